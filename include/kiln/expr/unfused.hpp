/// Fusion off (kiln/core/fusion.hpp): an expression split into one pass per operation. Every operation
/// below the root is evaluated into a temporary of its own; the root then runs into the destination.
#pragma once
#include <memory>
#include <type_traits>
#include <vector>

#include "kiln/expr/binary.hpp"
#include "kiln/expr/broadcast.hpp"
#include "kiln/expr/cast.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/node.hpp"
#include "kiln/expr/strided.hpp"
#include "kiln/expr/unary.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::detail {

/// The temporaries of one split expression, kept alive until its root has run.
using Temporaries = std::vector<std::shared_ptr<void>>;

template <class E>
struct is_unary : std::false_type {};
template <class F, class A>
struct is_unary<Unary<F, A>> : std::true_type {};
template <class E>
struct is_binary : std::false_type {};
template <class F, class A, class B>
struct is_binary<Binary<F, A, B>> : std::true_type {};
template <class E>
struct is_where : std::false_type {};
template <class C, class A, class B>
struct is_where<Where<C, A, B>> : std::true_type {};
template <class E>
struct is_cast : std::false_type {};
template <class T, class A>
struct is_cast<Cast<T, A>> : std::true_type {};
template <class E>
struct is_broadcast : std::false_type {};
template <class E, class Out>
struct is_broadcast<Broadcast<E, Out>> : std::true_type {};
template <class E>
struct is_strided : std::false_type {};
template <class E, class Out>
struct is_strided<Strided<E, Out>> : std::true_type {};

/// Operations in an expression (a leaf has none; a broadcast or a strided read only re-reads its child).
template <class E>
struct op_count : std::integral_constant<int, 0> {};
template <class F, class A>
struct op_count<Unary<F, A>> : std::integral_constant<int, 1 + op_count<A>::value> {};
template <class F, class A, class B>
struct op_count<Binary<F, A, B>> : std::integral_constant<int, 1 + op_count<A>::value + op_count<B>::value> {};
template <class C, class A, class B>
struct op_count<Where<C, A, B>>
    : std::integral_constant<int, 1 + op_count<C>::value + op_count<A>::value + op_count<B>::value> {};
template <class T, class A>
struct op_count<Cast<T, A>> : std::integral_constant<int, 1 + op_count<A>::value> {};
template <class E, class Out>
struct op_count<Broadcast<E, Out>> : std::integral_constant<int, op_count<E>::value> {};
template <class E, class Out>
struct op_count<Strided<E, Out>> : std::integral_constant<int, op_count<E>::value> {};

/// The element type an operation's result is stored in: a cast's target type, else its value type.
template <class E>
struct stored_type {
  using type = typename E::value_type;
};
template <class T, class A>
struct stored_type<Cast<T, A>> {
  using type = T;
};

template <class D, class E>
auto split_below_root(const E& e, Temporaries& keep, int device);

/// e evaluated into a new tensor (one pass, after its own operations' passes), as a leaf; a leaf as is
/// (and a value no tensor can hold stays inside its parent's pass).
template <class D, class E>
auto materialize(const E& e, Temporaries& keep, int device) {
  if constexpr (op_count<E>::value == 0 || !element<typename stored_type<E>::type>) {
    return e;
  } else if constexpr (is_broadcast<E>::value || is_strided<E>::value) {
    return split_below_root<D>(e, keep, device);  // its child evaluated; the broadcast stays a read
  } else {
    using V = typename stored_type<E>::type;
    auto inner = split_below_root<D>(e, keep, device);
    auto t = std::make_shared<Tensor<V, typename E::shape_type, D>>(inner.extents(), device);
    executor<D>::run(t->view(), inner);
    keep.push_back(t);
    return TensorView<const V, typename E::shape_type, D>{t->data(), t->extents()};
  }
}

/// The same operation at the root, each child evaluated on its own (materialize).
template <class D, class E>
auto split_below_root(const E& e, Temporaries& keep, int device) {
  if constexpr (op_count<E>::value == 0) {
    return e;
  } else if constexpr (is_unary<E>::value) {
    auto a = materialize<D>(e.a, keep, device);
    return Unary<decltype(e.f), decltype(a)>{e.f, a};
  } else if constexpr (is_binary<E>::value) {
    auto a = materialize<D>(e.a, keep, device);
    auto b = materialize<D>(e.b, keep, device);
    return Binary<decltype(e.f), decltype(a), decltype(b)>{e.f, a, b, e.ext};
  } else if constexpr (is_where<E>::value) {
    auto c = materialize<D>(e.c, keep, device);
    auto a = materialize<D>(e.a, keep, device);
    auto b = materialize<D>(e.b, keep, device);
    return Where<decltype(c), decltype(a), decltype(b)>{c, a, b, e.ext};
  } else if constexpr (is_cast<E>::value) {
    auto a = materialize<D>(e.a, keep, device);
    return Cast<typename stored_type<E>::type, decltype(a)>{a};
  } else if constexpr (is_strided<E>::value) {
    auto child = materialize<D>(e.child, keep, device);
    Strided<decltype(child), typename E::shape_type> r{{}, child, e.out, {}, e.offset};  // the child's layout: as before
    for (std::size_t d = 0; d != E::rank; ++d) r.stride[d] = e.stride[d];
    return r;
  } else {
    static_assert(is_broadcast<E>::value, "kiln: an expression node the unfused evaluation does not know");
    auto child = materialize<D>(e.child, keep, device);
    return Broadcast<decltype(child), typename E::shape_type>(child, e.out);
  }
}

}  // namespace kiln::detail
