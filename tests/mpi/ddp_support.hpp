// What the Distributed<Mpi> and Distributed<Nccl> tests share: each rank's share of a batch, and training
// one device on the whole batch next to DistributedDataParallel on the shares.
#pragma once
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <kiln/parallel/distributed.hpp>
#include <vector>

#include "support/reference.hpp"

namespace kiln::test {

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

/// The smallest batch of at least `want` rows that `size` ranks share equally.
inline index_t batch_for(int size, index_t want) { return (want + size - 1) / size * size; }

/// Rank `rank`'s equal share (of `size`) of a host tensor's rows, copied to device D.
template <class D = Cpu, class E, class S>
Tensor<E, S, D> share(const Tensor<E, S>& t, int rank, int size) {
  BOOST_REQUIRE_MESSAGE(t.size(0) % size == 0, "the test's batch of " << t.size(0) << " rows does not split equally over "
                                                                       << size << " ranks (use batch_for)");
  const index_t n = t.size(0) / size, row = t.numel() / t.size(0);
  Extents<S> e = t.extents();
  e[0] = n;
  const auto all = t.to_vector();
  return make_tensor<D>(std::vector<E>(all.begin() + rank * n * row, all.begin() + (rank + 1) * n * row), e);
}

/// How far DistributedDataParallel's model ends from one device's: the largest parameter difference
/// and the largest buffer (running statistics) difference.
struct TrainedApart {
  double parameters = 0, buffers = 0;
};

/// `steps` Adam steps on one device of type D over the whole batch and, on every rank, of
/// DistributedDataParallel over its share; every rank builds its model from its own seed (rank 0's
/// parameters win). Returns how far apart they end. A Net with SyncBatchNorm is BatchNorm on the one
/// device (it has no replica group).
template <class Net, class In, class Backend, class D, class Y, class SY, class Loss>
TrainedApart train_both_apart(parallel::ProcessGroup<Backend>& group, int steps, const Extents<In>& ext,
                              const std::vector<Y>& targets, const Extents<SY>& target_ext, Loss loss) {
  nn::Model<Net, In, Policy<Fp32, D>> single(5);
  optim::Adam opt(single, {.lr = 1e-2});
  parallel::DistributedDataParallel<Net, In, Backend, Fp32, D> ddp(group, 5 + static_cast<std::uint64_t>(group.rank()));
  BOOST_TEST(ddp.in_sync());
  BOOST_TEST(ddp.module().parameters().to_vector() == single.parameters().to_vector(), boost::test_tools::per_element());
  optim::Adam dopt(ddp.module(), {.lr = 1e-2});
  const auto y_host = make_tensor<Cpu>(targets, target_ext);
  const auto y = make_tensor<D>(targets, target_ext);
  const auto y_mine = share<D>(y_host, group.rank(), group.size());
  for (int s = 0; s < steps; ++s) {
    const auto x_host = make_tensor<Cpu>(random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 100 + s), ext);
    opt.zero_grad();
    const auto pred = single.forward(x_host.template to<D>());
    single.backward(loss.backward(pred, y));
    opt.step();

    dopt.zero_grad();
    const auto p = ddp.forward(share<D>(x_host, group.rank(), group.size()));
    ddp.backward(loss.backward(p, y_mine));
    dopt.step();
  }
  BOOST_TEST(ddp.in_sync());
  return {max_abs_diff(ddp.module().parameters().to_vector(), single.parameters().to_vector()),
          max_abs_diff(ddp.module().buffers().to_vector(), single.buffers().to_vector())};
}

/// train_both_apart's larger difference.
template <class Net, class In, class Backend, class D, class Y, class SY, class Loss>
double train_both(parallel::ProcessGroup<Backend>& group, int steps, const Extents<In>& ext, const std::vector<Y>& targets,
                  const Extents<SY>& target_ext, Loss loss) {
  const TrainedApart d = train_both_apart<Net, In, Backend, D>(group, steps, ext, targets, target_ext, loss);
  return std::max(d.parameters, d.buffers);
}

/// The gradients DistributedDataParallel leaves after one backward over the shares, for bucket caps from
/// one byte (a bucket per parameter) to torch's 25 MiB, against one device's on the whole batch: returns
/// the largest difference over all caps.
template <class Net, class In, class Backend, class D, class Y, class SY, class Loss>
double bucketed_gradient_error(parallel::ProcessGroup<Backend>& group, const Extents<In>& ext, const std::vector<Y>& targets,
                               const Extents<SY>& target_ext, Loss loss) {
  const auto x = make_tensor<Cpu>(random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 3), ext);
  const auto y = make_tensor<Cpu>(targets, target_ext);
  nn::Model<Net, In, Policy<Fp32, D>> single(2);
  single.backward(loss.backward(single.forward(x.template to<D>()), y.template to<D>()));
  const auto want = single.gradients().to_vector();
  double worst = 0;
  constexpr double byte = 1.0 / 1048576.0;
  for (const double cap : {byte, 64 * byte, 400 * byte, 25.0}) {
    parallel::DistributedDataParallel<Net, In, Backend, Fp32, D> ddp(group, 2, {.bucket_cap_mb = cap, .first_bucket_mb = cap});
    BOOST_TEST_MESSAGE("rank " << group.rank() << ": bucket cap " << cap * 1048576.0 << " B: " << ddp.buckets().size()
                               << " buckets");
    if (cap == byte) BOOST_TEST(ddp.buckets().size() == ddp.module().named_parameters().size());
    if (cap == 25.0) BOOST_TEST(ddp.buckets().size() == 1u);
    ddp.backward(loss.backward(ddp.forward(share<D>(x, group.rank(), group.size())), share<D>(y, group.rank(), group.size())));
    worst = std::max(worst, max_abs_diff(ddp.module().gradients().to_vector(), want));
  }
  return worst;
}

}  // namespace kiln::test
