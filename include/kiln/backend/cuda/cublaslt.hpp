/// Linear layers' GEMM with the bias (and ReLU) in cuBLASLt's epilogue: y = relu(x Wᵀ + b) in one call.
///
/// Used by nn::Linear on CUDA for float with a bias and no activation or ReLU after it. Not used for GELU:
/// cuBLASLt's GELU epilogues compute the tanh approximation, and torch.nn.GELU() (kiln's GELU) is the
/// exact erf form. The backward pass keeps kiln's one-pass derivative + bias-gradient kernel: cuBLASLt's
/// BGRADB overwrites the bias gradient, where gradients accumulate.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/backend/cuda/check.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/memory.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::cuda {

namespace detail {
/// The calling thread's cuBLASLt handles, one per device.
struct CublasLtHandles {
  cublasLtHandle_t handle[max_devices] = {};
  CublasLtHandles() = default;
  CublasLtHandles(const CublasLtHandles&) = delete;
  CublasLtHandles& operator=(const CublasLtHandles&) = delete;
  ~CublasLtHandles() {
    for (int d = 0; d < max_devices; ++d)
      if (handle[d]) (void)cublasLtDestroy(handle[d]);
  }
};

/// The largest power of two (up to 256) that divides the address: cuBLASLt's alignment preferences.
inline std::uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t al = 256;
  while (al > 4 && a % al != 0) al /= 2;
  return al;
}
}  // namespace detail

inline cublasLtHandle_t cublaslt_handle(int device = -1) {
  thread_local detail::CublasLtHandles handles;
  if (device < 0) device = current_device();
  if (device >= max_devices)
    throw ValueError("kiln::cuda::cublaslt_handle: device index " + std::to_string(device) + " exceeds kiln's limit of " +
                     std::to_string(max_devices) + " devices");
  cublasLtHandle_t& h = handles.handle[device];
  if (h == nullptr) {
    DeviceGuard g(device);
    KILN_CUBLAS_CHECK(cublasLtCreate(&h));
  }
  return h;
}

/// y[N, Out] = act(x[N, In] Wᵀ + b) for row-major float x, W [Out, In], b [Out], y, as one cuBLASLt
/// matmul with the BIAS or RELU_BIAS epilogue (full fp32: CUBLAS_COMPUTE_32F, no TF32). Built for one
/// batch size and one set of operand alignments; `matches` says whether it can serve another call.
class LinearEpiloguePlan {
 public:
  LinearEpiloguePlan(index_t n, index_t in, index_t out, bool relu, const float* x, const float* w, const float* y,
                     int device)
      : n_(n), device_(device), ax_(detail::alignment_of(x)), aw_(detail::alignment_of(w)), ay_(detail::alignment_of(y)) {
    DeviceGuard g(device);
    KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major view of the row-major operands: yᵀ [Out, N] = W [Out, In] · xᵀ [In, N], where the
    // stored W reads as Wᵀ [In, Out] (so transa = T) and the stored x as xᵀ [In, N].
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtEpilogue_t ep = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, CUDA_R_32F, static_cast<std::uint64_t>(in),
                                                 static_cast<std::uint64_t>(out), in));
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, CUDA_R_32F, static_cast<std::uint64_t>(in),
                                                 static_cast<std::uint64_t>(n), in));
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, CUDA_R_32F, static_cast<std::uint64_t>(out),
                                                 static_cast<std::uint64_t>(n), out));
    cublasLtMatmulPreference_t pref = nullptr;
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = workspace_bytes;
    (void)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    (void)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw_, sizeof aw_);
    (void)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax_, sizeof ax_);
    (void)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ay_, sizeof ay_);
    (void)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ay_, sizeof ay_);
    int returned = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(device), op_, a_, b_, d_, d_, pref, 1, &heuristic_, &returned);
    (void)cublasLtMatmulPreferenceDestroy(pref);
    usable_ = st == CUBLAS_STATUS_SUCCESS && returned > 0;
  }
  ~LinearEpiloguePlan() {
    if (d_) (void)cublasLtMatrixLayoutDestroy(d_);
    if (b_) (void)cublasLtMatrixLayoutDestroy(b_);
    if (a_) (void)cublasLtMatrixLayoutDestroy(a_);
    if (op_) (void)cublasLtMatmulDescDestroy(op_);
  }
  LinearEpiloguePlan(const LinearEpiloguePlan&) = delete;
  LinearEpiloguePlan& operator=(const LinearEpiloguePlan&) = delete;

  /// cuBLASLt has an algorithm for this shape and epilogue (else the caller takes its other path).
  bool usable() const { return usable_; }
  /// Whether this plan can run a call with these operands (same batch, alignments no weaker).
  bool matches(index_t n, const float* x, const float* w, const float* y) const {
    return n == n_ && detail::alignment_of(x) >= ax_ && detail::alignment_of(w) >= aw_ && detail::alignment_of(y) >= ay_;
  }
  void run(const float* x, const float* w, const float* bias, float* y) const {
    DeviceGuard g(device_);
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    Tensor<float, Shape<dyn>, Cuda> ws(Extents<Shape<dyn>>(static_cast<index_t>(workspace_bytes / sizeof(float))), device_);
    const float alpha = 1.0f, beta = 0.0f;
    KILN_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(device_), op_, &alpha, w, a_, x, b_, &beta, y, d_, y, d_,
                                     &heuristic_.algo, ws.data(), workspace_bytes, current_stream(device_)));
  }

  static constexpr std::size_t workspace_bytes = std::size_t{4} << 20;

 private:
  index_t n_;
  int device_;
  std::uint32_t ax_, aw_, ay_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  bool usable_ = false;
};

}  // namespace kiln::cuda
