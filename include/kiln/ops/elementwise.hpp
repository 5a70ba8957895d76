/// The elementwise vocabulary: operators, math functions, where, cast. Each builds a node; nothing runs.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "kiln/core/number_fits.hpp"
#include "kiln/core/type_list.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/expr/binary.hpp"
#include "kiln/expr/broadcast.hpp"
#include "kiln/expr/cast.hpp"
#include "kiln/expr/unary.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {
/// x as a node; a number as a Scalar of ops::detail::number_type_t next to the other operand's values.
template <class Other, class X>
auto node_for(const X& x) {
  if constexpr (std::is_arithmetic_v<X>) {
    using N = ops::detail::number_type_t<X, typename node_t<Other>::value_type>;
    return Scalar<N>{static_cast<N>(x)};
  } else {
    return as_expr(x);
  }
}

template <class F, class X, class Y>
auto make_binary(const X& x, const Y& y, const char* what, F f = {}) {
  auto a = node_for<Y>(x);
  auto b = node_for<X>(y);
  using A = decltype(a);
  using B = decltype(b);
  using SA = typename A::shape_type;
  using SB = typename B::shape_type;
  static_assert(shapes_must_broadcast<SA, SB>::value);
  using Out = broadcast_shape_t<SA, SB>;
  if constexpr (is_scalar_node<A>::value) {
    return Binary<F, A, B>{f, a, b, b.extents()};
  } else if constexpr (is_scalar_node<B>::value) {
    return Binary<F, A, B>{f, a, b, a.extents()};
  } else {
    const auto out = broadcast_extents<Out>(a.extents(), b.extents(), what);
    auto aa = broadcast_to<Out>(a, out);
    auto bb = broadcast_to<Out>(b, out);
    return Binary<F, decltype(aa), decltype(bb)>{f, aa, bb, out};
  }
}

/// Checks a number given next to operand X against the type torch checks it in: X's stored half or
/// bfloat16 (torch's where(m, h, 70000.) raises: 70000 does not fit half, though kiln computes in float),
/// else the type it is taken in (clamp(u8, 0, 300) raises; 2.5 next to int32 is float).
template <class X, class N>
void check_number_next_to(N v, const char* who) {
  using Stored = result_element_t<X>;
  if constexpr (!std::is_same_v<N, bool> && (std::is_same_v<Stored, half> || std::is_same_v<Stored, bfloat16>))
    check_number_fits<Stored>(v, who);
  else
    check_number_fits<typename decltype(node_for<X>(v))::value_type>(v, who);
}

/// One bound of clamp: a number bound must fit (check_number_next_to: clamp(u8, 0, 300) is a ValueError,
/// as torch's, not a bound of 44).
template <class F, class X, class B>
auto clamp_side(const X& x, const B& bound, const char* who) {
  if constexpr (std::is_arithmetic_v<B>) check_number_next_to<X>(bound, who);
  return make_binary<F>(x, bound, who);
}

template <class F, class X>
auto make_unary(const X& x, F f = {}) {
  auto a = as_expr(x);
  return Unary<F, decltype(a)>{f, a};
}
}  // namespace detail

// ---- arithmetic operators (at least one side a kiln operand) ----
#define KILN_BINARY_OPERATOR(op, Functor, what)                                            \
  template <operand_or_number X, operand_or_number Y>                                      \
    requires(operand<X> || operand<Y>)                                                     \
  auto operator op(const X& x, const Y& y) {                                               \
    return detail::make_binary<ops::Functor>(x, y, what);                                  \
  }
KILN_BINARY_OPERATOR(+, Plus, "operator+")
KILN_BINARY_OPERATOR(-, Minus, "operator-")
KILN_BINARY_OPERATOR(*, Multiplies, "operator*")
KILN_BINARY_OPERATOR(/, Divides, "operator/")
KILN_BINARY_OPERATOR(<, Less, "operator<")
KILN_BINARY_OPERATOR(<=, LessEqual, "operator<=")
KILN_BINARY_OPERATOR(>, Greater, "operator>")
KILN_BINARY_OPERATOR(>=, GreaterEqual, "operator>=")

// ---- functions of two operands (or an operand and a number), broadcast ----
#define KILN_BINARY_FUNCTION(name, Functor)                                                \
  template <operand_or_number X, operand_or_number Y>                                      \
    requires(operand<X> || operand<Y>)                                                     \
  auto name(const X& x, const Y& y) {                                                      \
    return detail::make_binary<ops::Functor>(x, y, "kiln::" #name);                        \
  }

template <operand X>
auto operator-(const X& x) {
  return detail::make_unary<ops::Negate>(x);
}

/// Elementwise x == y and x != y, as bool (operators are left to mean identity for tensors).
KILN_BINARY_FUNCTION(eq, EqualTo)
KILN_BINARY_FUNCTION(ne, NotEqualTo)
/// Elementwise maximum / minimum of two operands (NaN propagates), like torch.maximum / minimum.
KILN_BINARY_FUNCTION(max, Maximum)
KILN_BINARY_FUNCTION(min, Minimum)

/// min(max(x, lo), hi) elementwise, one pass (torch.clamp(x, min, max)): NaN stays NaN, lo > hi gives hi
/// everywhere, x where it equals a bound (-0.0 stays -0.0), a NaN bound gives NaN, as torch's; the bounds
/// are numbers or operands (broadcast), and a floating bound makes an integer x's result float, as
/// torch's promotion.
template <operand X, operand_or_number L, operand_or_number H>
auto clamp(const X& x, const L& lo, const H& hi) {
  // hi is checked next to x itself (a half x's `below` computes in float)
  if constexpr (std::is_arithmetic_v<H>) detail::check_number_next_to<X>(hi, "kiln::clamp");
  auto below = detail::clamp_side<ops::ClampBelow>(x, lo, "kiln::clamp");
  return detail::clamp_side<ops::ClampAbove>(below, hi, "kiln::clamp");
}
/// max(x, lo) (torch.clamp(x, min=lo), clamp_min), with clamp's rules.
template <operand X, operand_or_number L>
auto clamp_min(const X& x, const L& lo) {
  return detail::clamp_side<ops::ClampBelow>(x, lo, "kiln::clamp_min");
}
/// min(x, hi) (torch.clamp(x, max=hi), clamp_max), with clamp's rules.
template <operand X, operand_or_number H>
auto clamp_max(const X& x, const H& hi) {
  return detail::clamp_side<ops::ClampAbove>(x, hi, "kiln::clamp_max");
}

/// x^y elementwise; x an operand and y a number or an operand, or x a number and y an operand
/// (torch.pow(2.0, x)).
template <operand_or_number X, operand_or_number Y>
  requires(operand<X> || operand<Y>)
auto pow(const X& x, const Y& y) {
  if constexpr (std::is_arithmetic_v<X>) {
    return detail::make_binary<ops::Pow>(x, y, "kiln::pow");
  } else if constexpr (std::is_arithmetic_v<Y>) {
    if constexpr (std::is_signed_v<Y> && std::is_integral_v<Y> &&
                  std::is_integral_v<typename detail::node_t<X>::value_type>)
      if (y < 0)
        throw ValueError("kiln::pow: integers to negative integer powers are not allowed (as torch); take "
                         "pow(cast<float>(x), " + std::to_string(y) + ")");
    return detail::make_unary(x, ops::PowScalar<Y>{y});
  } else {
    return detail::make_binary<ops::Pow>(x, y, "kiln::pow");
  }
}

// Each function of one operand; given a plain number it says so in one error (it would list every
// overload of the name otherwise).
#define KILN_UNARY_FUNCTION(name, Functor)                                                                \
  template <operand X>                                                                                    \
  auto name(const X& x) {                                                                                 \
    return detail::make_unary<ops::Functor>(x);                                                           \
  }                                                                                                       \
  template <class N>                                                                                      \
    requires std::is_arithmetic_v<N>                                                                      \
  auto name(N) {                                                                                          \
    static_assert(detail::dependent_false<N>, "kiln::" #name ": takes a tensor or an expression, not a number; "  \
                                      "for a number use <cmath>'s (std::exp(2.0)) or wrap it in a tensor"); \
    return 0;                                                                                             \
  }
KILN_UNARY_FUNCTION(exp, Exp)
KILN_UNARY_FUNCTION(log, Log)
KILN_UNARY_FUNCTION(tanh, Tanh)
KILN_UNARY_FUNCTION(sigmoid, Sigmoid)
KILN_UNARY_FUNCTION(relu, Relu)
KILN_UNARY_FUNCTION(sqrt, Sqrt)
KILN_UNARY_FUNCTION(abs, Abs)
KILN_UNARY_FUNCTION(log1p, Log1p)
KILN_UNARY_FUNCTION(expm1, Expm1)
KILN_UNARY_FUNCTION(sin, Sin)
KILN_UNARY_FUNCTION(cos, Cos)
KILN_UNARY_FUNCTION(tan, Tan)
KILN_UNARY_FUNCTION(log2, Log2)
KILN_UNARY_FUNCTION(log10, Log10)
KILN_UNARY_FUNCTION(exp2, Exp2)
KILN_UNARY_FUNCTION(erf, Erf)
KILN_UNARY_FUNCTION(floor, Floor)
KILN_UNARY_FUNCTION(ceil, Ceil)
KILN_UNARY_FUNCTION(trunc, Trunc)
KILN_UNARY_FUNCTION(round, Round)
KILN_UNARY_FUNCTION(sign, Sign)
KILN_UNARY_FUNCTION(reciprocal, Reciprocal)
KILN_UNARY_FUNCTION(rsqrt, Rsqrt)
KILN_UNARY_FUNCTION(isnan, IsNan)
KILN_UNARY_FUNCTION(isinf, IsInf)
KILN_UNARY_FUNCTION(isfinite, IsFinite)
KILN_UNARY_FUNCTION(logical_not, LogicalNot)
#undef KILN_UNARY_FUNCTION

/// torch.logical_and / logical_or / logical_xor: bools, a value other than 0 (NaN too) true; operands or
/// numbers, broadcast.
KILN_BINARY_FUNCTION(logical_and, LogicalAnd)
KILN_BINARY_FUNCTION(logical_or, LogicalOr)
KILN_BINARY_FUNCTION(logical_xor, LogicalXor)

namespace detail {
/// x op y of the division family; an integer division by a number that is 0 in the operation's type
/// (0, or 256 next to uint8, which wraps to it) is refused here, as torch's ZeroDivisionError (a zero
/// inside an integer divisor tensor gives 0: see ops::detail::int_fmod).
template <class F, class X, class Y>
auto make_division(const X& x, const Y& y, const char* what) {
  if constexpr (std::is_arithmetic_v<Y>) {
    using R = typename decltype(make_binary<F>(x, y, what))::value_type;
    if constexpr (std::is_integral_v<R>)
      if (static_cast<R>(y) == R(0))
        throw ValueError(std::string(what) + ": integer division by zero (torch's ZeroDivisionError)" +
                         (y == Y(0) ? std::string()
                                    : ": the divisor " + std::to_string(y) + " is 0 in the operands' " +
                                          std::to_string(sizeof(R) * 8) + "-bit integer type, as it wraps"));
  }
  return make_binary<F>(x, y, what);
}
}  // namespace detail

/// torch.fmod(x, y): x - trunc(x / y) * y, with x's sign (C's fmod for floats); torch.remainder(x, y), also
/// x % y (as libtorch's operator% and Python's): x - floor(x / y) * y, with y's sign; torch.floor_divide
/// (Python's //): floor(x / y) in the promoted type (int // int stays int). Operands or numbers,
/// broadcast, promoted as torch's; bools refused.
#define KILN_DIVISION(name, Functor, what)                                                 \
  template <operand_or_number X, operand_or_number Y>                                      \
    requires(operand<X> || operand<Y>)                                                     \
  auto name(const X& x, const Y& y) {                                                      \
    return detail::make_division<ops::Functor>(x, y, what);                                \
  }
KILN_DIVISION(fmod, Fmod, "kiln::fmod")
KILN_DIVISION(remainder, Remainder, "kiln::remainder")
KILN_DIVISION(floor_divide, FloorDivides, "kiln::floor_divide")
KILN_DIVISION(operator%, Remainder, "operator%")
#undef KILN_DIVISION

/// torch.bitwise_and / bitwise_or / bitwise_xor / bitwise_not, also &, |, ^ and ~ (as libtorch's):
/// integers and bools, promoted as torch's (bool & int64 is int64).
KILN_BINARY_FUNCTION(bitwise_and, BitAnd)
KILN_BINARY_FUNCTION(bitwise_or, BitOr)
KILN_BINARY_FUNCTION(bitwise_xor, BitXor)
KILN_BINARY_OPERATOR(&, BitAnd, "operator&")
KILN_BINARY_OPERATOR(|, BitOr, "operator|")
KILN_BINARY_OPERATOR(^, BitXor, "operator^")
#undef KILN_BINARY_OPERATOR
#undef KILN_BINARY_FUNCTION
template <operand X>
auto bitwise_not(const X& x) {
  return detail::make_unary<ops::BitNot>(x);
}
template <operand X>
auto operator~(const X& x) {
  return detail::make_unary<ops::BitNot>(x);
}

namespace detail {
/// v in R, a double beyond R's range as the infinity of its sign (a plain conversion is undefined there).
template <class R>
R saturating(double v) {
  const double top = static_cast<double>(std::numeric_limits<R>::max());
  if (v > top) return std::numeric_limits<R>::infinity();
  if (v < -top) return -std::numeric_limits<R>::infinity();
  return static_cast<R>(v);
}
}  // namespace detail

/// torch.nan_to_num(x, nan, posinf, neginf): NaN as `nan` (0), +inf as `posinf`, -inf as `neginf` (the
/// largest and lowest finite values of x's element type when not given; a tensor's own type, so ±65504
/// for half, as torch's); integers and bools are themselves.
template <operand X>
auto nan_to_num(const X& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                std::optional<double> neginf = std::nullopt) {
  using V = typename decltype(as_expr(x))::value_type;
  using R = std::conditional_t<std::is_floating_point_v<V>, V, float>;
  using L = detail::result_element_t<X>;  // (integers are their own: any limits do)
  const double top = detail::largest_finite<std::conditional_t<std::is_floating_point_v<compute_t<L>>, L, R>>();
  return detail::make_unary(x, ops::NanToNum<R>{detail::saturating<R>(nan), detail::saturating<R>(posinf.value_or(top)),
                                                 detail::saturating<R>(neginf.value_or(-top))});
}

/// c ? a : b elementwise (c a bool-valued operand, e.g. `x > 0`); all three broadcast together.
template <operand C, operand_or_number A, operand_or_number B>
auto where(const C& c, const A& a, const B& b) {
  auto cc = as_expr(c);
  // >>> Stopped here? The condition is a comparison (x > 0) or a bool tensor, as torch.where's. <<<
  static_assert(std::is_same_v<typename decltype(cc)::value_type, bool>,
                "kiln::where: the condition must be bool-valued (x > 0.0f, a Tensor<bool, ...>), as torch.where's; "
                "for a number tensor m, where(m != 0, a, b)");
  // Two numbers: float if either is floating, else int64 (bool for two bools), as torch.where.
  using Integers = std::conditional_t<std::is_same_v<A, bool> && std::is_same_v<B, bool>, bool, std::int64_t>;
  using Numbers =
      std::conditional_t<std::is_floating_point_v<A> || std::is_floating_point_v<B>, float, Integers>;
  using Ref =
      std::conditional_t<std::is_arithmetic_v<A>, std::conditional_t<std::is_arithmetic_v<B>, Numbers, B>, A>;
  auto aa = detail::node_for<Ref>(a);
  auto bb = detail::node_for<Ref>(b);
  // A number must fit the type torch takes it in (torch: where(m, u8, 300) raises; it would be 44).
  if constexpr (std::is_arithmetic_v<A> && std::is_arithmetic_v<B>) {
    detail::check_number_fits<Numbers>(a, "kiln::where");
    detail::check_number_fits<Numbers>(b, "kiln::where");
  } else if constexpr (std::is_arithmetic_v<A>) {
    detail::check_number_next_to<B>(a, "kiln::where");
  } else if constexpr (std::is_arithmetic_v<B>) {
    detail::check_number_next_to<A>(b, "kiln::where");
  }
  using SC = typename decltype(cc)::shape_type;
  using SA = typename decltype(aa)::shape_type;
  using SB = typename decltype(bb)::shape_type;
  static_assert(shapes_must_broadcast<SC, SA>::value && shapes_must_broadcast<SC, SB>::value &&
                shapes_must_broadcast<SA, SB>::value);
  using Out = broadcast_shape_t<SC, broadcast_shape_t<SA, SB>>;
  Extents<Out> out;
  if constexpr (detail::is_scalar_node<decltype(aa)>::value && detail::is_scalar_node<decltype(bb)>::value) {
    out = detail::broadcast_extents<Out>(cc.extents(), Extents<Shape<>>{}, "kiln::where");
  } else if constexpr (detail::is_scalar_node<decltype(aa)>::value) {
    out = detail::broadcast_extents<Out>(cc.extents(), bb.extents(), "kiln::where");
  } else if constexpr (detail::is_scalar_node<decltype(bb)>::value) {
    out = detail::broadcast_extents<Out>(cc.extents(), aa.extents(), "kiln::where");
  } else {
    out = detail::broadcast_extents<Out>(
        cc.extents(), detail::broadcast_extents<broadcast_shape_t<SA, SB>>(aa.extents(), bb.extents(), "kiln::where"),
        "kiln::where");
  }
  auto c2 = detail::broadcast_to<Out>(cc, out);
  auto a2 = detail::broadcast_to<Out>(aa, out);
  auto b2 = detail::broadcast_to<Out>(bb, out);
  return Where<decltype(c2), decltype(a2), decltype(b2)>{c2, a2, b2, out};
}

/// x's values as element type T stores them (`cast<double>(x)`, `cast<kiln::half>(x)`).
template <class T, operand X>
auto cast(const X& x) {
  static_assert(element<T>, "kiln::cast<T>: T must be a kiln element type (float, double, kiln::half, ...)");
  auto a = as_expr(x);
  return Cast<T, decltype(a)>{a};
}

// ---- compound assignment on tensors: one pass each ----
namespace detail {
/// t = t op y in place. As torch's in-place ops, refused when the result is of a kind t cannot hold:
/// floating values into an integer tensor (`i *= 0.5`, `i /= 2`), or numbers into a bool tensor.
template <class T, class S, class D, class E>
Tensor<T, S, D>& assign_in_place(Tensor<T, S, D>& t, const E& e) {
  using R = typename E::value_type;
  // >>> Stopped here? The in-place result does not fit the tensor's element type (torch refuses it too).
  static_assert(!std::is_floating_point_v<R> || std::is_floating_point_v<compute_t<T>>,
                "kiln: the result of this in-place op is floating point and the tensor holds integers; write "
                "t = cast<T>(t op y) to truncate, or keep the values in a float tensor");
  static_assert(!std::is_same_v<T, bool> || std::is_same_v<R, bool>,
                "kiln: the result of this in-place op is a number and the tensor holds bools");
  assign(t, e);
  return t;
}
}  // namespace detail

// t op= y for + - * / % & | ^. A temporary view is written in place too, as torch's
// `x[:, 1:3] += 1`: `x.slice(1, 3) += 1.0f;`.
#define KILN_COMPOUND_ASSIGNMENT(op)                                        \
  template <class T, class S, class D, operand_or_number Y>                 \
  Tensor<T, S, D>& operator op##=(Tensor<T, S, D>& t, const Y& y) {         \
    return detail::assign_in_place(t, t op y);                              \
  }                                                                         \
  template <class T, class S, class D, operand_or_number Y>                 \
  Tensor<T, S, D> operator op##=(Tensor<T, S, D>&& t, const Y& y) {         \
    detail::assign_in_place(t, t op y);                                     \
    return std::move(t);                                                    \
  }
KILN_COMPOUND_ASSIGNMENT(+)
KILN_COMPOUND_ASSIGNMENT(-)
KILN_COMPOUND_ASSIGNMENT(*)
KILN_COMPOUND_ASSIGNMENT(/)
KILN_COMPOUND_ASSIGNMENT(%)
KILN_COMPOUND_ASSIGNMENT(&)
KILN_COMPOUND_ASSIGNMENT(|)
KILN_COMPOUND_ASSIGNMENT(^)
#undef KILN_COMPOUND_ASSIGNMENT

}  // namespace kiln
