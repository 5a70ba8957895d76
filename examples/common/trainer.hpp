// What a training example trains: one model with Adam and its loss scaler; with --parallel dp,
// DataParallel replicas (CPU, or one per GPU) with one Adam each and one loss scaler over them; with --parallel ddp under mpirun, this
// rank's DistributedDataParallel (examples/common/distributed.hpp). The examples' fit() takes any.
#pragma once
#include <cstdio>
#include <string>
#include <type_traits>

#include <kiln/nn/model.hpp>
#include <kiln/optim/adam.hpp>
#include <kiln/optim/grad_scaler.hpp>
#include <kiln/parallel/data_parallel.hpp>
#if KILN_WITH_NCCL && KILN_CUDA_COMPILER
#include <kiln/parallel/nccl_replicas.hpp>  // DataParallel's GPU replicas
#endif

#include "cli.hpp"
#include "distributed.hpp"
#include "epoch.hpp"

namespace examples {

/// Builds the model (or the replicas, logging the batch's split once) from o.seed and calls
/// `run(trained, optimizer, scaler, where)`, where `where` names the device and precision for the
/// run's line; returns what run returns.
template <class Net, class In, class Precision, class D, class Run>
int with_trainer(const TrainOptions& o, const std::string& device, const kiln::optim::AdamOptions& adam, Run run) {
#if KILN_WITH_MPI
  if constexpr (std::is_same_v<D, kiln::Cpu> || built_with_nccl)  // on GPUs ddp is NCCL's (cli.hpp refuses it otherwise)
    if (o.parallel == "ddp") return with_distributed<Net, In, Precision, D>(o, device, adam, run);
#endif
  if constexpr (std::is_same_v<D, kiln::Cpu> || built_with_nccl) {
    if (o.parallel == "dp") {  // the seeds' multi-device run: replicas, each batch split across them
      const bool cpu = std::is_same_v<D, kiln::Cpu>;
      int replicas = o.devices > 0 ? o.devices : 2;  // CPU replicas: 2 unless told; GPUs: every visible one
#if KILN_CUDA_COMPILER
      if (!cpu && o.devices == 0) replicas = kiln::cuda::device_count();
#endif
      kiln::parallel::DataParallel<Net, In, Precision, D> dp(replicas, o.seed);
      auto opts = dp.make_optimizers([&](auto& m) { return kiln::optim::Adam(m, adam); });
      auto scaler = make_scaler(dp.module());  // one scaler over the bundle: every replica steps or none
      const std::string kind = cpu ? "CPU replica" : "GPU replica";
      std::printf("DataParallel: %d %s%s; a batch of %d is split %s\n", dp.size(), kind.c_str(), dp.size() == 1 ? "" : "s",
                  o.batch_size, kiln::parallel::Split::of(o.batch_size, dp.size()).describe().c_str());
      std::fflush(stdout);  // (before an error line of the resume or --weights on stderr)
      return run(dp, opts, scaler, std::to_string(dp.size()) + " " + kind + (dp.size() == 1 ? "" : "s") + " in " + o.precision);
    }
  }
  kiln::nn::Model<Net, In, kiln::Policy<Precision, D>> model(o.seed);
  kiln::optim::Adam opt(model, adam);
  auto scaler = make_scaler(model);  // loss scaling under fp16; a pass-through otherwise
  return run(model, opt, scaler, device + " in " + o.precision);
}

}  // namespace examples
