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

#include "cli.hpp"

namespace examples {

/// The flags a resumed run must share with the run that wrote the checkpoint, by flag name ("seed": it
/// draws the initialisation, the shuffles and mlp_boston's split; resumed with another, test rows of the
/// first run could be trained on). Saved as metadata "run.<flag>".
using RunSettings = std::map<std::string, std::string>;
inline RunSettings run_settings(const TrainOptions& o) { return {{"seed", std::to_string(o.seed)}}; }

template <class Model, class Optimizer, class Scaler>
void save_training_state(const std::string& path, const Model& model, const Optimizer& opt, const Scaler& scaler,
                         int epochs_done, const RunSettings& run) {
  kiln::OptimizerState state = kiln::optimizer_state(opt);  // Adam's moments and step count
  auto meta = scaler.state("grad_scaler.");                 // empty unless loss scaling is on
  meta.insert(state.metadata.begin(), state.metadata.end());
  meta.insert({{"epoch", std::to_string(epochs_done)}, {"format", "kiln training state"}});
  for (const auto& [flag, value] : run) meta["run." + flag] = value;
  kiln::save_checkpoint(path, model, std::move(state.entries), meta);
}

/// Restores what save_training_state wrote; returns the epochs already done. A checkpoint without a
/// scaler state (written in fp32 or bf16) leaves the scaler at its initial scale. Every part is checked
/// before any is written: a bad checkpoint (another model's, another optimizer's, a broken epoch or scale)
/// throws a kiln::CheckpointError naming the file and leaves model, optimizer and scaler as they were.
template <class Model, class Optimizer, class Scaler>
int load_training_state(const std::string& path, Model& model, Optimizer& opt, Scaler& scaler, const RunSettings& run) {
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
    for (const auto& [flag, value] : run)  // a checkpoint of an older kiln has none: not checked
      if (const auto it = m.find("run." + flag); it != m.end() && it->second != value)
        throw kiln::CheckpointError("kiln: " + path + ": the checkpoint was trained with --" + flag + " " + it->second +
                                    "; this run has --" + flag + " " + value + ": resume with --" + flag + " " +
                                    it->second);
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
                         Optimizers& opts, const Scaler& scaler, int epochs_done, const RunSettings& run) {
  save_training_state(path, dp.replica(0), opts.replica(0), scaler, epochs_done, run);
}
template <class Net, class In, class Prec, class D, class Optimizers, class Scaler>
int load_training_state(const std::string& path, kiln::parallel::DataParallel<Net, In, Prec, D>& dp, Optimizers& opts,
                        Scaler& scaler, const RunSettings& run) {
  int epochs = 0;
  for (int r = 0; r < dp.size(); ++r) epochs = load_training_state(path, dp.replica(r), opts.replica(r), scaler, run);
  return epochs;
}

#if KILN_WITH_MPI
/// DistributedDataParallel (--parallel ddp): rank 0 writes (atomically), and no rank goes on before the
/// file is whole; every rank loads. A failure on any rank is an error on all of them.
template <class Net, class In, class B, class Prec, class D, class Optimizer, class Scaler>
void save_training_state(const std::string& path, kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp,
                         Optimizer& opt, const Scaler& scaler, int epochs_done, const RunSettings& run) {
  ddp.on_main_rank([&] { save_training_state(path, ddp.module(), opt, scaler, epochs_done, run); }, "writing " + path);
}
template <class Net, class In, class B, class Prec, class D, class Optimizer, class Scaler>
int load_training_state(const std::string& path, kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp,
                        Optimizer& opt, Scaler& scaler, const RunSettings& run) {
  int epochs = 0;
  ddp.on_every_rank([&] { epochs = load_training_state(path, ddp.module(), opt, scaler, run); }, "loading " + path);
  return epochs;
}
#endif

}  // namespace examples
