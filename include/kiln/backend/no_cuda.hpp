/// kiln::cuda's device checks and memory statistics in a program built without CUDA (not linked to
/// kiln::cuda): no GPU to use, as torch.cuda.is_available() is False in a CPU build of torch. kiln/kiln.hpp
/// includes this header or, in a CUDA build, backend/cuda/device.hpp and memory.hpp, whose functions of
/// the same names ask the driver and the caching allocator.
#pragma once
#include <cstddef>
#include <string>

#include "kiln/core/config.hpp"
#include "kiln/core/type_list.hpp"

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
// build of torch, do not compile: below.)

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

// The rest of torch.cuda raises in a CPU build of torch ("Torch not compiled with CUDA enabled"), even
// behind `if (torch.cuda.is_available())`; here it does not compile, and the error says so (rather than
// "not a member of kiln::cuda"): code for the GPU goes under `#if KILN_WITH_CUDA`.
#define KILN_NO_CUDA_FUNCTION(name)                                                                          \
  template <class... A>                                                                                     \
  void name(A&&...) {                                                                                       \
    static_assert(::kiln::detail::dependent_false<A...>,                                                    \
                  "kiln::cuda::" #name ": this program is built without CUDA (torch's CPU build raises "     \
                  "\"Torch not compiled with CUDA enabled\"); put the code that needs a GPU under "          \
                  "#if KILN_WITH_CUDA, and link the target to kiln::cuda to have one");                      \
  }
KILN_NO_CUDA_FUNCTION(device_properties)
KILN_NO_CUDA_FUNCTION(current_device)
KILN_NO_CUDA_FUNCTION(set_device)
KILN_NO_CUDA_FUNCTION(synchronize)
KILN_NO_CUDA_FUNCTION(mem_get_info)
KILN_NO_CUDA_FUNCTION(runtime_version)
KILN_NO_CUDA_FUNCTION(driver_version)
KILN_NO_CUDA_FUNCTION(reset_peak_memory_stats)
KILN_NO_CUDA_FUNCTION(set_per_process_memory_fraction)
#undef KILN_NO_CUDA_FUNCTION

}  // namespace kiln::cuda
#endif
