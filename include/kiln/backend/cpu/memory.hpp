/// Host memory: the CPU's caching allocator over 64-byte-aligned blocks.
#pragma once
#include <cstdlib>

#include "kiln/policy/device.hpp"
#include "kiln/tensor/allocator.hpp"

namespace kiln::backend::cpu {

inline void* raw_allocate(std::size_t bytes, int) {
  if (bytes > static_cast<std::size_t>(-1) - 63) return nullptr;  // rounding up would wrap to a tiny block
  return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
}
inline void raw_deallocate(void* p, int) { std::free(p); }

/// The process-wide host allocator (never destroyed, so tensors freed during exit stay valid).
inline CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator(RawAllocator{&raw_allocate, &raw_deallocate, nullptr, "cpu"}, 0);
  return *a;
}

}  // namespace kiln::backend::cpu
