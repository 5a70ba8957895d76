/// LayerNorm: y = (x - mean) / sqrt(var + eps) · weight + bias over the last dimensions of each sample,
/// as torch.nn.LayerNorm(normalized_shape, eps, elementwise_affine).
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/real.hpp"
#include "kiln/nn/detail/norm_rows.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// S with its last dimensions Trailing (S's leading ones kept; [S's dimension 0, *Trailing] where S has
/// no more dimensions than Trailing).
template <class S, class Trailing,
          class Index = std::make_index_sequence<(S::rank > Trailing::rank ? S::rank : Trailing::rank + 1)>>
struct ending_in;
template <class S, class Trailing, std::size_t... I>
struct ending_in<S, Trailing, std::index_sequence<I...>> {
  static constexpr std::size_t lead = sizeof...(I) - Trailing::rank;
  using type = Shape<(I < lead ? extent_or_dyn<S>(I) : Trailing::extents[I < lead ? 0 : I - lead])...>;
};

/// LayerNorm over the trailing dimensions Normalized (a static Shape) of its input: rows of L elements,
/// a weight and bias per element (NormRows {L, L, 1, 1}).
template <class Normalized, float Eps, bool Affine>
struct LayerNormLayer {
  static_assert(Normalized::rank > 0 && Normalized::is_static && Normalized::static_numel() > 0,
                "kiln::nn::LayerNorm: the normalised shape needs static, positive extents (no dyn)");
  static_assert(Eps >= 0.0f, "kiln::nn::LayerNorm: eps must not be negative");
  static constexpr std::size_t K = Normalized::rank;
  static constexpr index_t L = Normalized::static_numel();

  /// The input's last K dimensions are the normalised shape (a dyn one is checked at run time).
  template <class S>
  static constexpr bool trailing_match() {
    if constexpr (S::rank < K) {
      return false;
    } else {
      for (std::size_t d = 0; d < K; ++d) {
        const index_t e = S::extents[S::rank - K + d];
        if (e != dyn && e != Normalized::extents[d]) return false;
      }
      return true;
    }
  }
  template <class S>
  static constexpr bool accepts = trailing_match<S>();
  template <class S>
  using output = S;
  /// What it takes where it is given S (for the error): S ending in the normalised shape.
  template <class S>
  using expects = typename ending_in<S, Normalized>::type;

  struct Spec {
    static constexpr index_t affine_count = L;
    using affine_type = Normalized;
    static std::vector<index_t> affine_shape() { return {Normalized::extents, Normalized::extents + K}; }
    /// "6" or "3, 4, 4": the normalised shape as torch lists it.
    static std::string dims() {
      std::string s;
      for (std::size_t d = 0; d < K; ++d) s += (d ? ", " : "") + std::to_string(Normalized::extents[d]);
      return s;
    }
    /// torch's repr: "LayerNorm((6,), eps=1e-05, elementwise_affine=True)".
    static std::string name() {
      return "LayerNorm((" + dims() + (K == 1 ? ",)" : ")") + ", eps=" + python_float(Eps) +
             ", elementwise_affine=" + (Affine ? "True" : "False") + ")";
    }
    template <class X>
    static NormRows rows_of(const X& x) {
      constexpr std::size_t R = X::rank;
      for (std::size_t d = 0; d < K; ++d)
        if (x.size(R - K + d) != Normalized::extents[d])
          throw ShapeError("kiln::nn::" + name() + ": input " + to_string(x.extents()) +
                           " does not end in the normalised shape [" + dims() + "]");
      return {L, L, 1, 1};
    }
  };

  template <class S, class P>
  using module = NormRowsModule<Spec, Eps, Affine, S, P>;
};

/// Normalized when it is a Shape, else a stand-in (LayerNormOver reports the misuse once).
template <class Normalized>
using shape_or_stand_in = std::conditional_t<kiln::shape<Normalized>, Normalized, Shape<1>>;
}  // namespace detail

/// torch.nn.LayerNorm(normalized_shape, eps, elementwise_affine) over the trailing dimensions
/// Normalized (a kiln::Shape of static extents): each sample's elements in those dimensions are
/// normalised by their own mean and biased variance, the same in training and evaluation.
/// Shapes: [..., *Normalized] -> the same. Parameters (ElementwiseAffine): weight (1) and bias (0), each
/// of the normalised shape. Example: `LayerNormOver<Shape<6, 28, 28>>` after `Conv2d<1, 6, 5>` on 32 × 32.
template <class Normalized, Real Eps = 1e-5f, bool ElementwiseAffine = true>
struct LayerNormOver
    : detail::LayerNormLayer<detail::shape_or_stand_in<Normalized>, Eps.value, ElementwiseAffine> {
  // A non-Shape N stops here with this one message: the base is built on a stand-in shape and accepts
  // any input, so that nothing fails after it.
  static_assert(
      kiln::shape<Normalized>,
      "kiln::nn::LayerNormOver<N>: N is the normalised shape as a kiln::Shape, e.g. Shape<6, 28, 28>");
  template <class S>
  static constexpr bool accepts =
      !kiln::shape<Normalized> || detail::LayerNormLayer<detail::shape_or_stand_in<Normalized>, Eps.value,
                                                         ElementwiseAffine>::template accepts<S>;
};

/// torch.nn.LayerNorm(F, eps, elementwise_affine): LayerNormOver<Shape<F>>, over the last dimension.
/// Shapes: [N, F] or [N, ..., F] -> the same. Example: `Sequential<Linear<13, 64>, LayerNorm<64>, GELU,
/// ...>`.
template <index_t F, Real Eps = 1e-5f, bool ElementwiseAffine = true>
struct LayerNorm : detail::LayerNormLayer<Shape<F>, Eps.value, ElementwiseAffine> {};

}  // namespace kiln::nn
