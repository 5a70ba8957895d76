/// Unflatten: one dimension viewed as several, a view (no copy), as torch.nn.Unflatten(dim, unflattened_size).
#pragma once
#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "kiln/nn/layer.hpp"
#include "kiln/ops/layout.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// Unflatten's sizes: each positive, or one -1 (torch's: inferred from the extent).
template <index_t... Sizes>
struct unflattened_sizes {
  static constexpr int inferred = (0 + ... + (Sizes == -1 ? 1 : 0));
  static constexpr bool valid = sizeof...(Sizes) > 0 && inferred <= 1 && ((Sizes > 0 || Sizes == -1) && ...);
  /// The product of the sizes given (the -1 left out).
  static constexpr index_t known = (index_t{1} * ... * (Sizes == -1 ? 1 : Sizes));
  /// Whether a static extent n splits into them (a multiple of `known` where one is inferred).
  static constexpr bool fit(index_t n) { return n != dyn && (inferred ? n % known == 0 : n == known); }
};

/// The extents of S with dimension D split into Sizes (-1 inferred).
template <class S, std::size_t D, index_t... Sizes>
constexpr auto unflattened_extents() {
  constexpr index_t sizes[] = {Sizes...};
  std::array<index_t, S::rank + sizeof...(Sizes) - 1> e{};
  std::size_t o = 0;
  for (std::size_t i = 0; i < S::rank; ++i) {
    if (i != D) {
      e[o++] = S::extents[i];
      continue;
    }
    for (const index_t s : sizes) e[o++] = s == -1 ? S::extents[D] / unflattened_sizes<Sizes...>::known : s;
  }
  return e;
}
template <class S, std::size_t D, class Sizes, class I = std::make_index_sequence<S::rank + Sizes::size() - 1>>
struct unflattened_shape;
template <class S, std::size_t D, index_t... Sizes, std::size_t... I>
struct unflattened_shape<S, D, std::integer_sequence<index_t, Sizes...>, std::index_sequence<I...>> {
  static constexpr auto e = unflattened_extents<S, D, Sizes...>();
  using type = Shape<e[I]...>;
};
}  // namespace detail

/// Dimension Dim (negative: from the end) of the input, of static extent, viewed as the dimensions Sizes,
/// as torch.nn.Unflatten(Dim, (Sizes...)): their product must be the extent, and one of them may be -1
/// (inferred). The inverse of Flatten; a decoder's way from features to images.
/// Shapes: [N, 256] -> [N, 16, 4, 4] for Unflatten<1, 16, 4, 4>; [N, L, 12] -> [N, L, 3, 4] for
/// Unflatten<-1, 3, -1>. The other dimensions (the batch, a sequence's length) may be dyn.
/// Example: `Sequential<Linear<32, 256>, ReLU, Unflatten<1, 16, 4, 4>, ConvTranspose2d<16, 8, 2, 2>, ...>`.
template <int Dim, index_t... Sizes>
struct Unflatten {
  static_assert(detail::unflattened_sizes<Sizes...>::valid,
                "kiln::nn::Unflatten<Dim, Sizes...>: give at least one size, each positive, or one of them -1 "
                "(inferred from the extent), as torch.nn.Unflatten's unflattened_size");

  // >>> Stopped here? Unflatten<Dim, Sizes...> takes a shape with a dimension Dim of static extent equal
  //     to the product of Sizes (a multiple of the others' product where one is -1). <<<
  template <class S>
  static constexpr bool accepts = S::rank >= detail::rank_with_dim<Dim> &&
                                  detail::unflattened_sizes<Sizes...>::fit(
                                      S::extents[detail::dim_of_rank<Dim, S::rank>]);
  /// (S itself where it is not accepted: nothing past the error is inferred from it.)
  template <class S>
  using output = typename std::conditional_t<
      accepts<S>,
      detail::unflattened_shape<S, detail::dim_of_rank<Dim, S::rank>, std::integer_sequence<index_t, Sizes...>>,
      std::type_identity<S>>::type;
  /// What it takes (for the error): S with dimension Dim the sizes' product (the least multiple where one
  /// is -1), or a shape that has a dimension Dim.
  template <class S>
  using expects = typename std::conditional_t<
      S::rank >= detail::rank_with_dim<Dim>,
      kiln::detail::with_extent<S, detail::dim_of_rank<Dim, S::rank>, detail::unflattened_sizes<Sizes...>::known>,
      std::type_identity<any_shape_of_rank_at_least<detail::rank_with_dim<Dim>>>>::type;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
   public:
    using typename detail::parameter_free<S, output<S>, P>::T;
    using typename detail::parameter_free<S, output<S>, P>::D;
    using typename detail::parameter_free<S, output<S>, P>::output_shape;
    /// torch's repr: "Unflatten(dim=1, unflattened_size=(16, 4, 4))" (a lone size as "(12,)").
    std::string name() const {
      std::string sizes;
      for (const index_t s : {Sizes...}) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
      return "Unflatten(dim=" + std::to_string(Dim) + ", unflattened_size=(" + sizes +
             (sizeof...(Sizes) == 1 ? ",))" : "))");
    }

    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context) {
      in_ = x.extents();
      Extents<output_shape> e;
      for (std::size_t i = 0, o = 0; i < S::rank; ++i)
        if (i == d)
          o += sizeof...(Sizes);
        else
          e[o++] = in_[i];
      return x.template reshape<output_shape>(e);
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) { return dy.template reshape<S>(in_); }

   private:
    static constexpr std::size_t d = detail::dim_of_rank<Dim, S::rank>;
    Extents<S> in_{};
  };
};

}  // namespace kiln::nn
