/// Views of a tensor in another shape, sharing its storage, as torch's x.flatten(start, end),
/// x.unflatten(dim, sizes), x.unsqueeze(dim) and x.squeeze(dim): the dimensions are template arguments
/// (negative from the last) and the new shape follows in the type.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "kiln/core/errors.hpp"
#include "kiln/ops/layout.hpp"
#include "kiln/tensor/shape.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {
/// unflatten's sizes: each positive, or one -1 (torch's: inferred from the extent).
template <index_t... Sizes>
struct unflattened_sizes {
  static constexpr int inferred = (0 + ... + (Sizes == -1 ? 1 : 0));
  static constexpr bool valid = sizeof...(Sizes) > 0 && inferred <= 1 && ((Sizes > 0 || Sizes == -1) && ...);
  /// The product of the sizes given (the -1 left out).
  static constexpr index_t known = (index_t{1} * ... * (Sizes == -1 ? 1 : Sizes));
  /// Whether an extent n splits into them (a multiple of `known` where one is inferred); dyn may.
  static constexpr bool fit(index_t n) { return n == dyn || (inferred ? n % known == 0 : n == known); }
  /// "16, 4, 4": the sizes as torch's messages and reprs write them.
  static std::string text() {
    std::string t;
    ((t += (t.empty() ? "" : ", ") + std::to_string(Sizes)), ...);
    return t;
  }
  /// The sizes for extent n (dyn: the inferred one dyn).
  static constexpr std::array<index_t, sizeof...(Sizes)> for_extent(index_t n) {
    return {(Sizes != -1 ? Sizes : n == dyn ? dyn : n / known)...};
  }
};

/// Extents (static, or a tensor's) with the `count` dimensions from `first` replaced by `by`: the one
/// step of flatten (one extent for several), unflatten (several for one), unsqueeze (one for none) and
/// squeeze (none for one).
template <std::size_t Rank, std::size_t First, std::size_t Count, std::size_t N, class In>
constexpr std::array<index_t, Rank - Count + N> replaced(const In& in, const std::array<index_t, N>& by) {
  std::array<index_t, Rank - Count + N> out{};
  std::size_t o = 0;
  for (std::size_t i = 0; i != First; ++i) out[o++] = in[i];
  for (std::size_t k = 0; k != N; ++k) out[o++] = by[k];
  for (std::size_t i = First + Count; i < Rank; ++i) out[o++] = in[i];
  return out;
}
/// S with the Count dimensions from First replaced by By::extents() (an extents_list, or unflatten's).
template <class S, std::size_t First, std::size_t Count, class By>
struct replaced_extents {
  static constexpr auto extents() { return replaced<S::rank, First, Count>(S::extents, By::extents()); }
};
template <class S, std::size_t First, std::size_t Count, class By>
using replaced_shape_t = shape_from_t<replaced_extents<S, First, Count, By>>;
/// unflatten's sizes for an extent N (dyn: the inferred one dyn), as replaced_shape_t's By.
template <index_t N, index_t... Sizes>
struct unflattened_for {
  static constexpr auto extents() { return unflattened_sizes<Sizes...>::for_extent(N); }
};

/// t viewed with the extents `e` (those of shape Out).
template <class Out, class T, class S, class D, std::size_t R>
Tensor<T, Out, D> view_as(const Tensor<T, S, D>& t, const std::array<index_t, R>& e) {
  Extents<Out> ext;
  for (std::size_t d = 0; d != R; ++d) ext[d] = e[d];
  return t.template reshape<Out>(ext);
}
}  // namespace detail

/// Fails to compile, naming the shape, unless Start and End are dimensions of it with Start <= End.
template <class S, int Start, int End>
struct flatten_dims_must_be_in_order {
  // >>> Stopped here? flatten<Start, End> names a dimension the tensor lacks, or Start after End. <<<
  static constexpr bool ok =
      S::rank == 0 ? (Start == 0 || Start == -1) && (End == 0 || End == -1)  // (torch: a 0-d tensor as [1])
                   : detail::valid_dim<S::rank>(Start) && detail::valid_dim<S::rank>(End) &&
                         detail::normalized_dim<S::rank>(Start) <= detail::normalized_dim<S::rank>(End);
  static_assert(
      ok,
      "kiln::flatten<Start, End>: both must be dimensions of the tensor (0 .. rank-1, or -rank .. -1) "
      "and Start must not come after End (torch: start_dim cannot come after end_dim); see the "
      "Shape<...> and the dimensions in kiln::flatten_dims_must_be_in_order<Shape, Start, End>");
  static constexpr bool value = true;
};
/// Fails to compile, naming the shape, unless Sizes can be dimension Dim's (valid, and a static extent
/// their product, or a multiple of it where one is -1).
template <class S, int Dim, index_t... Sizes>
struct unflatten_sizes_must_fit {
  static constexpr bool dim_ok = detail::valid_dim<S::rank>(Dim);
  // >>> Stopped here? unflatten<Dim, Sizes...>: Dim is not a dimension of the tensor, the sizes are not
  //     positive (or one -1), or their product is not the dimension's static extent. <<<
  static_assert(dim_ok, "kiln::unflatten<Dim, Sizes...>: Dim must be a dimension of the tensor (0 .. rank-1, or "
                        "-rank .. -1); see kiln::unflatten_sizes_must_fit<Shape, Dim, Sizes...>");
  static_assert(detail::unflattened_sizes<Sizes...>::valid,
                "kiln::unflatten<Dim, Sizes...>: give at least one size, each positive, or one of them -1 "
                "(inferred)");
  static constexpr bool ok = dim_ok && detail::unflattened_sizes<Sizes...>::valid &&
                            detail::unflattened_sizes<Sizes...>::fit(S::extents[detail::normalized_dim<S::rank>(Dim)]);
  static_assert(!dim_ok || !detail::unflattened_sizes<Sizes...>::valid || ok,
                "kiln::unflatten<Dim, Sizes...>: the sizes do not multiply to dimension Dim's extent (torch: "
                "sizes don't multiply up to the size of dim); see kiln::unflatten_sizes_must_fit<Shape, Dim, "
                "Sizes...> (-1 in the Shape is dyn)");
  static constexpr bool value = true;
};
/// Fails to compile, naming the shape, unless Dim is where unsqueeze may put a dimension: 0 .. rank (or
/// -(rank+1) .. -1, as torch's).
template <class S, int Dim>
struct unsqueeze_dim_must_be_in_range {
  // >>> Stopped here? unsqueeze<Dim> puts a dimension outside 0 .. rank. <<<
  static constexpr bool ok = Dim >= -static_cast<int>(S::rank) - 1 && Dim <= static_cast<int>(S::rank);
  static_assert(ok,
                "kiln::unsqueeze<Dim>: Dim must be in 0 .. rank (or -(rank+1) .. -1, as torch's); see "
                "kiln::unsqueeze_dim_must_be_in_range<Shape, Dim>");
  static constexpr bool value = true;
};
/// Fails to compile, naming the shape, when dimension Dim's extent is dyn: whether squeeze<Dim> drops it
/// (extent 1) or keeps it (another, as torch's) is the result's type.
template <class S, int Dim>
struct squeeze_extent_must_be_static {
  static constexpr bool dim_ok = detail::valid_dim<S::rank>(Dim);
  // >>> Stopped here? squeeze<Dim> of a dimension that is not the tensor's, or whose extent is dyn. <<<
  static_assert(dim_ok, "kiln::squeeze<Dim>: Dim must be a dimension of the tensor (0 .. rank-1, or -rank .. -1); "
                        "see kiln::squeeze_extent_must_be_static<Shape, Dim>");
  static constexpr bool ok = dim_ok && S::extents[dim_ok ? detail::normalized_dim<S::rank>(Dim) : 0] != dyn;
  static_assert(
      !dim_ok || ok,
      "kiln::squeeze<Dim>: dimension Dim's extent is dyn, so the result's shape is not known when "
      "compiling (torch drops it only when it is 1 at run time); use reshape<Shape<...>>() with the "
      "shape you expect; see kiln::squeeze_extent_must_be_static<Shape, Dim>");
  static constexpr bool value = true;
};

/// torch's x.flatten(start_dim = 0, end_dim = -1): dimensions Start .. End as one (their product; dyn if
/// one of them is), a view sharing x's storage. A rank-0 tensor gives [1], as torch's.
/// Example: `kiln::flatten<1>(images)` views [N, 3, 32, 32] as [N, 3072] (nn::Flatten's view).
template <int Start = 0, int End = -1, class T, class S, class D>
auto flatten(const Tensor<T, S, D>& x) {
  static_assert(flatten_dims_must_be_in_order<S, Start, End>::value);
  if constexpr (!flatten_dims_must_be_in_order<S, Start, End>::ok) {
    return x;  // (the error above alone)
  } else if constexpr (S::rank == 0) {
    return x.template reshape<Shape<1>>();
  } else {
    constexpr std::size_t first = static_cast<std::size_t>(detail::normalized_dim<S::rank>(Start));
    constexpr std::size_t count = static_cast<std::size_t>(detail::normalized_dim<S::rank>(End)) - first + 1;
    constexpr index_t merged = [] {
      index_t n = 1;
      for (std::size_t d = first; d != first + count; ++d) n = (n == dyn || S::extents[d] == dyn) ? dyn : n * S::extents[d];
      return n;
    }();
    using Out = detail::replaced_shape_t<S, first, count, extents_list<merged>>;
    index_t n = 1;
    for (std::size_t d = first; d != first + count; ++d) n *= x.size(static_cast<int>(d));
    return detail::view_as<Out>(x, detail::replaced<S::rank, first, count>(x.extents(), std::array<index_t, 1>{n}));
  }
}

/// torch's x.unflatten(Dim, (Sizes...)): dimension Dim as the dimensions Sizes (one of them may be -1,
/// inferred), a view sharing x's storage; the inverse of flatten. A static extent must be their product
/// (a compile error otherwise); a dyn one is checked when it runs (ShapeError, in torch's words).
/// Example: `kiln::unflatten<1, 16, 4, 4>(features)` views [N, 256] as [N, 16, 4, 4].
template <int Dim, index_t... Sizes, class T, class S, class D>
auto unflatten(const Tensor<T, S, D>& x) {
  static_assert(unflatten_sizes_must_fit<S, Dim, Sizes...>::value);
  if constexpr (!unflatten_sizes_must_fit<S, Dim, Sizes...>::ok) {
    return x;  // (the error above alone)
  } else {
    using U = detail::unflattened_sizes<Sizes...>;
    constexpr std::size_t d = static_cast<std::size_t>(detail::normalized_dim<S::rank>(Dim));
    using Out = detail::replaced_shape_t<S, d, 1, detail::unflattened_for<S::extents[d], Sizes...>>;
    const index_t n = x.size(static_cast<int>(d));
    if (!U::fit(n))
      throw ShapeError("kiln::unflatten: provided sizes [" + U::text() + "] don't multiply up to the size of dim " +
                       std::to_string(Dim) + " (" + std::to_string(n) + ") in the input tensor " + to_string(x.extents()));
    return detail::view_as<Out>(x, detail::replaced<S::rank, d, 1>(x.extents(), U::for_extent(n)));
  }
}

/// torch's x.unsqueeze(Dim): a new dimension of extent 1 at Dim (0 .. rank; negative from the end of the
/// result's), a view sharing x's storage: [3] as [1, 3] (Dim 0) or [3, 1] (Dim -1 or 1).
template <int Dim, class T, class S, class D>
auto unsqueeze(const Tensor<T, S, D>& x) {
  static_assert(unsqueeze_dim_must_be_in_range<S, Dim>::value);
  if constexpr (!unsqueeze_dim_must_be_in_range<S, Dim>::ok) {
    return x;  // (the error above alone)
  } else {
    constexpr std::size_t d = static_cast<std::size_t>(Dim < 0 ? Dim + static_cast<int>(S::rank) + 1 : Dim);
    using Out = detail::replaced_shape_t<S, d, 0, extents_list<1>>;
    return detail::view_as<Out>(x, detail::replaced<S::rank, d, 0>(x.extents(), std::array<index_t, 1>{1}));
  }
}

/// torch's x.squeeze(Dim): without dimension Dim when its extent is 1, else x as it is (torch's too), a
/// view sharing x's storage. The extent must be static (dyn: a compile error, as the result's type would
/// depend on it).
template <int Dim, class T, class S, class D>
auto squeeze(const Tensor<T, S, D>& x) {
  static_assert(squeeze_extent_must_be_static<S, Dim>::value);
  constexpr bool ok = squeeze_extent_must_be_static<S, Dim>::ok;
  constexpr std::size_t d = ok ? static_cast<std::size_t>(detail::normalized_dim<S::rank>(Dim)) : 0;
  if constexpr (!ok || S::extents[d] != 1) {
    return x;  // (extent not 1, as torch's; or the error above alone)
  } else {
    using Out = detail::replaced_shape_t<S, d, 1, extents_list<>>;
    return detail::view_as<Out>(x, detail::replaced<S::rank, d, 1>(x.extents(), std::array<index_t, 0>{}));
  }
}

}  // namespace kiln
