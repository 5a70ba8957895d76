// Checkpoints of a training example: the model's parameters (PyTorch's state_dict names; float32 masters
// under every precision), Adam's moments and step count (kiln::optimizer_state), the loss scaler's state
// (fp16) and the epoch reached, in one safetensors file written atomically.
#pragma once
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <kiln/core/config.hpp>
#include <kiln/io/optimizer_state.hpp>
#include <kiln/io/safetensors.hpp>
#include <kiln/parallel/data_parallel.hpp>
#if KILN_WITH_MPI
#include <kiln/parallel/distributed.hpp>
#endif

namespace examples {

template <class Model, class Optimizer, class Scaler>
void save_training_state(const std::string& path, const Model& model, const Optimizer& opt, const Scaler& scaler,
                         int epochs_done) {
  kiln::OptimizerState state = kiln::optimizer_state(opt);  // Adam's moments and step count
  auto meta = scaler.state("grad_scaler.");                 // empty unless loss scaling is on
  meta.insert(state.metadata.begin(), state.metadata.end());
  meta.insert({{"epoch", std::to_string(epochs_done)}, {"format", "kiln training state"}});
  kiln::save_checkpoint(path, model, std::move(state.entries), meta);
}

/// Restores what save_training_state wrote; returns the epochs already done. A checkpoint without a
/// scaler state (written in fp32 or bf16) leaves the scaler at its initial scale. Every part is checked
/// before any is written: a bad checkpoint (another model's, another optimizer's, a broken epoch or scale)
/// throws a kiln::CheckpointError naming the file and leaves model, optimizer and scaler as they were.
template <class Model, class Optimizer, class Scaler>
int load_training_state(const std::string& path, Model& model, Optimizer& opt, Scaler& scaler) {
  std::map<std::string, std::string> meta;
  std::int64_t epochs = 0;
  const auto scaler_state = [&](auto&& apply) {  // the scaler's messages with the file's name
    try {
      apply();
    } catch (const kiln::ValueError& e) {
      throw kiln::CheckpointError("kiln: " + path + ": " + e.what());
    }
  };
  const auto rest = kiln::load_checkpoint(path, model, &meta, [&](const auto& entries, const auto& m) {
    epochs = kiln::metadata_count(m, "epoch", path);
    if (epochs > INT_MAX)
      throw kiln::CheckpointError("kiln: " + path + ": metadata 'epoch' is " + std::to_string(epochs) +
                                  "; expected at most " + std::to_string(INT_MAX));
    kiln::check_optimizer_state(opt, entries, m, path);
    if (m.count("grad_scaler.scale")) scaler_state([&] { scaler.check_state(m, "grad_scaler."); });
  });
  kiln::load_optimizer_state(opt, rest, meta, path);
  if (meta.count("grad_scaler.scale")) scaler_state([&] { scaler.load_state(meta, "grad_scaler."); });
  return static_cast<int>(epochs);
}

/// DataParallel (--parallel dp): the first replica and its optimizer are saved (all replicas are the same);
/// every replica and optimizer is restored.
template <class Net, class In, class Prec, class D, class Optimizers, class Scaler>
void save_training_state(const std::string& path, const kiln::parallel::DataParallel<Net, In, Prec, D>& dp,
                         Optimizers& opts, const Scaler& scaler, int epochs_done) {
  save_training_state(path, dp.replica(0), opts.replica(0), scaler, epochs_done);
}
template <class Net, class In, class Prec, class D, class Optimizers, class Scaler>
int load_training_state(const std::string& path, kiln::parallel::DataParallel<Net, In, Prec, D>& dp, Optimizers& opts,
                        Scaler& scaler) {
  int epochs = 0;
  for (int r = 0; r < dp.size(); ++r) epochs = load_training_state(path, dp.replica(r), opts.replica(r), scaler);
  return epochs;
}

#if KILN_WITH_MPI
/// DistributedDataParallel (--parallel ddp): rank 0 writes (atomically), and no rank goes on before the
/// file is whole; every rank loads. A failure on any rank is an error on all of them.
template <class Net, class In, class B, class Prec, class D, class Optimizer, class Scaler>
void save_training_state(const std::string& path, kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp,
                         Optimizer& opt, const Scaler& scaler, int epochs_done) {
  ddp.on_main_rank([&] { save_training_state(path, ddp.module(), opt, scaler, epochs_done); }, "writing " + path);
}
template <class Net, class In, class B, class Prec, class D, class Optimizer, class Scaler>
int load_training_state(const std::string& path, kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp,
                        Optimizer& opt, Scaler& scaler) {
  int epochs = 0;
  ddp.on_every_rank([&] { epochs = load_training_state(path, ddp.module(), opt, scaler); }, "loading " + path);
  return epochs;
}
#endif

}  // namespace examples
