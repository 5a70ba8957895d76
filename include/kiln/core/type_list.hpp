/// Compile-time helpers: dependent_false for closing `if constexpr` chains, and a type list.
#pragma once
#include <cstddef>

namespace kiln {
namespace detail {
/// `static_assert(dependent_false<T>, "...")` fails only when instantiated.
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace detail

/// A pack of types.
template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};
}  // namespace kiln
