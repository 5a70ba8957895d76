// An exception's message for an example's one error line (every example, with CLI11 or without).
#pragma once
#include <cstring>
#include <exception>

namespace examples {

/// An exception's message without the "kiln: " that kiln's own messages start with (the examples' error
/// line names the program already).
inline const char* message_of(const std::exception& e) {
  const char* m = e.what();
  return std::strncmp(m, "kiln: ", 6) == 0 ? m + 6 : m;
}

}  // namespace examples
