/// kiln's warnings: what is allowed but most likely a mistake (torch's UserWarning), such as stepping a
/// learning-rate scheduler before its optimizer. By default a warning is printed on stderr; a program
/// can route warnings elsewhere (its log, a test's list) or drop them, as c10's WarningHandler allows.
#pragma once
#include <atomic>
#include <cstdio>
#include <string>

namespace kiln {

/// What receives a warning's text (one line, without the "kiln: warning: " prefix).
using WarningHandler = void (*)(const std::string& message);

namespace detail {
inline void print_warning(const std::string& message) {
  std::fprintf(stderr, "kiln: warning: %s\n", message.c_str());
}
inline std::atomic<WarningHandler>& warning_handler_cell() {
  static std::atomic<WarningHandler> handler{&print_warning};
  return handler;
}
}  // namespace detail

/// Routes kiln's warnings to `handler` (nullptr: drops them) and returns the handler it replaces; the
/// default prints "kiln: warning: <message>" on stderr. A handler may be called from any thread.
inline WarningHandler set_warning_handler(WarningHandler handler) {
  return detail::warning_handler_cell().exchange(handler);
}

/// Hands `message` to the current handler.
inline void warn(const std::string& message) {
  if (WarningHandler h = detail::warning_handler_cell().load()) h(message);
}

}  // namespace kiln
