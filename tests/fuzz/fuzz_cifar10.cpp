// libFuzzer target: CIFAR-10 binary batches (kiln::data::Cifar10). Any input must load or throw a
// kiln::Error; what loads must keep the reader's promises (3072 bytes and one label 0-9 per image, every
// image readable). Built by run-fuzz.sh with clang -fsanitize=fuzzer,address,undefined; replayed over
// tests/fuzz/regressions/cifar10 by CTest (replay.cpp).
//
// Each input is the test split's test_batch.bin, and each of the train split's five data_batch_<k>.bin
// (links to it: the train split holds five times its records).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <kiln/data/cifar10.hpp>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"

namespace {
namespace fz = kiln::fuzz;

void load_and_check(const std::string& root, bool train, std::size_t input_size) {
  try {
    const kiln::data::Cifar10 split(root, train);
    const auto count = static_cast<std::size_t>(split.size());
    fz::require(count * kiln::data::Cifar10::record_bytes == input_size * (train ? 5 : 1),
                "Cifar10: one image per 3073-byte record of each file");
    fz::require(split.images().size() == count * kiln::data::Cifar10::image_bytes, "Cifar10: 3072 bytes per image");
    fz::require(split.labels().size() == count, "Cifar10: one label per image");
    std::vector<float> x(kiln::data::Cifar10::image_bytes);
    std::int64_t y = -1;
    for (kiln::index_t i = 0; i < split.size(); ++i) {
      split.read(i, x, std::span<std::int64_t>(&y, 1));
      fz::require(y >= 0 && y <= 9, "Cifar10: labels are 0-9");
      for (const float v : x) fz::require(v >= 0.0f && v <= 1.0f, "Cifar10: pixels are in [0, 1]");
    }
  } catch (const kiln::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One folder for the whole run: test_batch.bin, and the five train batches as links to it.
  static const std::filesystem::path root = [] {
    const auto dir = fz::fresh_folder("cifar10");
    for (const auto name : kiln::data::Cifar10::file_names(true)) std::filesystem::create_symlink("test_batch.bin", dir / name);
    return dir;
  }();
  fz::write_file(root / "test_batch.bin", data, size);
  load_and_check(root.string(), false, size);
  load_and_check(root.string(), true, size);
  return 0;
}
