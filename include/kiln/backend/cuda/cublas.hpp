/// GPU GEMM through cuBLAS (host code): one handle per thread and device, row-major like the CPU's CBLAS.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kiln/backend/cuda/check.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/memory.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/type_list.hpp"
#include "kiln/ops/matmul.hpp"
#include "kiln/policy/device.hpp"

namespace kiln::cuda {

namespace detail {
/// The calling thread's cuBLAS handles, one per device, created on first use and destroyed with the thread.
struct CublasHandles {
  cublasHandle_t handle[max_devices] = {};
  CublasHandles() = default;
  CublasHandles(const CublasHandles&) = delete;
  CublasHandles& operator=(const CublasHandles&) = delete;
  ~CublasHandles() {  // on their device, unbound from a stream that may be gone (a Graph's side stream)
    for (int d = 0; d < max_devices; ++d)
      if (handle[d]) {
        QuietDeviceGuard g(d);
        (void)cublasSetStream(handle[d], nullptr);
        (void)cublasDestroy(handle[d]);
      }
  }
};
}  // namespace detail

/// The calling thread's cuBLAS handle for `device` (< 0: the current one), bound to that device's
/// current stream. Math mode CUBLAS_DEFAULT_MATH: float GEMMs are full fp32 (no TF32), like PyTorch's
/// default (torch.backends.cuda.matmul.allow_tf32 = False).
inline cublasHandle_t cublas_handle(int device = -1) {
  thread_local detail::CublasHandles handles;
  if (device < 0) device = current_device();
  if (device >= max_devices)
    throw ValueError("kiln::cuda::cublas_handle: device index " + std::to_string(device) + " exceeds kiln's limit of " +
                     std::to_string(max_devices) + " devices");
  cublasHandle_t& h = handles.handle[device];
  if (h == nullptr) {
    DeviceGuard g(device);
    KILN_CUBLAS_CHECK(cublasCreate(&h));
    KILN_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  }
  KILN_CUBLAS_CHECK(cublasSetStream(h, current_stream(device)));
  return h;
}

}  // namespace kiln::cuda

namespace kiln::detail {

/// Row-major GEMM on a GPU: C[M, N] = alpha op(A) op(B) + beta C, the same contract as the CPU's
/// backend::cpu::gemm. cuBLAS is column-major, so it computes Cᵀ = op(B)ᵀ op(A)ᵀ: a row-major matrix
/// read column-major is its transpose, so B and A swap places and keep their transpose flags.
/// float: cublasSgemm (fp32); double: cublasDgemm; half/bfloat16: cublasGemmEx with fp32 accumulation
/// (CUBLAS_COMPUTE_32F; tensor cores allowed), C in the same type or in float (TC = float). As in PyTorch's
/// default (allow_fp16/bf16_reduced_precision_reduction), cuBLAS may add split-K partial sums of a 16-bit
/// C in C's type. k == 0 gives C = beta C (the BLAS convention), done here rather than left to cuBLAS.
template <>
struct gemm_backend<Cuda> {
  template <class T, class TC = T>
  static void run(bool ta, bool tb, index_t m, index_t n, index_t k, double alpha_d, const T* a, index_t lda,
                  const T* b, index_t ldb, double beta_d, TC* c, index_t ldc, int device) {
    if (m == 0 || n == 0) return;
    cuda::DeviceGuard g(device);
    cublasHandle_t h = cuda::cublas_handle(device);
    if (k == 0) {
      scale_c(h, m, n, beta_d, c, ldc, device);
      return;
    }
    [[maybe_unused]] const float alpha = static_cast<float>(alpha_d),
                                 beta = static_cast<float>(beta_d);  // not double
    const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // first cuBLAS operand: B
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // second: A
    // cuBLAS wants ld >= max(1, rows); an operand with no elements (k == 0) has ld 0 in row-major.
    const std::int64_t la = std::max<index_t>(lda, 1), lb = std::max<index_t>(ldb, 1), lc = std::max<index_t>(ldc, 1);
    if constexpr (!std::is_same_v<T, TC>) {
      static_assert(std::is_same_v<TC, float> && (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>),
                    "kiln::matmul on kiln::Cuda: C may differ from A and B only as float for half/bfloat16 operands");
      constexpr cudaDataType_t type = std::is_same_v<T, half> ? CUDA_R_16F : CUDA_R_16BF;
      KILN_CUBLAS_CHECK(cublasGemmEx_64(h, opb, opa, n, m, k, &alpha, b, type, lb, a, type, la, &beta, c, CUDA_R_32F,
                                        lc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else if constexpr (std::is_same_v<T, float>) {
      KILN_CUBLAS_CHECK(cublasSgemm_64(h, opb, opa, n, m, k, &alpha, b, lb, a, la, &beta, c, lc));
    } else if constexpr (std::is_same_v<T, double>) {
      KILN_CUBLAS_CHECK(cublasDgemm_64(h, opb, opa, n, m, k, &alpha_d, b, lb, a, la, &beta_d, c, lc));
    } else if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
      constexpr cudaDataType_t type = std::is_same_v<T, half> ? CUDA_R_16F : CUDA_R_16BF;
      KILN_CUBLAS_CHECK(cublasGemmEx_64(h, opb, opa, n, m, k, &alpha, b, type, lb, a, type, la, &beta, c, type, lc,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      // >>> Stopped here? cuBLAS GEMM is wired up for float, double, half and bfloat16 only. <<<
      static_assert(dependent_false<T>, "kiln::matmul on kiln::Cuda supports float, double, kiln::half and "
                                        "kiln::bfloat16; cast<float>() integer operands first");
    }
  }

 private:
  /// C[M, N] (row stride ldc) = beta C: an empty product (k == 0). beta 1 leaves C; beta 0 zeroes it (no
  /// 0 x NaN); otherwise cublasScalEx row by row (one call when the rows are contiguous).
  template <class TC>
  static void scale_c(cublasHandle_t h, index_t m, index_t n, double beta_d, TC* c, index_t ldc, int device) {
    if (beta_d == 1.0) return;
    if (beta_d == 0.0) {
      KILN_CUDA_CHECK(cudaMemset2DAsync(c, static_cast<std::size_t>(ldc) * sizeof(TC), 0,
                                        static_cast<std::size_t>(n) * sizeof(TC), static_cast<std::size_t>(m),
                                        cuda::current_stream(device)));
      return;
    }
    constexpr bool is_double = std::is_same_v<TC, double>;
    constexpr cudaDataType_t type = is_double ? CUDA_R_64F
                                    : std::is_same_v<TC, float> ? CUDA_R_32F
                                    : std::is_same_v<TC, half>  ? CUDA_R_16F
                                                                : CUDA_R_16BF;
    const float beta = static_cast<float>(beta_d);
    const void* alpha = is_double ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta);
    const cudaDataType_t scalar = is_double ? CUDA_R_64F : CUDA_R_32F;
    const bool contiguous = ldc == n;
    for (index_t i = 0; i < (contiguous ? 1 : m); ++i)
      KILN_CUBLAS_CHECK(cublasScalEx_64(h, contiguous ? std::int64_t{m} * n : std::int64_t{n}, alpha, scalar,
                                        c + i * ldc, type, 1, scalar));
  }
};

}  // namespace kiln::detail
