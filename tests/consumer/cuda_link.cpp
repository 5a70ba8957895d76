// Links everything kiln::cuda brings (cudart, cuBLAS, cuBLASLt, cuDNN) into a g++ program that must
// start on a machine without a GPU or driver (no libcuda.so.1 dependency).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cstdio>
#if KILN_WITH_CUDNN
#include <cudnn.h>
#endif

int main() {
  int devices = 0;
  cudaError_t const err = cudaGetDeviceCount(&devices);
  int cublas_major = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas_major);
  std::printf("consumer cuda: %d device(s) (%s), cuBLAS %d", devices, cudaGetErrorString(err), cublas_major);
#if KILN_WITH_CUDNN
  std::printf(", cuDNN %zu", cudnnGetVersion());
#endif
  std::printf("\n");
  return 0;
}
