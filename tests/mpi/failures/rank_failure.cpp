// A Distributed<Mpi> training loop in which rank 1 fails at step 3, as tests/mpi/failures/check.cmake
// runs it under mpiexec -n 2: `kill` (rank 1 dies by SIGKILL), `hang` (rank 1 stops taking part),
// `throw` (rank 1 ends with an exception). Rank 0 must not hang: it ends with an error within the
// group's timeout (2 s, or the seconds of a second argument), or mpirun ends it when rank 1 dies (an
// exception that unwinds the group makes rank 1's exit abort the job: with a timeout of 600 s the job
// still ends at once). `throw_after_agreed`: the ranks first all catch a failed checkpoint write (an
// error every rank throws together), then rank 1 throws its own: the job still ends at once.
// `bad_env_on_one_rank`: rank 1 alone has a LOCAL_RANK that is not a number: every rank ends with the
// launch check's error at once (rank 0 does not wait for rank 1 until its timeout).
// `different_counts`: at step 3 the ranks sum a metric vector of different lengths (4 values on rank 0,
// 1000 on rank 1): rank 0's request fails with MPI_ERR_TRUNCATE, which it names, and the job ends at once.
// `hang_in_backward`: a net with SyncBatchNorm and a bucket per parameter; at step 3 rank 1 runs the forward
// and stops before the backward: rank 0's SyncBatchNorm backward times out while the last layer's average
// is in flight, and rank 0 ends after one timeout, not two (it does not wait for that average again).
// `throw_caught`: rank 1's exception at step 3 unwinds the DistributedDataParallel and is caught in main,
// which prints it and returns 1 while the group lives on: the job still ends at once.
// `steps_apart`: rank 1 runs 2 steps, rank 0 3, then both write a checkpoint through on_main_rank: their
// collectives no longer pair up, and rank 0 must not write (it printed "rank 0 wrote the checkpoint").
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <kiln/parallel/distributed.hpp>
#include <kiln/parallel/mpi.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace knn = kiln::nn;
using Mlp = knn::Sequential<knn::Linear<13, 16>, knn::ReLU, knn::Linear<16, 32>, knn::ReLU, knn::Linear<32, 1>>;
using Row = kiln::Shape<kiln::dyn, 13>;

/// Every rank's batch: 8 rows of 0.5, targets 1.
struct Batch {
  kiln::Tensor<float, Row> x{kiln::Extents<Row>(8)};
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 1>> y{kiln::Extents<kiln::Shape<kiln::dyn, 1>>(8)};
  Batch() {
    x.fill(0.5f);
    y.fill(1.0f);
  }
};

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "hang" && mode != "throw" && mode != "throw_after_agreed" &&
      mode != "bad_env_on_one_rank" && mode != "different_counts" && mode != "hang_in_backward" &&
      mode != "throw_caught" && mode != "steps_apart") {
    std::fprintf(stderr,
                 "usage: %s kill|hang|throw|throw_after_agreed|bad_env_on_one_rank|different_counts|"
                 "hang_in_backward|throw_caught|steps_apart [group timeout in s]\n",
                 argv[0]);
    return 2;
  }
  const char* world_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (mode == "bad_env_on_one_rank" && world_rank != nullptr && std::string(world_rank) == "1")
    ::setenv("LOCAL_RANK", "abc", 1);
  try {
    const int timeout_s = argc > 2 ? std::stoi(argv[2]) : 2;
    kiln::parallel::ProcessGroup<kiln::Mpi> group({.timeout = std::chrono::seconds(timeout_s)});
    if (mode == "hang_in_backward") {
      using SyncMlp = knn::Sequential<knn::Linear<13, 16>, knn::SyncBatchNorm<16>, knn::ReLU, knn::Linear<16, 1>>;
      kiln::parallel::DistributedDataParallel<SyncMlp, Row, kiln::Mpi> ddp(
          group, 0, {.bucket_cap_mb = 1e-6, .first_bucket_mb = 1e-6});
      const Batch b;
      knn::MSELoss mse;
      for (int step = 0; step < 100; ++step) {
        const auto out = ddp.forward(b.x);
        if (group.rank() == 1 && step == 3) {
          std::printf("rank 1: stopping before the backward of step 3\n");
          std::fflush(stdout);
          std::this_thread::sleep_for(std::chrono::minutes(10));
        }
        const auto started = std::chrono::steady_clock::now();
        try {
          ddp.backward(mse.backward(out, b.y));
        } catch (const std::exception& e) {
          const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
          std::fprintf(stderr, "rank %d: the backward failed after %.1f s of a %d s timeout: %s\n", group.rank(),
                       waited, timeout_s, e.what());
          throw;
        }
      }
      return 0;
    }
    if (mode == "throw_caught" || mode == "steps_apart") {
      try {  // the training in a scope of its own; the group outlives it
        kiln::parallel::DistributedDataParallel<Mlp, Row, kiln::Mpi> ddp(group, 0);
        kiln::optim::SGD opt(ddp.module(), {.lr = 0.01});
        const Batch b;
        knn::MSELoss mse;
        const int steps = mode == "steps_apart" ? (group.rank() == 0 ? 3 : 2) : 100;
        for (int step = 0; step < steps; ++step) {
          if (mode == "throw_caught" && group.rank() == 1 && step == 3) {
            std::printf("rank 1: failing (%s) at step 3\n", mode.c_str());
            std::fflush(stdout);
            throw std::runtime_error("rank 1 gave up");
          }
          opt.zero_grad();
          ddp.backward(mse.backward(ddp.forward(b.x), b.y));
          opt.step();
        }
        ddp.on_main_rank([] { std::printf("rank 0 wrote the checkpoint\n"), std::fflush(stdout); },
                         "writing the checkpoint");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: error: %s\n", group.rank(), e.what());
        return 1;  // (the group is destroyed normally)
      }
      return 0;
    }
    kiln::parallel::DistributedDataParallel<Mlp, Row, kiln::Mpi> ddp(group, 0);
    if (mode == "throw_after_agreed") {
      try {
        ddp.on_main_rank([] { throw std::runtime_error("disk full"); }, "writing the checkpoint");
      } catch (const kiln::parallel::DistributedError& e) {  // every rank: training goes on
        std::printf("rank %d: caught '%s'\n", group.rank(), e.what());
      }
    }
    kiln::optim::SGD opt(ddp.module(), {.lr = 0.01});
    const Batch b;
    knn::MSELoss mse;
    for (int step = 0; step < 100; ++step) {
      if (mode == "different_counts" && step == 3) {
        std::vector<float> metrics(group.rank() == 0 ? 4 : 1000, 1.0f);
        group.all_reduce_sum(metrics.data(), static_cast<kiln::index_t>(metrics.size()), "summing the metrics");
      } else if (group.rank() == 1 && step == 3) {
        std::printf("rank 1: failing (%s) at step 3\n", mode.c_str());
        std::fflush(stdout);
        if (mode == "kill") std::raise(SIGKILL);
        if (mode == "hang") std::this_thread::sleep_for(std::chrono::minutes(10));
        throw std::runtime_error("rank 1 gave up");
      }
      opt.zero_grad();
      ddp.backward(mse.backward(ddp.forward(b.x), b.y));
      opt.step();
    }
    std::printf("rank %d: finished 100 steps\n", group.rank());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank_failure: %s\n", e.what());
    return 1;
  }
}
