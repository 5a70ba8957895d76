// Replays saved fuzz inputs through a fuzz target without libFuzzer: linked with one of fuzz_idx.cpp,
// fuzz_cifar10.cpp, fuzz_csv.cpp, fuzz_safetensors.cpp (one executable each: kiln_fuzz_replay_<target>),
// it feeds every file named on the command line, or found in a folder named there, to that target's
// LLVMFuzzerTestOneInput.
// CTest runs it over tests/fuzz/regressions/<target>/ (label cpu): the crashers the fuzzer found, kept so
// that a fix that is reverted fails the suite. A file that makes a reader throw anything but a kiln::Error
// fails the run (exit 1); a broken invariant or a crash aborts it; no file at all is a failure too.
//
//   kiln_fuzz_replay_csv tests/fuzz/regressions/csv [more files or folders...]
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int a = 1; a < argc; ++a) {
    const fs::path arg = argv[a];
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::directory_iterator(arg))
        if (entry.is_regular_file() && entry.path().filename().string().front() != '.') files.push_back(entry.path());
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or folder\n", arg.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs; usage: %s <file or folder>...\n", argc ? argv[0] : "replay");
    return 2;
  }
  int failed = 0;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
    std::fflush(stdout);
    try {
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      std::printf("replay: FAILED %s: an exception that is not a kiln::Error escaped: %s\n", file.c_str(), e.what());
      ++failed;
    } catch (...) {
      std::printf("replay: FAILED %s: an exception that is not a std::exception escaped\n", file.c_str());
      ++failed;
    }
  }
  std::printf("replay: %zu inputs, %d failed\n", files.size(), failed);
  return failed ? 1 : 0;
}
