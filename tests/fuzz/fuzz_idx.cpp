// libFuzzer target: IDX files (kiln::data::read_idx) and the MNIST split built on them (kiln::data::Mnist).
// Any input must load or throw a kiln::Error; what loads must keep the reader's promises (dims that
// multiply to the number of values, labels 0-9, one 28 x 28 image per label). Built by run-fuzz.sh with
// clang -fsanitize=fuzzer,address,undefined; replayed over tests/fuzz/regressions/idx by CTest (replay.cpp).
//
// Each input is read as a plain file; gzip-compressed (zlib), as a .gz; cut short after compression, as a
// truncated .gz; when it starts with the gzip magic, as a .gz as it is; and as the images file of an MNIST
// split (or its labels file when byte 3 says rank 1), next to a valid file of the other kind.
#include <cstddef>
#include <cstdint>
#include <kiln/data/idx.hpp>
#include <kiln/data/mnist.hpp>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"

namespace {
namespace fz = kiln::fuzz;

/// The rank the input's magic claims (byte 3), when it is a plausible one; else MNIST's images rank, 3.
int claimed_rank(const std::uint8_t* data, std::size_t size) { return size >= 4 && data[3] <= 8 ? data[3] : 3; }

/// Big-endian dimension `d` of the header, or 0 when the input is shorter.
std::uint32_t claimed_dim(const std::uint8_t* data, std::size_t size, int d) {
  const std::size_t at = 4 + 4 * static_cast<std::size_t>(d);
  if (size < at + 4) return 0;
  return (std::uint32_t{data[at]} << 24) | (std::uint32_t{data[at + 1]} << 16) | (std::uint32_t{data[at + 2]} << 8) |
         std::uint32_t{data[at + 3]};
}

/// read_idx, and the promises of what it returns.
void read_and_check(const std::string& path, int rank) {
  try {
    const kiln::data::IdxArray a = kiln::data::read_idx(path, rank);
    fz::require(a.dims.size() == static_cast<std::size_t>(rank), "read_idx: one dimension per rank");
    unsigned __int128 product = 1;
    for (const auto d : a.dims) {
      fz::require(d >= 0, "read_idx: dimensions are non-negative");
      product *= static_cast<unsigned __int128>(d);
      if (product > static_cast<unsigned __int128>(a.values.size())) product = a.values.size() + 1;  // no wrap
    }
    fz::require(product == a.values.size(), "read_idx: the dimensions multiply to the number of values");
    if (!a.values.empty()) {
      volatile std::uint8_t last = a.values.back();  // touch the ends (ASan checks the range)
      (void)last;
    }
  } catch (const kiln::Error&) {
  }
}

/// A valid IDX file of `rank` (1: labels, 3: 28 x 28 images) holding `n` items.
std::vector<std::uint8_t> valid_idx(int rank, std::uint32_t n) {
  std::vector<std::uint8_t> b{0, 0, 8, static_cast<std::uint8_t>(rank)};
  std::vector<std::uint32_t> dims{n};
  if (rank == 3) dims.insert(dims.end(), {28, 28});
  for (const auto d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
  const std::size_t values = rank == 3 ? std::size_t{n} * 784 : n;
  for (std::size_t i = 0; i < values; ++i) b.push_back(static_cast<std::uint8_t>(rank == 3 ? i * 7 : i % 10));
  return b;
}

/// An MNIST test split whose images (or labels) file is the input; the other file is valid and holds as many
/// items as the input's first dimension claims (at most 512, else 1).
void mnist_split(const std::uint8_t* data, std::size_t size) {
  static const auto root = fz::fresh_folder("mnist");  // both files are rewritten for each input
  const bool input_is_labels = size >= 4 && data[3] == 1;
  std::uint32_t n = claimed_dim(data, size, 0);
  if (n > 512) n = 1;
  const auto other = valid_idx(input_is_labels ? 3 : 1, n);
  fz::write_file(root / "t10k-images-idx3-ubyte", input_is_labels ? other.data() : data, input_is_labels ? other.size() : size);
  fz::write_file(root / "t10k-labels-idx1-ubyte", input_is_labels ? data : other.data(), input_is_labels ? size : other.size());
  for (const kiln::index_t limit : {kiln::index_t{-1}, kiln::index_t{1}}) {
    try {
      const kiln::data::Mnist split(root.string(), false, limit);
      const auto count = static_cast<std::size_t>(split.size());
      fz::require(split.size() >= 0 && (limit < 0 || split.size() <= limit), "Mnist: 0 <= size() <= limit");
      fz::require(split.images().size() == count * 784, "Mnist: 784 bytes per image");
      fz::require(split.labels().size() == count, "Mnist: one label per image");
      std::vector<float> x(784);
      std::int64_t y = -1;
      for (kiln::index_t i = 0; i < split.size(); ++i) {
        split.read(i, x, std::span<std::int64_t>(&y, 1));
        fz::require(y >= 0 && y <= 9, "Mnist: labels are 0-9");
        for (const float v : x) fz::require(v >= 0.0f && v <= 1.0f, "Mnist: pixels are in [0, 1]");
      }
    } catch (const kiln::Error&) {
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int rank = claimed_rank(data, size);
  read_and_check(fz::write_file(fz::scratch() / "input-idx-ubyte", data, size), rank);
#if KILN_WITH_ZLIB
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b)  // a gzip stream as it is
    read_and_check(fz::write_file(fz::scratch() / "raw.gz", data, size), 3);
  const auto gz = fz::gzip(data, size);
  read_and_check(fz::write_file(fz::scratch() / "input.gz", gz.data(), gz.size()), rank);
  read_and_check(fz::write_file(fz::scratch() / "cut.gz", gz.data(), gz.size() / 2), rank);
#endif
  mnist_split(data, size);
  return 0;
}
