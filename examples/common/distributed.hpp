// --parallel ddp in the training examples: one process per device under mpirun (Distributed<Mpi> on the
// CPU, Distributed<Nccl> on GPUs). Every rank trains on its DistributedSampler share of each epoch and
// evaluates the whole test set (all ranks hold the same model); rank 0 alone prints, appends --metrics
// and writes --checkpoint, and every rank loads it with --resume.
#pragma once
#include <kiln/core/config.hpp>
#if KILN_WITH_MPI
#include <cstdio>
#include <string>
#include <type_traits>

#include <kiln/data/sampler.hpp>
#include <kiln/optim/adam.hpp>
#include <kiln/parallel/distributed.hpp>
#include <kiln/parallel/mpi.hpp>
#if KILN_WITH_NCCL && KILN_CUDA_COMPILER
#include <kiln/parallel/nccl.hpp>
#endif

#include "cli.hpp"
#include "epoch.hpp"

namespace examples {

/// What reduces gradients of models on D: MPI on the CPU, NCCL on GPUs.
template <class D>
using backend_for = std::conditional_t<std::is_same_v<D, kiln::Cpu>, kiln::Mpi, kiln::Nccl>;

/// Builds the process group and this rank's DistributedDataParallel from o.seed (rank 0's parameters
/// win), its Adam and loss scaler, and calls `run(ddp, optimizer, scaler, where)`. Ranks other than 0
/// send their standard output to /dev/null (errors still reach stderr).
template <class Net, class In, class Precision, class D, class Run>
int with_distributed(const TrainOptions& o, const std::string& device, const kiln::optim::AdamOptions& adam, Run run) {
  using Backend = backend_for<D>;
  kiln::parallel::ProcessGroup<Backend> group({.expected_world_size = o.devices});
  if (!group.is_main() && std::freopen("/dev/null", "w", stdout) == nullptr)
    throw kiln::Error("rank " + std::to_string(group.rank()) + ": cannot silence standard output");
  secondary_rank() = !group.is_main();
  kiln::parallel::DistributedDataParallel<Net, In, Backend, Precision, D> ddp(group, o.seed);
  kiln::optim::Adam opt(ddp.module(), adam);
  auto scaler = make_scaler(ddp.module());  // loss scaling under fp16; a pass-through otherwise
  std::printf("DistributedDataParallel: %d rank%s over %s (%s), %zu gradient bucket%s; each rank trains on 1/%d of "
              "every epoch (DistributedSampler) in batches of %d\n",
              group.size(), group.size() == 1 ? "" : "s", std::string(Backend::name).c_str(), device.c_str(),
              ddp.buckets().size(), ddp.buckets().size() == 1 ? "" : "s", group.size(), o.batch_size);
  const std::string where = std::to_string(group.size()) + " " + device + " rank" + (group.size() == 1 ? "" : "s") +
                            " in " + o.precision;
  return run(ddp, opt, scaler, where);
}

}  // namespace examples
#endif
