/// The traffic of an elementwise pass or a reduction (kiln/core/counters.hpp), counted from its tree:
/// each distinct tensor it reads once at the tensor's own size (a broadcast bias is read once, not once
/// per row), the destination written once, and one operation per Unary, Binary or Where per element.
#pragma once
#include <cstdint>

#include "kiln/core/counters.hpp"
#include "kiln/expr/binary.hpp"
#include "kiln/expr/broadcast.hpp"
#include "kiln/expr/cast.hpp"
#include "kiln/expr/node.hpp"
#include "kiln/expr/strided.hpp"
#include "kiln/expr/unary.hpp"
#include "kiln/tensor/view.hpp"

namespace kiln::detail {

/// The tensors a tree reads, each once (x * x reads x once). Trees hold a handful of leaves; past
/// `capacity` distinct ones a leaf is counted without looking for its twin.
struct LeafBytes {
  static constexpr int capacity = 16;
  const void* seen[capacity] = {};
  int count = 0;
  std::uint64_t bytes = 0;
  void add(const void* p, std::uint64_t b) {
    for (int k = 0; k < count; ++k)
      if (seen[k] == p) return;
    if (count < capacity) seen[count++] = p;
    bytes += b;
  }
};

/// Operations per element of a tree (casts and broadcasts are moves, not arithmetic).
template <class E>
struct ops_per_element : std::integral_constant<std::uint64_t, 0> {};
template <class F, class A>
struct ops_per_element<Unary<F, A>> : std::integral_constant<std::uint64_t, 1 + ops_per_element<A>::value> {};
template <class F, class A, class B>
struct ops_per_element<Binary<F, A, B>>
    : std::integral_constant<std::uint64_t, 1 + ops_per_element<A>::value + ops_per_element<B>::value> {};
template <class C, class A, class B>
struct ops_per_element<Where<C, A, B>>
    : std::integral_constant<std::uint64_t,
                             1 + ops_per_element<C>::value + ops_per_element<A>::value + ops_per_element<B>::value> {};
template <class T, class A>
struct ops_per_element<Cast<T, A>> : ops_per_element<A> {};
template <class E, class Out>
struct ops_per_element<Broadcast<E, Out>> : ops_per_element<E> {};
template <class E, class Out>
struct ops_per_element<Strided<E, Out>> : ops_per_element<E> {};

// Declared first, so that each overload's recursion sees all the others.
template <class T, class S, class D>
void add_leaves(const TensorView<T, S, D>& v, LeafBytes& acc);
template <class T>
void add_leaves(const Scalar<T>&, LeafBytes&);
template <class F, class A>
void add_leaves(const Unary<F, A>& e, LeafBytes& acc);
template <class F, class A, class B>
void add_leaves(const Binary<F, A, B>& e, LeafBytes& acc);
template <class C, class A, class B>
void add_leaves(const Where<C, A, B>& e, LeafBytes& acc);
template <class T, class A>
void add_leaves(const Cast<T, A>& e, LeafBytes& acc);
template <class E, class Out>
void add_leaves(const Broadcast<E, Out>& e, LeafBytes& acc);
template <class E, class Out>
void add_leaves(const Strided<E, Out>& e, LeafBytes& acc);
template <class E>
void add_leaves(const E& e, LeafBytes& acc);

template <class T, class S, class D>
void add_leaves(const TensorView<T, S, D>& v, LeafBytes& acc) {
  acc.add(v.data, bytes_of<std::remove_const_t<T>>(v.size()));
}
template <class T>
void add_leaves(const Scalar<T>&, LeafBytes&) {}
template <class F, class A>
void add_leaves(const Unary<F, A>& e, LeafBytes& acc) {
  add_leaves(e.a, acc);
}
template <class F, class A, class B>
void add_leaves(const Binary<F, A, B>& e, LeafBytes& acc) {
  add_leaves(e.a, acc);
  add_leaves(e.b, acc);
}
template <class C, class A, class B>
void add_leaves(const Where<C, A, B>& e, LeafBytes& acc) {
  add_leaves(e.c, acc);
  add_leaves(e.a, acc);
  add_leaves(e.b, acc);
}
template <class T, class A>
void add_leaves(const Cast<T, A>& e, LeafBytes& acc) {
  add_leaves(e.a, acc);
}
template <class E, class Out>
void add_leaves(const Broadcast<E, Out>& e, LeafBytes& acc) {
  add_leaves(e.child, acc);
}
/// A permute reads its child whole; a narrow reads part of it, counted whole too (an upper bound).
template <class E, class Out>
void add_leaves(const Strided<E, Out>& e, LeafBytes& acc) {
  add_leaves(e.child, acc);
}
/// A node kiln does not know: read at the value type once per element it yields.
template <class E>
void add_leaves(const E& e, LeafBytes& acc) {
  acc.add(&e, bytes_of<typename E::value_type>(e.extents().numel()));
}

/// dst[i] = e[i] over n elements.
template <class Dst, class E>
Traffic assignment_traffic(const Dst& dst, const E& e) {
  LeafBytes acc;
  add_leaves(e, acc);
  const index_t n = dst.size();
  return {acc.bytes + bytes_of<typename Dst::element_type>(n), static_cast<std::uint64_t>(n) * ops_per_element<E>::value};
}

/// A reduction of e (`count` elements read) into `outputs` values of type Out: one operation per element
/// read on top of the tree's own.
template <class Out, class E>
Traffic reduction_traffic(const E& e, index_t count, index_t outputs) {
  LeafBytes acc;
  add_leaves(e, acc);
  return {acc.bytes + bytes_of<Out>(outputs), static_cast<std::uint64_t>(count) * (1 + ops_per_element<E>::value)};
}

}  // namespace kiln::detail
