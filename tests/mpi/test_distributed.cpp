// Distributed<Mpi> on 2 ranks (mpiexec -n 2): rank 0's parameters reach every rank; 20 Adam steps with
// each rank on its half of the global batch give the parameters of one device on the whole batch
// (within 1e-5); the averaged gradients equal the single-device ones for every bucket size; no_sync
// accumulation (and set_require_sync(false / true) as no_sync and back), decided by the forward as in
// torch; GroupNorm and LayerNorm training like one device; rank 0's BatchNorm buffers broadcast
// before training forwards; SyncBatchNorm training like one device on the whole batch (uneven and empty
// shares, one value per channel an error on every rank); rank-0 checkpoints that every rank loads; and
// ranks that disagree (world size, model, a failed checkpoint write) all end with an error instead of
// hanging.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <kiln/data/data.hpp>
#include <kiln/io/optimizer_state.hpp>
#include <kiln/io/safetensors.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <kiln/parallel/distributed.hpp>
#include <kiln/parallel/mpi.hpp>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>  // getpid

#include "mpi/ddp_support.hpp"
#include "support/parallel_models.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using Group = kiln::parallel::ProcessGroup<kiln::Mpi>;
using kt::max_abs_diff;
using kt::share;
template <class Net, class In, class Prec = kiln::Fp32>
using Ddp = kiln::parallel::DistributedDataParallel<Net, In, kiln::Mpi, Prec>;

using kiln::test::parallel_models::Image;
using kiln::test::parallel_models::LeNet;
using kiln::test::parallel_models::Mlp;
using kiln::test::parallel_models::Row;

constexpr auto test_timeout = std::chrono::seconds(60);

/// The no_sync tests' batch: 16 rows and targets, and one device's gradient of its mean MSE (seed 6).
struct SixteenRows {
  Tensor<float, Row> x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(16 * 13, -1, 1, 4), Extents<Row>(16));
  Tensor<float, Shape<dyn, 1>> y =
      kt::make_tensor<kiln::Cpu>(kt::random_values<float>(16, -1, 1, 5), Extents<Shape<dyn, 1>>(16));
  std::vector<float> want;
  SixteenRows() {
    knn::Model<Mlp, Row> single(6);
    single.backward(knn::MSELoss{}.backward(single.forward(x), y));
    want = single.gradients().to_vector();
  }
};

/// What one run of docs/parallel.md's resume recipe (the snippet parallel.ddp_resume, included as written)
/// ends with: trains until `epochs` epochs are done, from ckpt.safetensors in the working directory when
/// it is there, writing it after every epoch.
struct ResumeRun {
  std::vector<float> parameters;
  double lr = 0;
  std::int64_t start = 0;
};
ResumeRun run_resume_recipe(Group& group, std::int64_t epochs) {
  Ddp<Mlp, Row> ddp(group, 3);
  kiln::optim::Adam opt(ddp, {.lr = 1e-2});
  const kiln::data::TensorDataset<Shape<13>, float, Shape<1>> train(kt::random_values<float>(24 * 13, -1, 1, 40),
                                                                    kt::random_values<float>(24, -1, 1, 41));
  kiln::data::DataLoader loader(train, kiln::data::DistributedSampler{.world_size = group.size(), .rank = group.rank()},
                                {.batch_size = 4});
  knn::MSELoss mse;
#include "parallel.ddp_resume.inc"
  return {ddp.module().parameters().to_vector(), opt.lr(), start};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(parallel)
BOOST_AUTO_TEST_SUITE(distributed_mpi)

// Run by the CTest kiln.mpi.launcher_env.LOCAL_RANK (mpiexec -x LOCAL_RANK=5, which neither rank's own
// local rank is), not in the plain run: a launcher's LOCAL_RANK (torchrun's; on GPUs the device a rank
// binds) wins over Open MPI's local rank.
BOOST_AUTO_TEST_CASE(a_launchers_local_rank_wins, *boost::unit_test::disabled()) {
  const char* local = std::getenv("LOCAL_RANK");
  BOOST_TEST_REQUIRE(local != nullptr);
  Group group({.timeout = test_timeout});
  BOOST_TEST(group.local_rank() == std::stoi(local));
}

BOOST_AUTO_TEST_CASE(the_job_has_two_ranks) {
  Group group({.timeout = test_timeout});
  BOOST_TEST_REQUIRE(group.size() == 2);
  BOOST_TEST(group.local_rank() == group.rank());  // one node
  const auto all = group.all_gather(100 + group.rank(), "test gather");
  BOOST_TEST(all == (std::vector<std::int64_t>{100, 101}), boost::test_tools::per_element());
  std::vector<double> v{static_cast<double>(group.rank()) + 0.5, 7.0};
  group.broadcast(v.data(), 2, 1, "test broadcast");
  BOOST_TEST(v == (std::vector<double>{1.5, 7.0}), boost::test_tools::per_element());
  group.barrier("test barrier");
  // MPI_THREAD_FUNNELED: a collective from another thread is refused before it reaches MPI, on both
  // ranks alike, and the group goes on working from the main thread.
  std::string refused;
  std::thread([&] {
    try {
      group.barrier("a barrier off the main thread");
    } catch (const kiln::parallel::DistributedError& e) {
      refused = e.what();
    }
  }).join();
  BOOST_TEST(refused.find("a barrier off the main thread: called from a thread other than the one that "
                          "initialised MPI") != std::string::npos, refused);
  group.barrier("test barrier again");
}

BOOST_AUTO_TEST_CASE(two_ranks_train_the_mlp_like_one_device) {
  Group group({.timeout = test_timeout});
  const auto targets = kt::random_values<float>(64, -2, 2, 7);
  const double d = kt::train_both<Mlp, Row, kiln::Mpi, kiln::Cpu>(group, 20, Extents<Row>(64), targets, Extents<Shape<dyn, 1>>(64), knn::MSELoss{});
  BOOST_TEST_MESSAGE("rank " << group.rank() << ": MLP, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(two_ranks_train_a_small_lenet_like_one_device) {
  Group group({.timeout = test_timeout});
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 3) % 10);
  const double d =
      kt::train_both<LeNet, Image, kiln::Mpi, kiln::Cpu>(group, 20, Extents<Image>(32), labels, Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("rank " << group.rank() << ": LeNet, 20 steps: largest parameter difference " << d);
  BOOST_TEST(d <= 1e-5);
}

BOOST_AUTO_TEST_CASE(frozen_layers_train_like_one_device_and_stay_where_they_were) {
  // The MLP's first Linear frozen on both ranks (ddp.freeze) and on one device; AdamW with weight decay
  // built on the DDP object skips it as the single device's does; a bucket per parameter (the frozen
  // layers' buckets are averaged at the end of backward, their gradients 0).
  Group group({.timeout = test_timeout});
  knn::Model<Mlp, Row> single(5);
  single.freeze(2);
  kiln::optim::AdamW opt(single, {.lr = 1e-2, .weight_decay = 0.1});
  Ddp<Mlp, Row> ddp(group, 5 + static_cast<std::uint64_t>(group.rank()), {.bucket_cap_mb = 1e-6, .first_bucket_mb = 1e-6});
  ddp.freeze(2);
  BOOST_TEST(ddp.frozen_layers() == 2u);
  BOOST_TEST(ddp.frozen_parameter_count() == 13 * 16 + 16);
  kiln::optim::AdamW dopt(ddp, {.lr = 1e-2, .weight_decay = 0.1});
  const auto start = ddp.module().parameters().to_vector();
  const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(16, -1, 1, 8), Extents<Shape<dyn, 1>>(16));
  for (std::uint32_t s = 0; s < 3; ++s) {
    const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(16 * 13, -1, 1, 60 + s), Extents<Row>(16));
    opt.zero_grad();
    single.backward(knn::MSELoss{}.backward(single.forward(x), y));
    opt.step();
    dopt.zero_grad();
    ddp.backward(knn::MSELoss{}.backward(ddp.forward(share(x, group.rank(), group.size())),
                                         share(y, group.rank(), group.size())));
    dopt.step();
  }
  const auto got = ddp.module().parameters().to_vector();
  BOOST_TEST((std::vector<float>(got.begin(), got.begin() + 224) == std::vector<float>(start.begin(), start.begin() + 224)));
  BOOST_TEST(max_abs_diff(got, single.parameters().to_vector()) <= 1e-5);
  BOOST_TEST(ddp.in_sync());
  // A bucket per parameter: 0.weight's and 0.bias's are not averaged (0 on both ranks), the other four are.
  BOOST_TEST(ddp.buckets().size() == 6u);
  BOOST_TEST(ddp.buckets_skipped_as_frozen() == 2u);
  ddp.unfreeze();
  dopt.zero_grad();
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(16 * 13, -1, 1, 70), Extents<Row>(16));
  ddp.backward(knn::MSELoss{}.backward(ddp.forward(share(x, group.rank(), group.size())),
                                       share(y, group.rank(), group.size())));
  BOOST_TEST(ddp.buckets_skipped_as_frozen() == 0u);
  dopt.step();
  BOOST_TEST(ddp.in_sync());
  // Frozen by ddp.freeze, unfrozen through ddp.module() (on both ranks): its buckets are averaged again
  // (they were skipped, and the ranks drifted apart, each stepping its own share's gradient).
  ddp.freeze(2);
  ddp.module().unfreeze();
  dopt.zero_grad();
  ddp.backward(knn::MSELoss{}.backward(ddp.forward(share(x, group.rank(), group.size())),
                                       share(y, group.rank(), group.size())));
  BOOST_TEST(ddp.buckets_skipped_as_frozen() == 0u);
  dopt.step();
  BOOST_TEST(ddp.in_sync());
}

BOOST_AUTO_TEST_CASE(averaged_gradients_equal_one_device_for_every_bucket_size) {
  Group group({.timeout = test_timeout});
  std::vector<std::int64_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7) % 10);
  const double d = kt::bucketed_gradient_error<LeNet, Image, kiln::Mpi, kiln::Cpu>(
      group, Extents<Image>(16), labels, Extents<Shape<dyn>>(16), knn::CrossEntropyLoss{});
  BOOST_TEST(d <= 1e-6);
}

BOOST_AUTO_TEST_CASE(buckets_start_while_backward_is_still_running) {
  // With a bucket per parameter, every bucket after the first layer's starts before backward reaches
  // that layer: the averaging overlaps the rest of backward, as DDP's does. Holding the buckets to the
  // end would give the same gradients, so only this tells.
  Group group({.timeout = test_timeout});
  Ddp<LeNet, Image> ddp(group, 3, {.bucket_cap_mb = 1e-6, .first_bucket_mb = 1e-6});  // 1 byte: one each
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(4 * 8 * 8, -1, 1, 8), Extents<Image>(4));
  std::vector<std::int64_t> labels{1, 2, 3, 4};
  const auto y = Tensor<std::int64_t, Shape<dyn>>::from(std::span<const std::int64_t>(labels), Extents<Shape<dyn>>(4));
  knn::CrossEntropyLoss ce;
  ddp.backward(ce.backward(ddp.forward(x), y));
  // A bucket can start before backward's end when its parameters all come after the first layer's:
  // it begins at or after the second layer with parameters ("4.weight").
  index_t second_layer = 0;
  for (const auto& p : ddp.module().named_parameters())
    if (p.name == "4.weight") second_layer = p.offset;
  std::size_t early = 0;
  for (const auto& b : ddp.buckets()) early += b.begin >= second_layer ? 1 : 0;
  BOOST_TEST_MESSAGE(ddp.buckets().size() << " buckets, " << ddp.buckets_started_during_backward()
                                          << " started during backward, " << early << " could");
  BOOST_TEST(second_layer > 0);
  BOOST_TEST(early >= 2u);
  BOOST_TEST(ddp.buckets_started_during_backward() == early);
}

BOOST_AUTO_TEST_CASE(without_launcher_variables_the_local_rank_comes_from_the_host_names) {
  // mpirun sets OMPI_COMM_WORLD_LOCAL_RANK; without it and LOCAL_RANK the group gathers the ranks' host
  // names (within its timeout): this test's ranks share one host, so each one's local rank is its rank.
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"})
    if (const char* v = std::getenv(name)) saved.emplace_back(name, v);
  ::unsetenv("LOCAL_RANK");
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  {
    Group group({.timeout = test_timeout});
    BOOST_TEST(group.local_rank() == group.rank());
  }
  for (const auto& [name, value] : saved) ::setenv(name.c_str(), value.c_str(), 1);
}

BOOST_AUTO_TEST_CASE(no_sync_accumulates_locally_and_the_last_backward_averages_everything) {
  Group group({.timeout = test_timeout});
  const SixteenRows batch;
  const auto& [x, y, want] = batch;
  knn::MSELoss mse;

  // Two micro-batches of 4 per rank (quarters of the batch), each loss gradient halved.
  Ddp<Mlp, Row> ddp(group, 6);
  const auto mine_x = share(x, group.rank(), group.size());
  const auto mine_y = share(y, group.rank(), group.size());
  const auto first_x = share(mine_x, 0, 2), second_x = share(mine_x, 1, 2);
  const auto first_y = share(mine_y, 0, 2), second_y = share(mine_y, 1, 2);
  {
    auto guard = ddp.no_sync();
    BOOST_TEST(!ddp.require_sync());
    ddp.backward(mse.backward(ddp.forward(first_x), first_y, 0.5f));
  }
  BOOST_TEST(ddp.require_sync());
  const auto local = ddp.module().gradients().to_vector();
  ddp.backward(mse.backward(ddp.forward(second_x), second_y, 0.5f));
  BOOST_TEST(max_abs_diff(ddp.module().gradients().to_vector(), want) <= 1e-6);
  // The first micro-batch's gradients were this rank's alone: one device's on its micro-batch (they
  // differ from the average).
  knn::Model<Mlp, Row> one(6);
  one.backward(mse.backward(one.forward(first_x), first_y, 0.5f));
  const auto own = one.gradients().to_vector();
  BOOST_TEST(max_abs_diff(local, own) <= 1e-6);
  BOOST_TEST(max_abs_diff(local, want) > 1e-4);

  // set_require_sync(false) (torch's require_backward_grad_sync = False) skips the averaging as no_sync()
  // does, and set_require_sync(true) brings it back: the same micro-batches end on the same gradients.
  Ddp<Mlp, Row> flag(group, 6);
  flag.set_require_sync(false);
  BOOST_TEST(!flag.require_sync());
  flag.backward(mse.backward(flag.forward(first_x), first_y, 0.5f));
  const auto flag_local = flag.module().gradients().to_vector();
  BOOST_TEST(max_abs_diff(flag_local, own) <= 1e-6);
  BOOST_TEST(flag_local == local, boost::test_tools::per_element());
  flag.set_require_sync(true);
  BOOST_TEST(flag.require_sync());
  flag.backward(mse.backward(flag.forward(second_x), second_y, 0.5f));
  BOOST_TEST(max_abs_diff(flag.module().gradients().to_vector(), want) <= 1e-6);
  BOOST_TEST(flag.module().gradients().to_vector() == ddp.module().gradients().to_vector(),
             boost::test_tools::per_element());
}

// torch's loss.backward() after a DDP forward always averages; kiln's ddp.module().backward(dy) after
// ddp.forward(x) would not (the ranks drift apart without a word): the next ddp.forward refuses it, on
// every rank, naming ddp.backward; under no_sync() the module's backward is a local one, as meant. The
// refusal is once: the forward after it runs.
BOOST_AUTO_TEST_CASE(a_ddp_forward_followed_by_the_modules_backward_is_refused) {
  Group group({.timeout = test_timeout});
  const SixteenRows batch;
  const auto& [x, y, want] = batch;
  knn::MSELoss mse;
  Ddp<Mlp, Row> ddp(group, 6);
  const auto mine_x = share(x, group.rank(), group.size());
  const auto mine_y = share(y, group.rank(), group.size());
  ddp.module().backward(mse.backward(ddp.forward(mine_x), mine_y));
  BOOST_CHECK_EXCEPTION((void)ddp.forward(mine_x), kiln::Error, [](const kiln::Error& e) {
    const std::string what = e.what();
    return what.find("went back through ddp.module().backward(dy), which does not average") != std::string::npos;
  });
  ddp.zero_grad();
  ddp.backward(mse.backward(ddp.forward(mine_x), mine_y));  // the forward after the refusal runs
  BOOST_TEST(max_abs_diff(ddp.module().gradients().to_vector(), want) <= 1e-6);
  {
    auto guard = ddp.no_sync();
    ddp.module().backward(mse.backward(ddp.forward(mine_x), mine_y));
  }
  (void)ddp.forward(mine_x);  // a local backward under no_sync(): nothing to refuse
  BOOST_TEST(ddp.in_sync());
}

// torch prepares its reducer in forward: a forward under no_sync() makes the backward after it local
// wherever that backward is called, a forward outside it makes it average even inside no_sync().
BOOST_AUTO_TEST_CASE(no_sync_is_decided_by_the_forward_as_in_torch) {
  Group group({.timeout = test_timeout});
  const SixteenRows batch;
  const auto& [x, y, want] = batch;
  knn::MSELoss mse;
  const auto mine_x = share(x, group.rank(), group.size());
  const auto mine_y = share(y, group.rank(), group.size());

  Ddp<Mlp, Row> local(group, 6);
  std::optional<Ddp<Mlp, Row>::NoSync> guard(std::in_place, local);
  const auto pred = local.forward(mine_x);
  guard.reset();
  BOOST_TEST(local.require_sync());
  local.backward(mse.backward(pred, mine_y));  // forward under no_sync: this rank's own gradients
  BOOST_TEST(max_abs_diff(local.module().gradients().to_vector(), want) > 1e-4);

  Ddp<Mlp, Row> averaged(group, 6);
  const auto pred2 = averaged.forward(mine_x);
  {
    auto inside = averaged.no_sync();
    averaged.backward(mse.backward(pred2, mine_y));  // forward outside: averaged
  }
  BOOST_TEST(max_abs_diff(averaged.module().gradients().to_vector(), want) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(group_and_layer_norm_ranks_train_like_one_device_with_every_bucket_size) {
  // Per-sample normalisations need nothing from the other rank: each rank's half trains like one
  // device on the whole batch, and the averaged gradients match for every bucket size.
  using Net = kiln::test::parallel_models::LeNetGroupNorm;
  Group group({.timeout = test_timeout});
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7) % 10);
  const double d = kt::train_both<Net, Image, kiln::Mpi, kiln::Cpu>(group, 20, Extents<Image>(32), labels,
                                                                    Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("rank " << group.rank() << ": GroupNorm + LayerNorm, 20 steps: largest difference " << d);
  BOOST_TEST(d <= 1e-5);
  const std::vector<std::int64_t> first(labels.begin(), labels.begin() + 16);
  const double g = kt::bucketed_gradient_error<Net, Image, kiln::Mpi, kiln::Cpu>(
      group, Extents<Image>(16), first, Extents<Shape<dyn>>(16), knn::CrossEntropyLoss{});
  BOOST_TEST(g <= 1e-6);
}

BOOST_AUTO_TEST_CASE(rank_zeros_batch_norm_buffers_reach_every_rank_before_a_training_forward) {
  // torch's broadcast_buffers: each rank normalises by its own batch, and the running statistics it
  // updates start from rank 0's whenever the previous forward was a synchronised training one.
  Group group({.timeout = test_timeout});
  using Net = knn::Sequential<knn::Linear<13, 4>, knn::BatchNorm1d<4>>;
  const auto data = [](int rank, std::uint32_t step) {
    return kt::make_tensor<kiln::Cpu>(kt::random_values<float>(6 * 13, -1, 1 + rank, 400 + 10 * step + static_cast<std::uint32_t>(rank)),
                                      Extents<Row>(6));
  };
  Ddp<Net, Row> ddp(group, 3);
  knn::Model<Net, Row> local(3);  // the same seed: rank 0's parameters, the same on every rank
  (void)ddp.forward(data(group.rank(), 0));
  // forward 2: rank 0's buffers after its forward 1, moved by this rank's batch
  (void)ddp.forward(data(group.rank(), 1));
  (void)local.forward(data(0, 0));
  (void)local.forward(data(group.rank(), 1));
  BOOST_TEST(local.buffers().to_vector() == ddp.module().buffers().to_vector(), boost::test_tools::per_element());
  if (group.rank() == 1) {  // its own batch was different: without the broadcast it would differ
    knn::Model<Net, Row> alone(3);
    (void)alone.forward(data(1, 0));
    (void)alone.forward(data(1, 1));
    BOOST_TEST(max_abs_diff(alone.buffers().to_vector(), ddp.module().buffers().to_vector()) > 1e-3);
  }
  // Forward 3, under no_grad, still broadcasts (forward 2 had gradients); forward 4 then does not:
  // rank 0's state after its forwards 1 and 2, moved by this rank's batches 3 and 4.
  {
    const knn::NoGrad no_grad(ddp.module());
    (void)ddp.forward(data(group.rank(), 2));
  }
  (void)ddp.forward(data(group.rank(), 3));
  knn::Model<Net, Row> expect(3);
  (void)expect.forward(data(0, 0));
  (void)expect.forward(data(0, 1));
  (void)expect.forward(data(group.rank(), 2));
  (void)expect.forward(data(group.rank(), 3));
  BOOST_TEST(expect.buffers().to_vector() == ddp.module().buffers().to_vector(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(sync_batch_norm_ranks_train_like_one_device_on_the_whole_batch) {
  // SyncBatchNorm normalises by both ranks' batches together: 20 Adam steps give one device's parameters
  // and running statistics on the global batch. With plain BatchNorm each rank normalises its own half,
  // which one device never does.
  Group group({.timeout = test_timeout});
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 3) % 10);
  using Sync = knn::convert_sync_batchnorm_t<kiln::test::parallel_models::LeNetBn>;
  const double d = kt::train_both<Sync, Image, kiln::Mpi, kiln::Cpu>(group, 20, Extents<Image>(32), labels,
                                                                      Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  BOOST_TEST_MESSAGE("rank " << group.rank() << ": LeNet with SyncBatchNorm, 20 steps: largest difference " << d);
  BOOST_TEST(d <= 1e-5);
  const auto plain = kt::train_both_apart<kiln::test::parallel_models::LeNetBn, Image, kiln::Mpi, kiln::Cpu>(
      group, 20, Extents<Image>(32), labels, Extents<Shape<dyn>>(32), knn::CrossEntropyLoss{});
  BOOST_TEST(plain.parameters > 1e-4);
}

BOOST_AUTO_TEST_CASE(sync_batch_norm_gradients_equal_one_device_for_every_bucket_size) {
  // With one-byte buckets the averages of the later layers are in flight while SyncBatchNorm's backward
  // sums its statistics: both collectives run beside each other, in the same order on every rank.
  Group group({.timeout = test_timeout});
  std::vector<std::int64_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7) % 10);
  using Sync = knn::convert_sync_batchnorm_t<kiln::test::parallel_models::LeNetBn>;
  const double d = kt::bucketed_gradient_error<Sync, Image, kiln::Mpi, kiln::Cpu>(
      group, Extents<Image>(16), labels, Extents<Shape<dyn>>(16), knn::CrossEntropyLoss{});
  BOOST_TEST(d <= 1e-6);
}

BOOST_AUTO_TEST_CASE(sync_batch_norm_takes_uneven_and_empty_shares) {
  // Rank 0 with 5 rows and rank 1 with 3, then rank 1 with none: every rank's output is its rows of one
  // model's on the 8 (or 5), every rank ends with that model's running statistics, and backward (dy the
  // per-row gradient of a sum, so the ranks' gradients add up to one model's) through the empty rank's
  // zero sums gives the averaged gradient of one model's over the whole batch.
  Group group({.timeout = test_timeout});
  using Net = knn::Sequential<knn::Linear<13, 6>, knn::SyncBatchNorm<6>, knn::ReLU, knn::Linear<6, 1>>;
  Ddp<Net, Row> ddp(group, 4);
  knn::Model<Net, Row> one(4);
  for (const index_t second : {index_t{3}, index_t{0}}) {
    const index_t total = 5 + second;
    const auto x = kt::random_values<float>(static_cast<std::size_t>(total * 13), -1, 1, 500 + static_cast<std::uint32_t>(second));
    const auto y_one = one.forward(kt::make_tensor<kiln::Cpu>(x, Extents<Row>(total))).to_vector();
    const index_t begin = group.rank() == 0 ? 0 : 5, mine = group.rank() == 0 ? 5 : second;
    const std::vector<float> xs(x.begin() + begin * 13, x.begin() + (begin + mine) * 13);
    const auto y = ddp.forward(kt::make_tensor<kiln::Cpu>(xs, Extents<Row>(mine))).to_vector();
    BOOST_TEST(max_abs_diff(y, std::vector<float>(y_one.begin() + begin, y_one.begin() + begin + mine)) <= 1e-5);
    BOOST_TEST(max_abs_diff(ddp.module().buffers().to_vector(), one.buffers().to_vector()) <= 1e-6);
    const auto dy = kt::random_values<float>(static_cast<std::size_t>(total), -1, 1, 600 + static_cast<std::uint32_t>(second));
    one.zero_grad();
    one.backward(kt::make_tensor<kiln::Cpu>(dy, Extents<Shape<dyn, 1>>(total)));
    ddp.zero_grad();
    ddp.backward(kt::make_tensor<kiln::Cpu>(std::vector<float>(dy.begin() + begin, dy.begin() + begin + mine),
                                            Extents<Shape<dyn, 1>>(mine)));
    auto want = one.gradients().to_vector();
    for (auto& g : want) g /= 2;  // the average over the 2 ranks of their parts of the sum
    BOOST_TEST(max_abs_diff(ddp.module().gradients().to_vector(), want) <= 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(sync_batch_norm_with_one_value_per_channel_fails_on_every_rank) {
  Group group({.timeout = test_timeout});
  using Net = knn::Sequential<knn::Linear<13, 4>, knn::SyncBatchNorm<4>>;
  Ddp<Net, Row> ddp(group, 1);
  const index_t mine = group.rank() == 0 ? 1 : 0;
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(13 * mine), -1, 1, 9), Extents<Row>(mine));
  BOOST_CHECK_EXCEPTION((void)ddp.forward(x), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("expected more than 1 value per channel when training, got 1 over the 2 replicas") !=
           std::string::npos;
  });
  group.barrier("after the failed forward");  // the group is fine: the error came after the collective
}

BOOST_AUTO_TEST_CASE(bf16_ranks_stay_identical) {
  Group group({.timeout = test_timeout});
  Ddp<Mlp, Row, kiln::MixedBf16> ddp(group, 9 + static_cast<std::uint64_t>(group.rank()));
  kiln::optim::Adam opt(ddp, {.lr = 1e-2});  // as torch's Adam(ddp.parameters()): the module's, working copy too
  knn::MSELoss mse;
  for (int s = 0; s < 5; ++s) {
    // Different data on each rank: only the averaging keeps them identical.
    const auto x32 = kt::make_tensor<kiln::Cpu>(
        kt::random_values<float>(8 * 13, -1, 1, 300 + 10 * s + static_cast<std::uint32_t>(group.rank())), Extents<Row>(8));
    Tensor<kiln::bfloat16, Row> x(x32.extents());
    kiln::assign(x, kiln::cast<kiln::bfloat16>(x32));
    Tensor<kiln::bfloat16, Shape<dyn, 1>> y(Extents<Shape<dyn, 1>>(8));
    y.fill(kiln::bfloat16(0.25f));
    opt.zero_grad();
    ddp.backward(mse.backward(ddp.forward(x), y));
    opt.step();
  }
  BOOST_TEST(ddp.in_sync());
  // The optimizer took the model's working copy through the DDP object: the step rewrote it.
  const auto& model = ddp.module();
  const auto master = model.parameters().to_vector();
  const auto work = ddp.module().working_parameters().to_vector();
  BOOST_REQUIRE_EQUAL(work.size(), master.size());
  for (std::size_t i = 0; i < master.size(); ++i)
    BOOST_TEST_REQUIRE(static_cast<float>(work[i]) == static_cast<float>(kiln::bfloat16(master[i])));
}

BOOST_AUTO_TEST_CASE(rank_zero_writes_the_checkpoint_and_every_rank_loads_it) {
  Group group({.timeout = test_timeout});
  Ddp<Mlp, Row> ddp(group, 11);
  const std::string path = (std::filesystem::temp_directory_path() / "kiln_mpi_test_checkpoint.safetensors").string();
  // Every rank changes its parameters differently; rank 0's are saved and then loaded everywhere.
  ddp.module().parameters().fill(static_cast<float>(group.rank() + 1));
  ddp.on_main_rank([&] { kiln::save_checkpoint(path, ddp.module()); }, "writing the checkpoint");
  BOOST_TEST(!ddp.in_sync());
  ddp.on_every_rank([&] { kiln::load_checkpoint(path, ddp.module()); }, "loading the checkpoint");
  BOOST_TEST(ddp.in_sync());
  BOOST_TEST(ddp.module().parameters().to_vector()[0] == 1.0f);
  group.barrier("before removing the checkpoint");
  if (group.is_main()) std::filesystem::remove(path);

  // A write that fails on rank 0 is an error on every rank, naming rank 0 and the cause (sent from rank 0).
  try {
    ddp.on_main_rank([&] { throw kiln::ValueError("disk full"); }, "writing the checkpoint");
    BOOST_ERROR("no rank may return from a failed checkpoint write");
  } catch (const kiln::parallel::DistributedError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("writing the checkpoint failed on rank 0: ") != std::string::npos, what);
    BOOST_TEST(what.find("disk full") != std::string::npos, what);
  }
  // A count below 0 is refused on every rank before any MPI call, as torch's sizes are.
  float v = 1.0f;
  BOOST_CHECK_THROW(group.all_reduce_sum(&v, -1, "summing nothing"), kiln::ValueError);
  BOOST_CHECK_THROW(group.broadcast(&v, -1, 0, "sending nothing"), kiln::ValueError);
  // An exception without a message, or one that is not a std::exception, fails the write too: no rank
  // takes it for a whole file.
  BOOST_CHECK_THROW(ddp.on_main_rank([] { throw std::runtime_error(""); }, "writing the checkpoint"),
                    kiln::parallel::DistributedError);
  BOOST_CHECK_THROW(ddp.on_main_rank([] { throw 42; }, "writing the checkpoint"),
                    kiln::parallel::DistributedError);
  // A load that fails on one rank only (a missing file there) is an error on both.
  const std::string missing = group.rank() == 1 ? "/nonexistent/kiln.safetensors" : path + ".absent";
  BOOST_CHECK_THROW(ddp.on_every_rank([&] { kiln::load_checkpoint(missing, ddp.module()); }, "loading"),
                    kiln::parallel::DistributedError);
}

// docs/parallel.md's resume recipe: 2 epochs, stopped, resumed for 2 more end where 4 in one run end,
// with the StepLR's lr of epoch 4 (a scheduler left at epoch 0 would set 1e-2 back after epoch 3).
BOOST_AUTO_TEST_CASE(the_docs_resume_recipe_continues_like_an_unbroken_run) {
  Group group({.timeout = test_timeout});
  std::int32_t id = static_cast<std::int32_t>(::getpid());  // rank 0's: one folder for the job
  group.broadcast(&id, 1, 0, "choosing the folder");
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_mpi_resume_" + std::to_string(id));
  if (group.is_main()) std::filesystem::create_directories(dir);
  group.barrier("after making the folder");
  // The recipe names ckpt.safetensors: run it in the folder, and leave it (and remove it) however the
  // runs end. Removed by rank 0 alone, without waiting: by then every rank is done with it or failing.
  struct InFolder {
    std::filesystem::path before, dir;
    bool is_main;
    ~InFolder() {
      std::error_code ec;
      std::filesystem::current_path(before, ec);
      if (is_main) std::filesystem::remove_all(dir, ec);
    }
  } in_folder{std::filesystem::current_path(), dir, group.is_main()};
  std::filesystem::current_path(dir);

  const ResumeRun whole = run_resume_recipe(group, 4);
  group.barrier("before removing the checkpoint");
  if (group.is_main()) std::filesystem::remove("ckpt.safetensors");
  group.barrier("after removing the checkpoint");
  const ResumeRun first = run_resume_recipe(group, 2);
  const ResumeRun rest = run_resume_recipe(group, 4);
  group.barrier("before removing the folder");
  BOOST_TEST(whole.start == 0);
  BOOST_TEST(first.start == 0);
  BOOST_TEST(rest.start == 2);
  BOOST_TEST(first.parameters != whole.parameters);  // the last two epochs changed something
  BOOST_TEST(rest.parameters == whole.parameters, boost::test_tools::per_element());
  BOOST_TEST(whole.lr == 1e-2 * 0.25);  // StepLR(2, 0.5) after 4 epochs
  BOOST_TEST(rest.lr == whole.lr);
}

BOOST_AUTO_TEST_CASE(a_wrong_world_size_ends_every_rank) {
  try {
    Group group({.timeout = test_timeout, .expected_world_size = 3});
    BOOST_ERROR("a job of 2 ranks was accepted where 3 were expected");
  } catch (const kiln::parallel::DistributedError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("the job needs 3 ranks but mpirun started 2 (mpirun -np 3)") != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_CASE(ranks_that_freeze_different_layers_all_fail) {
  // ddp.freeze is a collective: counts that differ end it on every rank, naming them; nothing is frozen.
  Group group({.timeout = test_timeout});
  Ddp<Mlp, Row> ddp(group, 0);
  try {
    ddp.freeze(group.rank() == 0 ? 2 : 4);
    BOOST_ERROR("different frozen layers were accepted");
  } catch (const kiln::parallel::DistributedError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("the ranks freeze different layers: rank 0 2, and rank 1 (4)") != std::string::npos, what);
  }
  BOOST_TEST(ddp.frozen_layers() == 0u);
  ddp.freeze(2);  // the same count on both: agreed
  BOOST_TEST(ddp.frozen_layers() == 2u);
  ddp.unfreeze();
  BOOST_TEST(ddp.module().frozen_layers() == 0u);
}

BOOST_AUTO_TEST_CASE(broadcast_parameters_sends_rank_0s_weights_to_every_rank) {
  // Weights loaded on rank 0 alone (here: filled), BatchNorm's running statistics with them; the
  // collective puts them on every rank (docs/parallel.md, Checkpoints).
  Group group({.timeout = test_timeout});
  Ddp<kiln::test::parallel_models::LeNetBn, Image> ddp(group, 0);
  if (group.rank() == 0) {
    ddp.module().parameters().fill(0.25f);
    ddp.module().buffers().fill(3.0f);
  }
  BOOST_TEST(!ddp.in_sync());
  ddp.broadcast_parameters();
  BOOST_TEST(ddp.in_sync());
  const auto p = ddp.module().parameters().to_vector();
  const auto b = ddp.module().buffers().to_vector();
  BOOST_TEST(std::all_of(p.begin(), p.end(), [](float v) { return v == 0.25f; }));
  BOOST_TEST(std::all_of(b.begin(), b.end(), [](float v) { return v == 3.0f; }));
}

BOOST_AUTO_TEST_CASE(ranks_that_build_different_models_all_fail) {
  Group group({.timeout = test_timeout});
  using Other = knn::Sequential<knn::Linear<13, 8>, knn::ReLU, knn::Linear<8, 1>>;
  try {
    if (group.rank() == 0) Ddp<Mlp, Row> ddp(group, 0);
    else Ddp<Other, Row> ddp(group, 0);
    BOOST_ERROR("different models were accepted");
  } catch (const kiln::parallel::DistributedError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("the ranks build different models: rank 0 has 801 parameters") != std::string::npos, what);
    BOOST_TEST(what.find("rank 1 (121)") != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_CASE(ranks_with_batch_norm_and_sync_batch_norm_all_fail) {
  // The same parameters and buffers, but SyncBatchNorm's forwards are collectives that BatchNorm2d's
  // are not: the layers' names in the layout tell them apart before any step could hang.
  Group group({.timeout = test_timeout});
  using Bn = kiln::test::parallel_models::LeNetBn;
  try {
    if (group.rank() == 0) Ddp<Bn, Image> ddp(group, 0);
    else Ddp<knn::convert_sync_batchnorm_t<Bn>, Image> ddp(group, 0);
    BOOST_ERROR("BatchNorm2d and SyncBatchNorm ranks were accepted");
  } catch (const kiln::parallel::DistributedError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("the ranks build different models") != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
