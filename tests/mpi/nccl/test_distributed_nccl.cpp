// Distributed<Nccl> (one process per GPU, mpiexec -n <GPUs>; CTest runs it with one rank, and
// scripts/gpu-check.sh with every GPU of the machine): rank 0's parameters reach every rank; 20 Adam
// steps over the shares of a batch give one GPU's parameters on the whole batch; the averaged
// gradients equal one GPU's for every bucket size; rank 0's BatchNorm buffers reach every rank; the
// device-memory all-gather and sum SyncBatchNorm uses, and SyncBatchNorm training like one GPU on the
// whole batch (synchronised from 2 ranks on). Skipped (exit 77) without a GPU.
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

BOOST_AUTO_TEST_CASE(rank_zeros_batch_norm_buffers_reach_every_rank_before_a_training_forward) {
  // As the MPI test: rank 0's running statistics (device memory, ncclBroadcast) are where every rank's
  // second training forward starts from; checked against one GPU fed rank 0's first batch, then its own.
  using Net = knn::Sequential<knn::Linear<13, 4>, knn::BatchNorm1d<4>>;
  using P = kiln::Policy<kiln::Fp32, kiln::Cuda>;
  const int rank = group().rank();
  const auto data = [](int r, std::uint32_t step) {
    return kt::make_tensor<kiln::Cpu>(kt::random_values<float>(6 * 13, -1, 1 + r, 400 + 10 * step + static_cast<std::uint32_t>(r)),
                                      Extents<Row>(6))
        .template to<kiln::Cuda>(group().device());
  };
  kiln::parallel::DistributedDataParallel<Net, Row, kiln::Nccl, kiln::Fp32, kiln::Cuda> ddp(group(), 3);
  (void)ddp.forward(data(rank, 0));
  (void)ddp.forward(data(rank, 1));
  knn::Model<Net, Row, P> local(3, group().device());
  (void)local.forward(data(0, 0));
  (void)local.forward(data(rank, 1));
  const auto want = local.buffers().to_vector(), got = ddp.module().buffers().to_vector();
  for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(device_memory_all_gather_and_sum) {
  // SyncBatchNorm's collectives: rank r sends {r + 1, 10 (r + 1)}.
  const int size = group().size(), rank = group().rank();
  const auto mine = kt::make_tensor<kiln::Cpu>(std::vector<double>{rank + 1.0, 10.0 * (rank + 1)}, Extents<Shape<dyn>>(2))
                        .to<kiln::Cuda>(group().device());
  kiln::Tensor<double, Shape<dyn>, kiln::Cuda> all(Extents<Shape<dyn>>(2 * size), group().device());
  group().all_gather(mine.data(), all.data(), 2, "test all_gather");
  std::vector<double> want;
  for (int r = 0; r < size; ++r) want.insert(want.end(), {r + 1.0, 10.0 * (r + 1)});
  BOOST_TEST(all.to_vector() == want, boost::test_tools::per_element());
  auto sum = mine.clone();
  group().all_reduce_sum(sum.data(), 2, "test all_reduce_sum");
  const double n = size * (size + 1) / 2.0;
  BOOST_TEST(sum.to_vector() == (std::vector<double>{n, 10 * n}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(sync_batch_norm_ranks_train_like_one_gpu) {
  const kiln::test::DeterministicCudnn deterministic;
  const kiln::index_t n = kt::batch_for(group().size(), 32);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 3) % 10);
  using Sync = knn::convert_sync_batchnorm_t<kiln::test::parallel_models::LeNetBn>;
  const double d = kt::train_both<Sync, Image, kiln::Nccl, kiln::Cuda>(group(), 20, Extents<Image>(n), labels,
                                                                        Extents<Shape<dyn>>(n), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("rank " << group().rank() << ": LeNet with SyncBatchNorm, 20 steps: largest difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
