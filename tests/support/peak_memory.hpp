// This process's peak resident memory, for tests that a bad input costs no more memory than it should.
#pragma once
#include <fstream>
#include <string>

namespace kiln::test {

/// Starts a fresh measure of this process's peak resident memory (Linux: /proc/self/clear_refs "5"
/// resets VmHWM); false where that is not possible.
inline bool reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.close();
  return static_cast<bool>(f);
}
/// This process's peak resident memory since reset_peak(), in MiB (VmHWM), or -1.
inline long peak_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6)) / 1024;
  return -1;
}

}  // namespace kiln::test
