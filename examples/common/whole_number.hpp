// A command-line count for the examples without CLI11 (00_tensors, 01_fused_expressions).
#pragma once
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>

namespace examples {

/// v as a whole decimal number >= 1 (all of it: "1e6" and "5x" are refused), or exit status 2 with
/// `<program>: <flag>: expected an integer >= 1, got '<v>'`.
inline long long whole_number(const char* program, const std::string& flag, const std::string& v) {
  long long x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || x < 1) {
    std::fprintf(stderr, "%s: %s: expected an integer >= 1, got '%s'\n", program, flag.c_str(), v.c_str());
    std::exit(2);
  }
  return x;
}

}  // namespace examples
