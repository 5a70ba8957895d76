/// Whether a number stored into a tensor fits its element type, as torch checks one (fill_, clamp's and
/// where's numbers): "value cannot be converted to type uint8_t without overflow" is a ValueError here.
/// Arithmetic with a number (`u8 + 300`) wraps instead, as torch's does, and is not checked.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/number_text.hpp"

namespace kiln::detail {

/// The largest finite value of a floating element type T, as a double.
template <class T>
constexpr double largest_finite() {
  if constexpr (std::is_same_v<T, half>) return 65504.0;
  else if constexpr (std::is_same_v<T, bfloat16>) return 3.3895313892515355e38;  // (2 - 2^-7) 2^127
  else return static_cast<double>(std::numeric_limits<T>::max());
}

/// c10::overflows<T>(v), as torch 1.13's fill_ answers: a floating T takes NaN, ±inf and finite values
/// within its range (65504.5 does not fit half); an integer T finite values within its range (-1.5 does
/// not fit uint8, 2.7 fits int32 as 2), an unsigned one also integers down to -max (they wrap, as C's:
/// -1 is 255 in uint8); bool takes anything.
template <class T, class N>
constexpr bool number_fits(N v) {
  static_assert(std::is_arithmetic_v<N>);
  if constexpr (std::is_same_v<T, bool>) {
    return true;
  } else if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    if constexpr (std::is_floating_point_v<N>)
      if (v != v || v == std::numeric_limits<N>::infinity() || v == -std::numeric_limits<N>::infinity()) return true;
    const double x = static_cast<double>(v), m = largest_finite<T>();
    return x >= -m && x <= m;
  } else {
    static_assert(std::is_integral_v<T>);
    constexpr T hi = std::numeric_limits<T>::max(), lo = std::numeric_limits<T>::lowest();
    if constexpr (std::is_floating_point_v<N>) {
      if (!(v == v)) return false;  // NaN
      // torch's f > max and f < lowest in double. For int64, max rounds up to 2^63 in double, which torch
      // 1.13 lets through (fill_(2.0 ** 63) stores INT64_MIN): kiln refuses 2^63 itself, a deliberate
      // difference (the conversion would be undefined in C++).
      const double x = static_cast<double>(v);
      constexpr double top = static_cast<double>(hi);
      return x >= static_cast<double>(lo) && x <= top && (std::numeric_limits<T>::digits < 53 || x < top);
    } else if constexpr (std::is_same_v<N, bool>) {
      return true;
    } else if constexpr (std::is_unsigned_v<T>) {
      static_assert(hi <= static_cast<T>(std::numeric_limits<std::int64_t>::max()));
      return std::cmp_less_equal(v, hi) && std::cmp_greater_equal(v, -static_cast<std::int64_t>(hi));
    } else {
      return std::cmp_less_equal(v, hi) && std::cmp_greater_equal(v, lo);
    }
  }
}

/// v, checked to fit T (a ValueError naming `who`, the number and the type otherwise).
template <class T, class N>
void check_number_fits(N v, const char* who) {
  if constexpr (!std::is_same_v<N, bool>)
    if (!number_fits<T>(v))
      throw ValueError(std::string(who) + ": the number " + shortest_text(v) + " does not fit " +
                       std::string(dtype_name<T>()) + " (torch: value cannot be converted to type " +
                       std::string(dtype_name<T>()) + " without overflow)");
}

}  // namespace kiln::detail
