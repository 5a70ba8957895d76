/// Flatten: dimensions start_dim .. end_dim as one, a view (no copy), as torch.nn.Flatten(start_dim=1,
/// end_dim=-1).
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>

#include "kiln/nn/layer.hpp"
#include "kiln/ops/views.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// FlattenDims<Start, End>'s output for an S it accepts: dimensions first .. last (static) as their product.
template <class S, int Start, int End>
struct flatten_output {
  static constexpr std::size_t first = static_cast<std::size_t>(kiln::detail::normalized_dim<S::rank>(Start));
  static constexpr std::size_t count =
      static_cast<std::size_t>(kiln::detail::normalized_dim<S::rank>(End)) - first + 1;
  static constexpr index_t merged = [] {
    index_t n = 1;
    for (std::size_t d = first; d != first + count; ++d) n *= S::extents[d];
    return n;
  }();
  using type = kiln::detail::replaced_shape_t<S, first, count, extents_list<merged>>;
};
}  // namespace detail

/// What FlattenDims<0, End> expects (the compile error's last argument): a model's dimension 0 is its
/// batch, which every layer keeps.
struct flatten_keeps_the_batch {};
/// What FlattenDims<Start, End> expects of a shape that has both dimensions (the compile error's last
/// argument): Start not after End, and dimensions Start .. End of static extents.
template <int Start, int End>
struct shape_with_static_dims_in_order {};

/// Dimensions Start .. End (negative: from the end; not the batch) of the input as one, their product, as
/// torch.nn.Flatten(start_dim=Start, end_dim=End). The dimensions flattened must be static; those before
/// and after them are kept (and may be dyn).
/// Shapes: [N, C, H, W] -> [N, C, H*W] for FlattenDims<2>; [N, C, H, W] -> [N, C*H, W] for FlattenDims<1, 2>.
/// `Flatten` is FlattenDims<1, -1>: [N, d1, d2, ...] -> [N, d1 d2 ...], torch's nn.Flatten().
template <int Start, int End = -1>
struct FlattenDims {
  template <class S>
  static constexpr bool accepts = [] {
    if constexpr (S::rank < detail::rank_with_dim<Start> || S::rank < detail::rank_with_dim<End>) {
      return false;
    } else {
      constexpr int first = kiln::detail::normalized_dim<S::rank>(Start);
      constexpr int last = kiln::detail::normalized_dim<S::rank>(End);
      bool ok = first != 0 && first <= last;
      for (int d = first; ok && d <= last; ++d) ok = S::extents[static_cast<std::size_t>(d)] != dyn;
      return ok;
    }
  }();
  /// (S itself where it is not accepted: nothing past the error is inferred from it.)
  template <class S>
  using output = typename std::conditional_t<accepts<S>, detail::flatten_output<S, Start, End>,
                                             std::type_identity<S>>::type;
  /// What it takes (for the error): for torch's default (1, -1), a shape of rank 2 or more, static past the
  /// batch; a shape that has dimensions Start and End; for a Start that is the batch,
  /// flatten_keeps_the_batch (torch's Flatten(0) has no kiln layer; kiln::flatten<0> views a tensor so);
  /// else shape_with_static_dims_in_order<Start, End>.
  template <class S>
  using expects = std::conditional_t<
      Start == 1 && End == -1, static_shape_of_rank_at_least<2>,
      std::conditional_t<
          (S::rank < detail::rank_with_dim<Start> || S::rank < detail::rank_with_dim<End>),
          any_shape_of_rank_at_least<(detail::rank_with_dim<Start> > detail::rank_with_dim<End>
                                          ? detail::rank_with_dim<Start>
                                          : detail::rank_with_dim<End>)>,
          std::conditional_t<(S::rank >= detail::rank_with_dim<Start> &&
                              kiln::detail::normalized_dim<S::rank>(Start) == 0),
                             flatten_keeps_the_batch, shape_with_static_dims_in_order<Start, End>>>>;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
   public:
    using typename detail::parameter_free<S, output<S>, P>::T;
    using typename detail::parameter_free<S, output<S>, P>::D;
    using typename detail::parameter_free<S, output<S>, P>::output_shape;
    /// torch's repr: "Flatten(start_dim=1, end_dim=-1)".
    std::string name() const {
      return "Flatten(start_dim=" + std::to_string(Start) + ", end_dim=" + std::to_string(End) + ")";
    }

    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context) {
      in_ = x.extents();
      return kiln::flatten<Start, End>(x);
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) { return dy.template reshape<S>(in_); }

   private:
    Extents<S> in_{};
  };
};

/// Shapes: [N, C, H, W] -> [N, C*H*W] (every dimension after the first must be static): torch's
/// nn.Flatten() with its defaults.
using Flatten = FlattenDims<1, -1>;

}  // namespace kiln::nn
