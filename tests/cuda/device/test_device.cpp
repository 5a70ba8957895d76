// Devices, streams, events and launches: what torch.cuda.is_available()/device_count()/
// get_device_properties() report, stream and device guards, event timing, and the launch helper's
// error that names the kernel.
#include <kiln/cuda.hpp>

#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "support/reference.hpp"

namespace {
namespace kt = kiln::test;
using kiln::Cuda;
using kiln::dyn;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kc = kiln::cuda;
using Vec = Shape<dyn>;

__global__ void add_one_kernel(float* x, index_t n) {
  const index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(device)

BOOST_AUTO_TEST_CASE(cuda_is_available_with_at_least_one_device) {
  BOOST_TEST(kc::is_available());
  BOOST_TEST(kc::device_count() >= 1);
  BOOST_TEST(kc::unavailable_reason().empty());
  BOOST_TEST(kc::runtime_version() >= 13000);
  BOOST_TEST(kc::driver_version() >= kc::runtime_version(), "a driver runs runtimes up to its own version");
  BOOST_TEST(kc::version_string(13000) == "13.0");
  BOOST_TEST(kc::version_string(12080) == "12.8");
}

BOOST_AUTO_TEST_CASE(device_properties_are_sane) {
  for (int i = 0; i < kc::device_count(); ++i) {
    BOOST_TEST_CONTEXT("cuda:" << i) {
      const kc::DeviceProperties p = kc::device_properties(i);
      BOOST_TEST_MESSAGE("cuda:" << i << " " << p.name << " sm_" << p.major << p.minor << ", " << p.multiprocessor_count
                                 << " SMs, " << kiln::format_bytes(p.total_memory) << " (" << kiln::format_bytes(p.free_memory)
                                 << " free), L2 " << kiln::format_bytes(p.l2_cache_bytes) << ", " << p.uuid << ", "
                                 << p.pci_bus_id);
      BOOST_TEST(p.index == i);
      BOOST_TEST(!p.name.empty());
      BOOST_TEST(p.major >= 7, "CUDA 13 supports sm_75 and newer");
      BOOST_TEST(p.compute_capability() == std::to_string(p.major) + "." + std::to_string(p.minor));
      BOOST_TEST(p.multiprocessor_count > 0);
      BOOST_TEST(p.total_memory >= (std::size_t{1} << 30));
      BOOST_TEST(p.free_memory > 0u);
      BOOST_TEST(p.free_memory <= p.total_memory);
      BOOST_TEST(p.l2_cache_bytes > 0u);
      BOOST_TEST(p.clock_khz > 0);
      BOOST_TEST(p.warp_size == 32);
      BOOST_TEST(p.max_threads_per_block == 1024);
      BOOST_TEST(p.uuid.rfind("GPU-", 0) == 0u);
      BOOST_TEST(p.uuid.size() == 40u);
      const auto [free, total] = kc::mem_get_info(i);
      BOOST_TEST(total == p.total_memory);
      BOOST_TEST(free <= total);
    }
  }
  BOOST_TEST(kc::device_properties(-1).index == kc::current_device());
}

BOOST_AUTO_TEST_CASE(bad_device_indices_throw_value_errors) {
  const int n = kc::device_count();
  BOOST_CHECK_THROW(kc::device_properties(n), kiln::ValueError);
  BOOST_CHECK_THROW(kc::device_properties(-2), kiln::ValueError);
  BOOST_CHECK_THROW(kc::set_device(n), kiln::ValueError);
  const int before = kc::current_device();
  kc::set_device(-1);  // torch's no-op
  BOOST_TEST(kc::current_device() == before);
  BOOST_TEST(cudaGetLastError() == cudaSuccess, "no error is left behind");
}

BOOST_AUTO_TEST_CASE(set_device_and_device_guard) {
  const int d = kc::current_device();
  kc::set_device(d);
  BOOST_TEST(kc::current_device() == d);
  {
    kc::DeviceGuard g(kc::device_count() - 1);
    BOOST_TEST(kc::current_device() == kc::device_count() - 1);
  }
  BOOST_TEST(kc::current_device() == d);
  kc::synchronize();
}

BOOST_AUTO_TEST_CASE(check_macro_throws_a_backend_error_naming_the_call) {
  try {
    KILN_CUDA_CHECK(cudaSetDevice(1 << 20));
    BOOST_FAIL("cudaSetDevice(1 << 20) must fail");
  } catch (const kiln::BackendError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("cudaSetDevice(1 << 20)") != std::string::npos, what);
    BOOST_TEST(what.find("cudaErrorInvalidDevice") != std::string::npos, what);
    BOOST_TEST(what.find("test_device.cpp") != std::string::npos, what);
  }
  BOOST_TEST(cudaGetLastError() == cudaSuccess, "the check clears the error it reports");
}

BOOST_AUTO_TEST_CASE(streams_are_current_for_a_scope) {
  BOOST_TEST(kc::current_stream() == cudaStreamPerThread);
  kc::Stream s;
  BOOST_TEST(s.get() != nullptr);
  BOOST_TEST(s.device() == kc::current_device());
  const index_t n = 4099;
  Tensor<float, Vec, Cuda> x(n), y(n);
  {
    kc::StreamGuard g(s);
    BOOST_TEST(kc::current_stream() == s.get());
    x.fill(3.0f);  // both kernels on s, in order
    y = x * x + 1.0f;
    {
      kc::StreamGuard inner(cudaStreamPerThread);
      BOOST_TEST(kc::current_stream() == cudaStreamPerThread);
    }
    BOOST_TEST(kc::current_stream() == s.get());
    s.synchronize();
    BOOST_TEST(s.query());
  }
  BOOST_TEST(kc::current_stream() == cudaStreamPerThread);
  bool ok = true;
  for (float v : y.to_vector()) ok = ok && v == 10.0f;
  BOOST_TEST(ok);
  kc::Stream moved = std::move(s);
  BOOST_TEST(moved.get() != nullptr);
  BOOST_TEST(s.get() == nullptr);
}

BOOST_AUTO_TEST_CASE(pooled_streams_are_handed_out_in_turn_and_kept) {
  // Four streams per device, in turn: the fifth call gives the first one back, on its device.
  std::vector<cudaStream_t> got;
  for (int k = 0; k < 8; ++k) {
    const kc::Stream& s = kc::pooled_stream(0);
    BOOST_TEST(s.device() == 0);
    got.push_back(s.get());
  }
  for (int k = 0; k < 4; ++k) {
    BOOST_TEST(got[static_cast<std::size_t>(k)] == got[static_cast<std::size_t>(k + 4)]);
    for (int m = k + 1; m < 4; ++m) BOOST_TEST(got[static_cast<std::size_t>(k)] != got[static_cast<std::size_t>(m)]);
  }
  // Usable as any stream, and still alive after its user's scope ends.
  const kc::Stream& s = kc::pooled_stream();
  Tensor<float, Vec, Cuda> x(1000);
  {
    kc::StreamGuard g(s);
    x.fill(2.0f);
  }
  s.synchronize();
  BOOST_TEST(s.query());
  BOOST_TEST(x.to_vector()[999] == 2.0f);
  BOOST_CHECK_THROW((void)kc::pooled_stream(kc::max_devices), kiln::ValueError);
}

BOOST_AUTO_TEST_CASE(events_time_work_and_order_streams) {
  const index_t n = index_t{1} << 22;
  Tensor<float, Vec, Cuda> x(n), y(n);
  x.fill(1.0f);
  y.fill(0.0f);
  {  // torch's default: no timing
    kc::Event a, b;
    a.record();
    b.record();
    b.synchronize();
    BOOST_CHECK_EXCEPTION((void)a.elapsed_ms(b), kiln::ValueError, kt::message_contains({"Event(true)"}));
  }
  kc::Event start(true), stop(true);
  BOOST_CHECK_THROW((void)start.elapsed_ms(stop), kiln::ValueError);
  BOOST_TEST(stop.query(), "an event never recorded counts as done");
  start.record();
  for (int i = 0; i < 10; ++i) y = kiln::exp(x) * 0.5f + y;
  stop.record();
  stop.synchronize();
  BOOST_TEST(stop.query());
  const float ms = start.elapsed_ms(stop);
  BOOST_TEST_MESSAGE("10 fused kernels over 4 Mi floats: " << ms << " ms");
  BOOST_TEST(ms >= 0.0f);

  // Work on another stream waits for an event recorded on this one.
  kc::Stream other;
  kc::Event ready(false);
  x.fill(2.0f);
  ready.record();
  other.wait(ready);
  {
    kc::StreamGuard g(other);
    y = x + 1.0f;
  }
  other.synchronize();
  bool ok = true;
  for (float v : y.to_vector()) ok = ok && v == 3.0f;
  BOOST_TEST(ok);
}

BOOST_AUTO_TEST_CASE(launch_counts_and_names_the_kernel_on_failure) {
  const index_t n = 1000;
  Tensor<float, Vec, Cuda> x(n);
  x.fill(0.0f);
  const auto before = kc::launches();
  kc::launch(&add_one_kernel, dim3(4), dim3(256), 0, kc::current_stream(), x.data(), n);
  BOOST_TEST(kc::launches() - before == 1u);
  bool ok = true;
  for (float v : x.to_vector()) ok = ok && v == 1.0f;
  BOOST_TEST(ok);
  try {
    kc::launch(&add_one_kernel, dim3(1), dim3(4096), 0, kc::current_stream(), x.data(), n);  // > 1024 threads
    BOOST_FAIL("a block of 4096 threads must not launch");
  } catch (const kiln::BackendError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("add_one_kernel") != std::string::npos, what);
    BOOST_TEST(what.find("4096") != std::string::npos, what);
  }
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  x += 1.0f;  // the device still works
  BOOST_TEST(kiln::sum(x).item() == 2.0f * static_cast<float>(n));
}

BOOST_AUTO_TEST_CASE(tuning_is_checked_at_compile_time) {
  constexpr kc::ElementwiseTuning t = kc::elementwise_tuning(4);
  static_assert(kc::valid_tuning(t) && t.block == 256 && t.vector_bytes == 16);
  static_assert(kc::vector_width(t, 4) == 4 && kc::vector_width(t, 2) == 8 && kc::vector_width(t, 8) == 2);
  static_assert(kc::vector_width(t, 1) == 8, "capped at 8 values");
  static_assert(kc::vector_width(kc::elementwise_tuning(4, false), 4) == 1);
  static_assert(!kc::valid_tuning(kc::ElementwiseTuning{.block = 100}));
  static_assert(!kc::valid_tuning(kc::ElementwiseTuning{.vector_bytes = 12}));
  BOOST_TEST(kc::grid_for(1, t) == 1u);
  BOOST_TEST(kc::grid_for(index_t{1} << 40, t) >= 1u);
}

BOOST_AUTO_TEST_SUITE_END()
