/// GPU and pinned host memory (host code): per-device caching allocators, copies, torch.cuda-style stats.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "kiln/backend/cuda/check.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/allocator.hpp"
#include "kiln/tensor/storage.hpp"

namespace kiln::cuda::detail {

/// Switches to `device` without throwing (allocator callbacks run under the allocator's lock); ok() says
/// whether `device` is current now (a call made without it would run on another device).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) {
    // Only this guard's own errors are cleared: an error of the program's (a bad launch) that is still
    // pending stays for its own cudaGetLastError, or for kiln's next checked call.
    if (device < 0) return;
    if (error_ = cudaGetDevice(&prev_); error_ != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (prev_ != device) {
      error_ = cudaSetDevice(device);
      changed_ = error_ == cudaSuccess;
      if (!changed_) (void)cudaGetLastError();
    }
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;
  ~QuietDeviceGuard() {
    if (changed_) (void)cudaSetDevice(prev_);
  }
  bool ok() const { return error_ == cudaSuccess; }
  cudaError_t error() const { return error_; }

 private:
  int prev_ = -1;
  bool changed_ = false;
  cudaError_t error_ = cudaSuccess;
};

/// The calling thread's capture mode relaxed for a scope: the allocator's cudaMalloc and event calls may
/// run on a thread that is capturing a graph (in the thread-local or global mode they would end it).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

[[noreturn]] inline void throw_allocation_error(const char* call, cudaError_t e, std::size_t bytes, int device) {
  (void)cudaGetLastError();
  throw BackendError(kiln::detail::backend_message("CUDA", call, __FILE__, __LINE__, static_cast<int>(e),
                                                   cuda_error_text(e)) +
                     " while allocating " + format_bytes(bytes) + " on device " + std::to_string(device));
}

/// cudaMalloc on `device`; nullptr when the device is full (the caching allocator then frees its
/// cache and retries, then throws OutOfMemoryError). Blocks are 256-byte aligned.
/// During a graph capture (kiln::cuda::Graph) the pool's new blocks come from here too: cudaMalloc is
/// not captured, but a capture in the thread-local or global mode refuses it unless the calling thread's
/// mode is relaxed for the call (as PyTorch's allocator does).
inline void* raw_device_allocate(std::size_t bytes, int device) {
  QuietDeviceGuard g(device);
  if (!g.ok()) throw_allocation_error("cudaSetDevice", g.error(), bytes, device);  // never on another GPU
  void* p = nullptr;
  cudaError_t e;
  {
    const RelaxedCaptureMode relaxed;
    e = cudaMalloc(&p, bytes);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so no later check reports it
    return nullptr;
  }
  if (e != cudaSuccess) throw_allocation_error("cudaMalloc", e, bytes, device);
  return p;
}

/// cudaFree; the caching allocator has synchronised the device first (raw_device_synchronize), so no
/// queued kernel still uses the block.
inline void raw_device_deallocate(void* p, int device) {
  QuietDeviceGuard g(device);  // (cudaFree finds the device of p by itself; its context may be made current)
  if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

/// Waits for `device`'s queued work before cached blocks go back to the driver (empty_cache, or a
/// retry after out of memory): cudaFree "may" synchronise, but is not documented to.
inline void raw_device_synchronize(int device) {
  QuietDeviceGuard g(device);
  if (!g.ok()) return;  // (another device's work is none of this; the next checked call reports the error)
  (void)cudaDeviceSynchronize();  // an error here is a kernel's, sticky: the next checked call reports it
}

/// cudaMemGetInfo (relaxed as raw_device_allocate: a ConvPlan built during a capture asks it).
inline bool raw_device_memory(int device, std::size_t* free, std::size_t* total) {
  QuietDeviceGuard g(device);
  if (!g.ok()) return false;  // (it would be another device's)
  const RelaxedCaptureMode relaxed;
  const bool ok = cudaMemGetInfo(free, total) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

/// cudaHostAlloc (portable: usable by every device's copies; relaxed as raw_device_allocate).
inline void* raw_pinned_allocate(std::size_t bytes, int) {
  void* p = nullptr;
  cudaError_t e;
  {
    const RelaxedCaptureMode relaxed;
    e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (e != cudaSuccess) throw_allocation_error("cudaHostAlloc", e, bytes, 0);
  return p;
}

inline void raw_pinned_deallocate(void* p, int) {
  if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}

/// The calling thread's current stream on `device` as the caching allocator's key. The per-thread
/// default stream (cudaStreamPerThread) is a different stream on every thread, so it is keyed by thread,
/// with a number no other thread ever gets (a thread-local's address may come back in a later thread
/// while the first one's work still runs). The numbers are odd and >= 3: never a stream handle
/// (pointers, or the special handles 1 and 2).
inline std::uintptr_t allocation_stream(int device) {
  const cudaStream_t s = current_stream(device);
  if (s == cudaStreamPerThread) {
    static std::atomic<std::uintptr_t> threads{0};
    thread_local const std::uintptr_t self = ((threads.fetch_add(1, std::memory_order_relaxed) + 1) << 1) | 1;
    return self;
  }
  return reinterpret_cast<std::uintptr_t>(s);
}

/// An event recorded on `device`'s current stream: the caching allocator's marker (record_use).
inline void* record_stream_marker(int device) {
  DeviceGuard g(device);
  const RelaxedCaptureMode relaxed;
  cudaEvent_t e = nullptr;
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const cudaError_t rc = cudaEventRecord(e, current_stream(device));
  if (rc != cudaSuccess) {
    (void)cudaEventDestroy(e);
    KILN_CUDA_CHECK(rc);
  }
  return e;
}

/// Whether the stream has reached a marker (then the event is destroyed). An error (a failed stream)
/// counts as reached: nothing will run there any more.
inline bool stream_marker_reached(void* marker) {
  const auto e = static_cast<cudaEvent_t>(marker);
  const RelaxedCaptureMode relaxed;
  const cudaError_t rc = cudaEventQuery(e);
  if (rc == cudaErrorNotReady) {
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();  // only if it is the one recorded
    return false;
  }
  if (cudaEventDestroy(e) != cudaSuccess || rc != cudaSuccess) (void)cudaGetLastError();
  return true;
}

/// Waits until the stream has reached a marker (the pinned allocator's retry after out of memory, and
/// its empty_cache). The marker stays until stream_marker_reached() destroys it.
inline void wait_stream_marker(void* marker) {
  const RelaxedCaptureMode relaxed;
  if (cudaEventSynchronize(static_cast<cudaEvent_t>(marker)) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace kiln::cuda::detail

namespace kiln::detail {

/// GPU memory: one caching allocator per device over cudaMalloc/cudaFree, created at first use and
/// never destroyed (tensors freed during exit stay valid and no CUDA call runs after the runtime is torn
/// down). Blocks are reused in the order of the device's current stream.
template <>
struct device_memory<Cuda> {
  /// The allocator of cuda:index (index < 0: the current device). Throws BackendError when CUDA is
  /// not available, ValueError for an index that is not a device of this machine.
  static CachingAllocator& allocator(int index) {
    index = cuda::detail::resolve_device(index, "kiln: memory on kiln::Cuda");
    static std::array<std::atomic<CachingAllocator*>, cuda::max_devices> slots{};
    static std::mutex create;
    CachingAllocator* a = slots[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
    if (a == nullptr) {
      std::lock_guard lock(create);
      a = slots[static_cast<std::size_t>(index)].load(std::memory_order_relaxed);
      if (a == nullptr) {
        a = new CachingAllocator(RawAllocator{&cuda::detail::raw_device_allocate, &cuda::detail::raw_device_deallocate,
                                              &cuda::detail::raw_device_memory, "cuda", &cuda::detail::allocation_stream,
                                              &cuda::detail::record_stream_marker, &cuda::detail::stream_marker_reached,
                                              &cuda::detail::raw_device_synchronize},
                                 index);
        note_device(index);  // before any thread can allocate there
        slots[static_cast<std::size_t>(index)].store(a, std::memory_order_release);
      }
    }
    return *a;
  }
  static constexpr bool indexed = true;
  /// The GPU that memory p belongs to (cudaPointerGetAttributes, a host call without synchronisation),
  /// as libtorch's getDeviceFromPtr: device, managed and pinned or registered host memory say which;
  /// -1 for memory the runtime does not know (plain host memory) or without a driver.
  static int pointer_device(const void* p) {
    const cudaPointerAttributes a = attributes(p);
    return a.type == cudaMemoryTypeUnregistered ? -1 : a.device;
  }
  /// The GPU p's memory is on when only that GPU reads it (cudaMalloc'd); -1 for memory every GPU
  /// reads (managed, pinned host) or that the runtime does not know.
  static int resident_device(const void* p) {
    const cudaPointerAttributes a = attributes(p);
    return a.type == cudaMemoryTypeDevice ? a.device : -1;
  }
  /// Whether kiln has used more than one GPU in this process: created the caching allocators of two
  /// (an allocation, or a memory statistic, asked of each) or wrapped memory of another (from_blob).
  /// Until then no operand can be on another GPU than device_in_use().
  static bool several_in_use() { return several().load(std::memory_order_acquire); }
  /// The first GPU kiln used (the only one while !several_in_use()); -1: none yet.
  static int device_in_use() { return first().load(std::memory_order_acquire); }
  /// Records that tensors may live on GPU `index` (one that this machine has).
  static void note_device(int index) {
    if (index < 0 || several_in_use()) return;
    int seen = first().load(std::memory_order_acquire);
    if (seen == index) return;  // the common case: loads only
    if (index >= cuda::device_count()) return;  // not a GPU: nothing can run there
    if (seen < 0 && first().compare_exchange_strong(seen, index)) return;
    if (seen != index) several().store(true, std::memory_order_release);
  }

 private:
  static std::atomic<int>& first() {
    static std::atomic<int> f{-1};
    return f;
  }
  static std::atomic<bool>& several() {
    static std::atomic<bool> b{false};
    return b;
  }
  static cudaPointerAttributes attributes(const void* p) {
    cudaPointerAttributes a{};
    a.type = cudaMemoryTypeUnregistered;
    a.device = -1;
    if (p == nullptr) return a;
    const cuda::detail::RelaxedCaptureMode relaxed;  // a query, allowed while a graph is captured
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      a.type = cudaMemoryTypeUnregistered;
      a.device = -1;
    }
    return a;
  }
};

template <>
struct device_scope<Cuda> : cuda::DeviceGuard {
  explicit device_scope(int index) : cuda::DeviceGuard(index) {}
};

/// Page-locked host memory for asynchronous copies (Tensor::pin_memory()). A pinned block that an
/// asynchronous copy reads or writes is not handed out again before the copy is done (as PyTorch's
/// CachingHostAllocator), so a batch freed right after `to<Cuda>(0, true)` is safe.
template <>
struct pinned_host_memory<Cpu> {
  static CachingAllocator& allocator() {
    static CachingAllocator* a = new CachingAllocator(
        RawAllocator{&cuda::detail::raw_pinned_allocate, &cuda::detail::raw_pinned_deallocate, nullptr, "pinned",
                     nullptr, &cuda::detail::record_stream_marker, &cuda::detail::stream_marker_reached, nullptr,
                     &cuda::detail::wait_stream_marker},
        0);
    return *a;
  }
  /// An asynchronous copy on `device`'s current stream `s` uses host memory p: if p is pinned, its block
  /// waits for the copy before reuse. Not during a capture (a replay copies later, on its own schedule).
  static void record_use(const void* p, int device, cudaStream_t s) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    KILN_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
    if (status == cudaStreamCaptureStatusNone) allocator().record_use(p, device);
  }
  /// record_use for a copy already queued on s; if the marker cannot be recorded, waits for the copy
  /// (the block must not be handed out while the copy may still use it), then rethrows.
  static void record_use_or_wait(const void* p, int device, cudaStream_t s) {
    try {
      record_use(p, device, s);
    } catch (...) {
      (void)cudaStreamSynchronize(s);
      (void)cudaGetLastError();
      throw;
    }
  }
};

/// Host -> GPU on the destination device's current stream; waits for it unless non_blocking (which is
/// only asynchronous from pinned memory; the source must then stay alive until the stream gets there).
template <>
struct device_copy<Cuda, Cpu> {
  static void run(void* dst, int dst_dev, const void* src, int, std::size_t bytes, bool non_blocking) {
    if (bytes == 0) return;
    cuda::DeviceGuard g(dst_dev);
    const cudaStream_t s = cuda::current_stream(dst_dev);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    if (!non_blocking) KILN_CUDA_CHECK(cudaStreamSynchronize(s));
    else pinned_host_memory<Cpu>::record_use_or_wait(src, dst_dev, s);
  }
};

/// GPU -> host on the source device's current stream; waits for it unless non_blocking (asynchronous
/// only into pinned memory: synchronise the stream before reading the destination).
template <>
struct device_copy<Cpu, Cuda> {
  static void run(void* dst, int, const void* src, int src_dev, std::size_t bytes, bool non_blocking) {
    if (bytes == 0) return;
    cuda::DeviceGuard g(src_dev);
    const cudaStream_t s = cuda::current_stream(src_dev);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    if (!non_blocking) KILN_CUDA_CHECK(cudaStreamSynchronize(s));
    else pinned_host_memory<Cpu>::record_use_or_wait(dst, src_dev, s);
  }
};

/// GPU -> GPU, never waited for on the host (torch's copies between GPUs are not, non_blocking or not;
/// a host wait would also end a graph capture). Same device: on its current stream, ordered with the
/// work on both blocks. Across devices: a peer copy on the destination's current stream, after the work
/// queued on the source's current stream, and the source's later work waits for the copy (the source's
/// block may be freed and reused there).
template <>
struct device_copy<Cuda, Cuda> {
  static void run(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes, bool /*non_blocking*/) {
    if (bytes == 0) return;
    if (dst_dev < 0) dst_dev = cuda::current_device();
    if (src_dev < 0) src_dev = cuda::current_device();
    if (dst_dev == src_dev) {
      cuda::DeviceGuard g(dst_dev);
      KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda::current_stream(dst_dev)));
      return;
    }
    cuda::Event src_ready(false);
    {
      cuda::DeviceGuard g(src_dev);
      src_ready.record(cuda::current_stream(src_dev));
    }
    cuda::DeviceGuard g(dst_dev);
    const cudaStream_t s = cuda::current_stream(dst_dev);
    KILN_CUDA_CHECK(cudaStreamWaitEvent(s, src_ready.get(), 0));
    KILN_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, s));
    cuda::Event copied(false);
    copied.record(s);
    cuda::DeviceGuard back(src_dev);
    KILN_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(src_dev), copied.get(), 0));
  }
};

}  // namespace kiln::detail

namespace kiln::cuda {

/// Allocator statistics of a device (< 0: the current one), like torch.cuda.memory_stats().
inline MemoryStats memory_stats(int device = -1) { return kiln::caching_allocator<Cuda>(device).stats(); }
/// Bytes held by live tensors (torch.cuda.memory_allocated).
inline std::size_t memory_allocated(int device = -1) { return memory_stats(device).allocated_bytes; }
/// Bytes held by kiln: live tensors plus its cache (torch.cuda.memory_reserved).
inline std::size_t memory_reserved(int device = -1) { return memory_stats(device).reserved_bytes; }
/// Peak of memory_allocated since the start or the last reset_peak_memory_stats().
inline std::size_t max_memory_allocated(int device = -1) { return memory_stats(device).peak_allocated_bytes; }
/// Peak of memory_reserved since the start or the last reset_peak_memory_stats().
inline std::size_t max_memory_reserved(int device = -1) { return memory_stats(device).peak_reserved_bytes; }
/// Restarts the peaks from the current values.
inline void reset_peak_memory_stats(int device = -1) { kiln::caching_allocator<Cuda>(device).reset_peak_stats(); }
/// Returns cached, unused blocks to the driver, so memory_reserved() == memory_allocated()
/// (torch.cuda.empty_cache()).
inline void empty_cache(int device = -1) { kiln::caching_allocator<Cuda>(device).empty_cache(); }
/// Caps what kiln reserves on a device to `fraction` of its memory (torch.cuda.set_per_process_memory_fraction):
/// allocations beyond it throw OutOfMemoryError. `fraction` is in [0, 1], as torch's (0: nothing can be
/// reserved; 1.0: the whole device, i.e. no cap); anything else throws ValueError.
inline void set_per_process_memory_fraction(double fraction, int device = -1) {
  if (kiln::detail::is_inf_or_nan(fraction) || fraction < 0.0 || fraction > 1.0)  // (bits: -ffast-math)
    throw ValueError("kiln::cuda::set_per_process_memory_fraction: fraction must be in [0, 1] (as torch's), got " +
                     std::to_string(fraction));
  CachingAllocator& a = kiln::caching_allocator<Cuda>(device);
  if (fraction == 1.0) {
    a.set_limit(std::nullopt);
    return;
  }
  const std::size_t total = mem_get_info(a.device()).second;
  a.set_limit(static_cast<std::size_t>(fraction * static_cast<double>(total)));
}

}  // namespace kiln::cuda
