// GPU memory: the per-device caching allocator reuses freed blocks, empty_cache() gives the cache back,
// statistics and peaks move as expected, a memory limit turns into a helpful OutOfMemoryError,
// pinned memory with non-blocking copies round-trips, a pinned block is not reused while a copy still
// uses it, and a block freed on one thread's stream is not handed to another thread's.
#include <kiln/cuda.hpp>

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {
using kiln::Cuda;
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kc = kiln::cuda;
using Vec = Shape<dyn>;

/// Restores the allocator's limit when a test ends, however it ends.
struct LimitGuard {
  kiln::CachingAllocator& a;
  std::optional<std::size_t> old = a.limit();
  ~LimitGuard() { a.set_limit(old); }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(allocator)
BOOST_AUTO_TEST_SUITE(cuda)

BOOST_AUTO_TEST_CASE(the_device_allocator_is_named_cuda_and_belongs_to_the_current_device) {
  kiln::CachingAllocator& a = kiln::caching_allocator<Cuda>();
  BOOST_TEST(std::string(a.name()) == "cuda");
  BOOST_TEST(a.device() == kc::current_device());
  BOOST_TEST(&a == &kiln::caching_allocator<Cuda>(kc::current_device()), "one allocator per device");
  BOOST_CHECK_THROW(kiln::caching_allocator<Cuda>(kc::device_count()), kiln::ValueError);
  Tensor<float, Vec, Cuda> t(1000);
  BOOST_TEST(t.device_index() == kc::current_device());
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(t.data()) % 256 == 0u, "cudaMalloc blocks are 256-byte aligned");
}

BOOST_AUTO_TEST_CASE(a_freed_block_is_reused_from_the_cache) {
  kc::empty_cache();
  const std::size_t bytes = kiln::CachingAllocator::round_size(1000 * sizeof(float));
  const auto s0 = kc::memory_stats();
  const void* first = nullptr;
  {
    Tensor<float, Vec, Cuda> t(1000);
    first = t.data();
    const auto s1 = kc::memory_stats();
    BOOST_TEST(s1.num_device_allocs - s0.num_device_allocs == 1u);
    BOOST_TEST(s1.allocated_bytes - s0.allocated_bytes == bytes);
    BOOST_TEST(s1.reserved_bytes - s0.reserved_bytes == bytes);
    BOOST_TEST(kc::memory_allocated() == s1.allocated_bytes);
  }
  const auto s2 = kc::memory_stats();
  BOOST_TEST(s2.allocated_bytes == s0.allocated_bytes, "freed: no longer allocated");
  BOOST_TEST(s2.reserved_bytes - s0.reserved_bytes == bytes, "but still reserved (cached)");
  BOOST_TEST(s2.num_device_frees == s0.num_device_frees);
  {
    Tensor<float, Vec, Cuda> t(1000);
    const auto s3 = kc::memory_stats();
    BOOST_TEST(t.data() == first, "the same block comes back");
    BOOST_TEST(s3.num_device_allocs == s2.num_device_allocs, "no cudaMalloc");
    BOOST_TEST(s3.num_cache_hits - s2.num_cache_hits == 1u);
  }
}

BOOST_AUTO_TEST_CASE(empty_cache_returns_reserved_to_allocated) {
  Tensor<float, Vec, Cuda> keep(12345);
  {
    Tensor<float, Vec, Cuda> a(1 << 20), b(3 << 20), c(777);
    a.fill(1.0f);  // a kernel uses the blocks before they are cached
  }
  BOOST_TEST(kc::memory_reserved() > kc::memory_allocated());
  const auto frees = kc::memory_stats().num_device_frees;
  kc::empty_cache();
  BOOST_TEST(kc::memory_reserved() == kc::memory_allocated());
  BOOST_TEST(kc::memory_stats().num_device_frees - frees >= 3u);
  BOOST_TEST(kc::memory_allocated() >= kiln::CachingAllocator::round_size(12345 * sizeof(float)));
}

BOOST_AUTO_TEST_CASE(peaks_follow_allocations_and_reset) {
  kc::empty_cache();
  kc::reset_peak_memory_stats();
  const std::size_t base = kc::memory_allocated();
  BOOST_TEST(kc::max_memory_allocated() == base);
  const std::size_t big = kiln::CachingAllocator::round_size(std::size_t{64} << 20);
  {
    Tensor<float, Vec, Cuda> t(index_t{16} << 20);  // 64 MiB
    BOOST_TEST(kc::max_memory_allocated() >= base + big);
  }
  BOOST_TEST(kc::memory_allocated() == base);
  BOOST_TEST(kc::max_memory_allocated() >= base + big, "the peak stays after the free");
  BOOST_TEST(kc::max_memory_reserved() >= kc::memory_reserved());
  kc::reset_peak_memory_stats();
  BOOST_TEST(kc::max_memory_allocated() == base);
}

BOOST_AUTO_TEST_CASE(an_allocation_over_the_limit_throws_out_of_memory_naming_size_and_remedy) {
  kiln::CachingAllocator& a = kiln::caching_allocator<Cuda>();
  LimitGuard guard{a};
  kc::empty_cache();
  a.set_limit(kc::memory_reserved() + (std::size_t{1} << 20));  // 1 MiB of headroom
  const index_t n = index_t{16} << 20;                          // 64 MiB of float
  try {
    Tensor<float, Vec, Cuda> t(n);
    BOOST_FAIL("allocating 64 MiB under a 1 MiB headroom must throw");
  } catch (const kiln::OutOfMemoryError& e) {
    const std::string what = e.what();
    BOOST_TEST_MESSAGE(what);
    BOOST_TEST(what.find(kiln::format_bytes(static_cast<std::size_t>(n) * sizeof(float))) != std::string::npos,
               "the message names the request: " << what);
    BOOST_TEST(what.find("64.00 MiB") != std::string::npos);
    BOOST_TEST(what.find("batch size") != std::string::npos, "the message suggests a remedy: " << what);
    BOOST_TEST(what.find("cuda:") != std::string::npos);
  }
  Tensor<float, Vec, Cuda> small(1000);  // within the limit: still fine
  small.fill(2.0f);
  BOOST_TEST(kiln::sum(small).item() == 2000.0f);
}

BOOST_AUTO_TEST_CASE(pinned_memory_and_non_blocking_copies_round_trip) {
  const index_t n = 100003;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i % 977) * 0.5f;
  const auto host = Tensor<float, Vec>::from(std::span<const float>(v), Extents<Vec>(n));
  const auto pinned = host.pin_memory();
  BOOST_TEST(pinned.is_pinned());
  BOOST_TEST(!host.is_pinned());
  BOOST_TEST(std::string(kiln::detail::pinned_host_memory<kiln::Cpu>::allocator().name()) == "pinned");
  BOOST_TEST(pinned.to_vector() == v);
  BOOST_TEST(pinned.pin_memory().shares_storage_with(pinned), "already pinned: returned as it is, as torch's");

  auto dev = pinned.to<Cuda>(-1, /*non_blocking=*/true);  // stream-ordered before the kernel below
  Tensor<float, Vec, Cuda> twice(n);
  twice = dev * 2.0f;
  auto back = Tensor<float, Vec>(Extents<Vec>(n)).pin_memory();
  kiln::detail::device_copy<kiln::Cpu, Cuda>::run(back.data(), 0, twice.data(), twice.device_index(), twice.nbytes(),
                                                 /*non_blocking=*/true);
  kc::synchronize_stream();  // the copies and the kernel ran in order on the current stream
  bool ok = true;
  for (index_t i = 0; i < n; ++i) ok = ok && back[i] == 2.0f * v[static_cast<std::size_t>(i)];
  BOOST_TEST(ok);

  // Blocking copies: host -> device -> device -> host.
  const auto d1 = host.to<Cuda>();
  const auto d2 = d1.to<Cuda>();
  BOOST_TEST(!d2.shares_storage_with(d1));
  BOOST_TEST(d2.to<kiln::Cpu>().to_vector() == v);
  BOOST_TEST(d2.to_vector() == v);
}

namespace {
/// Keeps the current stream busy for about `ms` milliseconds (so that work queued after it waits).
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
void keep_stream_busy(int ms) {
  int khz = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, kc::current_device()));
  spin<<<1, 1, 0, kc::current_stream()>>>(static_cast<long long>(khz) * ms);
  KILN_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_pinned_block_is_not_reused_before_its_non_blocking_copy_has_run) {
  // The loader's idiom: a pinned batch copied without blocking, then dropped while the copy still
  // waits in the stream; the next batch is pinned at once. It must not land in the first one's block.
  // Every allocation that may synchronise (cudaHostAlloc, cudaMalloc) happens before the stream is
  // held up, so the copy is still queued when the next batch is pinned.
  const index_t n = 1 << 20;
  std::vector<float> first(static_cast<std::size_t>(n), 1.0f), second(static_cast<std::size_t>(n), 2.0f);
  kiln::detail::pinned_host_memory<kiln::Cpu>::allocator().empty_cache();  // no older block of this size
  Tensor<float, Vec, Cuda> dev(n);
  const void* dropped = nullptr;
  {
    const auto pinned = Tensor<float, Vec>::from(std::span<const float>(first), Extents<Vec>(n)).pin_memory();
    dropped = pinned.data();
    keep_stream_busy(200);  // the copy below cannot start for a while
    kiln::detail::device_copy<Cuda, kiln::Cpu>::run(dev.data(), dev.device_index(), pinned.data(), 0, pinned.nbytes(),
                                                   /*non_blocking=*/true);
  }
  const auto next = Tensor<float, Vec>::from(std::span<const float>(second), Extents<Vec>(n)).pin_memory();
  BOOST_TEST(static_cast<const void*>(next.data()) != dropped, "the dropped batch's block was handed out again");
  kc::synchronize_stream();
  BOOST_TEST(dev.to_vector() == first);
  {  // once the copy has run, the block is reused as usual
    const auto later = Tensor<float, Vec>(Extents<Vec>(n)).pin_memory();
    BOOST_TEST(static_cast<const void*>(later.data()) == dropped);
  }

  // The other way: a non-blocking copy into a pinned tensor that is dropped before the stream gets there.
  Tensor<float, Vec, Cuda> src(n);
  src.fill(3.0f);
  const void* target = nullptr;
  {
    auto back = Tensor<float, Vec>(Extents<Vec>(n)).pin_memory();
    target = back.data();
    keep_stream_busy(200);
    kiln::detail::device_copy<kiln::Cpu, Cuda>::run(back.data(), 0, src.data(), src.device_index(), src.nbytes(),
                                                   /*non_blocking=*/true);
  }
  auto reuse = Tensor<float, Vec>::from(std::span<const float>(second), Extents<Vec>(n)).pin_memory();
  BOOST_TEST(static_cast<const void*>(reuse.data()) != target);
  kc::synchronize_stream();
  BOOST_TEST(reuse.to_vector() == second, "the copy overwrote a block handed out again");
}

BOOST_AUTO_TEST_CASE(a_block_freed_by_one_thread_is_not_handed_to_another_threads_stream) {
  // Each thread has its own default stream: a block freed on one, with a kernel still queued there,
  // must not go to another thread's stream (which does not wait for that kernel).
  const index_t n = 1 << 18;
  kc::synchronize_stream();
  kc::empty_cache();  // no older block of this size
  const void* freed = nullptr;
  {
    Tensor<float, Vec, Cuda> t(n);
    keep_stream_busy(50);
    t.fill(1.0f);  // queued behind the spin
    freed = t.data();
  }
  const void* other = nullptr;
  std::thread([&] {
    Tensor<float, Vec, Cuda> u(n);
    other = u.data();
  }).join();
  BOOST_TEST(other != freed);
  Tensor<float, Vec, Cuda> same(n);  // this thread's stream: its later work follows the fill
  BOOST_TEST(static_cast<const void*>(same.data()) == freed);
  kc::synchronize_stream();
}

BOOST_AUTO_TEST_CASE(a_block_freed_on_another_threads_stream_waits_for_the_work_queued_there) {
  // The other way round: a tensor made here is used and dropped on another thread (its own default
  // stream) with a kernel still queued there; this thread's stream does not wait for that kernel.
  const index_t n = 1 << 18;
  kc::synchronize_stream();
  kc::empty_cache();
  std::optional<Tensor<float, Vec, Cuda>> t(std::in_place, n);
  const void* freed = t->data();
  std::thread([&] {
    keep_stream_busy(50);
    t->fill(1.0f);  // queued behind the spin, on that thread's stream
    t.reset();
  }).join();
  const Tensor<float, Vec, Cuda> now(n);
  BOOST_TEST(static_cast<const void*>(now.data()) != freed, "handed out while the other stream may use it");
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
  const Tensor<float, Vec, Cuda> later(n);  // that stream's work is done: the block is this stream's again
  BOOST_TEST(static_cast<const void*>(later.data()) == freed);
}

BOOST_AUTO_TEST_CASE(memory_fraction_caps_reservations) {
  kiln::CachingAllocator& a = kiln::caching_allocator<Cuda>();
  LimitGuard guard{a};
  kc::set_per_process_memory_fraction(0.5);
  const auto total = kc::mem_get_info().second;
  BOOST_TEST(a.limit().value_or(SIZE_MAX) == static_cast<std::size_t>(0.5 * static_cast<double>(total)));
  kc::set_per_process_memory_fraction(1.0);
  BOOST_TEST(!a.limit().has_value());
  // torch's range [0, 1]: 0 leaves nothing to reserve, anything outside (or NaN) is an error.
  for (double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()})
    BOOST_CHECK_THROW(kc::set_per_process_memory_fraction(bad), kiln::ValueError);
  BOOST_TEST(!a.limit().has_value(), "a refused fraction leaves the limit as it was");
  kc::empty_cache();
  kc::set_per_process_memory_fraction(0.0);
  BOOST_TEST(a.limit().value_or(SIZE_MAX) == std::size_t{0});
  BOOST_CHECK_THROW((Tensor<float, Vec, Cuda>(1024)), kiln::OutOfMemoryError);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
