/// kiln::cuda's device checks in a program built without CUDA (not linked to kiln::cuda): no GPU to use,
/// as torch.cuda.is_available() is False in a CPU build of torch. kiln/kiln.hpp includes this header or,
/// in a CUDA build, backend/cuda/device.hpp, whose functions of the same names ask the driver.
#pragma once
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

}  // namespace kiln::cuda
#endif
