/// A caching allocator like PyTorch's: freed blocks are kept and reused; statistics; empty_cache().
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kiln/core/errors.hpp"

namespace kiln {

/// What an allocator holds. "allocated" is in tensors; "reserved" adds the cache.
struct MemoryStats {
  std::size_t allocated_bytes = 0;       ///< in use by live blocks (torch.cuda.memory_allocated)
  std::size_t reserved_bytes = 0;        ///< allocated + cached (torch.cuda.memory_reserved)
  std::size_t peak_allocated_bytes = 0;  ///< max of allocated since the last reset
  std::size_t peak_reserved_bytes = 0;   ///< max of reserved since the last reset
  std::uint64_t num_device_allocs = 0;   ///< calls into the underlying allocator (cudaMalloc, aligned_alloc)
  std::uint64_t num_device_frees = 0;    ///< calls that returned memory to it
  std::uint64_t num_requests = 0;        ///< allocate() calls
  std::uint64_t num_cache_hits = 0;      ///< requests served from the cache
};

/// "1.50 GiB"
inline std::string format_bytes(std::size_t b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, unit[u]);
  return buf;
}

/// The memory underneath a CachingAllocator: malloc-like functions that return nullptr when full.
struct RawAllocator {
  void* (*allocate)(std::size_t bytes, int device) = nullptr;  ///< nullptr when out of memory
  void (*deallocate)(void* p, int device) = nullptr;
  /// Free and total bytes of the device, if known (for the out-of-memory message); may be null.
  bool (*device_memory)(int device, std::size_t* free, std::size_t* total) = nullptr;
  const char* name = "cpu";  ///< "cpu", "cuda", "pinned"
};

/// Reuses freed blocks instead of returning them. Thread-safe. Sizes are rounded up (512 B below
/// 1 MiB; eighths of a power of two above), and a request takes the smallest cached block that fits
/// within 25% of its size. Blocks are stream-ordered on the device's current stream.
class CachingAllocator {
 public:
  CachingAllocator(RawAllocator raw, int device) : raw_(raw), device_(device) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` bytes (64-byte aligned on the CPU, 256 on CUDA); nullptr for 0.
  /// Throws OutOfMemoryError after releasing the cache and retrying.
  void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::size_t size = round_size(bytes);
    std::lock_guard lock(mutex_);
    ++stats_.num_requests;
    if (auto it = free_.lower_bound(size); it != free_.end() && it->first <= size + size / 4) {
      void* p = it->second;
      live_.emplace(p, it->first);
      stats_.allocated_bytes += it->first;
      free_.erase(it);
      ++stats_.num_cache_hits;
      update_peaks();
      return p;
    }
    void* p = nullptr;
    if (limit_ == 0 || stats_.reserved_bytes + size <= limit_) p = raw_.allocate(size, device_);
    if (p == nullptr) {  // release what is cached, then try once more
      release_cache_locked();
      if (limit_ == 0 || stats_.reserved_bytes + size <= limit_) p = raw_.allocate(size, device_);
    }
    if (p == nullptr) throw OutOfMemoryError(oom_message(bytes));
    ++stats_.num_device_allocs;
    live_.emplace(p, size);
    stats_.allocated_bytes += size;
    stats_.reserved_bytes += size;
    update_peaks();
    return p;
  }

  /// Returns a block to the cache. p must come from allocate() of this allocator.
  void deallocate(void* p) {
    if (p == nullptr) return;
    std::lock_guard lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: never free memory we did not hand out
    stats_.allocated_bytes -= it->second;
    free_.emplace(it->second, p);
    live_.erase(it);
  }

  /// Returns every cached (unused) block to the device, like torch.cuda.empty_cache().
  void empty_cache() {
    std::lock_guard lock(mutex_);
    release_cache_locked();
  }

  MemoryStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  /// Peaks restart from the current values (torch.cuda.reset_peak_memory_stats).
  void reset_peak_stats() {
    std::lock_guard lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }
  /// Caps reserved bytes (0 = no cap), like torch.cuda.set_per_process_memory_fraction.
  void set_limit(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    limit_ = bytes;
  }
  std::size_t limit() const {
    std::lock_guard lock(mutex_);
    return limit_;
  }
  int device() const { return device_; }
  const char* name() const { return raw_.name; }

  /// The size a request of `bytes` is rounded to.
  static std::size_t round_size(std::size_t bytes) {
    constexpr std::size_t small = 1u << 20;
    if (bytes <= small) return (bytes + 511) / 512 * 512;
    if (bytes > static_cast<std::size_t>(-1) / 2) return bytes;  // beyond any device: fail, never overflow
    std::size_t p = small;
    while (p * 2 < bytes) p *= 2;  // p < bytes <= 2p: round up to a multiple of p/8
    const std::size_t step = p / 8;
    return (bytes + step - 1) / step * step;
  }

 private:
  void update_peaks() {
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
    if (stats_.reserved_bytes > stats_.peak_reserved_bytes) stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }
  void release_cache_locked() {
    for (auto& [size, p] : free_) {
      raw_.deallocate(p, device_);
      stats_.reserved_bytes -= size;
      ++stats_.num_device_frees;
    }
    free_.clear();
  }
  std::string oom_message(std::size_t bytes) const {
    std::string m = std::string("kiln: out of memory on ") + raw_.name + ":" + std::to_string(device_) +
                    ": tried to allocate " + format_bytes(bytes) + "; " +
                    format_bytes(stats_.allocated_bytes) + " in use by tensors, " +
                    format_bytes(stats_.reserved_bytes - stats_.allocated_bytes) + " cached by kiln";
    if (limit_ != 0) m += ", limit " + format_bytes(limit_);
    std::size_t free = 0, total = 0;
    if (raw_.device_memory && raw_.device_memory(device_, &free, &total))
      m += ", device has " + format_bytes(free) + " free of " + format_bytes(total);
    m += ". Remedies: a smaller batch size; gradient accumulation over smaller micro-batches; mixed "
         "precision (kiln::MixedFp16 or kiln::MixedBf16); inference without gradients; freeing tensors "
         "you no longer need.";
    return m;
  }

  RawAllocator raw_;
  int device_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;     // cached blocks by size
  std::unordered_map<void*, std::size_t> live_;  // handed-out blocks and their sizes
  MemoryStats stats_{};
  std::size_t limit_ = 0;
};

}  // namespace kiln
