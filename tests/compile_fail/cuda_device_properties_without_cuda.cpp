// expect: kiln::cuda::device_properties: this program is built without CUDA.*#if KILN_WITH_CUDA
// errors: 1
// torch.cuda.get_device_properties(0) behind `if (torch.cuda.is_available())`, in a program built without
// CUDA: torch's CPU build raises "Torch not compiled with CUDA enabled" when it runs; kiln's does not
// compile, with one error that says why and what to do (it said "'device_properties' is not a member of
// 'kiln::cuda'").
#include <kiln/kiln.hpp>

#include <cstdio>

void device_info() {
  if (kiln::cuda::is_available()) (void)kiln::cuda::device_properties(0);
  else std::printf("no GPU: %s\n", kiln::cuda::unavailable_reason().c_str());
}
