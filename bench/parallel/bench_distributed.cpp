// bench_distributed: one process per CPU device (Distributed<Mpi>), run as `mpiexec -n 2 bench_distributed`.
// A LeNet training step (3x32x32, global batch 128, cross entropy, Adam) on one process with every
// OpenMP thread, against DistributedDataParallel with each rank on its share of the batch and its share
// of the threads; and the gradient averaging alone (all buckets, MPI_Iallreduce). Issue #6 asks for
// these; its scaling target (>= 90 % from 1 to 8 devices) is for GPUs with NVLink, so on a CPU the
// ratios are reported, not targeted:
//
//   ddp_speedup          the one-process step / the per-rank step of the same global batch
//   local_fraction       a rank's forward + backward on its share without averaging / the DDP step
//   allreduce_fraction   the averaging's share of a DDP step
//
//   mpiexec -n 2 ./bench_distributed [--n 128] [--repeat 20] [--json FILE]
// Rank 0 prints and writes the JSON. Open MPI pins each rank to its cores (unpinned, the ranks' threads
// collide and a step takes 1.6x as long); for the one-process step rank 0 widens its affinity to every
// core of the machine and takes all the threads, then goes back to its own.
#include <sched.h>

#include <cstdint>
#include <chrono>
#include <cstdio>
#include <thread>
#include <kiln/kiln.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <kiln/parallel/distributed.hpp>
#include <kiln/parallel/mpi.hpp>
#include <random>
#include <string>
#include <vector>

#if KILN_HAS_OPENMP
#include <omp.h>
#endif

#include "../harness.hpp"
#include "../models.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;
using kiln::bench::models::LeNet;
using Image = Shape<dyn, 3, 32, 32>;
using Ddp = kiln::parallel::DistributedDataParallel<LeNet, Image, kiln::Mpi>;

void set_threads([[maybe_unused]] int n) {
#if KILN_HAS_OPENMP
  omp_set_num_threads(n);
#endif
}
/// Runs f with this process allowed on every core (Linux), then restores its own affinity.
template <class F>
void on_every_core(F&& f) {
  cpu_set_t own, all;
  const bool pinned = sched_getaffinity(0, sizeof own, &own) == 0;
  CPU_ZERO(&all);
  for (unsigned c = 0; c < std::thread::hardware_concurrency() && c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  if (pinned) (void)sched_setaffinity(0, sizeof all, &all);
  f();
  if (pinned) (void)sched_setaffinity(0, sizeof own, &own);
}
int max_threads() {
#if KILN_HAS_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
}  // namespace

int main(int argc, char** argv) {
  kiln::parallel::ProcessGroup<kiln::Mpi> group;
  // Rank 0 reports; the others run the same rounds silently (and write no JSON).
  std::vector<char*> args(argv, argv + argc);
  if (!group.is_main()) {
    if (std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
    args = kiln::bench::without_json(argc, argv);
  }
  kiln::bench::Harness h("bench_distributed", static_cast<int>(args.size()), args.data(), {.n = 128, .repeat = 20, .warmup = 3});
  const kiln::index_t batch = h.n();
  const int ranks = group.size();
  if (batch % ranks != 0) {
    std::fprintf(stderr, "bench_distributed: --n %lld does not divide over %d ranks\n", static_cast<long long>(batch), ranks);
    return 2;
  }
  const kiln::index_t share = batch / ranks;
  const int all_threads = std::max<int>(max_threads(), static_cast<int>(std::thread::hardware_concurrency()));
  const int rank_threads = std::max(1, all_threads / ranks);  // one process gets every core, a rank its share

  std::mt19937 g(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  kiln::Tensor<float, Image> x{kiln::Extents<Image>(batch)}, xr{kiln::Extents<Image>(share)};
  for (kiln::index_t i = 0; i < x.numel(); ++i) x[i] = normal(g);
  for (kiln::index_t i = 0; i < xr.numel(); ++i) xr[i] = x[group.rank() * xr.numel() + i];
  kiln::Tensor<std::int64_t, Shape<dyn>> y(batch), yr(share);
  for (kiln::index_t i = 0; i < batch; ++i) y[i] = i % 10;
  for (kiln::index_t i = 0; i < share; ++i) yr[i] = y[group.rank() * share + i];
  CrossEntropyLoss ce;

  Model<LeNet, Image> single(0);
  kiln::optim::Adam opt(single, {.lr = 1e-3});
  Ddp ddp(group, 0);
  kiln::optim::Adam dopt(ddp.module(), {.lr = 1e-3});
  std::printf("%d rank%s, %d thread%s each (one process: %d); global batch %lld, %lld per rank; %zu gradient bucket%s\n",
              ranks, ranks == 1 ? "" : "s", rank_threads, rank_threads == 1 ? "" : "s", all_threads,
              static_cast<long long>(batch), static_cast<long long>(share), ddp.buckets().size(),
              ddp.buckets().size() == 1 ? "" : "s");

  // Rank 0 steps alone with every thread while the others wait at the barrier (their cores idle); the
  // time is rank 0's step, before the barrier (which would add a collective's latency to it).
  h.add_timed("single_step", 0, "one process, whole batch", [&] {
    const auto t0 = std::chrono::steady_clock::now();
    if (group.is_main()) {
      set_threads(all_threads);
      on_every_core([&] {
        opt.zero_grad();
        single.backward(ce.backward(single.forward(x), y));
        opt.step();
      });
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    group.barrier("the single-process step");
    return seconds;
  });
  h.add("ddp_step", 0, "DDP, each rank its share", [&] {
    set_threads(rank_threads);
    dopt.zero_grad();
    ddp.backward(ce.backward(ddp.forward(xr), yr));
    dopt.step();
  });
  h.add("local_step", 0, "each rank its share, no averaging", [&] {
    set_threads(rank_threads);
    auto local = ddp.no_sync();
    dopt.zero_grad();
    ddp.backward(ce.backward(ddp.forward(xr), yr));
  });
  h.add("allreduce", 4.0 * 2 * static_cast<double>(Ddp::model_type::parameter_count),
        "averaging every bucket", [&] { ddp.all_reduce_gradients(); });
  h.run();
  set_threads(all_threads);

  if (!ddp.in_sync()) {
    std::fprintf(stderr, "bench_distributed: the ranks drifted apart\n");
    return 1;
  }
  h.info("ranks", ranks);
  h.info("threads_per_rank", rank_threads);
  h.info("parameters", static_cast<double>(Ddp::model_type::parameter_count));
  h.info("ddp_speedup", h.median("single_step") / h.median("ddp_step"));
  h.info("local_fraction", h.median("local_step") / h.median("ddp_step"));
  h.info("allreduce_fraction", h.median("allreduce") / h.median("ddp_step"));
  std::printf("LeNet step: one process %.2f ms, %d ranks %.2f ms (speedup %.2f); averaging %lld gradients %.3f ms "
              "(%.1f %% of the step)\n",
              h.median("single_step") * 1e3, ranks, h.median("ddp_step") * 1e3,
              h.median("single_step") / h.median("ddp_step"), static_cast<long long>(Ddp::model_type::parameter_count),
              h.median("allreduce") * 1e3, 100.0 * h.median("allreduce") / h.median("ddp_step"));
  return h.finish();
}
