/// The tensors an expression reads: a walk over its leaves, for the checks made before a pass runs
/// (overlap with the destination, devices).
#pragma once
#include <cstddef>
#include <type_traits>

#include "kiln/expr/unfused.hpp"
#include "kiln/tensor/view.hpp"

namespace kiln::detail {

template <class E>
struct is_tensor_view : std::false_type {};
template <class T, class S, class D>
struct is_tensor_view<TensorView<T, S, D>> : std::true_type {};

/// A Strided node straight over a tensor (a narrow or permute of it): f(data, bytes, element size) for
/// the elements it can read, from its offset to the last one its strides reach (a narrow of rows 2..3
/// reads nothing of rows 0..1). The element size is given only where it reads them in order (row-major
/// strides of its output: an identity permute, a narrow of whole rows), else 0. One that reads nothing
/// gives its whole tensor, as any other leaf (the device checks see it).
template <class E, class F>
void strided_tensor_leaf(const E& e, F&& f) {
  using V = std::remove_const_t<std::remove_pointer_t<decltype(e.child.data)>>;
  if (e.out.numel() == 0) {
    f(static_cast<const void*>(e.child.data), static_cast<std::size_t>(e.child.size()) * sizeof(V),
      std::size_t{0});
    return;
  }
  index_t lo = e.offset, hi = e.offset, step = 1;
  bool in_order = true;
  for (std::size_t d = E::rank; d-- > 0;) {
    const index_t reach = (e.out[d] - 1) * e.stride[d];
    (reach < 0 ? lo : hi) += reach;
    if (e.out[d] != 1 && e.stride[d] != step) in_order = false;
    step *= e.out[d];
  }
  f(static_cast<const void*>(e.child.data + lo), static_cast<std::size_t>(hi - lo + 1) * sizeof(V),
    in_order ? sizeof(V) : std::size_t{0});
}

/// f(data, bytes, element size) for every tensor leaf of e. A node kiln does not know is skipped. Below a
/// Strided node (permute, narrow) of an expression the element size is given as 0: such a leaf is read at
/// other indices than the output's, so it is never "the destination read in place" (expr/overlap.hpp).
template <class E, class F>
void for_each_leaf(const E& e, F&& f) {
  if constexpr (is_tensor_view<E>::value) {
    using V = std::remove_const_t<std::remove_pointer_t<decltype(e.data)>>;
    f(static_cast<const void*>(e.data), static_cast<std::size_t>(e.size()) * sizeof(V), sizeof(V));
  } else if constexpr (is_unary<E>::value || is_cast<E>::value) {
    for_each_leaf(e.a, f);
  } else if constexpr (is_binary<E>::value) {
    for_each_leaf(e.a, f);
    for_each_leaf(e.b, f);
  } else if constexpr (is_where<E>::value) {
    for_each_leaf(e.c, f);
    for_each_leaf(e.a, f);
    for_each_leaf(e.b, f);
  } else if constexpr (is_broadcast<E>::value) {
    for_each_leaf(e.child, f);
  } else if constexpr (is_strided<E>::value) {
    if constexpr (is_tensor_view<std::remove_cvref_t<decltype(e.child)>>::value)
      strided_tensor_leaf(e, f);
    else
      for_each_leaf(e.child,
                    [&](const void* p, std::size_t bytes, std::size_t) { f(p, bytes, std::size_t{0}); });
  }
}

}  // namespace kiln::detail
