/// The element types (float, double, half, bfloat16), what each computes in, and conversions.
#pragma once
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

#if KILN_HAS_CUDA_HALF
using half = __half;              ///< IEEE binary16; CUDA's type, usable in host code too.
using bfloat16 = __nv_bfloat16;  ///< bfloat16; CUDA's type, usable in host code too.
#else
namespace detail {
/// Storage-only stand-ins used when no CUDA headers exist: round-to-nearest-even conversions.
struct half_bits {
  std::uint16_t bits;
  half_bits() = default;
  half_bits(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static std::uint16_t from_float(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    std::uint32_t sign = (x >> 16) & 0x8000u;
    std::uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (mag >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (mag < 0x38800000u) {                                                      // subnormal or zero
      float a;
      std::memcpy(&a, &mag, 4);
      std::uint32_t r = static_cast<std::uint32_t>(a * 16777216.0f + 0.5f);  // 2^24, nearest
      float back = static_cast<float>(r) - a * 16777216.0f;
      if (back == 0.5f && (r & 1u)) --r;  // ties to even
      return static_cast<std::uint16_t>(sign | r);
    }
    std::uint32_t e = ((mag >> 23) - 112u) << 10;
    std::uint32_t m = (mag >> 13) & 0x3ffu;
    std::uint32_t rest = mag & 0x1fffu;
    std::uint32_t h = e | m;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  static float to_float(std::uint16_t h) {
    std::uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
      float f = static_cast<float>(m) * (1.0f / 16777216.0f);
      return sign ? -f : f;
    }
    if (e == 31) x = sign | 0x7f800000u | (m << 13);
    else x = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};
struct bfloat16_bits {
  std::uint16_t bits;
  bfloat16_bits() = default;
  bfloat16_bits(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) { bits = static_cast<std::uint16_t>((x >> 16) | 0x40u); return; }
    x += 0x7fffu + ((x >> 16) & 1u);
    bits = static_cast<std::uint16_t>(x >> 16);
  }
  operator float() const {
    std::uint32_t x = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
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
#if KILN_HAS_CUDA_HALF
    return __half2float(v);
#else
    return static_cast<float>(v);
#endif
  } else if constexpr (std::is_same_v<T, bfloat16>) {
#if KILN_HAS_CUDA_HALF
    return __bfloat162float(v);
#else
    return static_cast<float>(v);
#endif
  } else {
    return v;
  }
}

/// Store: any arithmetic value -> storage type T (round to nearest even for half/bfloat16).
template <class T, class V>
KILN_HOST_DEVICE KILN_FORCEINLINE T from_compute(V v) {
  if constexpr (std::is_same_v<T, half>) {
#if KILN_HAS_CUDA_HALF
    return __float2half_rn(static_cast<float>(v));
#else
    return half(static_cast<float>(v));
#endif
  } else if constexpr (std::is_same_v<T, bfloat16>) {
#if KILN_HAS_CUDA_HALF
    return __float2bfloat16_rn(static_cast<float>(v));
#else
    return bfloat16(static_cast<float>(v));
#endif
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
