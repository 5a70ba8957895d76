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

/// f(data, bytes, element size) for every tensor leaf of e. A node kiln does not know is skipped. Below a
/// Strided node (permute, narrow) the element size is given as 0: such a leaf is read at other indices
/// than the output's, so it is never "the destination read in place" (expr/overlap.hpp).
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
    for_each_leaf(e.child, [&](const void* p, std::size_t bytes, std::size_t) { f(p, bytes, std::size_t{0}); });
  }
}

}  // namespace kiln::detail
