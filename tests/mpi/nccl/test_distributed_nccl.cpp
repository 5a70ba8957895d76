// Distributed<Nccl> (one process per GPU, mpiexec -n <GPUs>; CTest runs it with one rank, and
// scripts/gpu-check.sh with every GPU of the machine): rank 0's parameters reach every rank; 20 Adam
// steps over the shares of a batch give one GPU's parameters on the whole batch; the averaged
// gradients equal one GPU's for every bucket size. Skipped (exit 77) without a GPU.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdint>
#include <kiln/cuda.hpp>  // the GPU executor (this file is compiled by nvcc only)
#include <kiln/nn/nn.hpp>
#include <kiln/parallel/distributed.hpp>
#include <kiln/parallel/nccl.hpp>
#include <vector>

#include "mpi/ddp_support.hpp"
#include "support/deterministic_cudnn.hpp"
#include "support/parallel_models.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using Group = kiln::parallel::ProcessGroup<kiln::Nccl>;

using kiln::test::parallel_models::Image;
using kiln::test::parallel_models::LeNet;
using kiln::test::parallel_models::Mlp;
using kiln::test::parallel_models::Row;

Group& group() {  // one communicator for the whole run, as a training program has
  static Group g({.timeout = std::chrono::seconds(120)});
  return g;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(parallel)
BOOST_AUTO_TEST_SUITE(distributed_nccl)

BOOST_AUTO_TEST_CASE(each_rank_has_its_gpu) {
  BOOST_TEST_MESSAGE("rank " << group().rank() << " of " << group().size() << " on GPU " << group().device());
  // local_rank(), or 0 where a launcher gave each rank only its own GPU
  BOOST_TEST(group().device() == (kiln::cuda::device_count() == 1 ? 0 : group().local_rank()));
  BOOST_TEST(kiln::cuda::current_device() == group().device());
}

BOOST_AUTO_TEST_CASE(ranks_train_the_mlp_like_one_gpu) {
  const kiln::index_t n = kt::batch_for(group().size(), 64);  // 64 on 1, 2, 4 or 8 GPUs
  const auto targets = kt::random_values<float>(static_cast<std::size_t>(n), -2, 2, 7);
  const double d = kt::train_both<Mlp, Row, kiln::Nccl, kiln::Cuda>(group(), 20, Extents<Row>(n), targets,
                                                                     Extents<Shape<dyn, 1>>(n), knn::MSELoss{});
  BOOST_TEST_MESSAGE("rank " << group().rank() << ": MLP, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(ranks_train_a_small_lenet_like_one_gpu) {
  const kiln::test::DeterministicCudnn deterministic;  // no atomics in either training's convolutions
  const kiln::index_t n = kt::batch_for(group().size(), 32);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 3) % 10);
  const double d = kt::train_both<LeNet, Image, kiln::Nccl, kiln::Cuda>(group(), 20, Extents<Image>(n), labels,
                                                                         Extents<Shape<dyn>>(n), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("rank " << group().rank() << ": LeNet, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(averaged_gradients_equal_one_gpu_for_every_bucket_size) {
  const kiln::test::DeterministicCudnn deterministic;  // no atomics in either training's convolutions
  const kiln::index_t n = kt::batch_for(group().size(), 16);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7) % 10);
  const double d = kt::bucketed_gradient_error<LeNet, Image, kiln::Nccl, kiln::Cuda>(
      group(), Extents<Image>(n), labels, Extents<Shape<dyn>>(n), knn::CrossEntropyLoss{});
  BOOST_TEST(d <= 1e-6);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
