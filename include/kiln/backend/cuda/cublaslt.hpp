/// Linear layers' GEMM with the bias (and ReLU) in cuBLASLt's epilogue: y = relu(x Wᵀ + b) in one call.
///
/// Used by nn::Linear on CUDA for float with a bias and no activation or ReLU after it. Not used for GELU:
/// cuBLASLt's GELU epilogues compute the tanh approximation, and torch.nn.GELU() (kiln's GELU) is the
/// exact erf form. The backward pass keeps kiln's one-pass derivative + bias-gradient kernel: cuBLASLt's
/// BGRADB overwrites the bias gradient, where gradients accumulate.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>
#include <string>
#include <type_traits>

#include "kiln/core/nan.hpp"
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

namespace detail {
/// Owns one cuBLASLt descriptor: destroyed with the plan, also when a later step of its constructor throws.
template <class H, cublasStatus_t (*Destroy)(H)>
struct LtDestroy {
  void operator()(H h) const { (void)Destroy(h); }
};
template <class H, cublasStatus_t (*Destroy)(H)>
using LtOwned = std::unique_ptr<std::remove_pointer_t<H>, LtDestroy<H, Destroy>>;
}  // namespace detail

/// y[N, Out] = act(x[N, In] Wᵀ + b) for row-major float x, W [Out, In], b [Out], y, as one cuBLASLt
/// matmul with the BIAS or RELU_BIAS epilogue (full fp32: CUBLAS_COMPUTE_32F, no TF32). Built for one
/// device, batch size and set of operand alignments (the bias's too: cuBLASLt's heuristic reads the bias
/// pointer for its alignment); `matches` says whether it can serve another call.
class LinearEpiloguePlan {
 public:
  LinearEpiloguePlan(index_t n, index_t in, index_t out, bool relu, const float* x, const float* w, const float* bias,
                     const float* y, int device)
      : n_(n),
        device_(device),
        ax_(detail::alignment_of(x)),
        aw_(detail::alignment_of(w)),
        ab_(detail::alignment_of(bias)),
        ay_(detail::alignment_of(y)) {
    DeviceGuard g(device);
    cublasLtMatmulDesc_t op = nullptr;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    op_.reset(op);
    // Column-major view of the row-major operands: yᵀ [Out, N] = W [Out, In] · xᵀ [In, N], where the
    // stored W reads as Wᵀ [In, Out] (so transa = T) and the stored x as xᵀ [In, N]. The bias runs along
    // yᵀ's rows (Out), as cuBLASLt's bias vector does.
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtEpilogue_t ep = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    a_ = layout(in, out, in);
    b_ = layout(in, n, in);
    d_ = layout(out, n, out);
    cublasLtMatmulPreference_t pref_raw = nullptr;
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
    const detail::LtOwned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref(pref_raw);
    const std::uint64_t ws = max_workspace_bytes;
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw_, sizeof aw_));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax_, sizeof ax_));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ay_, sizeof ay_));
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ay_, sizeof ay_));
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(device), op, a_.get(), b_.get(), d_.get(),
                                                             d_.get(), pref_raw, 1, &heuristic_, &returned);
    usable_ = st == CUBLAS_STATUS_SUCCESS && returned > 0;
  }

  /// cuBLASLt has an algorithm for this shape and epilogue (else the caller takes its other path).
  bool usable() const { return usable_; }
  /// Whether this plan can run a call with these operands (same device and batch, alignments no weaker).
  bool matches(index_t n, const float* x, const float* w, const float* bias, const float* y, int device) const {
    return device == device_ && n == n_ && detail::alignment_of(x) >= ax_ && detail::alignment_of(w) >= aw_ &&
           detail::alignment_of(bias) >= ab_ && detail::alignment_of(y) >= ay_;
  }
  /// Runs the matmul on the device's current stream. False, with nothing written and the plan marked
  /// unusable, when cuBLASLt refuses the call after all (its heuristic's success does not promise that
  /// the algorithm runs); other failures throw BackendError.
  bool run(const float* x, const float* w, const float* bias, float* y) {
    DeviceGuard g(device_);
    KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const std::size_t ws_bytes = heuristic_.workspaceSize;
    Tensor<float, Shape<dyn>, Cuda> ws;
    if (ws_bytes > 0)
      ws = Tensor<float, Shape<dyn>, Cuda>(Extents<Shape<dyn>>(static_cast<index_t>((ws_bytes + 3) / 4)), device_);
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(cublaslt_handle(device_), op_.get(), &alpha, w, a_.get(), x, b_.get(), &beta, y, d_.get(), y,
                       d_.get(), &heuristic_.algo, ws_bytes > 0 ? ws.data() : nullptr, ws_bytes, current_stream(device_));
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH) {
      usable_ = false;
      return false;
    }
    KILN_CUBLAS_CHECK(st);
    return true;
  }

  /// The most workspace an algorithm may ask for; a call allocates what its algorithm needs (often none).
  static constexpr std::size_t max_workspace_bytes = std::size_t{4} << 20;

 private:
  using Layout = detail::LtOwned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
  /// A column-major float matrix of rows x cols with leading dimension ld.
  static Layout layout(index_t rows, index_t cols, index_t ld) {
    cublasLtMatrixLayout_t l = nullptr;
    KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, static_cast<std::uint64_t>(rows),
                                                 static_cast<std::uint64_t>(cols), ld));
    return Layout(l);
  }

  index_t n_;
  int device_;
  std::uint32_t ax_, aw_, ab_, ay_;
  detail::LtOwned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> op_;
  Layout a_, b_, d_;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  bool usable_ = false;
};

/// Whether cuBLASLt's RELU_BIAS epilogue keeps NaN as torch.relu does (relu(nan) = nan) on `device`,
/// asked of the device once per process: a small matmul whose first row holds a NaN. An fmax-style
/// epilogue would give 0, hiding a diverging fp32 run behind a finite loss; Linear then runs ReLU in
/// kiln's epilogue kernel instead. Not asked during a graph capture (the probe reads back): false there.
inline bool relu_epilogue_keeps_nan(int device) {
  static std::array<std::atomic<int>, max_devices> known{};  // 0 not asked yet, 1 keeps NaN, 2 does not
  if (device < 0) device = current_device();
  std::atomic<int>& k = known.at(static_cast<std::size_t>(device));
  if (const int v = k.load(std::memory_order_acquire); v != 0) return v == 1;
  DeviceGuard g(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK(cudaStreamIsCapturing(current_stream(device), &status));
  if (status != cudaStreamCaptureStatusNone) return false;
  constexpr index_t n = 4, in = 16, out = 16;
  std::vector<float> xv(n * in, 0.0f), wv(out * in, 1.0f), bv(out, 0.0f);
  xv[0] = std::numeric_limits<float>::quiet_NaN();
  using Vec = Tensor<float, Shape<dyn>, Cuda>;
  Vec x(Extents<Shape<dyn>>(n * in), device), w(Extents<Shape<dyn>>(out * in), device), b(Extents<Shape<dyn>>(out), device),
      y(Extents<Shape<dyn>>(n * out), device);
  x.copy_from(std::span<const float>(xv));
  w.copy_from(std::span<const float>(wv));
  b.copy_from(std::span<const float>(bv));
  LinearEpiloguePlan plan(n, in, out, true, x.data(), w.data(), b.data(), y.data(), device);
  bool keeps = true;  // no cuBLASLt path at all: nothing to avoid
  if (plan.usable() && plan.run(x.data(), w.data(), b.data(), y.data())) {
    const std::vector<float> yv = y.to_vector();
    keeps = kiln::detail::is_nan(yv[0]) && kiln::detail::is_nan(yv[out - 1]) && yv[out] == 0.0f;  // (bits: -ffast-math)
  }
  k.store(keeps ? 1 : 2, std::memory_order_release);
  return keeps;
}

}  // namespace kiln::cuda
