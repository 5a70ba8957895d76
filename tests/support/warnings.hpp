// CollectWarnings: kiln's warnings (kiln::warn) collected while one lives, for a test to read; the
// handler before it is back after.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <kiln/core/warning.hpp>

namespace kiln::test {

inline std::vector<std::string>& collected_warnings() {
  static std::vector<std::string> w;
  return w;
}
inline void collect_warning(const std::string& message) { collected_warnings().push_back(message); }

struct CollectWarnings {
  kiln::WarningHandler previous;
  CollectWarnings() : previous(kiln::set_warning_handler(&collect_warning)) { collected_warnings().clear(); }
  ~CollectWarnings() { kiln::set_warning_handler(previous); }
  CollectWarnings(const CollectWarnings&) = delete;
  CollectWarnings& operator=(const CollectWarnings&) = delete;
  std::size_t count() const { return collected_warnings().size(); }
  const std::vector<std::string>& messages() const { return collected_warnings(); }
};

}  // namespace kiln::test
