/// Error checks for CUDA, cuBLAS and cuDNN calls: a failure throws kiln::BackendError naming the call.
#pragma once
#include <string>

#include <cuda_runtime_api.h>

#include "kiln/core/errors.hpp"

namespace kiln::cuda::detail {
/// "cudaErrorMemoryAllocation: out of memory"
inline std::string cuda_error_text(cudaError_t e) {
  const char* name = cudaGetErrorName(e);
  const char* what = cudaGetErrorString(e);
  return std::string(name ? name : "cudaError") + ": " + (what ? what : "unknown error");
}
}  // namespace kiln::cuda::detail

/// Evaluates a CUDA runtime call; on failure clears the (non-sticky) last error, so that a later
/// check does not report it again, and throws kiln::BackendError with file, line, call and message.
#define KILN_CUDA_CHECK(call)                                                                              \
  do {                                                                                                     \
    const cudaError_t kiln_cuda_status_ = (call);                                                          \
    if (kiln_cuda_status_ != cudaSuccess) {                                                                \
      (void)cudaGetLastError();                                                                            \
      throw ::kiln::BackendError(::kiln::detail::backend_message(                                          \
          "CUDA", #call, __FILE__, __LINE__, static_cast<int>(kiln_cuda_status_),                          \
          ::kiln::cuda::detail::cuda_error_text(kiln_cuda_status_)));                                      \
    }                                                                                                      \
  } while (0)

/// Evaluates a cuBLAS call (needs <cublas_v2.h>); throws kiln::BackendError on failure.
#define KILN_CUBLAS_CHECK(call)                                                                            \
  do {                                                                                                     \
    const cublasStatus_t kiln_cublas_status_ = (call);                                                     \
    if (kiln_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      throw ::kiln::BackendError(::kiln::detail::backend_message("cuBLAS", #call, __FILE__, __LINE__,      \
                                                                 static_cast<int>(kiln_cublas_status_),    \
                                                                 cublasGetStatusString(kiln_cublas_status_))); \
    }                                                                                                      \
  } while (0)

/// Evaluates a cuDNN call (needs <cudnn.h>); throws kiln::BackendError on failure.
#define KILN_CUDNN_CHECK(call)                                                                             \
  do {                                                                                                     \
    const cudnnStatus_t kiln_cudnn_status_ = (call);                                                       \
    if (kiln_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                                      \
      throw ::kiln::BackendError(::kiln::detail::backend_message("cuDNN", #call, __FILE__, __LINE__,       \
                                                                 static_cast<int>(kiln_cudnn_status_),     \
                                                                 cudnnGetErrorString(kiln_cudnn_status_))); \
    }                                                                                                      \
  } while (0)
