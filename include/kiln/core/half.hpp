/// The element types (float, double, half, bfloat16), what each computes in, and conversions.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "kiln/core/config.hpp"

#if KILN_HAS_CUDA_HALF
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace kiln {

namespace detail {
/// c ? a : b through masks, which compilers keep branch-free (a ternary on integers may become a branch,
/// and a branch stops a loop from vectorising).
inline std::uint32_t select_bits(bool c, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return (a & m) | (b & ~m);
}
/// binary16 bits -> float, exact for every value (subnormals, inf; a NaN keeps its sign and payload and
/// comes out quiet, as torch's loads): the exponent is rebased with one integer add, and a subnormal is
/// renormalised by one float subtraction (no loop). Branch-free: all
/// three cases are computed and one is selected, so a loop that loads half vectorises. The host path of
/// to_compute (CUDA's host __half2float is several times slower, and it is on every load on a CPU).
inline float half_bits_to_float(std::uint16_t h) {
  constexpr std::uint32_t exponent = 0x7c00u << 13;  // binary16's exponent field, moved to float's place
  const std::uint32_t magnitude = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t e = magnitude & exponent;
  const std::uint32_t normal = magnitude + ((127u - 15u) << 23);      // rebias
  const std::uint32_t special = (normal + ((128u - 16u) << 23))       // inf or NaN: exponent all ones too,
                               | (static_cast<std::uint32_t>((magnitude & 0x007fe000u) != 0) << 22);  // quiet
  const std::uint32_t shifted = normal + (1u << 23);                  // zero or subnormal 2^-14 0.m as
  float f;                                                            // 2^-14 1.m ...
  std::memcpy(&f, &shifted, 4);
  f -= 6.103515625e-05f;                                              // ... minus 2^-14, exactly
  std::uint32_t subnormal;
  std::memcpy(&subnormal, &f, 4);
  const std::uint32_t u = select_bits(e == exponent, special, select_bits(e == 0, subnormal, normal)) |
                          (static_cast<std::uint32_t>(h & 0x8000u) << 16);
  float out;
  std::memcpy(&out, &u, 4);
  return out;
}
/// float -> binary16 bits, rounded to nearest even; beyond the range inf, NaN a quiet NaN. Subnormal
/// results are rounded by the FPU: adding 0.5 puts float's last mantissa bit at 2^-24, binary16's
/// smallest subnormal. Branch-free like half_bits_to_float (every case computed, one selected).
inline std::uint16_t float_to_half_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  // |f| >= 65536 (or inf, NaN); [65520, 65536) rounds up to inf in the normal case
  const std::uint32_t huge = select_bits(u > 0x7f800000u, 0x7e00u, 0x7c00u);
  float a;                                      // |f| < 2^-14: subnormal or zero
  std::memcpy(&a, &u, 4);
  a += 0.5f;
  std::uint32_t tiny;
  std::memcpy(&tiny, &a, 4);
  tiny -= 0x3f000000u;                          // the bits of 0.5
  // normal: rebias, round half to even on the 13 dropped bits; a carry out of the mantissa raises the
  // exponent (up to inf)
  const std::uint32_t normal = (u + (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
  const std::uint32_t h = select_bits(u >= (143u << 23), huge, select_bits(u < (113u << 23), tiny, normal));
  return static_cast<std::uint16_t>(h | sign);
}
/// float -> bfloat16 bits, rounded to nearest even; a NaN stays a (quiet) NaN. Branch-free but for the
/// NaN select, so a loop that stores bfloat16 still vectorises (with CUDA's host __float2bfloat16_rn the
/// fused bf16 Adam step of a 2.1 M-parameter MLP stayed scalar: 18.7 ms against 3.5 ms with these).
inline std::uint16_t float_to_bfloat16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<std::uint16_t>(select_bits((u & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}
/// bfloat16 bits -> float (exact: the upper half of a float).
inline float bfloat16_bits_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// v as a float that rounds to the same half or bfloat16 as v itself (host): rounded to odd, toward zero
/// with the last bit set where digits were dropped, so a value just past a tie between two 16-bit
/// neighbours is not first rounded onto the tie (`static_cast<float>` then binary16 would round
/// 1 + 2^-11 + 2^-40 to 1). Float keeps 13 bits more than binary16 and 16 more than bfloat16, enough for
/// round to odd to be exact. A floating value is compared in its own type, an integer kept to 24
/// significant bits with the dropped ones as the last (no double in between, which an int64 past 2^53
/// would be rounded to). A float is itself (a non-arithmetic type converts as it does); NaN stays NaN.
template <class V>
inline float narrow_to_odd(V v) {
  if constexpr (std::is_same_v<V, float> || !std::is_arithmetic_v<V>) {
    return static_cast<float>(v);
  } else if constexpr (std::is_floating_point_v<V>) {
    float f = static_cast<float>(v);
    if (static_cast<V>(f) != v && v == v) {
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      if ((f < 0 ? -static_cast<V>(f) : static_cast<V>(f)) > (v < 0 ? -v : v)) --u;  // toward zero
      u |= 1u;
      std::memcpy(&f, &u, 4);
    }
    return f;
  } else {
    const bool negative = v < V(0);
    std::uint64_t m =
        negative ? std::uint64_t(0) - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
    int shift = 0;
    while ((m >> shift) >= (std::uint64_t(1) << 24)) ++shift;
    if (shift > 0) m = (m >> shift) | ((m & ((std::uint64_t(1) << shift) - 1)) != 0 ? 1u : 0u);
    const float f = std::ldexp(static_cast<float>(m), shift);  // m has 24 bits at most: exact
    return negative ? -f : f;
  }
}
}  // namespace detail

#if KILN_HAS_CUDA_HALF
using half = __half;              ///< IEEE binary16; CUDA's type, usable in host code too.
using bfloat16 = __nv_bfloat16;  ///< bfloat16; CUDA's type, usable in host code too.
#else
namespace detail {
/// Storage-only stand-ins used when no CUDA headers exist: round-to-nearest-even conversions, from any
/// number rounded once (a double is not rounded to float first), as CUDA's __half(double).
struct half_bits {
  std::uint16_t bits;
  half_bits() = default;
  template <class V>
    requires std::is_arithmetic_v<V>
  half_bits(V v) : bits(float_to_half_bits(narrow_to_odd(v))) {}  // NOLINT: implicit, as __half's
  operator float() const { return half_bits_to_float(bits); }
};
struct bfloat16_bits {
  std::uint16_t bits;
  bfloat16_bits() = default;
  template <class V>
    requires std::is_arithmetic_v<V>
  bfloat16_bits(V v) : bits(float_to_bfloat16_bits(narrow_to_odd(v))) {}  // NOLINT
  operator float() const { return bfloat16_bits_to_float(bits); }
};
}  // namespace detail
using half = detail::half_bits;
using bfloat16 = detail::bfloat16_bits;
#endif

/// The element types a Tensor may hold.
template <class T>
concept element = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> ||
                  std::is_same_v<T, bfloat16> || std::is_same_v<T, std::uint8_t> || std::is_same_v<T, std::int32_t> ||
                  std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>;

/// The type arithmetic on T runs in: half and bfloat16 compute in float.
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<half> {
  using type = float;
};
template <>
struct compute_type<bfloat16> {
  using type = float;
};
template <class T>
using compute_t = typename compute_type<T>::type;

/// Load: storage -> compute type.
template <class T>
KILN_HOST_DEVICE KILN_FORCEINLINE compute_t<T> to_compute(T v) {
  if constexpr (std::is_same_v<T, half>) {
#if KILN_HAS_CUDA_HALF && defined(__CUDA_ARCH__)
    return __half2float(v);
#elif KILN_HAS_CUDA_HALF
    return detail::half_bits_to_float(static_cast<__half_raw>(v).x);
#else
    return static_cast<float>(v);
#endif
  } else if constexpr (std::is_same_v<T, bfloat16>) {
#if KILN_HAS_CUDA_HALF && defined(__CUDA_ARCH__)
    return __bfloat162float(v);
#elif KILN_HAS_CUDA_HALF
    return detail::bfloat16_bits_to_float(static_cast<__nv_bfloat16_raw>(v).x);
#else
    return static_cast<float>(v);
#endif
  } else {
    return v;
  }
}

/// Store: any arithmetic value -> storage type T (round to nearest even for half/bfloat16, once: a double
/// or a wide integer is not rounded to float first; on the device a long double is a double).
template <class T, class V>
KILN_HOST_DEVICE KILN_FORCEINLINE T from_compute(V v) {
  if constexpr (std::is_same_v<T, half>) {
#if KILN_HAS_CUDA_HALF && defined(__CUDA_ARCH__)
    if constexpr (std::is_same_v<V, double>)
      return __double2half(v);
    else if constexpr (std::is_integral_v<V> && std::is_signed_v<V>)
      return __ll2half_rn(static_cast<long long>(v));
    else if constexpr (std::is_integral_v<V>)
      return __ull2half_rn(static_cast<unsigned long long>(v));
    else
      return __float2half_rn(static_cast<float>(v));
#elif KILN_HAS_CUDA_HALF
    __half_raw r;
    r.x = detail::float_to_half_bits(detail::narrow_to_odd(v));
    return half(r);
#else
    return half(detail::narrow_to_odd(v));
#endif
  } else if constexpr (std::is_same_v<T, bfloat16>) {
#if KILN_HAS_CUDA_HALF && defined(__CUDA_ARCH__)
    if constexpr (std::is_same_v<V, double>)
      return __double2bfloat16(v);
    else if constexpr (std::is_integral_v<V> && std::is_signed_v<V>)
      return __ll2bfloat16_rn(static_cast<long long>(v));
    else if constexpr (std::is_integral_v<V>)
      return __ull2bfloat16_rn(static_cast<unsigned long long>(v));
    else
      return __float2bfloat16_rn(static_cast<float>(v));
#elif KILN_HAS_CUDA_HALF
    __nv_bfloat16_raw r;
    r.x = detail::float_to_bfloat16_bits(detail::narrow_to_odd(v));
    return bfloat16(r);
#else
    return bfloat16(detail::narrow_to_odd(v));
#endif
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && !std::is_same_v<T, bool> &&
                       std::is_floating_point_v<V>) {
    // Through int64 as torch converts (a negative float to uint8 wraps: -1.0 -> 255, on every machine;
    // straight to an unsigned type it is undefined, and x86 and Arm differ).
    return static_cast<T>(static_cast<std::int64_t>(v));
  } else {
    return static_cast<T>(v);
  }
}

/// PyTorch's name for an element type ("float32", "float16", ...).
template <class T>
constexpr std::string_view dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, double>) return "float64";
  else if constexpr (std::is_same_v<T, half>) return "float16";
  else if constexpr (std::is_same_v<T, bfloat16>) return "bfloat16";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else return "unknown";
}

}  // namespace kiln
