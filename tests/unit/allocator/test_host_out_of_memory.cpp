// The caching allocator when the host has no memory left for its own bookkeeping (a node of its maps):
// a request it cannot record gives its block back and throws std::bad_alloc, a free it cannot record
// (frees run in destructors: they must not throw) gives the block to the device, and a cached block that
// cannot join a capture's pool goes back to the cache. operator new is replaced in this test program to
// fail once on demand. Host code only: nvcc takes a replaced operator new as device code too, so the CUDA
// test program leaves this file out (the allocator's bookkeeping is the same host code there).
#if !defined(__CUDACC__)
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <new>

#include <kiln/tensor/allocator.hpp>

namespace host_oom {
thread_local long fail_after = -1;  // operator new calls that succeed before one throws; -1: none throws

/// Makes the n-th operator new call from here on (0: the next) throw, for one scope.
struct FailingNew {
  explicit FailingNew(long n) { fail_after = n; }
  ~FailingNew() { fail_after = -1; }
  FailingNew(const FailingNew&) = delete;
  FailingNew& operator=(const FailingNew&) = delete;
};

struct Raw {
  static inline int allocs = 0, frees = 0;
  static void* allocate(std::size_t bytes, int) {
    ++allocs;
    return std::malloc(bytes);  // (not operator new: only the allocator's bookkeeping fails)
  }
  static void deallocate(void* p, int) {
    ++frees;
    std::free(p);
  }
  static kiln::RawAllocator raw() {
    allocs = frees = 0;
    return {&allocate, &deallocate, nullptr, "test"};
  }
};
constexpr std::size_t block = 64 * 1024;

/// Whether f() threw std::bad_alloc, with the n-th operator new call in it failing (Boost.Test's own
/// allocations stay outside).
template <class F>
bool throws_bad_alloc(long n, F f) {
  try {
    const FailingNew failing(n);
    f();
  } catch (const std::bad_alloc&) {
    return true;
  }
  return false;
}
}  // namespace host_oom

// The replacement: libstdc++'s own operator new, malloc until it fails, but for the one call told to throw;
// its operator delete, free, is replaced too, so that a sanitizer's own delete does not see malloc's
// blocks (ASan: alloc-dealloc-mismatch). new[] and delete[] call these.
// (g++ 12 warns that free() meets operator new's pointers where it inlines these: they are malloc's here.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  if (host_oom::fail_after >= 0 && host_oom::fail_after-- == 0) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

BOOST_AUTO_TEST_SUITE(allocator)
BOOST_AUTO_TEST_SUITE(host_out_of_memory)

BOOST_AUTO_TEST_CASE(a_request_that_cannot_be_recorded_gives_its_block_back) {
  kiln::CachingAllocator a(host_oom::Raw::raw(), 0);
  // The record of the new block fails.
  BOOST_TEST(host_oom::throws_bad_alloc(0, [&] { (void)a.allocate(host_oom::block); }));
  BOOST_TEST(host_oom::Raw::allocs == 1);
  BOOST_TEST(host_oom::Raw::frees == 1, "the block was given back, not lost");
  BOOST_TEST(a.stats().reserved_bytes == 0u);
  BOOST_TEST(a.stats().allocated_bytes == 0u);
  BOOST_TEST(a.stats().num_device_allocs == 0u);
  a.deallocate(a.allocate(host_oom::block));  // and the allocator goes on
  BOOST_TEST(a.stats().reserved_bytes == host_oom::block);
  a.empty_cache();
}

BOOST_AUTO_TEST_CASE(a_free_that_cannot_be_recorded_gives_the_block_to_the_device_without_throwing) {
  kiln::CachingAllocator a(host_oom::Raw::raw(), 0);
  void* p = a.allocate(host_oom::block);
  // The cache's record of the freed block fails: no exception comes out.
  BOOST_TEST(!host_oom::throws_bad_alloc(0, [&] { a.deallocate(p); }));
  BOOST_TEST(host_oom::Raw::frees == 1);
  BOOST_TEST(a.stats().reserved_bytes == 0u);
  BOOST_TEST(a.stats().allocated_bytes == 0u);
  BOOST_TEST(a.stats().num_device_frees == 1u);
  BOOST_TEST(a.cached_bytes() == 0u);
}

BOOST_AUTO_TEST_CASE(a_cached_block_that_cannot_join_a_capture_pool_goes_back_to_the_cache) {
  kiln::CachingAllocator a(host_oom::Raw::raw(), 0);
  void* p = a.allocate(host_oom::block);
  a.deallocate(p);
  const kiln::PoolId pool = a.begin_pool();
  // The block's record as live succeeds, its record as the pool's fails.
  BOOST_TEST(host_oom::throws_bad_alloc(1, [&] { (void)a.allocate(host_oom::block); }));
  BOOST_TEST(a.cached_bytes() == host_oom::block, "back in the shared cache");
  BOOST_TEST(a.stats().allocated_bytes == 0u);
  BOOST_TEST(a.pool_bytes(pool) == 0u);
  a.end_pool();
  a.release_pool(pool);
  void* again = a.allocate(host_oom::block);
  BOOST_TEST(again == p);
  BOOST_TEST(host_oom::Raw::allocs == 1);
  a.deallocate(again);
  a.empty_cache();
  BOOST_TEST(host_oom::Raw::frees == 1);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
#endif  // !__CUDACC__
