// DeviceLoader on the GPU (kiln_cuda_test_data). The device-generic cases of tests/unit/data (bytes
// scaled and normalised on the device equal the host's Normalize bit for bit, one kernel per batch, an
// early exit) compiled for kiln::Cuda, and what only a GPU has: batches copied from pinned memory on the
// DeviceLoader's copy stream arrive whole while the current stream is busy.
#include "unit/data/test_device_loader.cpp"

#include <kiln/cuda.hpp>

namespace {
/// Holds a stream for about `cycles` GPU clock cycles.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(data)
BOOST_AUTO_TEST_SUITE(device_loader_cuda)

BOOST_AUTO_TEST_CASE(pinned_batches_arrive_whole_behind_a_busy_current_stream) {
  const ByteImages images;
  const kd::Bytes bytes(images);
  kd::DataLoader loader(bytes, {.batch_size = 8, .shuffle = true, .num_workers = 2, .pin_memory = true, .seed = 3});
  kd::DataLoader reference(bytes, {.batch_size = 8, .shuffle = true, .seed = 3});
  kd::DeviceLoader<kiln::Cuda, decltype(loader)> on_gpu(loader, {255.0f, means, stds});
  kd::DeviceLoader<kiln::Cpu, decltype(reference)> on_cpu(reference, {255.0f, means, stds});
  BOOST_TEST(on_gpu.device() == kiln::cuda::current_device());
  std::vector<std::vector<float>> expected;
  for (const auto& b : on_cpu) expected.push_back(b.x.to_vector());
  std::size_t k = 0;
  for (const auto& b : on_gpu) {
    // The current stream is kept busy (~10 ms) before it reads the batch: the batch must still be whole
    // (the current stream waits for the copy stream's event, and the next batch's copy, issued before
    // this one was handed out, must not have written into it).
    spin<<<1, 1, 0, kiln::cuda::current_stream()>>>(20'000'000);
    KILN_CUDA_CHECK(cudaGetLastError());
    BOOST_REQUIRE(k < expected.size());
    BOOST_TEST(b.x.to_vector() == expected[k], boost::test_tools::per_element());
    BOOST_TEST(b.x.device_index() == on_gpu.device());
    ++k;
  }
  BOOST_TEST(k == expected.size());
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
