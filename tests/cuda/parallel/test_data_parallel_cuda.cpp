// DataParallel with CUDA replicas (one per GPU, ncclCommInitAll, grouped ncclAllReduce): on as many GPUs
// as the machine has (at most 4; one GPU: one replica), 20 Adam steps of the seeds' MLP and a small LeNet
// on the same global batches as one GPU end within 1e-5 of its parameters, with the replicas identical
// and every replica's first gradients within 1e-4 of the largest (a gradient scale Adam hides breaks it);
// BatchNorm's buffers start every step from replica 0's; train_steps without zero_grad accumulate like one
// GPU; SyncBatchNorm replicas train like one GPU; the
// grouped all-reduce itself, called directly (also on one GPU).
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <kiln/cuda.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <kiln/parallel/nccl_replicas.hpp>
#include <vector>

#include "support/deterministic_cudnn.hpp"
#include "support/parallel_models.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
namespace kt = kiln::test;
namespace knn = kiln::nn;

using kiln::test::parallel_models::Image;
using kiln::test::parallel_models::LeNet;
using kiln::test::parallel_models::Mlp;
using kiln::test::parallel_models::Row;

int gpus() { return std::min(4, kiln::cuda::device_count()); }

/// The largest element of |a - b| over the largest of |b|: a gradient off by a factor (a sum-reduced
/// loss averaged over the replicas instead of summed: x0.5 on 2 replicas) is off by |factor - 1|.
double relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  for (float v : b) scale = std::max(scale, std::abs(static_cast<double>(v)));
  return scale > 0 ? d / scale : d;
}

/// `steps` Adam steps on one GPU and on gpus() replicas, the same global batches; returns the largest
/// parameter or buffer difference. Each step's loss, and every replica's gradients after the first step's
/// backward (within 1e-4 of the largest; Adam's step hides a uniform scale of the gradient), are checked.
template <class Net, class In, class Y, class SY, class Loss>
double train_both(int steps, const Extents<In>& ext, const std::vector<Y>& targets, const Extents<SY>& target_ext, Loss loss) {
  using P = kiln::Policy<kiln::Fp32, kiln::Cuda>;
  knn::Model<Net, In, P> single(5, 0);
  kiln::optim::Adam opt(single, {.lr = 1e-2});
  kiln::parallel::DataParallel<Net, In, kiln::Fp32, kiln::Cuda> dp(gpus(), 5);
  auto opts = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2}); });
  const auto y_host = kt::make_tensor<kiln::Cpu>(targets, target_ext);
  const auto y = y_host.template to<kiln::Cuda>(0);
  for (int s = 0; s < steps; ++s) {
    const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 100 + s), ext);
    opt.zero_grad();
    const auto pred = single.forward(x.template to<kiln::Cuda>(0));
    const double want = loss(pred, y).item();
    single.backward(loss.backward(pred, y));
    const auto want_grad = single.gradients().to_vector();
    opt.step();
    opts.zero_grad();
    const double got = dp.train_step(x, y_host, loss);
    if (s == 0)
      for (int r = 0; r < dp.size(); ++r)
        BOOST_TEST(relative_diff(dp.replica(r).gradients().to_vector(), want_grad) <= 1e-4, "replica " << r);
    opts.step();
    BOOST_TEST(got == want, boost::test_tools::tolerance(1e-5));
  }
  BOOST_TEST(dp.in_sync());
  const auto a = dp.module().parameters().to_vector(), b = single.parameters().to_vector();
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  const auto ab = dp.module().buffers().to_vector(), bb = single.buffers().to_vector();  // running statistics
  for (std::size_t i = 0; i < ab.size(); ++i) d = std::max(d, std::abs(static_cast<double>(ab[i]) - bb[i]));
  return d;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(parallel)
BOOST_AUTO_TEST_SUITE(data_parallel_cuda)

BOOST_AUTO_TEST_CASE(gpu_replicas_train_the_mlp_like_one_gpu) {
  const double d = train_both<Mlp>(20, Extents<Row>(64), kt::random_values<float>(64, -2, 2, 7), Extents<Shape<dyn, 1>>(64),
                                   knn::MSELoss{});
  BOOST_TEST_MESSAGE(gpus() << " GPU replica(s), MLP, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(gpu_replicas_train_a_small_lenet_like_one_gpu) {
  const kiln::test::DeterministicCudnn deterministic;  // no atomics in either training's convolutions
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 3) % 10);
  const double d = train_both<LeNet>(20, Extents<Image>(32), labels, Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE(gpus() << " GPU replica(s), LeNet, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(sync_batch_norm_gpu_replicas_train_like_one_gpu) {
  // SyncBatchNorm across the GPUs' replicas (through host memory; on one GPU there is no group and it
  // is BatchNorm): one GPU's parameters and running statistics on the whole batch.
  const kiln::test::DeterministicCudnn deterministic;
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 3) % 10);
  using Sync = knn::convert_sync_batchnorm_t<kiln::test::parallel_models::LeNetBn>;
  const double d = train_both<Sync>(20, Extents<Image>(32), labels, Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE(gpus() << " GPU replica(s), LeNet with SyncBatchNorm, 20 steps: largest difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(gpu_replicas_weigh_class_weighted_rows_like_one_gpu) {
  // Class weights on the GPU (copied per call, a mean over the weights that count), label smoothing and
  // ignored rows; class 0 weighs 0 and fills the first replica's rows when there are several GPUs (8, 6
  // or 4 rows: torch.chunk of 16 for 2, 3 or 4).
  const kiln::test::DeterministicCudnn deterministic;
  const std::vector<std::int64_t> labels{0, 0, 0, 0, 0, 0, 0, -100, 1, 2, 3, 7, 9, 9, -100, 5};
  const knn::CrossEntropyLoss ce{.weight = {0.0, 1.0, 2.0, 3.0, 0.25, 1.5, 4.0, 0.75, 1.25, 2.5}, .label_smoothing = 0.1};
  const double d = train_both<LeNet>(5, Extents<Image>(16), labels, Extents<Shape<dyn>>(16), ce);
  BOOST_TEST_MESSAGE(gpus() << " GPU replica(s), LeNet, class weights: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(batch_norm_buffers_start_every_step_from_replica_zeros) {
  // torch's replicate(): replica r's running statistics after two steps are replica 0's after the first,
  // moved by r's chunk of the second batch (copied to the other GPUs through the host).
  using Net = knn::Sequential<knn::Linear<13, 4>, knn::BatchNorm1d<4>>;
  using P = kiln::Policy<kiln::Fp32, kiln::Cuda>;
  const int n = gpus();
  kiln::parallel::DataParallel<Net, Row, kiln::Fp32, kiln::Cuda> dp(n, 5);
  knn::MSELoss mse;
  const auto rows = static_cast<kiln::index_t>(4 * n);
  const auto x0 = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(rows * 13), -1, 2, 500), Extents<Row>(rows));
  const auto x1 = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(rows * 13), -1, 2, 501), Extents<Row>(rows));
  const auto y = kt::make_tensor<kiln::Cpu>(std::vector<float>(static_cast<std::size_t>(rows * 4), 0.5f), Extents<Shape<dyn, 4>>(rows));
  (void)dp.train_step(x0, y, mse);
  (void)dp.train_step(x1, y, mse);
  for (int r = 0; r < n; ++r) {
    knn::Model<Net, Row, P> one(5, 0);
    (void)one.forward(x0.slice(0, 4).template to<kiln::Cuda>(0));
    (void)one.forward(x1.slice(4 * r, 4 * r + 4).template to<kiln::Cuda>(0));
    const auto want = one.buffers().to_vector(), got = dp.replica(r).buffers().to_vector();
    for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(1e-6f));
  }
}

BOOST_AUTO_TEST_CASE(gradients_accumulate_over_train_steps_like_one_gpu) {
  // Three train_steps without zero_grad give the three batches' summed gradient on every replica, as
  // three backward passes on one GPU (replicas 1..N-1 start each step from zero on their own GPU).
  using P = kiln::Policy<kiln::Fp32, kiln::Cuda>;
  const int n = gpus();
  knn::Model<Mlp, Row, P> single(5, 0);
  kiln::parallel::DataParallel<Mlp, Row, kiln::Fp32, kiln::Cuda> dp(n, 5);
  auto opts = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2}); });
  const knn::MSELoss mse;
  const auto rows = static_cast<kiln::index_t>(6 * n);
  const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(rows), -2, 2, 8),
                                            Extents<Shape<dyn, 1>>(rows));
  single.zero_grad();
  opts.zero_grad();
  for (int micro = 0; micro < 3; ++micro) {
    const auto x = kt::make_tensor<kiln::Cpu>(
        kt::random_values<float>(static_cast<std::size_t>(rows * 13), -1, 1, 200 + micro), Extents<Row>(rows));
    single.backward(mse.backward(single.forward(x.template to<kiln::Cuda>(0)), y.template to<kiln::Cuda>(0)));
    (void)dp.train_step(x, y, mse);
  }
  const auto want = single.gradients().to_vector();
  for (int r = 0; r < n; ++r) {
    const auto got = dp.replica(r).gradients().to_vector();
    double d = 0;
    for (std::size_t i = 0; i < got.size(); ++i) d = std::max(d, std::abs(static_cast<double>(got[i]) - want[i]));
    BOOST_TEST(d <= 1e-5, "replica " << r << ": largest difference " << d);
  }
}

BOOST_AUTO_TEST_CASE(the_grouped_all_reduce_sums_over_every_gpu) {
  // DataParallel skips the all-reduce with one replica; called directly it runs on a one-GPU machine
  // too: ncclGroupStart/End, the datatype and the element count (an odd one) over gpus() communicators.
  const int n = gpus();
  kiln::parallel::detail::ReplicaDevices<kiln::Cuda> devices(n);
  const kiln::index_t count = 1001;
  std::vector<kiln::Tensor<float, Shape<dyn>, kiln::Cuda>> grads;
  std::vector<float*> ptrs;
  for (int r = 0; r < n; ++r) {
    const auto on = devices.scope(r);
    grads.push_back(kt::make_tensor<kiln::Cpu>(std::vector<float>(count, static_cast<float>(r + 1)), Extents<Shape<dyn>>(count))
                        .to<kiln::Cuda>(r));
    ptrs.push_back(grads.back().data());
  }
  devices.synchronize();
  devices.all_reduce(ptrs, count);
  const float want = static_cast<float>(n * (n + 1) / 2);
  for (const auto& g : grads) BOOST_TEST(kt::all_equal(g.to_vector(), std::vector<float>(count, want)));
}

BOOST_AUTO_TEST_CASE(more_replicas_than_gpus_is_an_error) {
  using Dp = kiln::parallel::DataParallel<Mlp, Row, kiln::Fp32, kiln::Cuda>;
  BOOST_CHECK_THROW(Dp(kiln::cuda::device_count() + 1, 0), kiln::ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
