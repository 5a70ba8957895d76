/// GPU convolution through cuDNN (host code): one handle per thread and device, and a ConvPlan holding the
/// descriptors and algorithms of one convolution shape, built once per batch size by Conv2d.
///
/// cuDNN 9's legacy convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter): still
/// supported in 9.x and what a fixed NCHW convolution needs; algorithms come from cuDNN's heuristics
/// (the _v7 queries), restricted to full-precision math for float and double (no TF32: the same numbers
/// as the CPU to 1e-5, like torch.backends.cudnn.allow_tf32 = False), in the heuristics' order, and only
/// those whose workspace fits in the device's free memory; set_cudnn_deterministic(true) keeps only
/// deterministic ones (torch.backends.cudnn.deterministic). Without an algorithm the caller falls back; an
/// algorithm refused when it runs (or whose workspace cannot be had) gives way to the next candidate.
#pragma once
#include <cudnn.h>

#include <atomic>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/backend/cuda/check.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/memory.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/type_list.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::cuda {

namespace detail {
/// The calling thread's cuDNN handles, one per device, created on first use and destroyed with the thread.
struct CudnnHandles {
  cudnnHandle_t handle[max_devices] = {};
  CudnnHandles() = default;
  CudnnHandles(const CudnnHandles&) = delete;
  CudnnHandles& operator=(const CudnnHandles&) = delete;
  ~CudnnHandles() {  // on their device, unbound from a stream that may be gone (a Graph's side stream)
    for (int d = 0; d < max_devices; ++d)
      if (handle[d]) {
        QuietDeviceGuard g(d);
        (void)cudnnSetStream(handle[d], nullptr);
        (void)cudnnDestroy(handle[d]);
      }
  }
};

template <class T>
constexpr cudnnDataType_t cudnn_type() {
  if constexpr (std::is_same_v<T, float>) return CUDNN_DATA_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return CUDNN_DATA_DOUBLE;
  else if constexpr (std::is_same_v<T, half>) return CUDNN_DATA_HALF;
  else if constexpr (std::is_same_v<T, bfloat16>) return CUDNN_DATA_BFLOAT16;
  else static_assert(kiln::detail::dependent_false<T>, "kiln::cuda: cuDNN convolution supports float, double, half, bfloat16");
}
/// Accumulation type: double for double, float otherwise (fp16/bf16 accumulate in fp32).
template <class T>
constexpr cudnnDataType_t cudnn_compute_type() {
  return std::is_same_v<T, double> ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}
/// The math type the heuristics are asked with: tensor cores for 16-bit types, FMA for float (no TF32:
/// the CPU's numbers to 1e-5) and double.
template <class T>
constexpr cudnnMathType_t query_math() {
  return std::is_same_v<T, half> || std::is_same_v<T, bfloat16> ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}
/// Whether an algorithm's math type is allowed for T (the descriptor takes it before the algorithm
/// runs, as PyTorch does): any for 16-bit types; FMA only for float (PyTorch asserts the same without
/// TF32); FMA or DEFAULT for double (on Hopper DEFAULT may mean FP64 tensor cores, which are exact
/// IEEE FMAs, and a double algorithm labelled DEFAULT must not leave double without any).
template <class T>
constexpr bool math_allowed(cudnnMathType_t m) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) return true;
  else if constexpr (std::is_same_v<T, float>) return m == CUDNN_FMA_MATH;
  else return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}
/// Bytes a workspace may take on `device`: the driver's free memory plus kiln's shared cache (the
/// allocator gives that back before it gives up); no limit when the driver cannot say.
inline std::size_t workspace_cap(int device) {
  std::size_t free = 0, total = 0;
  if (!raw_device_memory(device, &free, &total)) return static_cast<std::size_t>(-1);
  return free + kiln::caching_allocator<Cuda>(device).cached_bytes();
}
inline std::atomic<bool>& cudnn_deterministic_flag() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace detail

/// Only deterministic convolution algorithms from now on (the same gradients run to run), like
/// torch.backends.cudnn.deterministic = True; off by default, as in PyTorch. Applies to plans made
/// after the call (a Conv2d makes one per batch size and device).
inline void set_cudnn_deterministic(bool on) { detail::cudnn_deterministic_flag().store(on); }
inline bool cudnn_deterministic() { return detail::cudnn_deterministic_flag().load(); }

/// The calling thread's cuDNN handle for `device` (< 0: the current one), bound to its current stream.
inline cudnnHandle_t cudnn_handle(int device = -1) {
  thread_local detail::CudnnHandles handles;
  if (device < 0) device = current_device();
  if (device >= max_devices)
    throw ValueError("kiln::cuda::cudnn_handle: device index " + std::to_string(device) + " exceeds kiln's limit of " +
                     std::to_string(max_devices) + " devices");
  cudnnHandle_t& h = handles.handle[device];
  if (h == nullptr) {
    DeviceGuard g(device);
    KILN_CUDNN_CHECK(cudnnCreate(&h));
  }
  KILN_CUDNN_CHECK(cudnnSetStream(h, current_stream(device)));
  return h;
}

/// One convolution of fixed shape: x [N, C, H, W] * w [K, C / G, R, R] (stride, padding, dilation, G
/// groups) -> y [N, K, Ho, Wo], element type T, on `device`. Holds the descriptors and, for forward, backward
/// data and backward filter, the algorithms cuDNN's heuristics offer (best first, each with its workspace),
/// tried in turn when one is refused as it runs.
template <class T>
class ConvPlan {
 public:
  ConvPlan(index_t n, index_t c, index_t h, index_t w, index_t k, index_t r, index_t stride, index_t pad,
           index_t dilation, index_t groups, int device)
      : n_(n), device_(device) {
    try {
      build(n, c, h, w, k, r, stride, pad, dilation, groups);
    } catch (...) {
      destroy();  // the descriptors created so far
      throw;
    }
  }
  ~ConvPlan() { destroy(); }
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;

  index_t batch() const { return n_; }
  int device() const { return device_; }
  /// Whether cuDNN offers an algorithm for every direction (else the caller takes its im2col path: the
  /// legacy API may have none for bf16, or none within the free memory, and cuDNN's descriptors take
  /// int dimensions and 2^31 elements at most).
  bool usable() const { return usable_; }

  /// y = conv(x, w) (beta = 0) or y += conv(x, w) (beta = 1).
  void forward(const T* x, const T* w, T* y, double beta = 0) const {
    DeviceGuard g(device_);
    Scale a(1.0), b(beta);
    count(x_count_ + w_count_ + y_count_ * (beta != 0 ? 2 : 1), gemm_ops());
    run(fwd_, fwd_at_, "cudnnConvolutionForward", [&](const auto& c, void* ws) {
      return cudnnConvolutionForward(cudnn_handle(device_), a.get(), x_, x, w_, w, conv_, c.algo, ws, c.bytes,
                                     b.get(), y_, y);
    });
  }
  /// dx = convᵀ(w, dy).
  void backward_data(const T* w, const T* dy, T* dx) const {
    DeviceGuard g(device_);
    Scale a(1.0), b(0.0);
    count(w_count_ + y_count_ + x_count_, gemm_ops());
    run(bwd_data_, bwd_data_at_, "cudnnConvolutionBackwardData", [&](const auto& c, void* ws) {
      return cudnnConvolutionBackwardData(cudnn_handle(device_), a.get(), w_, w, y_, dy, conv_, c.algo, ws,
                                          c.bytes, b.get(), x_, dx);
    });
  }
  /// dw = x ⋆ dy + beta dw (beta = 1 accumulates, as gradients do).
  void backward_filter(const T* x, const T* dy, T* dw, double beta = 1) const {
    DeviceGuard g(device_);
    Scale a(1.0), b(beta);
    count(x_count_ + y_count_ + w_count_ * (beta != 0 ? 2 : 1), gemm_ops());
    run(bwd_filter_, bwd_filter_at_, "cudnnConvolutionBackwardFilter", [&](const auto& c, void* ws) {
      return cudnnConvolutionBackwardFilter(cudnn_handle(device_), a.get(), x_, x, y_, dy, conv_, c.algo, ws,
                                            c.bytes, b.get(), w_, dw);
    });
  }
  /// db += Σ over n, h, w of dy (Conv2d calls it for float and double only: cuDNN's legacy bias gradient
  /// documents no bf16).
  void backward_bias(const T* dy, T* db) const {
    DeviceGuard g(device_);
    Scale a(1.0), b(1.0);
    count(y_count_ + 2 * out_channels_, static_cast<std::uint64_t>(y_count_));
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_handle(device_), a.get(), y_, dy, b.get(), b_, db));
  }

 private:
  static int i(index_t v) { return static_cast<int>(v); }
  /// The descriptors, then the algorithms (usable_); cuDNN's int dimensions bound what it can take.
  void build(index_t n, index_t c, index_t h, index_t w, index_t k, index_t r, index_t stride, index_t pad,
             index_t dilation, index_t groups) {
    const index_t limit = std::numeric_limits<int>::max();
    const index_t cg = c / groups;                                             // the filter's channels
    if (n > limit || n * c * h * w > limit || k * cg * r * r > limit) return;  // usable_ stays false
    // The output too, before its descriptor (which would refuse it: CUDNN_STATUS_NOT_SUPPORTED): the
    // caller then takes the im2col path, whose GEMMs take 64-bit sizes.
    const index_t span = dilation * (r - 1) + 1;
    const index_t out_h = (h + 2 * pad - span) / stride + 1, out_w = (w + 2 * pad - span) / stride + 1;
    if (out_h > 0 && out_w > 0 && n * k * out_h * out_w > limit) return;
    DeviceGuard g(device_);
    constexpr cudnnDataType_t type = detail::cudnn_type<T>();
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_));
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_));
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&b_));
    KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_));
    KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, type, i(n), i(c), i(h), i(w)));
    KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_, type, CUDNN_TENSOR_NCHW, i(k), i(cg), i(r), i(r)));
    KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, i(pad), i(pad), i(stride), i(stride), i(dilation),
                                                     i(dilation), CUDNN_CROSS_CORRELATION,
                                                     detail::cudnn_compute_type<T>()));
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_, i(groups)));
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, detail::query_math<T>()));
    int on = 0, oc = 0, oh = 0, ow = 0;
    KILN_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_, x_, w_, &on, &oc, &oh, &ow));
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, type, on, oc, oh, ow));
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(b_, CUDNN_TENSOR_NCHW, type, 1, oc, 1, 1));
    x_count_ = n * c * h * w;
    w_count_ = k * cg * r * r;
    y_count_ = static_cast<index_t>(on) * oc * oh * ow;
    out_channels_ = oc;
    usable_ = choose_algorithms();  // (the output's size was checked above)
  }
  void destroy() {
    if (conv_) (void)cudnnDestroyConvolutionDescriptor(conv_);
    if (w_) (void)cudnnDestroyFilterDescriptor(w_);
    if (b_) (void)cudnnDestroyTensorDescriptor(b_);
    if (y_) (void)cudnnDestroyTensorDescriptor(y_);
    if (x_) (void)cudnnDestroyTensorDescriptor(x_);
    conv_ = nullptr, w_ = nullptr, b_ = nullptr, y_ = nullptr, x_ = nullptr;
  }

  /// alpha / beta as cuDNN reads them: double for double data, float otherwise.
  struct Scale {
    std::conditional_t<std::is_same_v<T, double>, double, float> v;
    explicit Scale(double x) : v(static_cast<decltype(v)>(x)) {}
    const void* get() const { return &v; }
  };
  /// Workspace from the caching allocator (floats, rounded up); empty for 0 bytes.
  Tensor<float, Shape<dyn>, Cuda> workspace(std::size_t bytes) const {
    if (bytes == 0) return {};
    return Tensor<float, Shape<dyn>, Cuda>(Extents<Shape<dyn>>(static_cast<index_t>((bytes + 3) / 4)), device_);
  }

  /// The descriptor takes the chosen algorithm's math type before each call, as PyTorch sets it (cuDNN
  /// picks kernels by algorithm and math type; float's is always FMA, see math_allowed).
  void use_math(cudnnMathType_t m) const { KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, m)); }

  /// An algorithm a direction may run, with its workspace and math type.
  template <class Algo>
  struct Candidate {
    Algo algo;
    std::size_t bytes;
    cudnnMathType_t math;
  };
  template <class Algo>
  using Candidates = std::vector<Candidate<Algo>>;

  /// cuDNN's candidates (best first) that succeeded, have an allowed math type (set on the descriptor
  /// before the workspace is sized, as it will run), a workspace within `cap` and, when asked for, are
  /// deterministic. False when none qualifies.
  template <class Perf, class Algo, class WorkspaceSize>
  bool pick(const Perf* perf, int found, std::size_t cap, WorkspaceSize&& workspace_size,
            Candidates<Algo>& out) const {
    const bool deterministic = cudnn_deterministic();
    for (int k = 0; k < found; ++k) {
      const Perf& p = perf[k];
      if (p.status != CUDNN_STATUS_SUCCESS || !detail::math_allowed<T>(p.mathType)) continue;
      if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      use_math(p.mathType);
      std::size_t b = 0;
      if (workspace_size(p.algo, &b) != CUDNN_STATUS_SUCCESS || b > cap) continue;
      out.push_back({p.algo, b, p.mathType});
    }
    return !out.empty();
  }

  /// Whether cuDNN refused a call as not supported: CUDNN_STATUS_NOT_SUPPORTED or, from cuDNN 9 on, any
  /// code of its category (CUDNN_STATUS_NOT_SUPPORTED_SHAPE, _SHARED_MEMORY_INSUFFICIENT, _PADDING, ...,
  /// 3001-3014: cudnn_graph.h's CUDNN_STATUS_CATEGORY).
  static bool refused(cudnnStatus_t status) {
#ifdef CUDNN_STATUS_CATEGORY
    return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED;
#else
    return status == CUDNN_STATUS_NOT_SUPPORTED;
#endif
  }

  /// Runs `call(candidate, workspace)` with the first candidate from `at` on that runs, as PyTorch tries
  /// its candidates: a status of success from the heuristics does not promise that the kernel runs. One
  /// that cuDNN refuses when called (CUDNN_STATUS_NOT_SUPPORTED or another of its category, before
  /// anything is written) is passed
  /// over from then on; one whose workspace cannot be had now (out of memory after the allocator freed
  /// its cache) is passed over for this call. Throws the last candidate's error.
  template <class Algo, class Call>
  void run(const Candidates<Algo>& list, std::size_t& at, const char* call_name, Call&& call) const {
    for (std::size_t k = at; k < list.size(); ++k) {
      const Candidate<Algo>& c = list[k];
      const bool last = k + 1 == list.size();
      use_math(c.math);
      Tensor<float, Shape<dyn>, Cuda> ws;
      try {
        ws = workspace(c.bytes);
      } catch (const OutOfMemoryError&) {
        if (last) throw;
        continue;
      }
      const cudnnStatus_t status = call(c, static_cast<void*>(ws.data()));
      if (status == CUDNN_STATUS_SUCCESS) return;
      if (!refused(status) || last)
        throw BackendError(kiln::detail::backend_message("cuDNN", call_name, __FILE__, __LINE__,
                                                         static_cast<int>(status),
                                                         cudnnGetErrorString(status)) +
                           " (algorithm " + std::to_string(static_cast<int>(c.algo)) + ", candidate " +
                           std::to_string(k + 1) + " of " + std::to_string(list.size()) + ")");
      if (k == at) ++at;  // refused for this shape: not tried again
    }
  }

  /// Forward, backward-data and backward-filter algorithms; false when a direction has none, or when
  /// cuDNN cannot rank them for this type (a heuristics query that fails: the caller falls back).
  bool choose_algorithms() {
    cudnnHandle_t h = cudnn_handle(device_);
    constexpr int max_algos = 16;
    const std::size_t cap = detail::workspace_cap(device_);
    int found = 0;
    {
      cudnnConvolutionFwdAlgoPerf_t perf[max_algos];
      use_math(detail::query_math<T>());  // what the heuristics offer depends on it (pick() changed it)
      if (cudnnGetConvolutionForwardAlgorithm_v7(h, x_, w_, conv_, y_, max_algos, &found, perf) != CUDNN_STATUS_SUCCESS)
        return false;
      const auto size = [&](cudnnConvolutionFwdAlgo_t a, std::size_t* b) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, x_, w_, conv_, y_, a, b);
      };
      if (!pick(perf, found, cap, size, fwd_)) return false;
    }
    {
      cudnnConvolutionBwdDataAlgoPerf_t perf[max_algos];
      use_math(detail::query_math<T>());
      if (cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_, y_, conv_, x_, max_algos, &found, perf) !=
          CUDNN_STATUS_SUCCESS)
        return false;
      const auto size = [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t* b) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_, y_, conv_, x_, a, b);
      };
      if (!pick(perf, found, cap, size, bwd_data_)) return false;
    }
    {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[max_algos];
      use_math(detail::query_math<T>());
      if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_, y_, conv_, w_, max_algos, &found, perf) !=
          CUDNN_STATUS_SUCCESS)
        return false;
      const auto size = [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t* b) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_, y_, conv_, w_, a, b);
      };
      return pick(perf, found, cap, size, bwd_filter_);
    }
  }

  /// One cuDNN call as a pass (kiln/core/counters.hpp): `values` elements of T moved, `ops` operations.
  static void count(index_t values, std::uint64_t ops) { kiln::detail::count_pass({kiln::detail::bytes_of<T>(values), ops}); }
  /// 2 x (outputs) x (C R R): the multiply-adds of the convolution, the same for all three directions.
  std::uint64_t gemm_ops() const {
    return 2 * static_cast<std::uint64_t>(y_count_) * static_cast<std::uint64_t>(w_count_ / (out_channels_ > 0 ? out_channels_ : 1));
  }

  index_t n_;
  int device_;
  index_t x_count_ = 0, w_count_ = 0, y_count_ = 0, out_channels_ = 0;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, b_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  Candidates<cudnnConvolutionFwdAlgo_t> fwd_;
  Candidates<cudnnConvolutionBwdDataAlgo_t> bwd_data_;
  Candidates<cudnnConvolutionBwdFilterAlgo_t> bwd_filter_;
  // The first candidate of each not refused when it ran (a plan belongs to one module, stepped by one
  // thread).
  mutable std::size_t fwd_at_ = 0, bwd_data_at_ = 0, bwd_filter_at_ = 0;
  bool usable_ = false;
};

}  // namespace kiln::cuda
