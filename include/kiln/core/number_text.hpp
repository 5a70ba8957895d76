/// Numbers as text for checkpoint metadata and messages: the shortest decimal that reads back to the
/// same value, and a strict read of a whole string.
#pragma once
#include <charconv>
#include <string>
#include <system_error>

namespace kiln::detail {

/// `v` in the fewest digits that read back as `v` (std::to_chars: 0.9, not 0.900000; "inf", "-inf",
/// "nan" for those).
template <class V>
std::string shortest_text(V v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// Reads all of `s` into `v` (std::from_chars: no leading space or '+', nothing after the number;
/// floating values take "inf" and "nan"); false, and `v` as it was, otherwise.
template <class V>
bool parse_whole(const std::string& s, V& v) {
  V read{};
  const auto r = std::from_chars(s.data(), s.data() + s.size(), read);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) return false;
  v = read;
  return true;
}

}  // namespace kiln::detail
