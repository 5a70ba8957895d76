// libFuzzer target: safetensors checkpoints (kiln::read_safetensors). Any input must load or throw a
// kiln::CheckpointError; what loads must keep the reader's promises: every tensor has a known dtype and
// exactly shape x dtype-size bytes, and writing the tensors and metadata back (write_safetensors) then
// reading them gives the same tensors and metadata. Built by run-fuzz.sh with clang
// -fsanitize=fuzzer,address,undefined; replayed over tests/fuzz/regressions/safetensors by CTest
// (replay.cpp).
#include <cstddef>
#include <cstdint>
#include <kiln/io/safetensors.hpp>
#include <map>
#include <string>

#include "fuzz_support.hpp"

namespace {
namespace fz = kiln::fuzz;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fz::write_file(fz::scratch() / "input.safetensors", data, size);
  std::map<std::string, kiln::SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  try {
    tensors = kiln::read_safetensors(path, &metadata);
  } catch (const kiln::CheckpointError&) {
    return 0;
  }
  for (const auto& [name, e] : tensors) {
    const std::size_t element = kiln::detail::dtype_size(e.dtype);
    fz::require(element != 0, "read_safetensors: a known dtype");
    fz::require(name != "__metadata__", "read_safetensors: __metadata__ is not a tensor");
    std::size_t n = 1;
    for (const kiln::index_t d : e.shape) {
      fz::require(d >= 0, "read_safetensors: extents >= 0");
      fz::require(d == 0 || n <= e.bytes.size() / static_cast<std::size_t>(d), "read_safetensors: shape fits the bytes");
      n *= static_cast<std::size_t>(d);
    }
    fz::require(n * element == e.bytes.size(), "read_safetensors: shape x dtype size = bytes");
  }
  // What was read writes back and reads again unchanged.
  const auto copy = fz::scratch() / "copy.safetensors";
  kiln::write_safetensors(copy, tensors, metadata);
  std::map<std::string, std::string> metadata2;
  const auto tensors2 = kiln::read_safetensors(copy, &metadata2);
  fz::require(metadata2 == metadata, "write_safetensors: metadata round trips");
  fz::require(tensors2.size() == tensors.size(), "write_safetensors: every tensor round trips");
  for (const auto& [name, e] : tensors) {
    const auto it = tensors2.find(name);
    fz::require(it != tensors2.end(), "write_safetensors: names round trip");
    fz::require(it->second.dtype == e.dtype && it->second.shape == e.shape && it->second.bytes == e.bytes,
                "write_safetensors: dtype, shape and bytes round trip");
  }
  return 0;
}
