/// kiln::cuda's device checks and memory statistics in a program built without CUDA (not linked to
/// kiln::cuda): no GPU to use, as torch.cuda.is_available() is False in a CPU build of torch. kiln/kiln.hpp
/// includes this header or, in a CUDA build, backend/cuda/device.hpp and memory.hpp, whose functions of
/// the same names ask the driver and the caching allocator.
#pragma once
#include <cstddef>
#include <string>

#include "kiln/core/config.hpp"

#if !KILN_WITH_CUDA  // (a CUDA build has backend/cuda/device.hpp's, which ask the driver)
namespace kiln::cuda {

/// 0: this program was built without CUDA.
inline int device_count() noexcept { return 0; }

/// false: this program was built without CUDA (torch.cuda.is_available() of a CPU build).
inline bool is_available() noexcept { return false; }

/// Why CUDA is not available here.
inline std::string unavailable_reason() {
  return "this program was built without CUDA (kiln's CUDA backend is in the target kiln::cuda; link to it, and "
         "compile the sources that run on the GPU as CUDA)";
}

// torch.cuda's memory functions as a CPU build of torch answers them, so the seeds' memory code runs
// unchanged: no GPU memory is held (0) and there is no cache to empty. The device index is ignored, as
// torch's is there. (reset_peak_memory_stats and set_per_process_memory_fraction, which raise in such a
// build of torch, are not here: they do not compile.)

/// 0 (torch.cuda.memory_allocated() of a CPU build).
inline std::size_t memory_allocated(int /*device*/ = -1) noexcept { return 0; }
/// 0 (torch.cuda.memory_reserved() of a CPU build).
inline std::size_t memory_reserved(int /*device*/ = -1) noexcept { return 0; }
/// 0 (torch.cuda.max_memory_allocated() of a CPU build).
inline std::size_t max_memory_allocated(int /*device*/ = -1) noexcept { return 0; }
/// 0 (torch.cuda.max_memory_reserved() of a CPU build).
inline std::size_t max_memory_reserved(int /*device*/ = -1) noexcept { return 0; }
/// Nothing to give back (torch.cuda.empty_cache() of a CPU build).
inline void empty_cache(int /*device*/ = -1) noexcept {}

}  // namespace kiln::cuda
#endif
