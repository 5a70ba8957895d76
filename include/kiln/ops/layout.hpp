/// permute, transpose, narrow: an operand read in another layout, as torch's x.permute(...),
/// x.transpose(a, b) and x.narrow(dim, start, length). kiln's tensors are contiguous, so these are
/// expressions, not views: nothing is copied until one is assigned or evaluated, and inside a chain it is
/// read in the chain's one pass (`y = kiln::transpose<0, 1>(a) * 2 + b` is one loop, one kernel).
#pragma once
#include <cstddef>
#include <string>
#include <utility>

#include "kiln/core/errors.hpp"
#include "kiln/expr/strided.hpp"
#include "kiln/tensor/shape.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {
/// Dimension d of a rank-R operand, torch's way: -1 is the last, -R the first.
template <std::size_t R>
constexpr int normalized_dim(int d) {
  return d < 0 ? d + static_cast<int>(R) : d;
}
template <std::size_t R>
constexpr bool valid_dim(int d) {
  return normalized_dim<R>(d) >= 0 && normalized_dim<R>(d) < static_cast<int>(R);
}

/// Whether P names each dimension of a rank-R operand once.
template <std::size_t R, int... P>
constexpr bool is_permutation() {
  if constexpr (sizeof...(P) != R) {
    return false;
  } else {
    const int p[] = {normalized_dim<R>(P)..., 0};  // (a trailing 0: no empty array at rank 0)
    bool seen[R + 1] = {};
    for (std::size_t k = 0; k != R; ++k) {
      if (p[k] < 0 || p[k] >= static_cast<int>(R) || seen[p[k]]) return false;
      seen[p[k]] = true;
    }
    return true;
  }
}

/// S with extent Dim replaced by N.
template <class S, std::size_t Dim, index_t N, class K = std::make_index_sequence<S::rank>>
struct with_extent;
template <class S, std::size_t Dim, index_t N, std::size_t... K>
struct with_extent<S, Dim, N, std::index_sequence<K...>> {
  using type = Shape<(K == Dim ? N : S::extents[K])...>;
};
}  // namespace detail

/// Fails to compile, naming the operand's shape and the dimensions given, unless P names each dimension
/// of the operand once.
template <class S, int... P>
struct permute_dims_must_name_each_dim_once {
  // >>> Stopped here? permute<P...> takes each dimension of the operand exactly once. <<<
  static_assert(detail::is_permutation<S::rank, P...>(),
                "kiln::permute: the dimensions must name each dimension of the operand once (0 .. rank-1, or "
                "-rank .. -1 as in torch); see the operand's Shape<...> and the dimensions given in "
                "kiln::permute_dims_must_name_each_dim_once<Shape, P...> in this message");
  static constexpr bool value = true;
};

/// Fails to compile, naming the operand's shape and the dimension, unless Dim is one of its dimensions.
template <class S, int Dim>
struct dim_must_be_in_range {
  // >>> Stopped here? The dimension is not one of the operand's (0 .. rank-1, or -rank .. -1). <<<
  static_assert(detail::valid_dim<S::rank>(Dim),
                "kiln: dimension out of range: expected 0 .. rank-1 (or -rank .. -1 as in torch); see the "
                "operand's Shape<...> and the dimension in kiln::dim_must_be_in_range<Shape, Dim> in this message");
  static constexpr bool value = true;
};

/// Fails to compile, naming the operand's shape, when narrow<Dim, Length> asks for more than a static
/// extent holds.
template <class S, int Dim, index_t Length>
struct narrow_length_must_fit {
  static constexpr index_t extent = S::extents[detail::normalized_dim<S::rank>(Dim)];
  // >>> Stopped here? narrow<Dim, Length> keeps more elements than dimension Dim has. <<<
  static_assert(Length >= 0 && (extent == dyn || Length <= extent),
                "kiln::narrow: the length must be >= 0 and at most the dimension's extent; see the operand's "
                "Shape<...>, the dimension and the length in kiln::narrow_length_must_fit<Shape, Dim, Length>");
  static constexpr bool value = true;
};

/// y = permute<P...>(x): y's dimension d is x's dimension P[d], as torch's x.permute(P...): permute<0, 2,
/// 3, 1>(x) reads an NCHW batch as NHWC. Negative dimensions count from the last (-1). The shape, static
/// extents included, follows: Shape<dyn, 3, 32, 32> becomes Shape<dyn, 32, 32, 3>.
template <int... P, class X>
auto permute(const X& x) {
  using E = detail::node_t<X>;
  using S = typename E::shape_type;
  constexpr std::size_t R = S::rank;
  if constexpr (!detail::is_permutation<R, P...>()) {
    static_assert(permute_dims_must_name_each_dim_once<S, P...>::value);
    return as_expr(x);  // (the operand as it is: one error, no second one where the result is used)
  } else {
    using Out = Shape<S::extents[detail::normalized_dim<R>(P)]...>;
    const E e = as_expr(x);
    const auto in = e.extents();
    index_t strides[R == 0 ? 1 : R];
    detail::row_major_strides(in, strides);
    constexpr int p[] = {detail::normalized_dim<R>(P)..., 0};
    Strided<E, Out> r{{}, e, Extents<Out>{}, {}, 0};
    for (std::size_t d = 0; d != R; ++d) {
      r.out[d] = in[static_cast<std::size_t>(p[d])];
      r.stride[d] = strides[p[d]];
    }
    return r;
  }
}

/// y = transpose<D0, D1>(x): x with dimensions D0 and D1 swapped, as torch's x.transpose(D0, D1);
/// transpose<-2, -1> swaps the last two. (kiln::transposed(w) is another thing: a matmul operand that
/// BLAS reads transposed, without any pass.)
template <int D0, int D1, class X>
auto transpose(const X& x) {
  using S = typename detail::node_t<X>::shape_type;
  constexpr std::size_t R = S::rank;
  if constexpr (!detail::valid_dim<R>(D0)) {
    static_assert(dim_must_be_in_range<S, D0>::value);
    return as_expr(x);
  } else if constexpr (!detail::valid_dim<R>(D1)) {
    static_assert(dim_must_be_in_range<S, D1>::value);
    return as_expr(x);
  } else {
    constexpr int a = detail::normalized_dim<R>(D0), b = detail::normalized_dim<R>(D1);
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return permute<(static_cast<int>(K) == a ? b : static_cast<int>(K) == b ? a : static_cast<int>(K))...>(x);
    }(std::make_index_sequence<R>{});
  }
}

namespace detail {
/// narrow's body: [start, start + length) of dimension Dim of x, that dimension's extent Length in the
/// result's type (dyn: known at run time).
template <int Dim, index_t Length, class X>
auto narrowed(const X& x, index_t start, index_t length) {
  using E = node_t<X>;
  using S = typename E::shape_type;
  if constexpr (!valid_dim<S::rank>(Dim)) {
    static_assert(dim_must_be_in_range<S, Dim>::value);
    return as_expr(x);
  } else {
    static_assert(narrow_length_must_fit<S, Dim, Length == dyn ? 0 : Length>::value);
    constexpr std::size_t d = static_cast<std::size_t>(normalized_dim<S::rank>(Dim));
    using Out = typename with_extent<S, d, Length>::type;
    const E e = as_expr(x);
    const auto in = e.extents();
    const index_t size = in[d];
    // torch: a negative start counts from the end; an empty dimension wraps as one of extent 1 (torch's
    // maybe_wrap_dim), so there -1 is 0 as well.
    const index_t wrap = size == 0 ? 1 : size;
    const index_t first = start < 0 ? start + wrap : start;
    if (first < 0 || first > size || length < 0 || length > size - first)
      throw ShapeError("kiln::narrow: dimension " + std::to_string(Dim) + " of " + to_string(in) + " has extent " +
                       std::to_string(size) + "; start " + std::to_string(start) + " and length " +
                       std::to_string(length) + " do not fit in it (expected -" + std::to_string(wrap) +
                       " <= start <= " + std::to_string(size) + " and start + length <= " + std::to_string(size) +
                       " once a negative start has the extent added)");
    Strided<E, Out> r{{}, e, Extents<Out>{}, {}, 0};
    row_major_strides(in, r.stride);
    for (std::size_t k = 0; k != S::rank; ++k) r.out[k] = in[k];
    r.out[d] = length;
    r.offset = first * r.stride[d];
    return r;
  }
}
}  // namespace detail

/// y = narrow<Dim>(x, start, length): elements [start, start + length) of dimension Dim, as torch's
/// x.narrow(Dim, start, length) (a negative start counts from the end); that dimension becomes dyn.
/// narrow<Dim, Length>(x, start) keeps a static length instead. A range outside the extent is a ShapeError.
template <int Dim, class X>
auto narrow(const X& x, index_t start, index_t length) {
  return detail::narrowed<Dim, dyn>(x, start, length);
}
template <int Dim, index_t Length, class X>
auto narrow(const X& x, index_t start) {
  return detail::narrowed<Dim, Length>(x, start, Length);
}

}  // namespace kiln
