// DataParallel with CPU replicas: torch.chunk's split; replicas stay identical; 2 replicas train like one
// device on the same global batch (20 Adam steps of the seeds' MLP and a small LeNet, within 1e-5; and
// every replica's first gradients within 1e-4 of the largest, which a gradient scale Adam hides breaks); an
// uneven split (7 samples on 3 replicas, 2 on 3) is weighted so the summed gradient is the batch's; bf16
// replicas follow one bf16 device; CrossEntropyLoss's (and NLLLoss's) ignored labels weigh each replica
// by the rows that count; sum-reduced and label-smoothed losses, probability targets and KLDivLoss's
// reductions train like one device; fp16 replicas step through one GradScaler like one fp16 device
// (skips counted once); train_steps without zero_grad accumulate gradients like one device; OneCycleLR drives every replica's optimizer; parameter
// groups reach every replica's optimizer and its scheduler; BatchNorm's buffers start every
// step from replica 0's; SyncBatchNorm replicas train like one device (an empty chunk too), fail
// together and never train alone; GroupNorm and LayerNorm replicas train like one device; an error on a
// replica's thread reaches the caller.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <kiln/parallel/data_parallel.hpp>
#include <vector>

#include "support/parallel_models.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using kiln::parallel::DataParallel;
using kiln::parallel::Split;

using kiln::test::parallel_models::Image;
using kiln::test::parallel_models::LeNet;
using kiln::test::parallel_models::Mlp;
using kiln::test::parallel_models::Row;

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

/// The largest element of |a - b| over the largest of |b|: a gradient off by a factor (a sum-reduced
/// loss averaged over the replicas instead of summed: x0.5 on 2 replicas) is off by |factor - 1|.
double relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0;
  for (float v : b) scale = std::max(scale, std::abs(static_cast<double>(v)));
  return scale > 0 ? max_abs_diff(a, b) / scale : max_abs_diff(a, b);
}

/// `steps` Adam steps on one device and on `replicas` replicas, the same global batches; returns the
/// largest parameter or buffer (running statistics) difference. A Net with SyncBatchNorm is BatchNorm
/// on the one device. Each step's loss, and every replica's gradients after the first step's backward
/// (within 1e-4 of the largest; Adam's step hides a uniform scale of the gradient), are checked too
/// unless `same_loss` is false.
template <class Net, class In, class Y, class SY, class Loss>
double train_both(int replicas, int steps, const Extents<In>& ext, const std::vector<Y>& targets,
                  const Extents<SY>& target_ext, Loss loss, bool same_loss = true) {
  knn::Model<Net, In> single(5);
  kiln::optim::Adam opt(single, {.lr = 1e-2});
  DataParallel<Net, In> dp(replicas, 5);
  auto opts = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2}); });
  BOOST_TEST(opts.size() == replicas);
  const auto y = kt::make_tensor<kiln::Cpu>(targets, target_ext);
  for (int s = 0; s < steps; ++s) {
    const auto x = kt::make_tensor<kiln::Cpu>(
        kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 100 + s), ext);
    opt.zero_grad();
    const auto pred = single.forward(x);
    const double want = loss(pred, y).item();
    single.backward(loss.backward(pred, y));
    const auto want_grad = single.gradients().to_vector();
    opt.step();

    opts.zero_grad();
    const double got = dp.train_step(x, y, loss);
    if (same_loss && s == 0)
      for (int r = 0; r < dp.size(); ++r)
        BOOST_TEST(relative_diff(dp.replica(r).gradients().to_vector(), want_grad) <= 1e-4, "replica " << r);
    opts.step();
    if (same_loss) BOOST_TEST(got == want, boost::test_tools::tolerance(1e-5));
  }
  BOOST_TEST(dp.in_sync());
  return std::max(max_abs_diff(dp.module().parameters().to_vector(), single.parameters().to_vector()),
                  max_abs_diff(dp.module().buffers().to_vector(), single.buffers().to_vector()));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(parallel)
BOOST_AUTO_TEST_SUITE(data_parallel)

BOOST_AUTO_TEST_CASE(batches_split_as_torch_chunk_does) {
  const auto a = Split::of(10, 4);
  BOOST_TEST(a.count == (std::vector<kiln::index_t>{3, 3, 3, 1}), boost::test_tools::per_element());
  BOOST_TEST(a.offset == (std::vector<kiln::index_t>{0, 3, 6, 9}), boost::test_tools::per_element());
  const auto b = Split::of(5, 4);  // ceil(5 / 4) = 2: the last replica gets nothing
  BOOST_TEST(b.count == (std::vector<kiln::index_t>{2, 2, 1, 0}), boost::test_tools::per_element());
  BOOST_TEST(Split::of(128, 3).describe() == "128 = 43 + 43 + 42");
  BOOST_TEST(Split::of(0, 2).describe() == "0 = 0 + 0");
}

BOOST_AUTO_TEST_CASE(two_replicas_train_the_mlp_like_one_device) {
  const auto targets = kt::random_values<float>(64, -2, 2, 7);
  const double d = train_both<Mlp>(2, 20, Extents<Row>(64), targets, Extents<Shape<dyn, 1>>(64), knn::MSELoss{});
  BOOST_TEST_MESSAGE("MLP, 2 replicas, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

// torch.nn.DataParallel reduces into the module's .grad, which accumulates: K train_steps without zero_grad
// give the K batches' summed gradient on every replica, as K backward passes on one device do (an uneven
// split with an empty share too: 5 rows on 4 replicas).
BOOST_AUTO_TEST_CASE(gradients_accumulate_over_train_steps_like_one_device) {
  for (const int rows : {24, 5}) {
    knn::Model<Mlp, Row> single(5);
    kiln::optim::Adam opt(single, {.lr = 1e-2});
    DataParallel<Mlp, Row> dp(rows == 5 ? 4 : 3, 5);
    auto opts = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2}); });
    const knn::MSELoss loss;
    const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(rows), -2, 2, 8),
                                              Extents<Shape<dyn, 1>>(rows));
    for (int round = 0; round < 2; ++round) {
      opt.zero_grad();
      opts.zero_grad();
      for (int micro = 0; micro < 3; ++micro) {
        const auto x = kt::make_tensor<kiln::Cpu>(
            kt::random_values<float>(static_cast<std::size_t>(rows) * 13, -1, 1, 200 + 10 * round + micro),
            Extents<Row>(rows));
        single.backward(loss.backward(single.forward(x), y));
        dp.train_step(x, y, loss);
      }
      const auto want = single.gradients().to_vector();
      for (int r = 0; r < dp.size(); ++r)
        BOOST_TEST(max_abs_diff(dp.replica(r).gradients().to_vector(), want) <= 1e-5);
      opt.step();
      opts.step();
    }
    BOOST_TEST(dp.in_sync());
    BOOST_TEST(max_abs_diff(dp.module().parameters().to_vector(), single.parameters().to_vector()) <= 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(two_replicas_train_a_small_lenet_like_one_device) {
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 3) % 10);
  const double d =
      train_both<LeNet>(2, 20, Extents<Image>(32), labels, Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("LeNet, 2 replicas, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(ignored_labels_are_weighted_like_the_whole_batch) {
  // CrossEntropyLoss's ignore_index: each replica's share is its rows that count, so a replica whose
  // rows are all ignored (the first four here) adds nothing and the mean is over the batch's four others.
  const std::vector<std::int64_t> labels{-100, -100, -100, -100, 1, 2, -100, 7};
  const double d = train_both<LeNet>(2, 5, Extents<Image>(8), labels, Extents<Shape<dyn>>(8), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("LeNet, 2 replicas, half the labels ignored: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
  DataParallel<LeNet, Image> dp(2, 5);
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(4 * 64, -1, 1, 11), Extents<Image>(4));
  const auto none = kt::make_tensor<kiln::Cpu>(std::vector<std::int64_t>(4, -100), Extents<Shape<dyn>>(4));
  for (int r = 0; r < dp.size(); ++r) dp.replica(r).zero_grad();
  BOOST_TEST(std::isnan(dp.train_step(x, none, knn::CrossEntropyLoss{})));  // torch's mean over no rows
  for (float g : dp.module().gradients().to_vector()) BOOST_TEST_REQUIRE(g == 0.0f);
}

BOOST_AUTO_TEST_CASE(nll_loss_after_log_softmax_is_weighted_like_cross_entropy) {
  // NLLLoss counts its rows as CrossEntropyLoss does (DataParallel asks the loss): replica 0 has three
  // ignored rows of five, and the mean is still over the batch's six that count.
  using Classifier = knn::Sequential<knn::Linear<13, 16>, knn::ReLU, knn::Linear<16, 5>, knn::LogSoftmax<>>;
  const std::vector<std::int64_t> labels{-100, -100, -100, 4, 1, 2, -100, 0, 3, 3};
  const double d = train_both<Classifier>(2, 10, Extents<Row>(10), labels, Extents<Shape<dyn>>(10), knn::NLLLoss{});
  BOOST_TEST_MESSAGE("13-16-5 classifier, 2 replicas, NLLLoss: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(sum_reduced_and_smoothed_losses_train_like_one_device) {
  // reduction = sum: each replica's gradient weighs 1 (its rows' sum), and the step returns the batch's
  // sum; label smoothing changes nothing in the split. Also with ignored rows, and a sum over none is 0.
  const auto targets = kt::random_values<float>(20, -2, 2, 12);
  const double mlp = train_both<Mlp>(3, 10, Extents<Row>(20), targets, Extents<Shape<dyn, 1>>(20),
                                     knn::MSELoss{.reduction = knn::Reduction::sum});
  BOOST_TEST(mlp <= 1e-5);
  const std::vector<std::int64_t> labels{-100, 3, 4, -100, 1, 2, -100, 7};
  const double lenet = train_both<LeNet>(
      2, 5, Extents<Image>(8), labels, Extents<Shape<dyn>>(8),
      knn::CrossEntropyLoss{.reduction = knn::Reduction::sum, .label_smoothing = 0.2});
  BOOST_TEST(lenet <= 1e-5);
  const double smoothed = train_both<LeNet>(2, 5, Extents<Image>(8), labels, Extents<Shape<dyn>>(8),
                                            knn::CrossEntropyLoss{.label_smoothing = 0.2});
  BOOST_TEST(smoothed <= 1e-5);
  // Class weights: a replica's share of the mean is the weights of its rows that count.
  const std::vector<double> weight{0.5, 1.0, 2.0, 3.0, 0.25, 1.5, 4.0, 0.75, 1.25, 2.5};
  const double weighted = train_both<LeNet>(2, 5, Extents<Image>(8), labels, Extents<Shape<dyn>>(8),
                                            knn::CrossEntropyLoss{.weight = weight, .label_smoothing = 0.2});
  BOOST_TEST(weighted <= 1e-5);
  // A class weighted 0 and a replica whose rows are all of it: its share is 0 (not 0 / 0 = NaN, which
  // the all-reduce would spread to every replica).
  const std::vector<double> drop_zero{0.0, 1.0, 2.0, 3.0, 0.25, 1.5, 4.0, 0.75, 1.25, 2.5};
  const double dropped = train_both<LeNet>(2, 5, Extents<Image>(8), std::vector<std::int64_t>{0, 0, 0, 0, 1, 2, -100, 7},
                                           Extents<Shape<dyn>>(8), knn::CrossEntropyLoss{.weight = drop_zero});
  BOOST_TEST(dropped <= 1e-5);
  // Nothing in the batch weighs anything: NaN gradients at the 0-weight rows, as on one device (and in
  // torch: 0 / 0), which a GradScaler then skips.
  {
    DataParallel<LeNet, Image> zero(2, 5);
    const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(4 * 64, -1, 1, 14), Extents<Image>(4));
    const auto class0 = kt::make_tensor<kiln::Cpu>(std::vector<std::int64_t>{0, 0, -100, 0}, Extents<Shape<dyn>>(4));
    for (int r = 0; r < zero.size(); ++r) zero.replica(r).zero_grad();
    BOOST_TEST(std::isnan(zero.train_step(x, class0, knn::CrossEntropyLoss{.weight = drop_zero})));
    bool nan = false;
    for (float g : zero.module().gradients().to_vector()) nan = nan || std::isnan(g);
    BOOST_TEST(nan);
  }
  DataParallel<LeNet, Image> dp(2, 5);
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(4 * 64, -1, 1, 13), Extents<Image>(4));
  const auto none = kt::make_tensor<kiln::Cpu>(std::vector<std::int64_t>(4, -100), Extents<Shape<dyn>>(4));
  BOOST_TEST(dp.train_step(x, none, knn::CrossEntropyLoss{.reduction = knn::Reduction::sum}) == 0.0);
}

BOOST_AUTO_TEST_CASE(probability_targets_train_like_one_device) {
  // CrossEntropyLoss with soft targets [N, C]: every row counts, so replicas weigh by their rows, with
  // class weights (which do not enter a mean over probability targets) and smoothing, on an uneven split.
  auto soft = kt::random_values<float>(7 * 10, 0.0f, 1.0f, 15);
  for (std::size_t n = 0; n < 7; ++n) {
    float s = 0;
    for (std::size_t j = 0; j < 10; ++j) s += soft[n * 10 + j];
    for (std::size_t j = 0; j < 10; ++j) soft[n * 10 + j] /= s;
  }
  const std::vector<double> weight{0.5, 1.0, 2.0, 3.0, 0.25, 1.5, 4.0, 0.75, 1.25, 2.5};
  const double d = train_both<LeNet>(3, 5, Extents<Image>(7), soft, Extents<Shape<dyn, 10>>(7),
                                     knn::CrossEntropyLoss{.weight = weight, .label_smoothing = 0.1});
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(kl_divergence_trains_like_one_device) {
  // KLDivLoss against probability rows: batchmean weighs each replica by its rows, sum by 1, mean by its
  // rows too (C elements each), on an uneven split.
  auto soft = kt::random_values<float>(7 * 10, 0.0f, 1.0f, 16);
  for (std::size_t n = 0; n < 7; ++n) {
    float s = 0;
    for (std::size_t j = 0; j < 10; ++j) s += soft[n * 10 + j];
    for (std::size_t j = 0; j < 10; ++j) soft[n * 10 + j] /= s;
  }
  using R = knn::KLDivReduction;
  for (const auto reduction : {R::batchmean, R::sum, R::mean}) {
    BOOST_TEST_CONTEXT("reduction " << static_cast<int>(reduction)) {
      const double d = train_both<LeNet>(3, 5, Extents<Image>(7), soft, Extents<Shape<dyn, 10>>(7),
                                         knn::KLDivLoss{.reduction = reduction});
      BOOST_TEST(d <= 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(weights_loaded_into_the_module_reach_every_replica_through_broadcast_parameters) {
  // A checkpoint loaded into dp.module() (replica 0) alone would leave the other replicas on their old
  // weights, and the summed gradients of replicas at different points would keep them apart for good.
  // broadcast_parameters() copies replica 0's parameters (and buffers) into the others; then training
  // goes on as one device that loaded the same weights.
  DataParallel<Mlp, Row> dp(2, 5);
  auto opts = dp.make_optimizers([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05}); });
  knn::Model<Mlp, Row> single(5);
  kiln::optim::SGD opt(single, {.lr = 0.05});
  const auto loaded =
      kt::random_values<float>(static_cast<std::size_t>(single.parameter_count), -0.3, 0.3, 77);
  dp.module().parameters().copy_from(std::span<const float>(loaded));  // as load_checkpoint writes them
  single.parameters().copy_from(std::span<const float>(loaded));
  BOOST_TEST(!dp.in_sync());
  dp.broadcast_parameters();
  BOOST_TEST(dp.in_sync());
  knn::MSELoss mse;
  const auto y =
      kt::make_tensor<kiln::Cpu>(kt::random_values<float>(16, -1, 1, 79), Extents<Shape<dyn, 1>>(16));
  for (std::uint32_t s = 0; s < 5; ++s) {
    const auto x =
        kt::make_tensor<kiln::Cpu>(kt::random_values<float>(16 * 13, -1, 1, 80 + s), Extents<Row>(16));
    opt.zero_grad();
    single.backward(mse.backward(single.forward(x), y));
    opt.step();
    opts.zero_grad();
    (void)dp.train_step(x, y, mse);
    opts.step();
  }
  BOOST_TEST(dp.in_sync());
  const double d = max_abs_diff(dp.module().parameters().to_vector(), single.parameters().to_vector());
  BOOST_TEST(d <= 1e-5, "largest difference " << d);
  // BatchNorm's running statistics go too.
  using Net = knn::Sequential<knn::Linear<13, 4>, knn::BatchNorm1d<4>>;
  DataParallel<Net, Row> norm(2, 5);
  const auto stats =
      kt::random_values<float>(static_cast<std::size_t>(norm.module().buffers().numel()), 0, 1, 78);
  norm.module().buffers().copy_from(std::span<const float>(stats));
  norm.broadcast_parameters();
  BOOST_TEST(norm.replica(1).buffers().to_vector() == stats, boost::test_tools::per_element());
  BOOST_TEST(norm.in_sync());
}

BOOST_AUTO_TEST_CASE(replicas_that_drifted_apart_stop_the_next_train_step) {
  // torch's habit, an optimizer on the module alone, steps replica 0 only here (torch re-copies its module
  // every forward, kiln's replicas stay where they are): the next train_step says so instead of summing
  // gradients taken at different weights from then on. So do weights loaded into module() alone.
  DataParallel<Mlp, Row> dp(2, 5);
  kiln::optim::SGD stray(dp.module(), {.lr = 0.05});
  knn::MSELoss mse;
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(8 * 13, -1, 1, 81), Extents<Row>(8));
  const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(8, -1, 1, 82), Extents<Shape<dyn, 1>>(8));
  (void)dp.train_step(x, y, mse);  // in step so far
  stray.step();
  BOOST_CHECK_EXCEPTION((void)dp.train_step(x, y, mse), kiln::Error, kt::message_contains({"replica 1", "make_optimizers"}));
  dp.broadcast_parameters();
  BOOST_CHECK_NO_THROW((void)dp.train_step(x, y, mse));
  auto last = dp.module().parameters().to_vector();
  last.back() += 1.0f;
  dp.module().parameters().copy_from(std::span<const float>(last));  // a checkpoint loaded into module() alone
  BOOST_CHECK_EXCEPTION((void)dp.train_step(x, y, mse), kiln::Error, kt::message_contains({"broadcast_parameters"}));
  // An in-place edit of replica 0 away from any sampled element (weight clipping on dp.module(), which
  // torch's re-copy each forward would spread): on the CPU every parameter is compared.
  dp.broadcast_parameters();
  auto edited = dp.module().parameters().to_vector();
  edited[edited.size() / 3] = 0.125f;
  dp.module().parameters().copy_from(std::span<const float>(edited));
  BOOST_CHECK_EXCEPTION((void)dp.train_step(x, y, mse), kiln::Error,
                        kt::message_contains({"element " + std::to_string(edited.size() / 3), "in place"}));
}

BOOST_AUTO_TEST_CASE(batch_norm_buffers_start_every_step_from_replica_zeros) {
  // torch's replicate(): each replica normalises its chunk by the chunk's statistics, its running
  // statistics starting from replica 0's; replica 0's are the ones that last.
  using Net = knn::Sequential<knn::Linear<13, 4>, knn::BatchNorm1d<4>>;
  DataParallel<Net, Row> dp(2, 5);
  knn::MSELoss mse;
  const auto batch = [](std::uint32_t step) {
    return kt::make_tensor<kiln::Cpu>(kt::random_values<float>(8 * 13, -1, 2, 500 + step), Extents<Row>(8));
  };
  const auto y = kt::make_tensor<kiln::Cpu>(std::vector<float>(32, 0.5f), Extents<Shape<dyn, 4>>(8));
  const auto x0 = batch(0), x1 = batch(1);
  (void)dp.train_step(x0, y, mse);
  (void)dp.train_step(x1, y, mse);
  knn::Model<Net, Row> first(5), second(5);  // replica 0 and replica 1, one device each
  (void)first.forward(x0.slice(0, 4));
  (void)second.forward(x0.slice(0, 4));  // step 2 starts from replica 0's
  (void)first.forward(x1.slice(0, 4));
  (void)second.forward(x1.slice(4, 8));
  // (within 1e-6: the replica's GEMMs run on fewer threads)
  BOOST_TEST(max_abs_diff(dp.replica(0).buffers().to_vector(), first.buffers().to_vector()) <= 1e-6);
  BOOST_TEST(max_abs_diff(dp.replica(1).buffers().to_vector(), second.buffers().to_vector()) <= 1e-6);
  BOOST_TEST(max_abs_diff(first.buffers().to_vector(), second.buffers().to_vector()) > 1e-3);
}

BOOST_AUTO_TEST_CASE(sync_batch_norm_replicas_train_like_one_device) {
  // SyncBatchNorm normalises by all the replicas' chunks together: 20 Adam steps on 2 and on 3 replicas
  // (an uneven split) give one device's parameters and running statistics; so does a batch of 2 on 3
  // replicas, where the third replica's chunk is empty and it still takes part.
  using Sync = knn::convert_sync_batchnorm_t<kiln::test::parallel_models::LeNetBn>;
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 3) % 10);
  const double two = train_both<Sync, Image>(2, 20, Extents<Image>(32), labels, Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  const double three = train_both<Sync, Image>(3, 20, Extents<Image>(32), labels, Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  const double empty = train_both<Sync, Image>(3, 5, Extents<Image>(2), std::vector<std::int64_t>{3, 7},
                                               Extents<Shape<dyn>>(2), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("SyncBatchNorm LeNet, 2 / 3 / 3 replicas with an empty chunk: " << two << " / " << three << " / " << empty);
  BOOST_TEST(two <= 1e-5);
  BOOST_TEST(three <= 1e-5);
  BOOST_TEST(empty <= 1e-5);
  const double plain = train_both<kiln::test::parallel_models::LeNetBn, Image>(2, 20, Extents<Image>(32), labels,
                                                                                Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{},
                                                                                /*same_loss=*/false);
  BOOST_TEST(plain > 1e-4);  // BatchNorm normalises each chunk by its own statistics
}

BOOST_AUTO_TEST_CASE(group_and_layer_norm_replicas_train_like_one_device) {
  // Normalisations within each sample need nothing from the other replicas: 3 replicas (11, 11, 10
  // samples) train a network with GroupNorm and LayerNorm like one device.
  using Net = kiln::test::parallel_models::LeNetGroupNorm;
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7) % 10);
  const double d =
      train_both<Net, Image>(3, 20, Extents<Image>(32), labels, Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("GroupNorm + LayerNorm, 3 replicas, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(sync_batch_norm_replicas_fail_together_and_never_train_alone) {
  using Sync = knn::convert_sync_batchnorm_t<kiln::test::parallel_models::LeNetBn>;
  DataParallel<Sync, Image> dp(2, 0);
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(4 * 64, -1, 1, 12), Extents<Image>(4));
  // Label 42 on replica 1 after both forwards' collectives: replica 0's backward collective is
  // abandoned, and the label's error reaches the caller, whichever thread ends first (replica 0's
  // Abandoned came out of the replica's error context as a plain Error and won now and then: 20 tries).
  const auto bad = kt::make_tensor<kiln::Cpu>(std::vector<std::int64_t>{0, 1, 2, 42}, Extents<Shape<dyn>>(4));
  for (int t = 0; t < 20; ++t)
    BOOST_CHECK_EXCEPTION((void)dp.train_step(x, bad, knn::CrossEntropyLoss{}), kiln::ValueError,
                          [](const kiln::ValueError& e) {
                            const std::string what = e.what();
                            return what.find("in replica 1 (rows 2 .. 3") != std::string::npos;
                          });
  const auto y = kt::make_tensor<kiln::Cpu>(std::vector<std::int64_t>{0, 1, 2, 3}, Extents<Shape<dyn>>(4));
  BOOST_TEST(std::isfinite(dp.train_step(x, y, knn::CrossEntropyLoss{})));  // the group works again
  // One replica's training forward outside a step would wait for the others forever: refused.
  BOOST_CHECK_EXCEPTION((void)dp.module().forward(x), kiln::Error, [](const kiln::Error& e) {
    return std::string(e.what()).find("outside a step of all 2 replicas") != std::string::npos;
  });
  dp.eval();
  BOOST_TEST(dp.module().forward(x).numel() == 40);  // evaluation exchanges nothing
  // A step takes replica 0's mode to every replica (torch's replicate): no replica waits for another
  // that evaluates.
  dp.module().train();
  dp.replica(1).eval();
  BOOST_TEST(std::isfinite(dp.train_step(x, y, knn::CrossEntropyLoss{})));
  BOOST_TEST(dp.replica(1).training());
}

BOOST_AUTO_TEST_CASE(schedulers_drive_every_replicas_optimizer) {
  // The optimizers' bundle is an optimizer to a scheduler: OneCycleLR sets the lr and the momentum
  // (SGD) or beta1 (Adam) of every replica.
  DataParallel<Mlp, Row> dp(3, 1);
  auto sgd = dp.make_optimizers([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.1}); });
  kiln::optim::OneCycleLR sgd_sched(sgd, 0.5, 20);
  auto adam = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-3}); });
  kiln::optim::OneCycleLR adam_sched(adam, 0.01, 20);
  for (int k = 0; k < 5; ++k) {
    sgd_sched.step();
    adam_sched.step();
  }
  for (int r = 0; r < dp.size(); ++r) {
    BOOST_TEST(sgd.replica(r).lr() == sgd_sched.get_last_lr());
    BOOST_TEST(sgd.replica(r).momentum() == sgd_sched.momentum_at(5));
    BOOST_TEST(adam.replica(r).lr() == adam_sched.get_last_lr());
    BOOST_TEST(adam.replica(r).betas().beta1 == adam_sched.momentum_at(5));
  }
  BOOST_TEST(sgd.momentum() < 0.95f);  // falling with the lr's rise
}

BOOST_AUTO_TEST_CASE(parameter_groups_reach_every_replica) {
  // add_param_group on the bundle adds the group to every replica's optimizer (by name, in each
  // replica's own model); a scheduler moves every group of every replica; the replicas stay identical.
  DataParallel<Mlp, Row> dp(2, 1);
  auto opt = dp.make_optimizers([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.1, .weight_decay = 0.01}); });
  std::vector<kiln::nn::ParameterInfo> biases;
  for (const auto& p : dp.replica(0).named_parameters())
    if (p.shape.size() == 1) biases.push_back(p);
  opt.add_param_group({.params = biases, .lr = 1.0, .weight_decay = 0.0});
  BOOST_TEST(opt.param_group_count() == 2u);
  BOOST_TEST(opt.replica(1).param_group_count() == 2u);
  BOOST_TEST((opt.group_parameter_names(1) == std::vector<std::string>{"0.bias", "2.bias", "4.bias"}));
  kiln::optim::StepLR sched(opt, /*step_size=*/1, /*gamma=*/0.5);
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(8 * 13, -1, 1, 21), Extents<Row>(8));
  const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(8, -1, 1, 22), Extents<Shape<dyn, 1>>(8));
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    (void)dp.train_step(x, y, knn::MSELoss{});
    opt.step();
    sched.step();
  }
  for (int r = 0; r < dp.size(); ++r) {
    BOOST_TEST(opt.replica(r).group_lr(0) == 0.1 * 0.125, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(opt.replica(r).group_lr(1) == 0.125, boost::test_tools::tolerance(1e-12));
  }
  BOOST_TEST(sched.get_last_lr(1) == 0.125, boost::test_tools::tolerance(1e-12));
  BOOST_TEST((dp.replica(0).parameters().to_vector() == dp.replica(1).parameters().to_vector()));
  // An entry of a model that is no replica is refused; a replica's or a name is found in each.
  knn::Model<Mlp, Row> other(1);
  BOOST_CHECK_THROW(opt.add_param_group({.params = {other.named_parameters()[0]}}), kiln::ValueError);
  BOOST_TEST(opt.param_group_count() == 2u);
  opt.add_param_group({.params = {dp.replica(1).named_parameters()[0], "2.weight"}, .lr = 0.0});
  BOOST_TEST(opt.replica(0).param_group_count() == 3u);
  BOOST_TEST((opt.replica(1).group_parameter_names(2) == std::vector<std::string>{"0.weight", "2.weight"}));
}

BOOST_AUTO_TEST_CASE(frozen_layers_hold_on_every_replica) {
  // freeze on the bundle freezes every replica's first layers; the optimizers made for the replicas
  // (before or after) leave them, weight decay on, and step the rest; the replicas stay identical.
  DataParallel<Mlp, Row> dp(2, 1);
  auto opt = dp.make_optimizers([](auto& m) { return kiln::optim::AdamW(m, {.lr = 0.1, .weight_decay = 0.1}); });
  dp.freeze(2);
  BOOST_TEST(dp.frozen_layers() == 2u);
  BOOST_TEST(dp.replica(1).frozen_layers() == 2u);
  const auto start = dp.replica(0).parameters().to_vector();
  const auto first = static_cast<std::size_t>(dp.replica(0).frozen_parameter_count());
  BOOST_TEST_REQUIRE(first == 13u * 16u + 16u);
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(8 * 13, -1, 1, 23), Extents<Row>(8));
  const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(8, -1, 1, 24), Extents<Shape<dyn, 1>>(8));
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    (void)dp.train_step(x, y, knn::MSELoss{});
    opt.step();
  }
  for (int r = 0; r < dp.size(); ++r) {
    const auto p = dp.replica(r).parameters().to_vector();
    BOOST_TEST((std::vector<float>(p.begin(), p.begin() + first) == std::vector<float>(start.begin(), start.begin() + first)));
    BOOST_TEST((std::vector<float>(p.begin() + first, p.end()) != std::vector<float>(start.begin() + first, start.end())));
  }
  BOOST_TEST((dp.replica(0).parameters().to_vector() == dp.replica(1).parameters().to_vector()));
  dp.unfreeze();
  BOOST_TEST(dp.replica(1).frozen_layers() == 0u);
  // Replica 0 alone frozen (dp.module().freeze, torch's habit): the next train_step says how to freeze.
  dp.module().freeze(2);
  BOOST_CHECK_EXCEPTION((void)dp.train_step(x, y, knn::MSELoss{}), kiln::Error, [](const kiln::Error& e) {
    return std::string(e.what()).find("replica 1 has 0 frozen layers, replica 0 2: freeze every replica with "
                                      "dp.freeze(k)") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(an_uneven_split_is_weighted_like_the_whole_batch) {
  for (const kiln::index_t n : {7, 2}) {  // 3 + 3 + 1 and 1 + 1 + 0 on 3 replicas
    BOOST_TEST_CONTEXT("batch " << n << " on 3 replicas: " << Split::of(n, 3).describe()) {
      const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(n * 13), -1, 1, 9),
                                                Extents<Row>(n));
      const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(n), -1, 1, 10),
                                                Extents<Shape<dyn, 1>>(n));
      knn::MSELoss mse;
      knn::Model<Mlp, Row> single(3);
      single.zero_grad();
      single.backward(mse.backward(single.forward(x), y));
      DataParallel<Mlp, Row> dp(3, 3);
      for (int r = 0; r < dp.size(); ++r) dp.replica(r).zero_grad();
      (void)dp.train_step(x, y, mse);
      for (int r = 0; r < dp.size(); ++r)
        BOOST_TEST(max_abs_diff(dp.replica(r).gradients().to_vector(), single.gradients().to_vector()) <= 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_replicas_train_like_one_bf16_device) {
  // Mixed precision replicas: inputs in the storage type, fp32 masters stepped on every replica; the
  // targets float (as the examples pass them; the fp16 case below has 16-bit targets). Every other
  // step gives train_step the float inputs, which it casts as the single model's were.
  using P = kiln::Policy<kiln::MixedBf16>;
  knn::Model<Mlp, Row, P> single(4);
  kiln::optim::Adam opt(single, {.lr = 1e-2});
  DataParallel<Mlp, Row, kiln::MixedBf16> dp(2, 4);
  auto opts = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2}); });
  knn::MSELoss mse;
  const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(32, -2, 2, 12), Extents<Shape<dyn, 1>>(32));
  for (int s = 0; s < 10; ++s) {
    const auto x32 = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(32 * 13, -1, 1, 200 + s), Extents<Row>(32));
    Tensor<kiln::bfloat16, Row> x(x32.extents());
    kiln::assign(x, kiln::cast<kiln::bfloat16>(x32));
    opt.zero_grad();
    single.backward(mse.backward(single.forward(x), y));
    opt.step();
    opts.zero_grad();
    if (s % 2 == 0)
      (void)dp.train_step(x, y, mse);
    else
      (void)dp.train_step(x32, y, mse);
    opts.step();
  }
  BOOST_TEST(dp.in_sync());
  // Each replica rounds its own activations and loss gradient, so not bit for bit (measured 1.5e-8).
  const double d = max_abs_diff(dp.module().parameters().to_vector(), single.parameters().to_vector());
  BOOST_TEST_MESSAGE("bf16, 2 replicas, 10 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(fp16_replicas_step_through_one_scaler_like_one_fp16_device) {
  // One GradScaler over the optimizer bundle: every replica's gradients unscaled, all step or none, a
  // skipped step counted once. A first scale of 2^40 overflows fp16 (skipped, backed off) until it fits.
  using P = kiln::Policy<kiln::MixedFp16>;
  const kiln::optim::GradScalerOptions so{.init_scale = 1099511627776.0, .growth_interval = 3};
  knn::Model<Mlp, Row, P> single(4);
  kiln::optim::Adam opt(single, {.lr = 1e-2});
  kiln::optim::GradScaler<kiln::Cpu> single_scaler(so);
  DataParallel<Mlp, Row, kiln::MixedFp16> dp(2, 4);
  auto opts = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2}); });
  kiln::optim::GradScaler<kiln::Cpu> scaler(so);
  knn::MSELoss mse;
  const auto y32 = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(32, -2, 2, 12), Extents<Shape<dyn, 1>>(32));
  Tensor<kiln::half, Shape<dyn, 1>> y(y32.extents());
  kiln::assign(y, kiln::cast<kiln::half>(y32));
  int dp_steps = 0, single_steps = 0;
  for (int s = 0; s < 40; ++s) {
    const auto x32 = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(32 * 13, -1, 1, 400 + s), Extents<Row>(32));
    Tensor<kiln::half, Row> x(x32.extents());
    kiln::assign(x, kiln::cast<kiln::half>(x32));
    opt.zero_grad();
    single.backward(mse.backward(single.forward(x), y, static_cast<float>(single_scaler.scale())));
    single_steps += single_scaler.step(opt);
    single_scaler.update();
    opts.zero_grad();
    (void)dp.train_step(x, y, mse, scaler.scale());
    dp_steps += scaler.step(opts);
    scaler.update();
  }
  BOOST_TEST(scaler.skipped_steps() > 0);  // the huge first scales overflowed
  BOOST_TEST(scaler.skipped_steps() == single_scaler.skipped_steps());
  BOOST_TEST(dp_steps == single_steps);
  BOOST_TEST(dp_steps + scaler.skipped_steps() == 40);
  BOOST_TEST(scaler.scale() == single_scaler.scale());
  BOOST_TEST(dp.in_sync());
  const double d = max_abs_diff(dp.module().parameters().to_vector(), single.parameters().to_vector());
  BOOST_TEST_MESSAGE("fp16, 2 replicas, 40 iterations (" << scaler.skipped_steps() << " skipped): largest parameter difference " << d);
  BOOST_TEST(d <= 1e-4);
}

BOOST_AUTO_TEST_CASE(an_error_on_a_replica_thread_reaches_the_caller) {
  DataParallel<LeNet, Image> dp(2, 0);
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(4 * 64, -1, 1, 11), Extents<Image>(4));
  const auto y = kt::make_tensor<kiln::Cpu>(std::vector<std::int64_t>{0, 1, 2, 42}, Extents<Shape<dyn>>(4));
  BOOST_CHECK_THROW((void)dp.train_step(x, y, knn::CrossEntropyLoss{}), kiln::ValueError);  // label 42: replica 1
  const auto y3 = kt::make_tensor<kiln::Cpu>(std::vector<std::int64_t>{0, 1, 2}, Extents<Shape<dyn>>(3));
  BOOST_CHECK_THROW((void)dp.train_step(x, y3, knn::CrossEntropyLoss{}), kiln::ShapeError);
  BOOST_CHECK_THROW((DataParallel<LeNet, Image>(0)), kiln::ValueError);
}

// A replica's error names the replica and the rows it was given, in the error's own type (torch's "Caught
// ValueError in replica 2 on device 2"): BatchNorm1d given 1 row of a batch of 5 over 4 replicas
// (5 = 2 + 2 + 1 + 0) raises there, as torch's does. train_step under NoGrad says to evaluate through
// dp.module() (it said Model::backward had no activations).
BOOST_AUTO_TEST_CASE(a_replicas_error_names_the_replica_and_its_rows) {
  using Bn = knn::Sequential<knn::Linear<13, 4>, knn::BatchNorm1d<4>, knn::Linear<4, 1>>;
  DataParallel<Bn, Row> dp(4, 5);
  const knn::MSELoss loss;
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(5 * 13, -1, 1, 3), Extents<Row>(5));
  const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(5, -1, 1, 4), Extents<Shape<dyn, 1>>(5));
  BOOST_CHECK_EXCEPTION(dp.train_step(x, y, loss), kiln::ValueError, [](const kiln::ValueError& e) {
    const std::string what = e.what();
    return what.find("in replica 2 (rows 4 .. 4 of the batch split 5 = 2 + 2 + 1 + 0): "
                     "kiln::nn::BatchNorm1d") != std::string::npos;
  });
  const auto x6 = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(6 * 13, -1, 1, 5), Extents<Row>(6));
  const auto y6 =
      kt::make_tensor<kiln::Cpu>(kt::random_values<float>(6, -1, 1, 6), Extents<Shape<dyn, 1>>(6));
  BOOST_TEST(std::isfinite(dp.train_step(x6, y6, loss)));  // 6 = 2 + 2 + 2 + 0
  knn::NoGrad guard(dp.module());
  BOOST_CHECK_EXCEPTION(dp.train_step(x6, y6, loss), kiln::Error, [](const kiln::Error& e) {
    const std::string what = e.what();
    return what.find("gradients are disabled (a NoGrad over the model)") != std::string::npos &&
           what.find("dp.module().forward(x) under NoGrad") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
