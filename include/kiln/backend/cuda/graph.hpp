/// CUDA graphs (host code): record a sequence of kiln calls once and replay it with one launch, like
/// torch.cuda.CUDAGraph with torch.cuda.graph(g).
#pragma once
#include <array>
#include <memory>
#include <utility>

#include <cuda_runtime_api.h>

#include "kiln/backend/cuda/check.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/memory.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/tensor/allocator.hpp"

namespace kiln::cuda {

/// Whether work queued now on `stream` is being recorded into a graph (cudaStreamIsCapturing).
inline bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}
/// Whether the current stream of the current device is being recorded.
inline bool is_capturing() { return is_capturing(current_stream()); }

namespace detail {
/// The calling thread's capture stream on `device`, created once and kept (as torch.cuda.graph's default
/// capture stream): the cuBLAS and cuDNN handles a capture binds to it stay bound to a live stream.
inline Stream& capture_stream(int device) {
  thread_local std::array<std::unique_ptr<Stream>, max_devices> streams;
  std::unique_ptr<Stream>& s = streams.at(static_cast<std::size_t>(device));
  if (!s) s = std::make_unique<Stream>(device);
  return *s;
}
}  // namespace detail

/// A captured sequence of GPU work, replayed with one launch. What it records is fixed: the kernels,
/// their arguments (host scalars included) and every address. So:
/// - inputs are read from, and outputs written to, the tensors the capture used: copy new data into the
///   captured input (`x.copy_(batch)`) before a replay and read the outputs the capture produced;
/// - capture() records and does not run: replay() runs, and warm-up calls must come before capture()
///   (cuDNN's algorithm search, cuBLAS's set-up and the first lazy allocations cannot be recorded);
/// - the capture allocates from a private pool of the device's caching allocator: blocks allocated or
///   freed during it (also a tensor allocated before it and freed during it) stay reserved for the graph
///   until reset() or the graph's destruction, so no later allocation can take memory a replay writes;
/// - host state does not advance between replays: optimizers need their capturable form (SGD, Adam
///   and AdamW with `.capturable = true` keep their step count, learning rate and flags on the device),
///   so does an fp16 GradScaler (`.capturable = true`, its scale passed as `scaler.loss_scale()`), and
///   Dropout refuses a training forward.
/// kiln::counters() counts a replay as the work its capture counted.
/// Example (an inference step):
///   model.eval(); (void)model.forward(x);               // warm-up: plans, workspaces
///   kiln::cuda::Graph g;
///   Tensor<float, Shape<dyn, 10>, Cuda> y;
///   g.capture([&] { y = model.forward(x); });
///   for (auto& batch : loader) { x.copy_(batch); g.replay(); use(y); }
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&& o) noexcept
      : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)),
        pool_(std::exchange(o.pool_, 0)), device_(o.device_), work_(o.work_),
        replayed_(std::exchange(o.replayed_, nullptr)) {}
  Graph& operator=(Graph&& o) noexcept {
    if (this != &o) {
      reset();
      graph_ = std::exchange(o.graph_, nullptr);
      exec_ = std::exchange(o.exec_, nullptr);
      pool_ = std::exchange(o.pool_, 0);
      device_ = o.device_;
      work_ = o.work_;
      replayed_ = std::exchange(o.replayed_, nullptr);
    }
    return *this;
  }
  ~Graph() { reset(); }

  /// Records what f() queues on the current device (on a side stream that becomes the current stream
  /// for the call, as torch.cuda.graph does), after the work already queued on the current stream. A
  /// graph captured before is dropped first. If f throws, or queues something a graph cannot hold (a
  /// synchronisation, a copy to pageable host memory), nothing is kept and the error propagates.
  template <class F>
  void capture(F&& f) {
    reset();
    device_ = current_device();
    CachingAllocator& alloc = kiln::caching_allocator<Cuda>(device_);
    Stream& side = detail::capture_stream(device_);
    Event ready(false);
    ready.record(current_stream(device_));
    side.wait(ready);  // the capture's inputs are ready before anything it records
    pool_ = alloc.begin_pool();
    const Counters before = counters();
    cudaGraph_t g = nullptr;
    {
      StreamGuard on(side);
      try {
        KILN_CUDA_CHECK(cudaStreamBeginCapture(side.get(), cudaStreamCaptureModeThreadLocal));
      } catch (...) {
        abandon(alloc);
        throw;
      }
      try {
        f();
      } catch (...) {
        (void)cudaStreamEndCapture(side.get(), &g);
        if (g != nullptr) (void)cudaGraphDestroy(g);
        (void)cudaGetLastError();
        abandon(alloc);
        throw;
      }
      const cudaError_t e = cudaStreamEndCapture(side.get(), &g);
      alloc.end_pool();
      if (e != cudaSuccess || g == nullptr) {
        (void)cudaGetLastError();
        if (g != nullptr) (void)cudaGraphDestroy(g);
        abandon(alloc);
        throw BackendError("kiln::cuda::Graph::capture: the capture was invalidated (" + detail::cuda_error_text(e) +
                           "): the captured code queued something a graph cannot hold, such as a "
                           "synchronisation, a blocking copy or work on another stream it did not join");
      }
    }
    graph_ = g;
    work_ = counters() - before;
    try {
      KILN_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
    } catch (...) {
      reset();
      throw;
    }
  }

  /// Runs the captured work on the current stream of the graph's device (asynchronously, like a kernel).
  void replay() {
    if (exec_ == nullptr)
      throw ValueError("kiln::cuda::Graph::replay: nothing is captured; call capture() first");
    DeviceGuard g(device_);
    if (replayed_ == nullptr) KILN_CUDA_CHECK(cudaEventCreateWithFlags(&replayed_, cudaEventDisableTiming));
    KILN_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream(device_)));
    KILN_CUDA_CHECK(cudaEventRecord(replayed_, current_stream(device_)));
    kiln::detail::count_work(work_);
  }

  /// Drops the graph and gives its pool's free blocks back to the device's cache (blocks still held by
  /// tensors follow when those are freed), after the last replay has finished: a replay still running
  /// writes those blocks.
  void reset() noexcept {
    if (replayed_ != nullptr) {
      (void)cudaEventSynchronize(replayed_);
      (void)cudaEventDestroy(replayed_);
      (void)cudaGetLastError();
      replayed_ = nullptr;
    }
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
    if (pool_ != 0) {
      try {
        kiln::caching_allocator<Cuda>(device_).release_pool(pool_);
      } catch (...) {  // the allocator exists whenever a pool does; nothing to undo otherwise
      }
      pool_ = 0;
    }
    work_ = {};
  }

  bool captured() const noexcept { return exec_ != nullptr; }
  /// The device the graph was captured on.
  int device() const noexcept { return device_; }
  /// What one replay does, as kiln::counters() counted it during the capture.
  const Counters& work() const noexcept { return work_; }
  /// Kernels and other nodes in the graph (0 before a capture).
  std::size_t nodes() const {
    if (graph_ == nullptr) return 0;
    std::size_t n = 0;
    KILN_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
    return n;
  }
  /// Bytes of device memory the graph's pool holds (its tensors and the blocks kept for it).
  std::size_t pool_bytes() const {
    return pool_ == 0 ? 0 : kiln::caching_allocator<Cuda>(device_).pool_bytes(pool_);
  }

 private:
  /// Ends and releases this capture's pool: release_pool() ends the routing only while the active pool
  /// is this one (end_pool() here would end another thread's capture, begun since this one's ended).
  void abandon(CachingAllocator& alloc) noexcept {
    alloc.release_pool(pool_);
    pool_ = 0;
  }

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  PoolId pool_ = 0;
  int device_ = 0;
  Counters work_{};
  cudaEvent_t replayed_ = nullptr;  // recorded after each replay's launch
};

}  // namespace kiln::cuda

namespace kiln::detail {
template <>
struct graph_capture<Cuda> {
  static bool active(int device) { return cuda::is_capturing(cuda::current_stream(device)); }
};
}  // namespace kiln::detail
