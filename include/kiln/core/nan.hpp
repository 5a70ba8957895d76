/// kiln::detail::is_nan: a NaN test that -ffast-math cannot remove.
///
/// kiln is header-only, so a user's flags compile its NaN rules: under -ffinite-math-only (part of
/// -ffast-math) GCC and Clang fold `x != x` and std::isnan(x) to false and may reorder the ordered
/// comparisons around them, which lost torch's propagation (max of {1, NaN, 3} gave 3, relu(NaN) 0).
/// For float and double the test reads the bits instead (exponent all ones, mantissa nonzero), which no
/// floating-point flag touches; it is branch-free, so loops that use it still vectorise.
#pragma once
#include <bit>
#include <cstdint>
#include <type_traits>

#include "kiln/core/config.hpp"

namespace kiln::detail {

/// True when x is a NaN; false for integers and bool. float and double: a bit test (survives
/// -ffast-math); other floating types (long double, a wrapper type): x != x.
template <class T>
KILN_HOST_DEVICE KILN_FORCEINLINE constexpr bool is_nan(T x) {
  if constexpr (std::is_integral_v<T>) {
    (void)x;
    return false;
  } else if constexpr (std::is_same_v<T, float>) {
    return (std::bit_cast<std::uint32_t>(x) & 0x7fffffffu) > 0x7f800000u;
  } else if constexpr (std::is_same_v<T, double>) {
    // In 32-bit halves: x86-64's baseline (SSE2) has no 64-bit integer compare, and a 64-bit test kept
    // GCC from vectorising a loop of doubles. NaN: high word (sign cleared) above 0x7ff00000, or equal
    // to it with a nonzero low word; or-ing (lo != 0) into the high word's lowest bit tests both.
    const std::uint64_t u = std::bit_cast<std::uint64_t>(x);
    const std::uint32_t hi = static_cast<std::uint32_t>(u >> 32) & 0x7fffffffu;
    const std::uint32_t lo = static_cast<std::uint32_t>(u);
    return (hi | static_cast<std::uint32_t>(lo != 0u)) > 0x7ff00000u;
  } else {
    return x != x;
  }
}

/// True when x is inf or NaN (not finite); a bit test (exponent all ones) for float and double, so
/// -ffast-math's folding of std::isfinite to true does not reach it (GradScaler, clip_grad_norm).
template <class M>
KILN_HOST_DEVICE KILN_FORCEINLINE constexpr bool is_inf_or_nan(M x) {
  static_assert(std::is_same_v<M, float> || std::is_same_v<M, double>);
  if constexpr (std::is_same_v<M, double>)
    return (std::bit_cast<std::uint64_t>(x) & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
  else
    return (std::bit_cast<std::uint32_t>(x) & 0x7f800000u) == 0x7f800000u;
}

}  // namespace kiln::detail
