/// for_each_kernel: f(i) for every i in [0, n), grid-stride; the kernel behind multi-output fused passes
/// (an optimizer step updates parameters and moments in one pass).
#pragma once
#include "kiln/core/config.hpp"
#if !KILN_CUDA_COMPILER
#error "include kiln/cuda.hpp from a CUDA source (a .cu file, or LANGUAGE CUDA): kiln's kernels need nvcc"
#endif

#include "kiln/core/index.hpp"

namespace kiln::cuda::detail {

template <class F>
__global__ void __launch_bounds__(256) for_each_kernel(const __grid_constant__ F f, index_t n) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

}  // namespace kiln::cuda::detail
