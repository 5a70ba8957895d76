/// Elementwise math, shared verbatim by the CPU loop and the CUDA kernel.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/core/vector_math.hpp"

namespace kiln::ops {

namespace detail {
/// The unsigned type integer arithmetic of R is done in, so that it wraps as torch's integer tensors do
/// (signed overflow is undefined in C++; C++20 converts back modulo 2^N): at least unsigned int, so that
/// no operand is promoted back to a signed int (uint16 * uint16 would overflow an int).
template <class R, bool Narrow = (sizeof(R) < sizeof(unsigned))>
struct wrap_type {
  using type = unsigned;  // (bool too, whose make_unsigned is ill-formed)
};
template <class R>
struct wrap_type<R, false> {
  using type = std::make_unsigned_t<R>;
};
template <class R>
using wrap_t = typename wrap_type<R>::type;
/// a + b, a - b, a * b and -a in R, wrapping.
template <class R>
KILN_HOST_DEVICE KILN_FORCEINLINE R wrap_add(R a, R b) {
  return static_cast<R>(static_cast<wrap_t<R>>(a) + static_cast<wrap_t<R>>(b));
}
template <class R>
KILN_HOST_DEVICE KILN_FORCEINLINE R wrap_sub(R a, R b) {
  return static_cast<R>(static_cast<wrap_t<R>>(a) - static_cast<wrap_t<R>>(b));
}
template <class R>
KILN_HOST_DEVICE KILN_FORCEINLINE R wrap_mul(R a, R b) {
  return static_cast<R>(static_cast<wrap_t<R>>(a) * static_cast<wrap_t<R>>(b));
}

// Float and double overloads of the C math functions (host and device under nvcc).
// (exp, erf, tanh, log1p and expm1 in float: in host code SLEEF's or libmvec's where linked, the same bits
// in a vector loop and alone, core/vector_math.hpp)
#if KILN_VECTOR_EXP
KILN_HOST_DEVICE KILN_FORCEINLINE float exp_(float x) { return kiln_expf(x); }
#else
KILN_HOST_DEVICE KILN_FORCEINLINE float exp_(float x) { return ::expf(x); }
#endif
KILN_HOST_DEVICE KILN_FORCEINLINE double exp_(double x) { return ::exp(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float log_(float x) { return ::logf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double log_(double x) { return ::log(x); }
#if KILN_VECTOR_MATH
KILN_HOST_DEVICE KILN_FORCEINLINE float tanh_(float x) { return kiln_tanhf(x); }
#else
KILN_HOST_DEVICE KILN_FORCEINLINE float tanh_(float x) { return ::tanhf(x); }
#endif
KILN_HOST_DEVICE KILN_FORCEINLINE double tanh_(double x) { return ::tanh(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float sqrt_(float x) { return ::sqrtf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double sqrt_(double x) { return ::sqrt(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float abs_(float x) { return ::fabsf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double abs_(double x) { return ::fabs(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float pow_(float x, float y) { return ::powf(x, y); }
KILN_HOST_DEVICE KILN_FORCEINLINE double pow_(double x, double y) { return ::pow(x, y); }
#if KILN_VECTOR_MATH
KILN_HOST_DEVICE KILN_FORCEINLINE float erf_(float x) { return kiln_erff(x); }
#else
KILN_HOST_DEVICE KILN_FORCEINLINE float erf_(float x) { return ::erff(x); }
#endif
KILN_HOST_DEVICE KILN_FORCEINLINE double erf_(double x) { return ::erf(x); }
#if KILN_VECTOR_MATH
KILN_HOST_DEVICE KILN_FORCEINLINE float log1p_(float x) { return kiln_log1pf(x); }
#else
KILN_HOST_DEVICE KILN_FORCEINLINE float log1p_(float x) { return ::log1pf(x); }
#endif
KILN_HOST_DEVICE KILN_FORCEINLINE double log1p_(double x) { return ::log1p(x); }
#if KILN_VECTOR_MATH
KILN_HOST_DEVICE KILN_FORCEINLINE float expm1_(float x) { return kiln_expm1f(x); }
#else
KILN_HOST_DEVICE KILN_FORCEINLINE float expm1_(float x) { return ::expm1f(x); }
#endif
KILN_HOST_DEVICE KILN_FORCEINLINE double expm1_(double x) { return ::expm1(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float sin_(float x) { return ::sinf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double sin_(double x) { return ::sin(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float cos_(float x) { return ::cosf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double cos_(double x) { return ::cos(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float tan_(float x) { return ::tanf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double tan_(double x) { return ::tan(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float log2_(float x) { return ::log2f(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double log2_(double x) { return ::log2(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float log10_(float x) { return ::log10f(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double log10_(double x) { return ::log10(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float exp2_(float x) { return ::exp2f(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double exp2_(double x) { return ::exp2(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float floor_(float x) { return ::floorf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double floor_(double x) { return ::floor(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float ceil_(float x) { return ::ceilf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double ceil_(double x) { return ::ceil(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float trunc_(float x) { return ::truncf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double trunc_(double x) { return ::trunc(x); }
// rint: to the nearest, ties to even (the default rounding mode), as torch.round.
KILN_HOST_DEVICE KILN_FORCEINLINE float rint_(float x) { return ::rintf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double rint_(double x) { return ::rint(x); }
template <class T>
  requires std::is_integral_v<T>
KILN_HOST_DEVICE KILN_FORCEINLINE T abs_(T x) {
  return x < 0 ? wrap_sub(T(0), x) : x;  // abs(INT_MIN) is INT_MIN, as torch's
}
/// a^n in integers (torch's integer pow): wraps on overflow; a negative n gives 1/a^|n| truncated
/// (1 for a = 1, +-1 for a = -1, else 0).
KILN_HOST_DEVICE KILN_FORCEINLINE std::int64_t ipow_(std::int64_t a, std::int64_t n) {
  if (n < 0) return a == 1 ? 1 : a == -1 ? ((n & 1) ? -1 : 1) : 0;
  std::uint64_t r = 1, b = static_cast<std::uint64_t>(a);
  for (; n != 0; n >>= 1, b *= b)
    if (n & 1) r *= b;
  return static_cast<std::int64_t>(r);
}

/// The wider of two integer types, in torch's order bool < uint8 < int32 < int64.
template <class A, class B>
using wider_integer_t =
    std::conditional_t<(sizeof(A) > sizeof(B)) || (sizeof(A) == sizeof(B) && !std::is_same_v<A, bool>), A, B>;
/// The type torch's promotion gives an operation over values a and b: a floating type wins over
/// integers (the wider of two floats), else the wider integer (uint8 + uint8 stays uint8 and wraps).
template <class A, class B>
using promote_t = std::conditional_t<std::is_floating_point_v<A> || std::is_floating_point_v<B>,
                                     std::common_type_t<A, B>, wider_integer_t<A, B>>;
/// The type a number of type N takes next to values of type V. As in torch, a number does not widen
/// its operand's kind (`x * 0.5` stays float, `i + 1` int32), but a floating number next to integers
/// is float (`i * 0.5`; `i < 2.5` compares 2.5) and an integer next to bools int64 (`mask * 2`).
template <class N, class V>
using number_type_t = std::conditional_t<
    std::is_floating_point_v<N> && !std::is_floating_point_v<V>, float,
    std::conditional_t<std::is_same_v<V, bool> && !std::is_same_v<N, bool>, std::int64_t, V>>;
/// The type of a real-valued result (a quotient, exp, sqrt) over values A: A if floating, else float
/// (torch's default dtype: int / int is a true division).
template <class A>
using real_t = std::conditional_t<std::is_floating_point_v<A>, A, float>;
/// exp(x[j] - m), term j of a row's Σ exp(x - m) in the compute type (a log-sum-exp's sum, as softmax's
/// and cross entropy's rows hand it to lane_sum, core/lane_sums.hpp).
template <class T>
struct ShiftedExp {
  const T* x;
  compute_t<T> m;
  KILN_HOST_DEVICE KILN_FORCEINLINE compute_t<T> operator[](index_t j) const {
    return exp_(to_compute(x[j]) - m);
  }
};
/// a^b in type R: the C library's pow for floating R, ipow_ for integers.
template <class R, class A, class B>
KILN_HOST_DEVICE KILN_FORCEINLINE R pow_in(A a, B b) {
  if constexpr (std::is_floating_point_v<R>) return pow_(static_cast<R>(a), static_cast<R>(b));
  else return static_cast<R>(ipow_(static_cast<std::int64_t>(a), static_cast<std::int64_t>(b)));
}
}  // namespace detail

// ---- arithmetic ----
// Two operands of different types meet in detail::promote_t (torch's promotion): int32 + float is
// float, uint8 + uint8 stays uint8; a quotient is real (int / int is float, x / 0 is inf, not a trap).
// Bools: + is or, * is and (as torch); - and unary minus are refused (torch refuses them too).
struct Plus {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    using R = detail::promote_t<A, B>;
    if constexpr (std::is_same_v<R, bool>) return a || b;
    else if constexpr (std::is_integral_v<R>) return detail::wrap_add(static_cast<R>(a), static_cast<R>(b));
    else return static_cast<R>(static_cast<R>(a) + static_cast<R>(b));
  }
};
struct Minus {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    using R = detail::promote_t<A, B>;
    static_assert(!std::is_same_v<R, bool>,
                  "kiln: subtracting bools (torch refuses it too); kiln::ne(a, b) is their exclusive or");
    if constexpr (std::is_integral_v<R>)
      return detail::wrap_sub(static_cast<R>(a), static_cast<R>(b));
    else
      return static_cast<R>(static_cast<R>(a) - static_cast<R>(b));
  }
};
struct Multiplies {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    using R = detail::promote_t<A, B>;
    if constexpr (std::is_same_v<R, bool>) return a && b;
    else if constexpr (std::is_integral_v<R>) return detail::wrap_mul(static_cast<R>(a), static_cast<R>(b));
    else return static_cast<R>(static_cast<R>(a) * static_cast<R>(b));
  }
};
struct Divides {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    using R = detail::real_t<detail::promote_t<A, B>>;
    return static_cast<R>(a) / static_cast<R>(b);
  }
};
struct Negate {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const {
    static_assert(!std::is_same_v<A, bool>,
                  "kiln: negating bools (torch refuses it too); kiln::eq(m, false) is their not");
    if constexpr (std::is_integral_v<A>)
      return detail::wrap_sub(A(0), a);
    else
      return static_cast<A>(-a);
  }
};
/// max(a, b); NaN in either propagates (torch.maximum).
struct Maximum {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    using R = detail::promote_t<A, B>;
    const R x = static_cast<R>(a), y = static_cast<R>(b);
    return (x > y || kiln::detail::is_nan(x)) ? x : y;
  }
};
/// min(a, b); NaN in either propagates (torch.minimum).
struct Minimum {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    using R = detail::promote_t<A, B>;
    const R x = static_cast<R>(a), y = static_cast<R>(b);
    return (x < y || kiln::detail::is_nan(x)) ? x : y;
  }
};
/// A real function of one value (exp2, log2, tan, ...): integers as float, as torch's.
#define KILN_REAL_FUNCTOR(Name, fn)                                 \
  struct Name {                                                     \
    template <class A>                                              \
    KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {  \
      return detail::fn(static_cast<detail::real_t<A>>(a));         \
    }                                                               \
  };
KILN_REAL_FUNCTOR(Tan, tan_)
KILN_REAL_FUNCTOR(Log2, log2_)
KILN_REAL_FUNCTOR(Log10, log10_)
KILN_REAL_FUNCTOR(Exp2, exp2_)
KILN_REAL_FUNCTOR(Erf, erf_)
#undef KILN_REAL_FUNCTOR

/// Rounding to an integral value (torch.floor, ceil, trunc, round: ties to even); integers are their own
/// (torch's floor of int64 is itself), bools do not compile (torch refuses them).
#define KILN_ROUNDING_FUNCTOR(Name, fn)                                                         \
  struct Name {                                                                                 \
    template <class A>                                                                          \
    KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const {                                 \
      static_assert(!std::is_same_v<A, bool>, "kiln::floor / ceil / trunc / round: bools (torch " \
                                              "refuses them too); take cast<float>(m)");        \
      if constexpr (std::is_integral_v<A>)                                                      \
        return a;                                                                               \
      else                                                                                      \
        return detail::fn(a);                                                                   \
    }                                                                                           \
  };
KILN_ROUNDING_FUNCTOR(Floor, floor_)
KILN_ROUNDING_FUNCTOR(Ceil, ceil_)
KILN_ROUNDING_FUNCTOR(Trunc, trunc_)
KILN_ROUNDING_FUNCTOR(Round, rint_)
#undef KILN_ROUNDING_FUNCTOR

/// -1, 0 or 1 in a's type (torch.sign): 0 for ±0 and NaN; a bool is itself.
struct Sign {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const {
    if constexpr (std::is_same_v<A, bool>)
      return a;
    else
      return static_cast<A>(static_cast<int>(A(0) < a) - static_cast<int>(a < A(0)));
  }
};
/// 1 / x (torch.reciprocal; integers as float).
struct Reciprocal {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    using R = detail::real_t<A>;
    return R(1) / static_cast<R>(a);
  }
};
/// 1 / sqrt(x) (torch.rsqrt; integers as float), a division after the square root on both devices.
struct Rsqrt {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    using R = detail::real_t<A>;
    return R(1) / detail::sqrt_(static_cast<R>(a));
  }
};
/// torch.isnan, isinf, isfinite: bools; an integer is never NaN or inf. Bit tests, which -ffast-math
/// keeps (core/nan.hpp).
struct IsNan {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a) const {
    return kiln::detail::is_nan(a);
  }
};
struct IsInf {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a) const {
    if constexpr (std::is_integral_v<A>)
      return false;
    else
      return kiln::detail::is_inf_or_nan(a) && !kiln::detail::is_nan(a);
  }
};
struct IsFinite {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a) const {
    if constexpr (std::is_integral_v<A>)
      return true;
    else
      return !kiln::detail::is_inf_or_nan(a);
  }
};
/// torch.logical_not, logical_and, logical_or, logical_xor: bools, any value other than 0 true (NaN too).
struct LogicalNot {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a) const {
    return a == A(0);
  }
};
struct LogicalAnd {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const {
    return (a != A(0)) && (b != B(0));
  }
};
struct LogicalOr {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const {
    return (a != A(0)) || (b != B(0));
  }
};
struct LogicalXor {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const {
    return (a != A(0)) != (b != B(0));
  }
};

/// clamp's lower bound, torch's max(x, lo) = x < lo ? lo : x: x where they are equal (clamp(-0.0, 0, 1)
/// is -0.0), x's NaN stays, a NaN bound gives NaN.
struct ClampBelow {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    using R = detail::promote_t<A, B>;
    const R x = static_cast<R>(a), lo = static_cast<R>(b);
    return (x < lo || kiln::detail::is_nan(lo)) ? lo : x;
  }
};
/// clamp's upper bound, torch's min(x, hi) = hi < x ? hi : x, with ClampBelow's rules.
struct ClampAbove {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    using R = detail::promote_t<A, B>;
    const R x = static_cast<R>(a), hi = static_cast<R>(b);
    return (hi < x || kiln::detail::is_nan(hi)) ? hi : x;
  }
};
/// a^b in the promoted type (integers: exact, see detail::ipow_).
struct Pow {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    return detail::pow_in<detail::promote_t<A, B>>(a, b);
  }
};

// ---- comparisons (yield bool) ----
struct Less {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const { return a < b; }
};
struct LessEqual {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const { return a <= b; }
};
struct Greater {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const { return a > b; }
};
struct GreaterEqual {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const { return a >= b; }
};
struct EqualTo {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const { return a == b; }
};
struct NotEqualTo {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE bool operator()(A a, B b) const { return a != b; }
};

// ---- unary math ----
struct Exp {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    return detail::exp_(static_cast<detail::real_t<A>>(a));
  }
};
struct Log {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    return detail::log_(static_cast<detail::real_t<A>>(a));
  }
};
struct Tanh {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    return detail::tanh_(static_cast<detail::real_t<A>>(a));
  }
};
/// log(1 + x), accurate near 0 (torch.log1p).
struct Log1p {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    return detail::log1p_(static_cast<detail::real_t<A>>(a));
  }
};
/// e^x - 1, accurate near 0 (torch.expm1).
struct Expm1 {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    return detail::expm1_(static_cast<detail::real_t<A>>(a));
  }
};
struct Sin {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    return detail::sin_(static_cast<detail::real_t<A>>(a));
  }
};
struct Cos {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    return detail::cos_(static_cast<detail::real_t<A>>(a));
  }
};
struct Sqrt {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    return detail::sqrt_(static_cast<detail::real_t<A>>(a));
  }
};
struct Abs {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return detail::abs_(a); }
};
/// 1 / (1 + e^-x); saturates cleanly to 0 and 1.
struct Sigmoid {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    using R = detail::real_t<A>;
    return R(1) / (R(1) + detail::exp_(-static_cast<R>(a)));
  }
};
/// max(x, 0); NaN stays NaN (torch.relu), also under -ffast-math (kiln::detail::is_nan).
struct Relu {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const {
    return (a < A(0) && !kiln::detail::is_nan(a)) ? A(0) : a;
  }
};
/// x^p for a fixed exponent. Floating x: the exponents torch's pow(Tensor, Scalar) computes another way
/// are computed that way (2, 3: products; -1, -2: a quotient; 0.5: sqrt; -0.5: 1 / sqrt), so the bits
/// are torch's (a correctly rounded pow differs from x * x * x in the last bit for a quarter of floats)
/// and so are the special values (pow(-0., 0.5) is -0., pow(-inf, 0.5) NaN, as sqrt's).
template <class P>
struct PowScalar {
  P p;
  /// The exponent promotes as a number (detail::number_type_t): int ** 0.5 is float, int ** 2 int,
  /// bool ** 2 int64.
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a) const {
    using R = detail::number_type_t<P, A>;
    if constexpr (std::is_floating_point_v<R>) {
      const R x = static_cast<R>(a);
      const double e = static_cast<double>(p);
      if (e == 2.0) return static_cast<R>(x * x);
      if (e == 3.0) return static_cast<R>(x * x * x);
      if (e == 0.5) return detail::sqrt_(x);
      if (e == -0.5) return static_cast<R>(R(1) / detail::sqrt_(x));
      if (e == -1.0) return static_cast<R>(R(1) / x);
      if (e == -2.0) return static_cast<R>(R(1) / (x * x));
      return detail::pow_(x, static_cast<R>(p));
    } else {
      return detail::pow_in<R>(a, p);
    }
  }
};

// ---- the division family and bitwise operations (torch.fmod, remainder, floor_divide, bitwise_*) ----
namespace detail {
KILN_HOST_DEVICE KILN_FORCEINLINE float fmod_(float x, float y) { return ::fmodf(x, y); }
KILN_HOST_DEVICE KILN_FORCEINLINE double fmod_(double x, double y) { return ::fmod(x, y); }
KILN_HOST_DEVICE KILN_FORCEINLINE float copysign_(float x, float y) { return ::copysignf(x, y); }
KILN_HOST_DEVICE KILN_FORCEINLINE double copysign_(double x, double y) { return ::copysign(x, y); }
/// a % b of integers without C's traps: a zero divisor gives 0 (torch's CPU raises ZeroDivisionError;
/// a divisor given as the number 0 is refused before any kernel runs) and b = -1 gives 0 (INT_MIN % -1
/// traps in C: torch 1.13's CPU dies of SIGFPE there).
template <class R>
KILN_HOST_DEVICE KILN_FORCEINLINE R int_fmod(R a, R b) {
  if (b == R(0)) return R(0);
  if constexpr (std::is_signed_v<R>)
    if (b == R(-1)) return R(0);
  return static_cast<R>(a % b);
}
/// a / b of integers rounded towards -inf (torch's div_floor_integer), with int_fmod's rules: 0 for a
/// zero divisor, INT_MIN / -1 wraps to INT_MIN.
template <class R>
KILN_HOST_DEVICE KILN_FORCEINLINE R int_floor_divide(R a, R b) {
  if (b == R(0)) return R(0);
  if constexpr (std::is_signed_v<R>) {
    if (b == R(-1)) return wrap_sub(R(0), a);
    const R q = static_cast<R>(a / b);
    return ((a < R(0)) != (b < R(0)) && static_cast<R>(a % b) != R(0)) ? static_cast<R>(q - 1) : q;
  } else {
    return static_cast<R>(a / b);
  }
}
/// The promoted type of a division-family operation; two bools are refused, as torch's.
template <class A, class B>
constexpr bool division_of_numbers() {
  static_assert(!std::is_same_v<promote_t<A, B>, bool>,
                "kiln::fmod / remainder / floor_divide: bools (torch refuses them too); take cast<int64_t>(m)");
  return true;
}
/// The promoted type of a bitwise operation: integers or bools, as torch's.
template <class A, class B>
constexpr bool bitwise_of_integers() {
  static_assert(std::is_integral_v<A> && std::is_integral_v<B>,
                "kiln: bitwise &, |, ^, ~ take integers or bools (torch refuses floating point too); for masks "
                "of comparisons they are and, or, xor, not");
  return true;
}
}  // namespace detail

/// a - trunc(a / b) * b, the dividend's sign (torch.fmod: C's fmod for floats, % for integers).
struct Fmod {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    static_assert(detail::division_of_numbers<A, B>());
    using R = detail::promote_t<A, B>;
    if constexpr (std::is_integral_v<R>) return detail::int_fmod(static_cast<R>(a), static_cast<R>(b));
    else return detail::fmod_(static_cast<R>(a), static_cast<R>(b));
  }
};
/// a - floor(a / b) * b, the divisor's sign (torch.remainder, Python's %, libtorch's operator%): fmod
/// moved by b when the signs differ, as torch computes it.
struct Remainder {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    static_assert(detail::division_of_numbers<A, B>());
    using R = detail::promote_t<A, B>;
    const R y = static_cast<R>(b);
    R r;
    if constexpr (std::is_integral_v<R>) r = detail::int_fmod(static_cast<R>(a), y);
    else r = detail::fmod_(static_cast<R>(a), y);
    if constexpr (std::is_signed_v<R>)  // (unsigned: the signs agree; floats are signed)
      if (r != R(0) && (r < R(0)) != (y < R(0))) r = static_cast<R>(r + y);
    return r;
  }
};
/// floor(a / b) (torch.floor_divide, Python's //; 1.13 rounds down). Floats as torch's div_floor_floating:
/// (a - fmod(a, b)) / b, corrected to the floor and to the nearest integer; a / b for b = 0.
struct FloorDivides {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    static_assert(detail::division_of_numbers<A, B>());
    using R = detail::promote_t<A, B>;
    const R x = static_cast<R>(a), y = static_cast<R>(b);
    if constexpr (std::is_integral_v<R>) {
      return detail::int_floor_divide(x, y);
    } else {
      if (y == R(0)) return static_cast<R>(x / y);
      const R mod = detail::fmod_(x, y);
      R div = static_cast<R>((x - mod) / y);
      if (mod != R(0) && (y < R(0)) != (mod < R(0))) div = static_cast<R>(div - R(1));
      if (div == R(0)) return detail::copysign_(R(0), static_cast<R>(x / y));
      R floordiv = detail::floor_(div);
      if (div - floordiv > R(0.5)) floordiv = static_cast<R>(floordiv + R(1));
      return floordiv;
    }
  }
};
/// torch.bitwise_and / or / xor / not (libtorch's &, |, ^, ~): integers in the promoted type, bools as
/// bools (~ of a bool is its not).
#define KILN_BITWISE_FUNCTOR(Name, op)                                                                         \
  struct Name {                                                                                                \
    template <class A, class B>                                                                                \
    KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {                                        \
      static_assert(detail::bitwise_of_integers<A, B>());                                                      \
      using R = detail::promote_t<A, B>;                                                                       \
      if constexpr (std::is_integral_v<R>) return static_cast<R>(static_cast<R>(a) op static_cast<R>(b));      \
      else return R{};  /* (refused above) */                                                                  \
    }                                                                                                          \
  };
KILN_BITWISE_FUNCTOR(BitAnd, &)
KILN_BITWISE_FUNCTOR(BitOr, |)
KILN_BITWISE_FUNCTOR(BitXor, ^)
#undef KILN_BITWISE_FUNCTOR
struct BitNot {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const {
    static_assert(detail::bitwise_of_integers<A, A>());
    if constexpr (std::is_same_v<A, bool>) return !a;
    else if constexpr (std::is_integral_v<A>) return static_cast<A>(~a);
    else return a;  // (refused above)
  }
};

/// torch.nan_to_num: NaN, +inf and -inf replaced by the given values (R: the computed type); integers
/// and bools are their own.
template <class R>
struct NanToNum {
  R nan, posinf, neginf;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const {
    if constexpr (std::is_integral_v<A>) {
      return a;
    } else {
      if (kiln::detail::is_nan(a)) return static_cast<A>(nan);
      if (kiln::detail::is_inf_or_nan(a)) return static_cast<A>(a > A(0) ? posinf : neginf);
      return a;
    }
  }
};

/// c ? a : b
struct Select {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(bool c, A a, A b) const { return c ? a : b; }
};

}  // namespace kiln::ops
