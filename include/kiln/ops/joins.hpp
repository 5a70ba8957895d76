/// Joins: torch.cat and torch.stack, tensors (or expressions) joined along one dimension into a new
/// tensor, one pass per operand that also evaluates it (an expression operand is read where it lands).
#pragma once
#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/expr/detail/operand_device.hpp"
#include "kiln/expr/detail/traffic.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

/// Fails to compile, naming the operands' shapes, unless they can be joined along dimension Dim: cat<Dim>
/// (Stack false) takes shapes of one rank >= 1 whose static extents agree in every other dimension
/// (torch: "Sizes of tensors must match except in dimension Dim"), Dim in [-rank, rank); stack<Dim>
/// (Stack true) shapes of one rank (0 too) that agree in every dimension, Dim in [-(rank + 1), rank] for
/// the new one. A dyn extent is checked when the join runs. One error for the first rule broken.
template <bool Stack, int Dim, class... S>
struct join_shapes_must_agree {
  static constexpr std::size_t rank = std::tuple_element_t<0, std::tuple<S...>>::rank;
  static constexpr int joined_rank = static_cast<int>(rank) + (Stack ? 1 : 0);
  static constexpr bool ranks_ok = ((S::rank == rank) && ...);
  static constexpr bool rank_ok = ranks_ok && (Stack || rank > 0);
  static constexpr bool dim_ok = rank_ok && Dim >= -joined_rank && Dim < joined_rank;
  static constexpr std::size_t axis = dim_ok ? static_cast<std::size_t>(Dim < 0 ? Dim + joined_rank : Dim) : 0;
  static constexpr bool extents_agree() {
    if (!dim_ok) return true;  // (an earlier rule's error)
    for (std::size_t d = 0; d != rank; ++d) {
      if (!Stack && d == axis) continue;
      index_t seen = dyn;
      for (const index_t e : {S::extents[d]...}) {
        if (e == dyn) continue;
        if (seen != dyn && e != seen) return false;
        seen = e;
      }
    }
    return true;
  }
  /// Whether every rule holds (the join goes on only then, so that a broken one is its only error).
  static constexpr bool ok = dim_ok && extents_agree();
  // >>> Stopped here? The operands of cat<Dim>/stack<Dim> have different ranks, rank 0 (cat), a Dim out
  //     of range, or static extents that differ where they must agree. <<<
  static_assert(ranks_ok,
                "kiln::cat / kiln::stack: the operands must have one rank; see their Shape<...>s in "
                "kiln::join_shapes_must_agree<stack, Dim, Shapes...> in this message");
  static_assert(!ranks_ok || rank_ok,
                "kiln::cat: a tensor of rank 0 cannot be concatenated (torch: zero-dimensional tensor cannot be "
                "concatenated); kiln::stack joins them into [N], or view each as Shape<1> first");
  static_assert(!rank_ok || dim_ok,
                "kiln::cat / kiln::stack: Dim out of range: cat takes 0 .. rank-1 (or -rank .. -1), stack 0 .. rank "
                "(or -(rank+1) .. -1), as torch");
  static_assert(extents_agree(),
                "kiln::cat / kiln::stack: the operands' static extents differ in a dimension where they must "
                "agree (cat: every dimension but Dim; stack: every one); see their Shape<...>s (-1 is dyn) in "
                "kiln::join_shapes_must_agree<stack, Dim, Shapes...> in this message");
  static constexpr bool value = true;
};

namespace detail {
/// The joined shape: cat's extent at the axis is the sum (dyn if one is dyn), stack's a new dimension of
/// one extent per operand; elsewhere the static extent the operands have (dyn if none has one).
template <bool Stack, std::size_t Axis, class... S>
constexpr auto joined_extents() {
  constexpr std::size_t rank = std::tuple_element_t<0, std::tuple<S...>>::rank;
  std::array<index_t, rank + (Stack ? 1 : 0)> out{};
  for (std::size_t d = 0, o = 0; d != rank; ++d) {
    if (Stack && d == Axis) out[o++] = static_cast<index_t>(sizeof...(S));
    index_t e = dyn;
    if (!Stack && d == Axis) {
      e = 0;
      for (const index_t x : {S::extents[d]...}) e = (e == dyn || x == dyn) ? dyn : e + x;
    } else {
      for (const index_t x : {S::extents[d]...})
        if (x != dyn) e = x;
    }
    out[o++] = e;
  }
  if (Stack && Axis == rank) out[rank] = static_cast<index_t>(sizeof...(S));
  return out;
}
template <bool Stack, std::size_t Axis, class... S>
struct joined {
  static constexpr auto extents() { return joined_extents<Stack, Axis, S...>(); }
};
template <bool Stack, std::size_t Axis, class... S>
using joined_shape_t = shape_from_t<joined<Stack, Axis, S...>>;

/// The device the operands agree on (void: numbers only, which join never sees).
template <class A, class... B>
struct devices_agree {
  using type = A;
};
template <class A, class B, class... C>
struct devices_agree<A, B, C...> : devices_agree<common_device_t<A, B>, C...> {};
/// Whether the devices agree (void: any), checked without common_device's error: join runs nothing past
/// a disagreement, whose one error devices_agree gives.
template <class A, class... Ds>
constexpr bool same_devices() {
  if constexpr (sizeof...(Ds) == 0)
    return true;
  else
    return ((std::is_void_v<A> || std::is_void_v<Ds> || std::is_same_v<A, Ds>) && ...) && same_devices<Ds...>();
}

/// torch's promotion of two element types for a join: the same type stays; half or bfloat16 next to
/// float or double gives that one, next to integers itself, and half next to bfloat16 float; the rest
/// ops::detail::promote_t's (int32 and float: float; int32 and int64: int64).
template <class A, class B>
struct standard_promotion {
  using type = ops::detail::promote_t<A, B>;
};
template <class A, class B>
struct join_promotion {
  static constexpr bool reduced_a = !std::is_same_v<compute_t<A>, A>, reduced_b = !std::is_same_v<compute_t<B>, B>;
  using type = typename std::conditional_t<
      std::is_same_v<A, B>, std::type_identity<A>,
      std::conditional_t<
          reduced_a && reduced_b, std::type_identity<float>,
          std::conditional_t<reduced_a, std::type_identity<std::conditional_t<std::is_floating_point_v<B>, B, A>>,
                             std::conditional_t<reduced_b,
                                                std::type_identity<std::conditional_t<std::is_floating_point_v<A>, A, B>>,
                                                standard_promotion<A, B>>>>>::type;
};
/// The element type of a join: the operands' types promoted in turn.
template <class A, class... B>
struct joined_element {
  using type = A;
};
template <class A, class B, class... C>
struct joined_element<A, B, C...> : joined_element<typename join_promotion<A, B>::type, C...> {};

/// Operand e's elements into their place in out: e is outer x [len] x inner, out outer x [out_len] x
/// inner, e's block at offset `at` of out's joined dimension (stack: len 1, and inner the operand's
/// elements past the new dimension).
template <class Out, class E>
struct JoinSlab {
  Out* out;
  E e;
  index_t len, inner, out_len, at;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t block = len * inner;
    const index_t o = i / block, r = i - o * block;
    out[(o * out_len + at) * inner + r] = from_compute<Out>(static_cast<compute_t<Out>>(e[i]));
  }
  Traffic traffic(index_t n) const {
    LeafBytes acc;
    add_leaves(e, acc);
    return {acc.bytes + bytes_of<Out>(n), static_cast<std::uint64_t>(n) * ops_per_element<E>::value};
  }
};

/// join, its shapes agreeing.
template <bool Stack, int Dim, class... X>
auto join_checked(const char* who, const X&... xs) {
  using D = typename devices_agree<typename node_t<X>::device...>::type;
  using Dev = std::conditional_t<std::is_void_v<D>, Cpu, D>;
  using Check = join_shapes_must_agree<Stack, Dim, typename node_t<X>::shape_type...>;
  constexpr std::size_t rank = Check::rank, axis = Check::axis;
  using Out = joined_shape_t<Stack, axis, typename node_t<X>::shape_type...>;
  using T = typename joined_element<result_element_t<X>...>::type;
  const auto es = std::make_tuple(as_expr(xs)...);
  // The extents: every operand's against the first's, where they must agree (torch's message).
  const auto first = std::get<0>(es).extents();
  int device = -1;
  index_t joined = 0;
  std::apply(
      [&](const auto&... e) {
        int k = 0;
        (
            [&] {
              const auto ext = e.extents();
              for (std::size_t d = 0; d != rank; ++d) {
                if ((!Stack && d == axis) || ext[d] == first[d]) continue;
                if (Stack)
                  throw ShapeError(std::string(who) + ": stack expects each tensor to be equal size, but got " +
                                   to_string(first) + " at entry 0 and " + to_string(ext) + " at entry " +
                                   std::to_string(k));
                throw ShapeError(std::string(who) + ": sizes of tensors must match except in dimension " +
                                 std::to_string(axis) + ": expected size " + std::to_string(first[d]) +
                                 " but got size " + std::to_string(ext[d]) + " for tensor number " +
                                 std::to_string(k) + " in the list (" + to_string(ext) + " against " +
                                 to_string(first) + ")");
              }
              joined += Stack ? 1 : ext[axis];
              const int at = operand_device<Dev>(e, who);
              check_same_device(who, device, at);
              if (device < 0) device = at;
              ++k;
            }(),
            ...);
      },
      es);
  Extents<Out> out_ext;
  for (std::size_t d = 0, o = 0; d != rank; ++d) {
    if (Stack && d == axis) out_ext[o++] = joined;
    out_ext[o++] = (!Stack && d == axis) ? joined : first[d];
  }
  if (Stack && axis == rank) out_ext[rank] = joined;
  const device_scope<Dev> on(device);
  Tensor<T, Out, Dev> y(out_ext, device);
  index_t outer = 1, inner = 1;
  for (std::size_t d = 0; d != axis; ++d) outer *= first[d];
  for (std::size_t d = rank; d > (Stack ? axis : axis + 1);) inner *= first[--d];  // the dimensions past the joined one
  index_t at = 0;
  std::apply(
      [&](const auto&... e) {
        (
            [&] {
              const index_t len = Stack ? 1 : e.extents()[axis];
              const index_t n = outer * len * inner;
              if (n != 0)
                executor<Dev>::for_each(n, JoinSlab<T, std::remove_cvref_t<decltype(e)>>{y.data(), e, len, inner,
                                                                                          joined, at});
              at += len;
            }(),
            ...);
      },
      es);
  return y;
}

template <bool Stack, int Dim, class... X>
auto join(const char* who, const X&... xs) {
  // >>> Stopped here? cat<Dim>() / stack<Dim>() without an operand (torch: expected a non-empty list). <<<
  static_assert(sizeof...(X) > 0, "kiln::cat / kiln::stack: give at least one operand (torch: expected a non-empty "
                                  "list of Tensors)");
  if constexpr (sizeof...(X) == 0) {
    return 0;  // (the error above alone)
  } else {
    static_assert(join_shapes_must_agree<Stack, Dim, typename node_t<X>::shape_type...>::value);
    if constexpr (!join_shapes_must_agree<Stack, Dim, typename node_t<X>::shape_type...>::ok) {
      return 0;  // (that rule's error alone)
    } else if constexpr (!same_devices<typename node_t<X>::device...>()) {
      (void)sizeof(devices_agree<typename node_t<X>::device...>);  // its error: different devices
      return 0;
    } else {
      return join_checked<Stack, Dim>(who, xs...);
    }
  }
}

}  // namespace detail

/// torch.cat((x, y, ...), Dim): the operands one after the other along dimension Dim (negative counts
/// from the last), into a new tensor. Every other dimension must agree (static extents at compile time,
/// dyn ones when it runs: a ShapeError in torch's words); the joined dimension's extent is the sum (dyn
/// where an operand's is dyn). The element type is the operands' (torch's promotion where they differ);
/// expressions are evaluated as they are copied, one pass per operand.
/// Example: `auto xy = kiln::cat<1>(x, y);` joins [N, 3] and [N, 5] into [N, 8].
template <int Dim, operand... X>
auto cat(const X&... xs) {
  return detail::join<false, Dim>("kiln::cat", xs...);
}
/// torch.stack((x, y, ...), Dim): the operands, of one shape, along a new dimension Dim (0 .. rank; negative
/// from the end of the result's), into a new tensor: [2, 3] and [2, 3] stacked along 0 are [2, 2, 3].
template <int Dim, operand... X>
auto stack(const X&... xs) {
  return detail::join<true, Dim>("kiln::stack", xs...);
}

}  // namespace kiln
