/// The index type of every extent, stride and flat position.
#pragma once
#include <cstdint>

namespace kiln {
/// Signed 64-bit: tensors over 2^31 elements index correctly, and differences never wrap.
using index_t = std::int64_t;
}  // namespace kiln
