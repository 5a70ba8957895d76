/// CUDA devices and streams (host code): availability, properties, the current device and stream, events.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "kiln/backend/cuda/check.hpp"
#include "kiln/core/errors.hpp"

namespace kiln::cuda {

/// Device indices kiln tracks per-device state for (streams, allocators, cuBLAS handles).
inline constexpr int max_devices = 64;

/// CUDA devices usable by this process; 0 on any error (no driver: cudaErrorInsufficientDriver, 35;
/// a driver but no GPU: cudaErrorNoDevice, 100). Never throws; clears the error it caused.
inline int device_count() noexcept {
  int n = 0;  // not written when the call fails
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// True when at least one CUDA device can be used (torch.cuda.is_available()).
inline bool is_available() noexcept { return device_count() > 0; }

/// "13.0" for 13000 (the encoding of cudaRuntimeGetVersion / cudaDriverGetVersion).
inline std::string version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

/// The CUDA runtime kiln was linked with, encoded as 1000 * major + 10 * minor (13000 = 13.0).
inline int runtime_version() noexcept {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
}

/// The newest CUDA version the installed driver supports (same encoding); 0 without a driver.
inline int driver_version() noexcept {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
}

/// Why CUDA is not available (the runtime's error, with a hint), or "" when it is.
inline std::string unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    std::string r = detail::cuda_error_text(e) + " (error " + std::to_string(static_cast<int>(e)) + ")";
    if (e == cudaErrorInsufficientDriver)
      r += "; no NVIDIA driver is loaded, or it is older than the CUDA " + version_string(runtime_version()) +
           " runtime kiln was built with";
    else if (e == cudaErrorNoDevice)
      r += "; the driver sees no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    return r;
  }
  if (n == 0) return "no CUDA device found";
  return {};
}

/// The calling thread's current device (cudaGetDevice). Throws BackendError when CUDA is unusable.
inline int current_device() {
  int d = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

namespace detail {
/// index, or the current device when index < 0; throws ValueError when it is not a device of this machine.
inline int resolve_device(int index, const char* what) {
  const int n = device_count();
  if (n == 0)
    throw BackendError(std::string(what) + ": CUDA is not available: " + unavailable_reason());
  if (index < 0) index = current_device();
  if (index >= n || index >= max_devices)
    throw ValueError(std::string(what) + ": device index " + std::to_string(index) + " out of range: this machine has " +
                     std::to_string(n) + " CUDA device(s), cuda:0 to cuda:" + std::to_string(n - 1));
  return index;
}
}  // namespace detail

/// Makes `index` the calling thread's current device (torch.cuda.set_device); a negative index changes
/// nothing (torch's no-op; kiln's -1 is "the current device" everywhere).
inline void set_device(int index) {
  if (index < 0) return;
  index = detail::resolve_device(index, "kiln::cuda::set_device");
  KILN_CUDA_CHECK(cudaSetDevice(index));
}

/// Sets the current device for a scope and restores the previous one (torch.cuda.device(i)).
/// A negative index changes nothing.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    if (index < 0) return;
    prev_ = current_device();
    if (index != prev_) {
      KILN_CUDA_CHECK(cudaSetDevice(index));
      changed_ = true;
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
  bool changed_ = false;
};

/// Waits until every queued operation on the device (default: current) has finished.
inline void synchronize(int index = -1) {
  DeviceGuard g(index);
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
}

/// What nvidia-smi / torch.cuda.get_device_properties report about one GPU.
struct DeviceProperties {
  int index = 0;                                 ///< cuda:index
  std::string name;                              ///< "NVIDIA H200"
  std::string uuid;                              ///< "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (as nvidia-smi -L)
  std::string pci_bus_id;                        ///< "0000:3B:00.0"
  std::size_t total_memory = 0;                  ///< bytes of device memory
  std::size_t free_memory = 0;                   ///< bytes free when queried (cudaMemGetInfo)
  int multiprocessor_count = 0;                  ///< SMs
  int major = 0;                                 ///< compute capability major (9 on Hopper)
  int minor = 0;                                 ///< compute capability minor
  std::size_t l2_cache_bytes = 0;                ///< L2 cache size
  int clock_khz = 0;                             ///< peak SM clock
  int memory_clock_khz = 0;                      ///< peak memory clock
  int memory_bus_width = 0;                      ///< bits
  int warp_size = 0;                             ///< 32
  int max_threads_per_block = 0;                 ///< 1024
  int max_threads_per_multiprocessor = 0;        ///< 2048 on Hopper
  std::size_t shared_memory_per_block = 0;       ///< default limit (48 KiB)
  std::size_t shared_memory_per_block_optin = 0; ///< with cudaFuncSetAttribute
  std::size_t shared_memory_per_multiprocessor = 0;
  bool integrated = false;                       ///< an integrated GPU sharing host memory (Jetson)
  /// "9.0"
  std::string compute_capability() const { return std::to_string(major) + "." + std::to_string(minor); }
};

/// Properties of device `index` (< 0: the current one). Throws ValueError for an index that is not a
/// device here, BackendError when CUDA is not available.
inline DeviceProperties device_properties(int index) {
  if (index < -1)
    throw ValueError("kiln::cuda::device_properties: device index " + std::to_string(index) +
                     " is negative (-1 means the current device)");
  index = detail::resolve_device(index, "kiln::cuda::device_properties");
  cudaDeviceProp p{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  DeviceProperties d;
  d.index = index;
  d.name = p.name;
  char buf[64];
  const auto* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  d.uuid = buf;
  if (cudaDeviceGetPCIBusId(buf, static_cast<int>(sizeof buf), index) == cudaSuccess) d.pci_bus_id = buf;
  else (void)cudaGetLastError();
  d.total_memory = p.totalGlobalMem;
  d.multiprocessor_count = p.multiProcessorCount;
  d.major = p.major;
  d.minor = p.minor;
  d.l2_cache_bytes = static_cast<std::size_t>(p.l2CacheSize);
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, index));
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, index));
  d.memory_bus_width = p.memoryBusWidth;
  d.warp_size = p.warpSize;
  d.max_threads_per_block = p.maxThreadsPerBlock;
  d.max_threads_per_multiprocessor = p.maxThreadsPerMultiProcessor;
  d.shared_memory_per_block = p.sharedMemPerBlock;
  d.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  d.shared_memory_per_multiprocessor = p.sharedMemPerMultiprocessor;
  d.integrated = p.integrated != 0;
  DeviceGuard g(index);
  std::size_t free = 0, total = 0;
  KILN_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  d.free_memory = free;
  return d;
}

/// Free and total bytes of a device (torch.cuda.mem_get_info).
inline std::pair<std::size_t, std::size_t> mem_get_info(int index = -1) {
  index = detail::resolve_device(index, "kiln::cuda::mem_get_info");
  DeviceGuard g(index);
  std::size_t free = 0, total = 0;
  KILN_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {free, total};
}

// ---------------------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------------------

namespace detail {
/// The calling thread's current stream of each device; cudaStreamPerThread until set.
struct StreamSlots {
  cudaStream_t stream[max_devices];
  StreamSlots() {
    for (auto& s : stream) s = cudaStreamPerThread;
  }
};
inline cudaStream_t& stream_slot(int device) {
  thread_local StreamSlots slots;
  if (device < 0) device = current_device();
  if (device >= max_devices)
    throw ValueError("kiln::cuda: device index " + std::to_string(device) + " exceeds kiln's limit of " +
                     std::to_string(max_devices) + " devices");
  return slots.stream[device];
}
}  // namespace detail

/// The stream kiln's kernels, copies and cuBLAS calls on `device` (< 0: the current device) use in
/// this thread: cudaStreamPerThread unless a StreamGuard or set_current_stream chose another.
inline cudaStream_t current_stream(int device = -1) { return detail::stream_slot(device); }

/// Makes `stream` the calling thread's current stream of `device` (< 0: the current device).
inline void set_current_stream(cudaStream_t stream, int device = -1) { detail::stream_slot(device) = stream; }

/// Waits for the work queued on `stream` (default: the current stream of the current device).
inline void synchronize_stream(cudaStream_t stream) { KILN_CUDA_CHECK(cudaStreamSynchronize(stream)); }
inline void synchronize_stream() { synchronize_stream(current_stream()); }

class Event;

/// An owned, non-blocking CUDA stream (cudaStreamNonBlocking: no implicit sync with the legacy
/// default stream). Movable, not copyable; destroyed with its owner.
class Stream {
 public:
  /// A new stream on `device` (< 0: the current one); lower `priority` numbers run first.
  explicit Stream(int device = -1, int priority = 0) {
    device_ = device < 0 ? current_device() : device;
    DeviceGuard g(device_);
    KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)), device_(o.device_) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      reset();
      stream_ = std::exchange(o.stream_, nullptr);
      device_ = o.device_;
    }
    return *this;
  }
  ~Stream() { reset(); }

  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  int device() const noexcept { return device_; }
  /// Blocks until everything queued on this stream has finished.
  void synchronize() const { KILN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  /// True when everything queued has finished.
  bool query() const {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    KILN_CUDA_CHECK(e);
    return true;
  }
  /// Later work on this stream waits for `e` (recorded on any stream).
  inline void wait(const Event& e) const;

 private:
  void reset() noexcept {
    if (stream_) {
      // Waits for the queued work first: the caching allocator keys freed blocks by stream handle, and
      // a new stream may get this handle back while the old work still uses a block freed here.
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
      (void)cudaGetLastError();
      stream_ = nullptr;
    }
  }
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

/// A stream from device `device`'s pool (< 0: the current device), like PyTorch's stream pool:
/// non-blocking streams created at the first call and kept until the process ends (never destroyed),
/// handed out in turn. For work whose owner may go away while a thread's cuBLAS or cuDNN handle is
/// still bound to its stream, or the caching allocator still keys blocks by it (DataParallel's replicas).
inline const Stream& pooled_stream(int device = -1) {
  constexpr int per_device = 4;
  struct Pool {
    std::once_flag made;
    Stream* streams[per_device] = {};
    std::atomic<unsigned> next{0};
  };
  static Pool pools[max_devices];
  if (device < 0) device = current_device();
  if (device >= max_devices)
    throw ValueError("kiln::cuda::pooled_stream: device index " + std::to_string(device) + " exceeds kiln's limit of " +
                     std::to_string(max_devices) + " devices");
  Pool& p = pools[device];
  std::call_once(p.made, [&] {  // a throw leaves the flag unset: the next call tries again
    std::unique_ptr<Stream> made[per_device];
    for (auto& s : made) s = std::make_unique<Stream>(device);
    for (int k = 0; k < per_device; ++k) p.streams[k] = made[k].release();  // kept for the process's life
  });
  return *p.streams[p.next.fetch_add(1, std::memory_order_relaxed) % per_device];
}

/// Makes a stream current for a scope, then restores the previous one (torch.cuda.stream(s)).
class StreamGuard {
 public:
  /// `stream` becomes the current stream of `device` (< 0: the current device).
  explicit StreamGuard(cudaStream_t stream, int device = -1) : device_guard_(-1) { enter(stream, device); }
  /// s becomes current, and s's device the current device, like torch.cuda.stream(s).
  explicit StreamGuard(const Stream& s) : device_guard_(s.device()) { enter(s.get(), s.device()); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  ~StreamGuard() { detail::stream_slot(device_) = prev_; }

 private:
  void enter(cudaStream_t s, int device) {
    device_ = device < 0 ? current_device() : device;
    cudaStream_t& slot = detail::stream_slot(device_);
    prev_ = slot;
    slot = s;
  }
  DeviceGuard device_guard_;
  int device_ = 0;
  cudaStream_t prev_ = cudaStreamPerThread;
};

/// A point in a stream, for cross-stream waits and, made with Event(true), timing (torch.cuda.Event, and
/// its default: enable_timing false). Created on the current device at the first record().
/// Example:
///   kiln::cuda::Event start(true), stop(true);
///   start.record();  y = relu(x);  stop.record();
///   stop.synchronize();  float ms = start.elapsed_ms(stop);
class Event {
 public:
  Event() = default;  ///< no timing (torch's enable_timing=False): a cheaper event, for waits
  explicit Event(bool enable_timing) : timing_(enable_timing) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)), timing_(o.timing_) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (event_) (void)cudaEventDestroy(event_);
      event_ = std::exchange(o.event_, nullptr);
      timing_ = o.timing_;
    }
    return *this;
  }
  ~Event() {
    if (event_) (void)cudaEventDestroy(event_);
  }

  /// Records the event on `stream` (default: the current stream of the current device).
  void record(cudaStream_t stream) {
    if (!event_) KILN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    KILN_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  void record() { record(current_stream()); }
  void record(const Stream& s) {
    DeviceGuard g(s.device());
    record(s.get());
  }
  bool recorded() const noexcept { return event_ != nullptr; }
  /// Blocks until the recorded work has finished.
  void synchronize() const {
    require_recorded("synchronize");
    KILN_CUDA_CHECK(cudaEventSynchronize(event_));
  }
  /// True when the recorded work has finished (or nothing was recorded).
  bool query() const {
    if (!event_) return true;
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    KILN_CUDA_CHECK(e);
    return true;
  }
  /// Milliseconds from this event to `end` (both recorded with timing, end completed).
  float elapsed_ms(const Event& end) const {
    require_recorded("elapsed_ms");
    end.require_recorded("elapsed_ms");
    if (!timing_ || !end.timing_)
      throw ValueError("kiln::cuda::Event::elapsed_ms: both events need timing; construct them with Event(true)");
    float ms = 0.0f;
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
    return ms;
  }
  cudaEvent_t get() const noexcept { return event_; }

 private:
  void require_recorded(const char* what) const {
    if (!event_)
      throw ValueError(std::string("kiln::cuda::Event::") + what + ": the event was never recorded; call record() first");
  }
  cudaEvent_t event_ = nullptr;
  bool timing_ = false;
};

inline void Stream::wait(const Event& e) const {
  if (e.get()) KILN_CUDA_CHECK(cudaStreamWaitEvent(stream_, e.get(), 0));
}

}  // namespace kiln::cuda
