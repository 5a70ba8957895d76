/// Elementwise math, shared verbatim by the CPU loop and the CUDA kernel.
#pragma once
#include <cmath>
#include <type_traits>

#include "kiln/core/config.hpp"

namespace kiln::ops {

namespace detail {
// Float and double overloads of the C math functions (host and device under nvcc).
KILN_HOST_DEVICE KILN_FORCEINLINE float exp_(float x) { return ::expf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double exp_(double x) { return ::exp(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float log_(float x) { return ::logf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double log_(double x) { return ::log(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float tanh_(float x) { return ::tanhf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double tanh_(double x) { return ::tanh(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float sqrt_(float x) { return ::sqrtf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double sqrt_(double x) { return ::sqrt(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float abs_(float x) { return ::fabsf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double abs_(double x) { return ::fabs(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE float pow_(float x, float y) { return ::powf(x, y); }
KILN_HOST_DEVICE KILN_FORCEINLINE double pow_(double x, double y) { return ::pow(x, y); }
KILN_HOST_DEVICE KILN_FORCEINLINE float erf_(float x) { return ::erff(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double erf_(double x) { return ::erf(x); }
template <class T>
  requires std::is_integral_v<T>
KILN_HOST_DEVICE KILN_FORCEINLINE T abs_(T x) {
  return x < 0 ? -x : x;
}
}  // namespace detail

// ---- arithmetic ----
struct Plus {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const { return a + b; }
};
struct Minus {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const { return a - b; }
};
struct Multiplies {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const { return a * b; }
};
struct Divides {
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const { return a / b; }
};
struct Negate {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return -a; }
};
/// max(a, b); NaN in either propagates (torch.maximum).
struct Maximum {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a, A b) const { return (a > b || a != a) ? a : b; }
};
/// min(a, b); NaN in either propagates (torch.minimum).
struct Minimum {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a, A b) const { return (a < b || a != a) ? a : b; }
};
struct Pow {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a, A b) const { return detail::pow_(a, b); }
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
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return detail::exp_(a); }
};
struct Log {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return detail::log_(a); }
};
struct Tanh {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return detail::tanh_(a); }
};
struct Sqrt {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return detail::sqrt_(a); }
};
struct Abs {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return detail::abs_(a); }
};
/// 1 / (1 + e^-x); saturates cleanly to 0 and 1.
struct Sigmoid {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return A(1) / (A(1) + detail::exp_(-a)); }
};
/// max(x, 0); NaN stays NaN (torch.relu).
struct Relu {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return a < A(0) ? A(0) : a; }
};
/// x^p for a fixed exponent.
template <class P>
struct PowScalar {
  P p;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const { return detail::pow_(a, static_cast<A>(p)); }
};

/// c ? a : b
struct Select {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(bool c, A a, A b) const { return c ? a : b; }
};

}  // namespace kiln::ops
