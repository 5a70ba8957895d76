/// Unflatten: one dimension viewed as several, a view (no copy), as torch.nn.Unflatten(dim, unflattened_size).
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>

#include "kiln/nn/layer.hpp"
#include "kiln/ops/views.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// Unflatten<Dim, Sizes...>'s output for an S it accepts.
template <class S, int Dim, index_t... Sizes>
struct unflatten_output {
  static constexpr std::size_t d = static_cast<std::size_t>(kiln::detail::normalized_dim<S::rank>(Dim));
  using type = kiln::detail::replaced_shape_t<S, d, 1, kiln::detail::unflattened_for<S::extents[d], Sizes...>>;
};
}  // namespace detail

/// What Unflatten<0, ...> expects (the compile error's last argument): a model's dimension 0 is its
/// batch, which every layer keeps.
struct unflatten_keeps_the_batch {};

/// Dimension Dim (negative: from the end; not the batch) of the input, of static extent, viewed as the dimensions Sizes,
/// as torch.nn.Unflatten(Dim, (Sizes...)): their product must be the extent, and one of them may be -1
/// (inferred). The inverse of Flatten; a decoder's way from features to images.
/// Shapes: [N, 256] -> [N, 16, 4, 4] for Unflatten<1, 16, 4, 4>; [N, L, 12] -> [N, L, 3, 4] for
/// Unflatten<-1, 3, -1>. The other dimensions (the batch, a sequence's length) may be dyn.
/// Example: `Sequential<Linear<32, 256>, ReLU, Unflatten<1, 16, 4, 4>, ConvTranspose2d<16, 8, 2, 2>, ...>`.
template <int Dim, index_t... Sizes>
struct Unflatten {
  static constexpr bool valid_sizes = kiln::detail::unflattened_sizes<Sizes...>::valid;
  static_assert(valid_sizes,
                "kiln::nn::Unflatten<Dim, Sizes...>: give at least one size, each positive, or one of them -1 "
                "(inferred from the extent), as torch.nn.Unflatten's unflattened_size");

  // >>> Stopped here? Unflatten<Dim, Sizes...> takes a shape with a dimension Dim, not the batch (0), of
  //     static extent equal to the product of Sizes (a multiple of the others' product where one is -1). <<<
  template <class S>
  static constexpr bool accepts =
      !valid_sizes ||  // (the sizes' own error alone)
      (S::rank >= detail::rank_with_dim<Dim> && kiln::detail::normalized_dim<S::rank>(Dim) != 0 &&
       S::extents[kiln::detail::normalized_dim<S::rank>(Dim)] != dyn &&
       kiln::detail::unflattened_sizes<Sizes...>::fit(S::extents[kiln::detail::normalized_dim<S::rank>(Dim)]));
  /// (S itself where it is not accepted: nothing past the error is inferred from it.)
  template <class S>
  using output = typename std::conditional_t<valid_sizes && accepts<S>, detail::unflatten_output<S, Dim, Sizes...>,
                                             std::type_identity<S>>::type;
  /// What it takes (for the error): S with dimension Dim the sizes' product (the least multiple where one
  /// is -1); a shape that has a dimension Dim; for the batch dimension, unflatten_keeps_the_batch (a
  /// model's dimension 0 is its batch, which every layer keeps: torch's Unflatten(0, ...) has no kiln
  /// layer; kiln::unflatten<0, ...> views a tensor so).
  template <class S>
  using expects = typename std::conditional_t<
      (S::rank < detail::rank_with_dim<Dim>), std::type_identity<any_shape_of_rank_at_least<detail::rank_with_dim<Dim>>>,
      std::conditional_t<kiln::detail::normalized_dim<S::rank>(Dim) == 0, std::type_identity<unflatten_keeps_the_batch>,
                         kiln::detail::with_extent<S, static_cast<std::size_t>(kiln::detail::normalized_dim<S::rank>(Dim)),
                                                   kiln::detail::unflattened_sizes<Sizes...>::known>>>::type;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
   public:
    using typename detail::parameter_free<S, output<S>, P>::T;
    using typename detail::parameter_free<S, output<S>, P>::D;
    using typename detail::parameter_free<S, output<S>, P>::output_shape;
    /// torch's repr: "Unflatten(dim=1, unflattened_size=(16, 4, 4))" (a lone size as "(12,)").
    std::string name() const {
      return "Unflatten(dim=" + std::to_string(Dim) + ", unflattened_size=(" +
             kiln::detail::unflattened_sizes<Sizes...>::text() +
             (sizeof...(Sizes) == 1 ? ",))" : "))");
    }

    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context) {
      in_ = x.extents();
      return kiln::unflatten<Dim, Sizes...>(x);
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) { return dy.template reshape<S>(in_); }

   private:
    Extents<S> in_{};
  };
};

}  // namespace kiln::nn
