/// GroupNorm: the channels of each sample split into G groups, each normalised by its own mean and
/// variance, then scaled and shifted per channel, as torch.nn.GroupNorm(num_groups, num_channels, eps,
/// affine).
#pragma once
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/real.hpp"
#include "kiln/nn/detail/norm_rows.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// GroupNorm<G, C> over [N, C, *]: rows n·G + g of C/G channels × the spatial size (NormRows
/// {C/G · L, C/G, L, G}), a weight and bias per channel. Named::repr(), when Named is not void, is the
/// name it prints (InstanceNorm's).
template <index_t G, index_t C, float Eps, bool Affine, class Named = void>
struct GroupNormLayer {
  static_assert(G > 0 && C > 0,
                "kiln::nn::GroupNorm<G, C>: the numbers of groups and channels must be positive");
  static_assert(C % G == 0,
                "kiln::nn::GroupNorm<G, C>: the channels C must be divisible by the groups G "
                "(torch: ValueError)");
  static_assert(Eps >= 0.0f, "kiln::nn::GroupNorm: eps must not be negative");

  /// [N, C, *]: dimension 1 holds the C channels (a dyn one is checked at run time).
  template <class S>
  static constexpr bool accepts = S::rank >= 2 && (S::extents[1] == C || S::extents[1] == dyn);
  template <class S>
  using output = S;
  /// What it takes where it is given S (for the error): S with C channels ([N, C] below rank 2).
  template <class S>
  using expects = typename with_channels<S, (S::rank < 2 ? 2 : S::rank), C>::type;

  struct Spec {
    static constexpr index_t affine_count = C;
    using affine_type = Shape<C>;
    static std::vector<index_t> affine_shape() { return {C}; }
    /// torch's repr: "GroupNorm(2, 6, eps=1e-05, affine=True)".
    static std::string name() {
      if constexpr (!std::is_void_v<Named>)
        return Named::repr();
      else
        return "GroupNorm(" + std::to_string(G) + ", " + std::to_string(C) + ", eps=" + python_float(Eps) +
               ", affine=" + (Affine ? "True" : "False") + ")";
    }
    template <class X>
    static NormRows rows_of(const X& x) {
      if (x.size(1) != C)
        throw ShapeError("kiln::nn::" + name() + ": input " + to_string(x.extents()) + " has " +
                         std::to_string(x.size(1)) + " channels, expected " + std::to_string(C));
      index_t spatial = 1;
      for (std::size_t d = 2; d < X::rank; ++d) spatial *= x.size(d);
      // No positions (H = 0, N > 0): rows of no elements. Counted as rows of C / G, the input has none
      // (numel 0), so nothing runs: an empty output and the gradients unchanged (torch 1.13: NaN weight
      // gradients, from a mean over nothing).
      if (spatial == 0) spatial = 1;
      return {C / G * spatial, C / G, spatial, G};
    }
  };

  template <class S, class P>
  using module = NormRowsModule<Spec, Eps, Affine, S, P>;
};
}  // namespace detail

/// torch.nn.GroupNorm(G, C, eps, affine): each sample's C channels (dimension 1) split into G groups of
/// C / G, each group normalised over its channels and positions by its own mean and biased variance, then
/// scaled and shifted per channel; the same in training and evaluation, independent of the batch (for
/// small per-device batches where BatchNorm's statistics are noisy). G = 1 normalises each sample as a
/// whole (LayerNorm over [C, H, W] with per-channel parameters); G = C each channel alone.
/// Shapes: [N, C, *] -> the same. Parameters (Affine): weight [C] (1), bias [C] (0).
/// Example: `Sequential<Conv2d<3, 32, 3, 1, 1>, GroupNorm<8, 32>, ReLU, ...>`.
template <index_t G, index_t C, Real Eps = 1e-5f, bool Affine = true>
struct GroupNorm : detail::GroupNormLayer<G, C, Eps.value, Affine> {};

}  // namespace kiln::nn
