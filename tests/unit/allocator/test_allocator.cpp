// The caching allocator: size rounding, reuse of freed blocks (cache hits, no new device allocation),
// statistics, empty_cache, and the out-of-memory message; through kiln::caching_allocator<D>() so the
// same checks run on the GPU. A private allocator over a counting raw allocator checks the policy.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::CachingAllocator;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

/// Restores the allocator's limit when the test ends (also on failure).
struct LimitGuard {
  CachingAllocator& a;
  std::optional<std::size_t> old = a.limit();
  ~LimitGuard() { a.set_limit(old); }
};

// A raw allocator that counts calls and can be told to fail (a full device).
struct CountingRaw {
  static inline int allocs = 0, frees = 0;
  static inline bool full = false;
  static void* allocate(std::size_t bytes, int) {
    if (full) return nullptr;
    ++allocs;
    return std::malloc(bytes);
  }
  static void deallocate(void* p, int) {
    ++frees;
    std::free(p);
  }
  static kiln::RawAllocator raw() { return {&allocate, &deallocate, nullptr, "test"}; }
  static void reset() { allocs = frees = 0, full = false; }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(allocator)

BOOST_AUTO_TEST_CASE(round_size_uses_512_byte_steps_then_eighths_of_a_power_of_two) {
  BOOST_TEST(CachingAllocator::round_size(0) == 0u);
  BOOST_TEST(CachingAllocator::round_size(1) == 512u);
  BOOST_TEST(CachingAllocator::round_size(512) == 512u);
  BOOST_TEST(CachingAllocator::round_size(513) == 1024u);
  BOOST_TEST(CachingAllocator::round_size(1000 * KiB + 1) == 1000 * KiB + 512);
  BOOST_TEST(CachingAllocator::round_size(MiB) == MiB);
  BOOST_TEST(CachingAllocator::round_size(MiB + 1) == MiB + 128 * KiB);  // (1 MiB, 2 MiB]: steps of 128 KiB
  BOOST_TEST(CachingAllocator::round_size(2 * MiB) == 2 * MiB);
  BOOST_TEST(CachingAllocator::round_size(3 * MiB) == 3 * MiB);  // (2 MiB, 4 MiB]: 256 KiB
  BOOST_TEST(CachingAllocator::round_size(3 * MiB + 1) == 3 * MiB + 256 * KiB);
  BOOST_TEST(CachingAllocator::round_size(5 * MiB + 1) == 5 * MiB + 512 * KiB);  // (4 MiB, 8 MiB]: 512 KiB
  BOOST_TEST(CachingAllocator::round_size(1000 * MiB) == 1024 * MiB);            // (512 MiB, 1 GiB]: 64 MiB
  for (std::size_t b : {1u, 700u, 4097u, 1048577u, 3000000u, 123456789u}) {
    const std::size_t r = CachingAllocator::round_size(b);
    BOOST_TEST(r >= b);
    BOOST_TEST(r <= b + b / 8 + 512);                  // never more than 12.5% (+ one small step) of waste
    BOOST_TEST(CachingAllocator::round_size(r) == r);  // idempotent
  }
}

BOOST_AUTO_TEST_CASE(format_bytes_prints_binary_units) {
  BOOST_TEST(kiln::format_bytes(0) == "0 B");
  BOOST_TEST(kiln::format_bytes(512) == "512 B");
  BOOST_TEST(kiln::format_bytes(1536) == "1.50 KiB");
  BOOST_TEST(kiln::format_bytes(3 * MiB) == "3.00 MiB");
  BOOST_TEST(kiln::format_bytes(std::size_t(3) << 29) == "1.50 GiB");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(freed_block_is_reused_without_a_device_allocation, D, kiln::test::devices) {
  auto& a = kiln::caching_allocator<D>();
  a.empty_cache();
  const auto s0 = a.stats();
  void* p = a.allocate(777 * KiB);
  BOOST_TEST(p != nullptr);
  const auto s1 = a.stats();
  BOOST_TEST(s1.num_device_allocs == s0.num_device_allocs + 1);
  BOOST_TEST(s1.num_requests == s0.num_requests + 1);
  BOOST_TEST(s1.allocated_bytes == s0.allocated_bytes + 777 * KiB);
  a.deallocate(p);
  const auto s2 = a.stats();
  BOOST_TEST(s2.allocated_bytes == s0.allocated_bytes);
  BOOST_TEST(s2.reserved_bytes == s1.reserved_bytes, "a freed block stays reserved (cached)");

  void* q = a.allocate(700 * KiB);  // fits in the cached 777 KiB block (within 25%)
  const auto s3 = a.stats();
  BOOST_TEST(q == p);
  BOOST_TEST(s3.num_cache_hits == s2.num_cache_hits + 1);
  BOOST_TEST(s3.num_device_allocs == s2.num_device_allocs, "no new device allocation");
  BOOST_TEST(s3.allocated_bytes == s0.allocated_bytes + 777 * KiB, "the whole cached block is in use");
  a.deallocate(q);

  void* r = a.allocate(400 * KiB);  // the cached block is more than 25% too large: a new one
  BOOST_TEST(r != p);
  BOOST_TEST(a.stats().num_device_allocs == s2.num_device_allocs + 1);
  a.deallocate(r);
  a.empty_cache();
  BOOST_TEST(a.stats().reserved_bytes == s0.reserved_bytes);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(stats_track_allocated_reserved_and_peaks, D, kiln::test::devices) {
  auto& a = kiln::caching_allocator<D>();
  a.empty_cache();
  a.reset_peak_stats();
  const auto s0 = a.stats();
  BOOST_TEST(s0.peak_allocated_bytes == s0.allocated_bytes);
  BOOST_TEST(s0.peak_reserved_bytes == s0.reserved_bytes);
  BOOST_TEST(s0.reserved_bytes >= s0.allocated_bytes);

  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(MiB + 1);  // rounded to 1 MiB + 128 KiB
  const std::size_t both = 3 * MiB + MiB + 128 * KiB;
  BOOST_TEST(a.stats().allocated_bytes == s0.allocated_bytes + both);
  BOOST_TEST(a.stats().reserved_bytes == s0.reserved_bytes + both);
  a.deallocate(p);
  const auto s1 = a.stats();
  BOOST_TEST(s1.allocated_bytes == s0.allocated_bytes + MiB + 128 * KiB);
  BOOST_TEST(s1.reserved_bytes == s0.reserved_bytes + both);
  BOOST_TEST(s1.peak_allocated_bytes == s0.allocated_bytes + both);
  BOOST_TEST(s1.peak_reserved_bytes == s0.reserved_bytes + both);
  BOOST_TEST(kiln::memory_stats<D>().allocated_bytes == s1.allocated_bytes,
             "memory_stats<D>() is the same view");

  a.reset_peak_stats();  // peaks restart from the current values
  BOOST_TEST(a.stats().peak_allocated_bytes == s1.allocated_bytes);
  BOOST_TEST(a.stats().peak_reserved_bytes == s1.reserved_bytes);

  a.empty_cache();  // returns the cached 3 MiB, keeps the live block
  const auto s2 = a.stats();
  BOOST_TEST(s2.reserved_bytes == s0.reserved_bytes + MiB + 128 * KiB);
  BOOST_TEST(s2.num_device_frees == s1.num_device_frees + 1);
  BOOST_TEST(s2.peak_reserved_bytes == s1.reserved_bytes, "empty_cache does not lower the peak");
  a.deallocate(q);
  kiln::empty_cache<D>();  // the free-function spelling
  BOOST_TEST(a.stats().reserved_bytes == s0.reserved_bytes);
  BOOST_TEST(a.stats().allocated_bytes == s0.allocated_bytes);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(tensors_release_memory_to_the_cache_when_destroyed, D, kiln::test::devices) {
  auto& a = kiln::caching_allocator<D>();
  a.empty_cache();
  const auto s0 = a.stats();
  const std::size_t block = CachingAllocator::round_size(1001 * 257 * sizeof(float));
  {
    Tensor<float, Shape<dyn, 257>, D> t(1001);
    BOOST_TEST(a.stats().allocated_bytes == s0.allocated_bytes + block);
    auto shared = t;  // a copy shares the block
    auto view = t.slice(1, 3);
    BOOST_TEST(a.stats().allocated_bytes == s0.allocated_bytes + block);
  }
  const auto s1 = a.stats();
  BOOST_TEST(s1.allocated_bytes == s0.allocated_bytes, "freed when the last tensor using it goes away");
  BOOST_TEST(s1.reserved_bytes == s0.reserved_bytes + block, "kept in the cache");
  {
    Tensor<float, Shape<dyn, 257>, D> again(1001);  // same size: served from the cache
    BOOST_TEST(a.stats().num_cache_hits == s1.num_cache_hits + 1);
    BOOST_TEST(a.stats().num_device_allocs == s1.num_device_allocs);
  }
  a.empty_cache();
  BOOST_TEST(a.stats().reserved_bytes == s0.reserved_bytes);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(limit_gives_an_out_of_memory_error_that_says_what_to_do, D,
                              kiln::test::devices) {
  auto& a = kiln::caching_allocator<D>();
  a.empty_cache();
  LimitGuard guard{a};
  void* cached = a.allocate(2 * MiB);
  a.deallocate(cached);  // 2 MiB cached: even without them, 3 MiB more would pass the limit
  a.set_limit(a.stats().reserved_bytes + 512 * KiB);
  BOOST_TEST(a.limit().value_or(SIZE_MAX) == a.stats().reserved_bytes + 512 * KiB);

  std::string message;
  try {
    Tensor<float, Shape<dyn>, D> big(static_cast<kiln::index_t>(3 * MiB / sizeof(float)));  // 3 MiB
    BOOST_ERROR("allocating past the limit must throw");
  } catch (const kiln::OutOfMemoryError& e) {
    message = e.what();
  }
  BOOST_TEST_MESSAGE("out-of-memory message: " << message);
  for (const char* part : {"out of memory", "tried to allocate 3.00 MiB", "in use", "cached", "limit",
                           "batch size", "gradient accumulation", "mixed precision"})
    BOOST_TEST(message.find(part) != std::string::npos, "the message mentions \"" << part << "\"");
  BOOST_TEST(a.stats().reserved_bytes == a.stats().allocated_bytes,
             "the cache was released before giving up");

  a.set_limit(std::nullopt);  // no cap: the same request succeeds
  Tensor<float, Shape<dyn>, D> fine(static_cast<kiln::index_t>(3 * MiB / sizeof(float)));
  BOOST_TEST(fine.numel() == static_cast<kiln::index_t>(3 * MiB / sizeof(float)));

  a.empty_cache();
  a.set_limit(std::size_t{0});  // a cap of nothing (torch's fraction 0): a new block is refused
  BOOST_TEST(a.limit().value_or(SIZE_MAX) == std::size_t{0});
  BOOST_CHECK_THROW((Tensor<float, Shape<dyn>, D>(16)), kiln::OutOfMemoryError);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(request_beyond_any_device_is_an_out_of_memory_error, D, kiln::test::devices) {
  const std::size_t huge = static_cast<std::size_t>(-1);
  BOOST_TEST(CachingAllocator::round_size(huge) == huge, "no overflow, no endless rounding loop");
  BOOST_TEST(CachingAllocator::round_size(huge / 2 + 1) >= huge / 2 + 1);
  auto& a = kiln::caching_allocator<D>();
  const auto before = a.stats();
  BOOST_CHECK_EXCEPTION(a.allocate(huge), kiln::OutOfMemoryError,
                        kt::message_contains({"tried to allocate", "TiB"}));
  BOOST_CHECK_THROW((Tensor<float, Shape<dyn>, D>(kiln::index_t(1) << 60)), kiln::OutOfMemoryError);  // 4 EiB
  BOOST_TEST(a.stats().allocated_bytes == before.allocated_bytes);
}

BOOST_AUTO_TEST_CASE(cache_is_released_and_retried_when_the_device_is_full) {
  CountingRaw::reset();
  {
    CachingAllocator a(CountingRaw::raw(), 0);
    BOOST_TEST(a.allocate(0) == nullptr);
    BOOST_TEST(a.stats().num_requests == 0u);
    void* p = a.allocate(4 * MiB);
    void* q = a.allocate(100);
    a.deallocate(p);
    a.deallocate(q);
    BOOST_TEST(CountingRaw::allocs == 2);
    BOOST_TEST(a.stats().reserved_bytes == 4 * MiB + 512);

    // A request that no cached block fits; the "device" refuses until the cache is returned to it.
    CountingRaw::full = true;
    BOOST_CHECK_EXCEPTION(a.allocate(MiB), kiln::OutOfMemoryError,
                          kt::message_contains({"out of memory on test:0", "tried to allocate 1.00 MiB",
                                                "0 B in use", "0 B cached"}));
    BOOST_TEST(CountingRaw::frees == 2, "both cached blocks were released before giving up");
    BOOST_TEST(a.stats().reserved_bytes == 0u);
    BOOST_TEST(a.stats().num_device_frees == 2u);
    BOOST_TEST(a.stats().num_alloc_retries == 1u);  // torch's memory_stats names
    BOOST_TEST(a.stats().num_ooms == 1u);

    CountingRaw::full = false;
    void* r = a.allocate(MiB);
    BOOST_TEST(a.stats().num_ooms == 1u);
    BOOST_TEST(r != nullptr);
    a.deallocate(r);

    int local = 0;
    a.deallocate(&local);  // not from this allocator: ignored, never freed
    BOOST_TEST(CountingRaw::frees == 2);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == 3);
  }
  CountingRaw::reset();
}

BOOST_AUTO_TEST_CASE(smallest_fitting_cached_block_is_taken) {
  CountingRaw::reset();
  {
    CachingAllocator a(CountingRaw::raw(), 0);
    void* big = a.allocate(1200 * KiB);  // rounded: 1 MiB + 256 KiB
    void* mid = a.allocate(1100 * KiB);  // rounded: 1 MiB + 128 KiB
    a.deallocate(big);
    a.deallocate(mid);
    void* p = a.allocate(MiB + 1);  // 1 MiB + 128 KiB: both fit within 25%, the smaller one is taken
    BOOST_TEST(p == mid);
    void* q = a.allocate(MiB + 1);
    BOOST_TEST(q == big);
    BOOST_TEST(a.stats().num_cache_hits == 2u);
    BOOST_TEST(CountingRaw::allocs == 2);
    a.deallocate(p);
    a.deallocate(q);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == 2);
  }
  CountingRaw::reset();
}

BOOST_AUTO_TEST_CASE(concurrent_allocations_keep_consistent_statistics) {
  CountingRaw::reset();
  {
    CachingAllocator a(CountingRaw::raw(), 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&a, t] {
        std::vector<void*> live;
        for (int i = 0; i < 2000; ++i) {
          live.push_back(a.allocate(static_cast<std::size_t>(512 * (1 + (i * 7 + t) % 13))));
          if (live.size() > 5) {
            a.deallocate(live.front());
            live.erase(live.begin());
          }
        }
        for (void* p : live) a.deallocate(p);
      });
    for (auto& th : threads) th.join();
    const auto s = a.stats();
    BOOST_TEST(s.allocated_bytes == 0u);
    BOOST_TEST(s.num_requests == 8000u);
    BOOST_TEST(s.num_cache_hits + s.num_device_allocs == s.num_requests);
    BOOST_TEST(s.num_device_allocs == static_cast<std::uint64_t>(CountingRaw::allocs));
    a.empty_cache();
    BOOST_TEST(a.stats().reserved_bytes == 0u);
    BOOST_TEST(CountingRaw::frees == CountingRaw::allocs);
  }
  CountingRaw::reset();
}

// Private pools (kiln::cuda::Graph captures into one): what the capturing thread frees stays in the
// pool, other threads keep the shared cache, release_pool() hands the blocks back.
BOOST_AUTO_TEST_CASE(a_pool_keeps_what_the_capturing_thread_frees_away_from_the_shared_cache) {
  CountingRaw::reset();
  {
    CachingAllocator a(CountingRaw::raw(), 0);
    void* before = a.allocate(4 * KiB);  // allocated before the capture, freed during it
    const kiln::PoolId pool = a.begin_pool();
    BOOST_TEST(pool != 0u);
    void* tmp = a.allocate(2 * KiB);
    a.deallocate(tmp);
    void* again = a.allocate(2 * KiB);  // the pool's own free block is reused within the capture
    BOOST_TEST(again == tmp);
    a.deallocate(before);  // the graph may read it on a replay: the pool keeps it
    BOOST_TEST(a.pool_bytes(pool) == 6 * KiB);
    a.end_pool();

    void* outside = a.allocate(4 * KiB);  // after the capture: the shared cache is empty, so a new block
    BOOST_TEST(outside != before);
    BOOST_TEST(CountingRaw::allocs == 3);
    a.deallocate(again);  // a pool block freed after the capture returns to the pool
    void* small = a.allocate(2 * KiB);
    BOOST_TEST(small != tmp);
    BOOST_TEST(CountingRaw::allocs == 4);

    a.empty_cache();  // the pool's blocks are not the cache's to free
    BOOST_TEST(CountingRaw::frees == 0);
    BOOST_TEST(a.stats().reserved_bytes == 12 * KiB);

    a.release_pool(pool);
    BOOST_TEST(a.pool_bytes(pool) == 0u);
    void* reused = a.allocate(4 * KiB);  // the released blocks serve everyone again
    BOOST_TEST(reused == before);
    BOOST_TEST(CountingRaw::allocs == 4);
    for (void* p : {outside, small, reused}) a.deallocate(p);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == 4);
    BOOST_TEST(a.stats().reserved_bytes == 0u);
  }
  CountingRaw::reset();
}

BOOST_AUTO_TEST_CASE(a_pool_takes_shared_cached_blocks_and_keeps_blocks_in_use_until_they_are_freed) {
  CountingRaw::reset();
  {
    CachingAllocator a(CountingRaw::raw(), 0);
    a.deallocate(a.allocate(8 * KiB));  // one block in the shared cache
    const kiln::PoolId pool = a.begin_pool();
    void* out = a.allocate(8 * KiB);  // the graph's output: taken from the shared cache into the pool
    BOOST_TEST(CountingRaw::allocs == 1);
    void* other = nullptr;
    std::thread([&] { other = a.allocate(8 * KiB); }).join();  // another thread is not capturing
    BOOST_TEST(other != out);
    BOOST_TEST(a.pool_bytes(pool) == 8 * KiB);
    a.end_pool();
    const kiln::PoolId next = a.begin_pool();  // ended: a new pool may start
    BOOST_TEST(next != pool);
    a.end_pool();
    a.release_pool(next);

    a.release_pool(pool);  // the output is still in use: it leaves the pool when it is freed
    a.deallocate(out);
    BOOST_TEST(a.allocate(8 * KiB) == out);
    a.deallocate(out);
    a.deallocate(other);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == CountingRaw::allocs);
  }
  CountingRaw::reset();
}

BOOST_AUTO_TEST_CASE(one_pool_at_a_time_and_no_cache_release_while_capturing) {
  CountingRaw::reset();
  {
    CachingAllocator a(CountingRaw::raw(), 0);
    a.deallocate(a.allocate(64 * KiB));  // cached; a full device would normally free it and retry
    const kiln::PoolId pool = a.begin_pool();
    BOOST_CHECK_THROW((void)a.begin_pool(), kiln::ValueError);
    CountingRaw::full = true;
    BOOST_CHECK_THROW((void)a.allocate(MiB), kiln::OutOfMemoryError);  // freeing would end a capture
    BOOST_TEST(CountingRaw::frees == 0);
    BOOST_TEST(a.stats().num_alloc_retries == 0u);  // nothing was freed to retry with
    BOOST_TEST(a.stats().num_ooms == 1u);
    CountingRaw::full = false;
    a.empty_cache();  // also asked for: nothing is freed until the capture ends
    BOOST_TEST(CountingRaw::frees == 0);
    BOOST_TEST(a.stats().reserved_bytes == 64 * KiB);
    a.end_pool();
    a.release_pool(pool);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == 1);
  }
  CountingRaw::reset();
}

BOOST_AUTO_TEST_CASE(a_released_graphs_block_freed_during_a_new_capture_stays_in_the_new_pool) {
  // A graph's output outlives the graph (release_pool) and is freed while the next graph is being
  // captured, which may have read it: the new pool keeps it, not the shared cache.
  CountingRaw::reset();
  {
    CachingAllocator a(CountingRaw::raw(), 0);
    const kiln::PoolId first = a.begin_pool();
    void* out = a.allocate(8 * KiB);
    a.end_pool();
    a.release_pool(first);
    const kiln::PoolId second = a.begin_pool();
    a.deallocate(out);
    BOOST_TEST(a.pool_bytes(second) == 8 * KiB);
    a.end_pool();
    void* eager = a.allocate(8 * KiB);  // not the block the second graph may read on a replay
    BOOST_TEST(eager != out);
    a.release_pool(second);
    a.deallocate(eager);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == CountingRaw::allocs);
  }
  CountingRaw::reset();
}

namespace {
// Streams and stream markers as a CUDA allocator sees them, simulated: the current stream is a number
// the test sets; a marker is reached once the test says its stream has got that far.
struct FakeStreams {
  static inline std::uintptr_t current = 1;
  static inline int recorded = 0;
  static inline std::vector<bool> reached;  // by marker number - 1
  static inline bool fail_record = false;     // record() throws, as a failed cudaEventRecord
  static inline int synchronized = 0;         // synchronize() calls
  static std::uintptr_t stream(int) { return current; }
  static void* record(int) {
    if (fail_record) throw kiln::BackendError("kiln: CUDA error: cudaEventRecord (test)");
    reached.push_back(false);
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(++recorded));
  }
  static bool is_reached(void* m) { return reached.at(reinterpret_cast<std::uintptr_t>(m) - 1); }
  static kiln::RawAllocator raw() {
    kiln::RawAllocator r = CountingRaw::raw();
    r.stream = &stream;
    r.record_marker = &record;
    r.marker_reached = &is_reached;
    r.synchronize = [](int) { ++synchronized; };
    return r;
  }
  static void reset() {
    current = 1, recorded = 0, synchronized = 0;
    fail_record = false;
    reached.clear();
    CountingRaw::reset();
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(a_freed_block_is_reused_only_on_the_stream_it_was_allocated_on) {
  FakeStreams::reset();
  {
    CachingAllocator a(FakeStreams::raw(), 0);
    void* p = a.allocate(64 * KiB);  // stream 1
    a.deallocate(p);
    FakeStreams::current = 2;  // another thread's stream: stream 1 may still be running a kernel on p
    void* q = a.allocate(64 * KiB);
    BOOST_TEST(q != p);
    BOOST_TEST(CountingRaw::allocs == 2);
    FakeStreams::current = 1;  // stream 1's own later work runs after that kernel: p is free for it
    void* r = a.allocate(64 * KiB);
    BOOST_TEST(r == p);
    BOOST_TEST(CountingRaw::allocs == 2);
    a.deallocate(r);
    FakeStreams::current = 2;
    a.deallocate(q);
    BOOST_TEST(FakeStreams::recorded == 0);  // each freed on its own stream: nothing to wait for
    CountingRaw::full = true;  // a full device: the other stream's cached blocks are freed, then retried
    FakeStreams::current = 3;
    BOOST_CHECK_THROW((void)a.allocate(64 * KiB), kiln::OutOfMemoryError);
    BOOST_TEST(CountingRaw::frees == 2);
  }
  FakeStreams::reset();
}

BOOST_AUTO_TEST_CASE(a_block_freed_on_another_stream_waits_for_the_work_queued_there) {
  // A tensor made on one thread (stream 1) is used and dropped on another (stream 2, that thread's
  // default stream): stream 2 may still be reading it when stream 1 asks for a block again.
  FakeStreams::reset();
  {
    CachingAllocator a(FakeStreams::raw(), 0);
    void* p = a.allocate(64 * KiB);
    FakeStreams::current = 2;
    a.deallocate(p);
    BOOST_TEST(FakeStreams::recorded == 1);  // a marker of stream 2's work so far
    FakeStreams::current = 1;
    void* q = a.allocate(64 * KiB);
    BOOST_TEST(q != p);  // stream 2 has not got there yet
    FakeStreams::reached[0] = true;
    void* r = a.allocate(64 * KiB);
    BOOST_TEST(r == p);  // it has: p is stream 1's again
    BOOST_TEST(CountingRaw::allocs == 2);
    // If no marker can be recorded, the device is synchronised instead and the block is cached at once.
    FakeStreams::fail_record = true;
    FakeStreams::current = 2;
    a.deallocate(r);
    BOOST_TEST(FakeStreams::synchronized == 1);
    FakeStreams::fail_record = false;
    FakeStreams::current = 1;
    BOOST_TEST(a.allocate(64 * KiB) == p);
    a.deallocate(p);
    a.deallocate(q);
    BOOST_TEST(FakeStreams::recorded == 1);  // freed on their own stream
    // During a capture the capturing thread's frees go to the pool without a marker (it would be a node
    // of the graph): the capture's side stream is ordered after the stream the pool was begun on.
    const kiln::PoolId pool = a.begin_pool();
    void* in_capture = a.allocate(64 * KiB);
    FakeStreams::current = 7;
    a.deallocate(in_capture);
    BOOST_TEST(FakeStreams::recorded == 1);
    a.end_pool();
    a.release_pool(pool);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == CountingRaw::allocs);
  }
  FakeStreams::reset();
}

BOOST_AUTO_TEST_CASE(a_capture_on_a_side_stream_uses_and_returns_blocks_of_the_stream_it_began_on) {
  // kiln::cuda::Graph begins the pool on the caller's stream, then captures on a fresh side stream
  // (which waits for the caller's queued work): the warm-up's cached blocks serve the capture, and the
  // graph's blocks serve the caller's stream again once it is released.
  FakeStreams::reset();
  {
    CachingAllocator a(FakeStreams::raw(), 0);
    void* warm = a.allocate(64 * KiB);  // the warm-up, on stream 1
    a.deallocate(warm);
    const kiln::PoolId pool = a.begin_pool();  // on stream 1
    FakeStreams::current = 7;                  // the capture's side stream
    void* in_capture = a.allocate(64 * KiB);
    BOOST_TEST(in_capture == warm);
    void* fresh = a.allocate(64 * KiB);
    a.deallocate(in_capture);
    a.end_pool();
    FakeStreams::current = 1;
    a.release_pool(pool);
    a.deallocate(fresh);  // a graph output freed after the release
    void* after = a.allocate(64 * KiB);
    void* after2 = a.allocate(64 * KiB);
    BOOST_TEST(((after == warm && after2 == fresh) || (after == fresh && after2 == warm)));
    BOOST_TEST(CountingRaw::allocs == 2);
    a.deallocate(after);
    a.deallocate(after2);
    BOOST_TEST(a.cached_bytes() == 128 * KiB);
    a.empty_cache();  // (a private allocator frees nothing when it is destroyed)
    BOOST_TEST(CountingRaw::frees == 2);
  }
  FakeStreams::reset();
}

BOOST_AUTO_TEST_CASE(a_block_waits_for_its_recorded_uses_before_it_is_handed_out_again) {
  FakeStreams::reset();
  {
    CachingAllocator a(FakeStreams::raw(), 0);
    auto* p = static_cast<char*>(a.allocate(64 * KiB));
    a.record_use(p + 1000, 0);  // an asynchronous copy from inside the block
    a.record_use(p + 64 * KiB + 5000, 0);  // not inside any block: ignored
    BOOST_TEST(FakeStreams::recorded == 1);
    a.deallocate(p);
    void* q = a.allocate(64 * KiB);  // the copy has not run yet: p is not handed out
    BOOST_TEST(q != static_cast<void*>(p));
    a.empty_cache();  // nor freed
    BOOST_TEST(CountingRaw::frees == 0);
    FakeStreams::reached[0] = true;  // the copy is done
    void* r = a.allocate(64 * KiB);
    BOOST_TEST(r == static_cast<void*>(p));
    // A buffer used again and again keeps only its unreached markers.
    for (int i = 0; i < 5; ++i) {
      a.record_use(r, 0);
      FakeStreams::reached.back() = true;
    }
    a.deallocate(r);
    void* again = a.allocate(64 * KiB);  // every use reached: reused at once
    BOOST_TEST(again == r);
    a.deallocate(again);
    a.deallocate(q);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == 2);
    BOOST_TEST(a.stats().reserved_bytes == 0u);
  }
  FakeStreams::reset();
}

BOOST_AUTO_TEST_CASE(a_block_freed_during_a_capture_while_still_in_use_joins_the_pool_when_its_uses_end) {
  // Freed during the capture with a copy still queued: it waits (pending), and once the copy is done
  // (after the capture ended) it goes to the capture's pool, not to the shared cache.
  FakeStreams::reset();
  {
    CachingAllocator a(FakeStreams::raw(), 0);
    void* p = a.allocate(64 * KiB);
    a.record_use(p, 0);
    const kiln::PoolId pool = a.begin_pool();
    a.deallocate(p);
    a.end_pool();
    FakeStreams::reached[0] = true;
    void* q = a.allocate(64 * KiB);  // collects p: into the pool
    BOOST_TEST(q != p);
    BOOST_TEST(a.pool_bytes(pool) == 64 * KiB);
    a.release_pool(pool);
    a.deallocate(q);
    a.empty_cache();
    BOOST_TEST(CountingRaw::frees == 2);
  }
  FakeStreams::reset();
}

BOOST_AUTO_TEST_CASE(the_out_of_memory_retry_and_empty_cache_wait_for_blocks_still_in_use) {
  // As torch's retry and empty_cache (which wait for outstanding events): a block freed while a recorded
  // use (an asynchronous copy) may still run is waited for and freed too, through the device's
  // synchronize hook, or (pinned memory, no device) by waiting on its markers.
  for (const bool pinned : {false, true}) {
    BOOST_TEST_CONTEXT((pinned ? "wait_marker" : "synchronize")) {
      static int waits = 0;
      waits = 0;
      FakeStreams::reset();
      {
        kiln::RawAllocator raw = FakeStreams::raw();
        if (pinned)
          raw.wait_marker = [](void* m) { ++waits, FakeStreams::reached.at(reinterpret_cast<std::uintptr_t>(m) - 1) = true; };
        else
          raw.synchronize = [](int) { ++waits, FakeStreams::reached.assign(FakeStreams::reached.size(), true); };
        CachingAllocator a(raw, 0);
        a.set_limit(64 * KiB);
        void* p = a.allocate(64 * KiB);
        a.record_use(p, 0);
        a.deallocate(p);
        FakeStreams::current = 2;
        void* q = nullptr;
        BOOST_CHECK_NO_THROW(q = a.allocate(64 * KiB));  // over the limit until p is waited for and freed
        BOOST_TEST(waits == 1);
        BOOST_TEST(CountingRaw::frees == 1);
        a.record_use(q, 0);
        a.deallocate(q);
        a.empty_cache();
        BOOST_TEST(waits == 2);
        BOOST_TEST(CountingRaw::frees == 2);
        BOOST_TEST(a.stats().reserved_bytes == 0u);
      }
      FakeStreams::reset();
    }
  }
}

BOOST_AUTO_TEST_CASE(empty_cache_waits_for_the_device_before_it_frees) {
  // The CUDA allocator's synchronize hook runs before cached blocks go back (cudaFree is not documented
  // to wait for the kernels that used them), and only when there is something to free.
  static int syncs = 0, frees_at_sync = -1;
  syncs = 0;
  CountingRaw::reset();
  {
    kiln::RawAllocator raw = CountingRaw::raw();
    raw.synchronize = [](int) { ++syncs, frees_at_sync = CountingRaw::frees; };
    CachingAllocator a(raw, 0);
    a.empty_cache();
    BOOST_TEST(syncs == 0);
    a.deallocate(a.allocate(4 * KiB));
    a.empty_cache();
    BOOST_TEST(syncs == 1);
    BOOST_TEST(frees_at_sync == 0);
    BOOST_TEST(CountingRaw::frees == 1);
  }
  CountingRaw::reset();
}

BOOST_AUTO_TEST_SUITE_END()
