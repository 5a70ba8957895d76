/// A caching allocator like PyTorch's: freed blocks are kept and reused; statistics; empty_cache();
/// private pools for CUDA graph capture.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

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
  std::uint64_t num_alloc_retries = 0;   ///< device allocations retried after freeing the cache (torch's name)
  std::uint64_t num_ooms = 0;            ///< requests that threw OutOfMemoryError (torch's name)
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
  /// Optional (CUDA): the calling thread's current stream on `device`, as a key. A freed block is reused
  /// only by requests on the stream it was allocated on: that stream runs its kernels in order, so its
  /// later work cannot overtake a kernel still using the block (as PyTorch's allocator). Null: one stream.
  std::uintptr_t (*stream)(int device) = nullptr;
  /// Optional (CUDA): a marker of the work queued so far on `device`'s current stream (an event), and
  /// whether a marker has been reached (the marker is gone then). See CachingAllocator::record_use.
  void* (*record_marker)(int device) = nullptr;
  bool (*marker_reached)(void* marker) = nullptr;
  /// Optional (CUDA): waits for everything queued on `device`, before cached blocks are given back
  /// (their last kernels may still be running; cudaFree only "may" synchronise).
  void (*synchronize)(int device) = nullptr;
  /// Optional (pinned host memory, which has no device to synchronise): waits until a marker is reached.
  void (*wait_marker)(void* marker) = nullptr;
};

/// A private pool's name (CachingAllocator::begin_pool); 0 is none.
using PoolId = std::uint64_t;

/// Reuses freed blocks instead of returning them. Thread-safe. Sizes are rounded up (512 B below
/// 1 MiB; eighths of a power of two above), and a request takes the smallest cached block that fits
/// within 25% of its size. On CUDA a block is reused only on the stream it was allocated on (each
/// thread's default stream is its own); a block that another stream also used needs record_use(),
/// like torch's Tensor.record_stream (kiln's asynchronous copies from and to pinned memory do it),
/// unless that stream is the one it is freed on (a tensor handed to another thread and dropped there):
/// then it waits for the work queued there so far without being asked.
///
/// Private pools (for kiln::cuda::Graph, like the pools of torch.cuda.graph): between begin_pool() and
/// end_pool(), the thread that began the pool allocates from it, and every block that thread frees then
/// (its own, or one allocated before) goes back to the pool, not to the shared cache: a captured graph
/// replays into the same addresses, so no block it touched may be handed to anyone else while the graph
/// lives. Blocks of a pool freed after end_pool() go back to the pool too; release_pool() hands the
/// pool's free blocks to the shared cache, and its blocks still in use go there when they are freed.
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
    std::uintptr_t stream = raw_.stream ? raw_.stream(device_) : 0;
    std::lock_guard lock(mutex_);
    ++stats_.num_requests;
    if (!pending_.empty()) collect_pending_locked();
    Pool* pool = pool_of_this_thread();
    if (pool != nullptr) {
      // A capture's blocks belong to the stream the pool was begun on: its side stream starts after that
      // stream's queued work, and replays run there, so that stream's cached blocks serve the capture and
      // the pool's blocks serve that stream once the graph is released.
      stream = pool->home;
      if (void* p = take_cached(pool->free, stream, size)) return p;
    }
    if (void* p = take_cached(free_, stream, size)) {
      if (pool != nullptr) {  // a block of the shared cache joins the pool
        try {
          owner_[p] = capturing_;
        } catch (...) {
          untake_locked(p);
          throw;
        }
      }
      return p;
    }
    void* p = nullptr;
    if (within_limit(size)) p = raw_.allocate(size, device_);
    if (p == nullptr && pool == nullptr) {  // release what is cached, then try once more (never while
      release_cache_locked();               // capturing: freeing device memory would end the capture)
      ++stats_.num_alloc_retries;
      if (within_limit(size)) p = raw_.allocate(size, device_);
    }
    if (p == nullptr) {
      ++stats_.num_ooms;
      throw OutOfMemoryError(oom_message(bytes));
    }
    try {
      live_.emplace(p, Block{size, stream});
      if (pool != nullptr) owner_[p] = capturing_;
    } catch (...) {  // no memory for the bookkeeping: the block goes back, not lost
      live_.erase(p);
      raw_.deallocate(p, device_);
      throw;
    }
    ++stats_.num_device_allocs;
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
    const Block b = it->second;
    const std::size_t size = b.size;
    stats_.allocated_bytes -= size;
    live_.erase(it);
    try {
      if (b.stream != 0 && raw_.stream != nullptr) mark_other_stream_locked(p, b.stream);
      if (!markers_.empty()) {
        if (auto m = markers_.find(p); m != markers_.end()) {  // a stream may still use it: not before its markers
          if (drop_reached(m->second)) {
            markers_.erase(m);
          } else {
            // Freed during a capture: the capture's pool gets it when its uses are done, even after the
            // capture has ended (cache_locked no longer knows it was freed then).
            if (pool_of_this_thread() != nullptr) {
              auto o = owner_.find(p);
              if (o == owner_.end() || !pools_.contains(o->second)) owner_[p] = capturing_;
            }
            pending_.push_back({p, b});
            return;
          }
        }
      }
      cache_locked(p, b);
    } catch (...) {  // no host memory for the bookkeeping; this runs in destructors: it must not throw
      give_back_locked(p, size);
    }
  }

  /// The work queued so far on `device`'s current stream uses the block that holds p (an asynchronous
  /// copy from or to it, say): once freed, the block is not reused before that work is done. Does
  /// nothing for memory this allocator did not hand out, or without marker hooks (the CPU).
  void record_use(const void* p, int device) {
    if (p == nullptr || raw_.record_marker == nullptr || raw_.marker_reached == nullptr) return;
    std::lock_guard lock(mutex_);
    auto it = live_.upper_bound(const_cast<void*>(p));
    if (it == live_.begin()) return;
    --it;
    const auto* base = static_cast<const char*>(it->first);
    if (static_cast<const char*>(p) >= base + it->second.size) return;  // not inside a live block
    std::vector<void*>& m = markers_[it->first];
    drop_reached(m);  // a buffer used again and again keeps only its unfinished markers
    m.push_back(raw_.record_marker(device));
  }

  /// Starts a private pool: until end_pool(), this thread's allocations come from it and the blocks this
  /// thread frees go to it. One pool at a time per allocator. Returns the pool's id for release_pool().
  PoolId begin_pool() {
    std::lock_guard lock(mutex_);
    if (capturing_ != 0)
      throw ValueError(std::string("kiln: ") + raw_.name + ":" + std::to_string(device_) +
                       ": a private pool is already active (one graph capture at a time per device)");
    capturing_ = ++last_pool_;
    capture_thread_ = std::this_thread::get_id();
    pools_[capturing_].home = raw_.stream ? raw_.stream(device_) : 0;
    return capturing_;
  }
  /// Ends the active pool's routing; its blocks stay reserved for it until release_pool().
  void end_pool() {
    std::lock_guard lock(mutex_);
    capturing_ = 0;
  }
  /// Gives a pool's free blocks to the shared cache; its blocks in use follow when they are freed.
  void release_pool(PoolId id) {
    std::lock_guard lock(mutex_);
    if (id == capturing_) capturing_ = 0;
    auto pool = pools_.find(id);
    if (pool == pools_.end()) return;
    for (auto& [key, p] : pool->second.free) {
      owner_.erase(p);
      free_.emplace(key, p);
    }
    pools_.erase(pool);
  }
  /// Bytes a pool holds, in use and free (0 once released).
  std::size_t pool_bytes(PoolId id) const {
    std::lock_guard lock(mutex_);
    if (!pools_.contains(id)) return 0;
    std::size_t n = 0;
    for (const auto& [p, owner] : owner_)
      if (owner == id) {
        if (auto l = live_.find(p); l != live_.end()) n += l->second.size;
      }
    for (const auto& [key, p] : pools_.at(id).free) n += key.second;
    return n;
  }

  /// Returns every cached (unused) block to the device, like torch.cuda.empty_cache(). Blocks kept for
  /// a private pool (a captured graph), blocks a stream may still use (record_use) and, while a graph
  /// is being captured, every block stay (freeing device memory would end the capture).
  void empty_cache() {
    std::lock_guard lock(mutex_);
    release_cache_locked();
  }

  MemoryStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  /// Bytes of the shared cache: what empty_cache() (or an out-of-memory retry) can give back now.
  std::size_t cached_bytes() const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [key, p] : free_) n += key.second;
    return n;
  }
  /// Peaks restart from the current values (torch.cuda.reset_peak_memory_stats).
  void reset_peak_stats() {
    std::lock_guard lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }
  /// Caps reserved bytes (std::nullopt: no cap, the default; 0: nothing more can be reserved), like
  /// torch.cuda.set_per_process_memory_fraction.
  void set_limit(std::optional<std::size_t> bytes) {
    std::lock_guard lock(mutex_);
    limit_ = bytes;
  }
  std::optional<std::size_t> limit() const {
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
  using Key = std::pair<std::uintptr_t, std::size_t>;  // (stream, size)
  using Cache = std::multimap<Key, void*>;             // cached blocks by stream, then size
  struct Block {
    std::size_t size;
    std::uintptr_t stream;  // the stream it was allocated on (0: the only one)
  };
  struct Pending {
    void* p;
    Block block;
  };
  struct Pool {
    Cache free;                // the pool's cached blocks
    std::uintptr_t home = 0;   // the stream begin_pool() was called on
  };
  /// The active pool when the calling thread is the one that began it; null otherwise.
  Pool* pool_of_this_thread() {
    if (capturing_ == 0 || std::this_thread::get_id() != capture_thread_) return nullptr;
    return &pools_[capturing_];
  }
  /// The smallest block of `cache` on `stream` that fits `size` within 25 %, now live; null when none.
  void* take_cached(Cache& cache, std::uintptr_t stream, std::size_t size) {
    auto it = cache.lower_bound(Key{stream, size});
    if (it == cache.end() || it->first.first != stream || it->first.second > size + size / 4) return nullptr;
    void* p = it->second;
    live_.emplace(p, Block{it->first.second, stream});
    stats_.allocated_bytes += it->first.second;
    cache.erase(it);
    ++stats_.num_cache_hits;
    update_peaks();
    return p;
  }
  /// deallocate's last resort: the block goes back to the device once nothing uses it, or, while a graph
  /// is captured (no cudaFree then), stays reserved and unused.
  void give_back_locked(void* p, std::size_t size) noexcept {
    owner_.erase(p);
    if (capturing_ != 0) {
      markers_.erase(p);
      return;
    }
    if (raw_.synchronize != nullptr) raw_.synchronize(device_);
    if (const auto m = markers_.find(p); m != markers_.end()) {
      for (void* marker : m->second) {
        if (raw_.synchronize == nullptr && raw_.wait_marker != nullptr) raw_.wait_marker(marker);
        (void)raw_.marker_reached(marker);  // (destroys it)
      }
      markers_.erase(m);
    }
    raw_.deallocate(p, device_);
    stats_.reserved_bytes -= size;
    ++stats_.num_device_frees;
  }
  /// Undoes take_cached (the block goes back to the shared cache).
  void untake_locked(void* p) {
    const auto l = live_.find(p);
    const Block b = l->second;
    live_.erase(l);
    stats_.allocated_bytes -= b.size;
    --stats_.num_cache_hits;
    free_.emplace(Key{b.stream, b.size}, p);
  }
  /// A block freed on another stream than its own (the calling thread's default stream, when another
  /// thread allocated it) may still be in use by the work queued there: it waits for a marker of that
  /// work before its own stream gets it again, as a torch user's record_stream would make it (torch's
  /// threads share one default stream; kiln's each have their own). Not during this thread's capture
  /// (the pool keeps the block; a marker there would be a node of the graph). If no marker can be
  /// recorded, the device is synchronised instead.
  void mark_other_stream_locked(void* p, std::uintptr_t own) {
    if (raw_.record_marker == nullptr || raw_.marker_reached == nullptr || pool_of_this_thread() != nullptr)
      return;
    if (raw_.stream(device_) == own) return;
    try {
      std::vector<void*>& m = markers_[p];
      m.reserve(m.size() + 1);
      m.push_back(raw_.record_marker(device_));
    } catch (...) {
      if (const auto m = markers_.find(p); m != markers_.end() && m->second.empty()) markers_.erase(m);
      if (raw_.synchronize != nullptr) raw_.synchronize(device_);
    }
  }
  void update_peaks() {
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
    if (stats_.reserved_bytes > stats_.peak_reserved_bytes) stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }
  /// Drops the reached markers of a list; true when none is left.
  bool drop_reached(std::vector<void*>& markers) {
    std::erase_if(markers, [&](void* m) { return raw_.marker_reached(m); });
    return markers.empty();
  }
  /// Freed blocks whose markers have all been reached join the cache.
  void collect_pending_locked() {
    std::erase_if(pending_, [&](const Pending& q) {
      auto m = markers_.find(q.p);
      if (m != markers_.end()) {
        if (!drop_reached(m->second)) return false;
        markers_.erase(m);
      }
      cache_locked(q.p, q.block);
      return true;
    });
  }
  /// A freed block joins its pool's cache or the shared one.
  void cache_locked(void* p, const Block& b) {
    const std::size_t size = b.size;
    if (!owner_.empty() || capturing_ != 0) {  // only while private pools exist: is it a pool's block?
      PoolId id = 0;
      if (auto o = owner_.find(p); o != owner_.end()) {
        if (pools_.contains(o->second)) id = o->second;
        else owner_.erase(o);  // its pool was released: the shared cache's, unless a capture takes it
      }
      // Freed during a capture (allocated before it, or by a graph since released): a replay may read
      // it, so the capture's pool keeps it.
      if (id == 0 && pool_of_this_thread() != nullptr) id = owner_[p] = capturing_;
      if (id != 0) {
        pools_.at(id).free.emplace(Key{b.stream, size}, p);
        return;
      }
    }
    free_.emplace(Key{b.stream, size}, p);
  }

  /// Frees every cached block, and (as torch's retry and empty_cache, which wait for outstanding
  /// events) every freed block still waiting on a recorded use, once the device has finished with it.
  void release_cache_locked() {
    if (capturing_ != 0) return;  // a cudaFree now would end the capture (and synchronise the device)
    if (!pending_.empty()) collect_pending_locked();
    if ((!free_.empty() || !pending_.empty()) && raw_.synchronize != nullptr) raw_.synchronize(device_);
    if (!pending_.empty() && raw_.wait_marker != nullptr)
      for (const Pending& q : pending_)
        if (const auto m = markers_.find(q.p); m != markers_.end())
          for (void* marker : m->second) raw_.wait_marker(marker);
    if (!pending_.empty()) collect_pending_locked();
    for (auto& [key, p] : free_) {
      raw_.deallocate(p, device_);
      stats_.reserved_bytes -= key.second;
      ++stats_.num_device_frees;
    }
    free_.clear();
  }
  // Whether reserving `size` more bytes stays within the limit (written so that nothing overflows).
  bool within_limit(std::size_t size) const {
    return !limit_ || (stats_.reserved_bytes <= *limit_ && size <= *limit_ - stats_.reserved_bytes);
  }
  std::string oom_message(std::size_t bytes) const {
    std::string m = std::string("kiln: out of memory on ") + raw_.name + ":" + std::to_string(device_) +
                    ": tried to allocate " + format_bytes(bytes) + "; " +
                    format_bytes(stats_.allocated_bytes) + " in use by tensors, " +
                    format_bytes(stats_.reserved_bytes - stats_.allocated_bytes) + " cached by kiln";
    if (limit_) m += ", limit " + format_bytes(*limit_);
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
  Cache free_;                                   // cached blocks
  std::map<void*, Block> live_;                  // handed-out blocks (ordered: record_use finds the block of a pointer)
  std::vector<Pending> pending_;                 // freed, but a stream may still use them (record_use)
  std::unordered_map<void*, std::vector<void*>> markers_;  // blocks' unreached markers
  MemoryStats stats_{};
  std::optional<std::size_t> limit_;             // reserved bytes allowed (none: no cap)
  std::unordered_map<PoolId, Pool> pools_;       // private pools not yet released
  std::unordered_map<void*, PoolId> owner_;      // blocks that belong to a pool, in use or free
  PoolId capturing_ = 0, last_pool_ = 0;         // the active pool (0: none)
  std::thread::id capture_thread_;
};

}  // namespace kiln
