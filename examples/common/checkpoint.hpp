// Checkpoints of a training example: the model's parameters (PyTorch's state_dict names; float32 masters
// under every precision), Adam's moments and step count (kiln::optimizer_state), the loss scaler's state
// (fp16), the epoch reached and the settings a resume must share (run_settings), in one safetensors file
// written atomically.
#pragma once
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <system_error>
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

/// How many samples one forward/backward of the whole job takes per --batch-size: 1 for one model and for
/// DataParallel (which splits the batch), the number of ranks under DistributedDataParallel (each rank
/// takes --batch-size).
template <class Trained>
int batch_ranks(const Trained&) {
  return 1;
}
#if KILN_WITH_MPI
template <class Net, class In, class B, class Prec, class D>
int batch_ranks(const kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp) {
  return ddp.world_size();
}
#endif

/// `v` in the fewest digits that read back as `v` (std::to_chars): 0.0001, 0.5, 1e-05.
inline std::string shortest(double v) {
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, v);
  return ec == std::errc{} ? std::string(text, end) : std::to_string(v);
}

/// One setting a resumed run must share with the run that wrote the checkpoint, saved as metadata
/// "run.<key>" = `value`. For the message that refuses a resume: `trained(recorded)` says the
/// checkpoint's value ("--seed 0", "no --limit"), `now` this run's, `resume(recorded)` the flags that give
/// the checkpoint's value in this run.
struct RunSetting {
  std::string key;
  std::string value;
  std::string now;
  std::function<std::string(const std::string&)> trained, resume;
};
using RunSettings = std::vector<RunSetting>;

/// A setting that is one flag's value: "--flag value" (or `none` for the value "", when not given).
inline RunSetting flag_setting(const std::string& key, const std::string& flag, const std::string& value,
                               const std::string& none = "") {
  const auto say = [flag, none](const std::string& v) { return v.empty() ? none : flag + " " + v; };
  return {key, value, say(value), say, say};
}

/// What a resumed run must share with the run that wrote the checkpoint, checked in this order: every
/// setting that changes what the model sees or the order it is trained in. --seed (the initialisation,
/// the shuffles and mlp_boston's split: with another, test rows of the first run could be trained on); the
/// whole job's batch (--batch-size, times the ranks under --parallel ddp, so `mpirun -np 2 ... --batch-size
/// 64` may resume a run of --batch-size 128 in one process, and back); --accumulate; --limit;
/// --weight-decay; --lr-step-size and --lr-gamma (the schedule); --target (where the example has one); and
/// o.data_summary, what the example read from --data (row counts, a CSV's
/// columns and a checksum of its values), so that the same data may move but other data is refused.
/// --precision, --device, --parallel, --devices (the batch aside), --workers, --lr (resume_training),
/// --epochs and the output paths may change.
template <class Trained>
RunSettings run_settings(const TrainOptions& o, const Trained& trained) {
  const long long ranks = batch_ranks(trained);
  const std::string on_ranks = " on each of " + std::to_string(ranks) + " ranks";
  RunSetting batch{"batch-size", std::to_string(o.batch_size * ranks),
                   "--batch-size " + std::to_string(o.batch_size),
                   [](const std::string& v) { return "batches of " + v; },
                   [ranks, on_ranks](const std::string& v) {
                     if (ranks == 1) return "--batch-size " + v;
                     long long all = 0;
                     const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), all);
                     if (ec != std::errc{} || end != v.data() + v.size() || all % ranks != 0)
                       return "batches of " + v + " (another number of ranks: " + std::to_string(ranks) +
                              " cannot split them evenly)";
                     return "--batch-size " + std::to_string(all / ranks) + on_ranks;
                   }};
  if (ranks > 1) batch.now += on_ranks + " (batches of " + batch.value + ")";
  RunSettings run{flag_setting("seed", "--seed", std::to_string(o.seed)), std::move(batch),
                  flag_setting("accumulate", "--accumulate", std::to_string(o.accumulate)),
                  flag_setting("limit", "--limit", o.limit >= 0 ? std::to_string(o.limit) : "",
                               "no --limit")};
  run.push_back(flag_setting("weight-decay", "--weight-decay", shortest(o.weight_decay)));
  run.push_back(flag_setting("lr-step-size", "--lr-step-size", o.lr_step_size > 0 ? std::to_string(o.lr_step_size) : "",
                             "no --lr-step-size"));
  if (o.lr_step_size > 0) run.push_back(flag_setting("lr-gamma", "--lr-gamma", shortest(o.lr_gamma)));
  if (!o.target.empty()) run.push_back(flag_setting("target", "--target", o.target));
  if (!o.data_summary.empty()) {
    const auto say = [](const std::string& v) { return "a --data of " + v; };
    run.push_back({"data", o.data_summary, say(o.data_summary), say,
                   [](const std::string&) { return std::string("the --data it was trained on"); }});
  }
  return run;
}

/// A checksum of `values` (64-bit FNV-1a over their bytes, in order) as 16 hex digits, for a data summary
/// (TrainOptions::data_summary): equal data give equal checksums on every machine of the same byte order.
template <class T>
std::string checksum(std::initializer_list<std::span<const T>> values) {
  std::uint64_t h = 14695981039346656037ull;
  for (const auto part : values)
    for (const T& v : part) {
      unsigned char bytes[sizeof(T)];
      std::memcpy(bytes, &v, sizeof(T));
      for (const unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
    }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

/// Metadata a training state carries besides the optimizer's and the scaler's: the schedule's base lr
/// (schedule.hpp).
using ExtraMetadata = std::map<std::string, std::string>;

template <class Model, class Optimizer, class Scaler>
void save_training_state(const std::string& path, const Model& model, const Optimizer& opt, const Scaler& scaler,
                         int epochs_done, const RunSettings& run, const ExtraMetadata& extra = {}) {
  kiln::OptimizerState state = kiln::optimizer_state(opt);  // Adam's moments and step count
  auto meta = scaler.state("grad_scaler.");                 // empty unless loss scaling is on
  meta.insert(state.metadata.begin(), state.metadata.end());
  meta.insert(extra.begin(), extra.end());
  meta.insert({{"epoch", std::to_string(epochs_done)}, {"format", "kiln training state"}});
  for (const auto& setting : run) meta["run." + setting.key] = setting.value;
  kiln::save_checkpoint(path, model, std::move(state.entries), meta);
}

/// The metadata key of the schedule's base lr (the lr of epoch 0), written by a run with --lr-step-size.
inline constexpr const char* schedule_base_key = "lr_schedule.base_lr";

/// A positive, finite number from metadata `key`, or a CheckpointError naming the file and the key.
inline double positive_number(const std::string& text, const char* key, const std::string& path) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(v) || !(v > 0))
    throw kiln::CheckpointError("kiln: " + path + ": metadata '" + key + "' is '" + text +
                                "'; expected a positive number");
  return v;
}

/// Restores what save_training_state wrote; returns the epochs already done. A checkpoint without a
/// scaler state (written in fp32 or bf16) leaves the scaler at its initial scale. Every part is checked
/// before any is written: a bad checkpoint (another model's, another optimizer's, a broken epoch or scale)
/// throws a kiln::CheckpointError naming the file and leaves model, optimizer and scaler as they were.
template <class Model, class Optimizer, class Scaler>
int load_training_state(const std::string& path, Model& model, Optimizer& opt, Scaler& scaler, const RunSettings& run,
                        double* schedule_base_lr = nullptr) {
  std::map<std::string, std::string> meta;
  std::int64_t epochs = 0;
  const auto scaler_state = [&](auto&& apply) {  // the scaler's messages with the file's name
    try {
      apply();
    } catch (const kiln::ValueError& e) {
      throw kiln::CheckpointError("kiln: " + path + ": " + message_of(e));
    }
  };
  const auto rest = kiln::load_checkpoint(path, model, &meta, [&](const auto& entries, const auto& m) {
    if (!m.count("epoch") && !m.count("format"))  // weights alone (save_checkpoint, torch's save_file)
      throw kiln::CheckpointError("kiln: " + path +
                                  ": a checkpoint of the model only (no epoch, no optimizer state); --resume "
                                  "needs a training state that this example wrote with --checkpoint");
    epochs = kiln::metadata_count(m, "epoch", path);
    if (epochs > INT_MAX)
      throw kiln::CheckpointError("kiln: " + path + ": metadata 'epoch' is " + std::to_string(epochs) +
                                  "; expected at most " + std::to_string(INT_MAX));
    // A setting the checkpoint does not record (written before kiln recorded it) is not checked.
    for (const auto& setting : run)
      if (const auto it = m.find("run." + setting.key); it != m.end() && it->second != setting.value)
        throw kiln::CheckpointError("kiln: " + path + ": the checkpoint was trained with " +
                                    setting.trained(it->second) + "; this run has " + setting.now +
                                    ": resume with " + setting.resume(it->second));
    kiln::check_optimizer_state(opt, entries, m, path);
    if (m.count("grad_scaler.scale")) scaler_state([&] { scaler.check_state(m, "grad_scaler."); });
    if (const auto it = m.find(schedule_base_key); it != m.end() && schedule_base_lr != nullptr)
      *schedule_base_lr = positive_number(it->second, schedule_base_key, path);
  });
  kiln::load_optimizer_state(opt, rest, meta, path);
  if (meta.count("grad_scaler.scale")) scaler_state([&] { scaler.load_state(meta, "grad_scaler."); });
  return static_cast<int>(epochs);
}

/// DataParallel (--parallel dp): the first replica and its optimizer are saved (all replicas are the same);
/// every replica and optimizer is restored: the file is read once, into replica 0 (checked whole before
/// anything is written), and the other replicas copy replica 0's parameters, buffers and optimizer state
/// (a checkpoint renamed over the file meanwhile cannot leave the replicas apart).
template <class Net, class In, class Prec, class D, class Optimizers, class Scaler>
void save_training_state(const std::string& path, const kiln::parallel::DataParallel<Net, In, Prec, D>& dp,
                         Optimizers& opts, const Scaler& scaler, int epochs_done, const RunSettings& run,
                         const ExtraMetadata& extra = {}) {
  save_training_state(path, dp.replica(0), opts.replica(0), scaler, epochs_done, run, extra);
}
template <class Net, class In, class Prec, class D, class Optimizers, class Scaler>
int load_training_state(const std::string& path, kiln::parallel::DataParallel<Net, In, Prec, D>& dp, Optimizers& opts,
                        Scaler& scaler, const RunSettings& run, double* schedule_base_lr = nullptr) {
  const int epochs = load_training_state(path, dp.replica(0), opts.replica(0), scaler, run, schedule_base_lr);
  dp.broadcast_parameters();
  const kiln::OptimizerState state = kiln::optimizer_state(opts.replica(0));
  for (int r = 1; r < dp.size(); ++r)
    kiln::load_optimizer_state(opts.replica(r), state.entries, state.metadata, path);
  return epochs;
}

#if KILN_WITH_MPI
/// DistributedDataParallel (--parallel ddp): rank 0 writes (atomically), and no rank goes on before the
/// file is whole; every rank loads. A failure on any rank is an error on all of them.
template <class Net, class In, class B, class Prec, class D, class Optimizer, class Scaler>
void save_training_state(const std::string& path, kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp,
                         Optimizer& opt, const Scaler& scaler, int epochs_done, const RunSettings& run,
                         const ExtraMetadata& extra = {}) {
  ddp.on_main_rank([&] { save_training_state(path, ddp.module(), opt, scaler, epochs_done, run, extra); },
                   "writing " + path);
}
template <class Net, class In, class B, class Prec, class D, class Optimizer, class Scaler>
int load_training_state(const std::string& path, kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp,
                        Optimizer& opt, Scaler& scaler, const RunSettings& run, double* schedule_base_lr = nullptr) {
  int epochs = 0;
  ddp.on_every_rank([&] { epochs = load_training_state(path, ddp.module(), opt, scaler, run, schedule_base_lr); },
                    "loading " + path);
  return epochs;
}
#endif

/// --weights: the parameters (and buffers: BatchNorm's statistics) of `path` by state_dict name, into the
/// model, every DataParallel replica, or every DistributedDataParallel rank (torch's
/// model.load_state_dict(torch.load(path))); anything else in the file (a training state's optimizer,
/// epoch) is left. Checked whole before anything is written (kiln::load_checkpoint).
/// kiln::load_checkpoint with its errors under --weights' name.
template <class Model>
void load_weights_of(const std::string& path, Model& model) {
  try {
    kiln::load_checkpoint(path, model);
  } catch (const kiln::CheckpointError& e) {
    throw kiln::CheckpointError("--weights: " + std::string(message_of(e)));
  }
}
template <class Model>
void load_weights(const std::string& path, Model& model) {
  load_weights_of(path, model);
}
template <class Net, class In, class Prec, class D>
void load_weights(const std::string& path, kiln::parallel::DataParallel<Net, In, Prec, D>& dp) {
  load_weights_of(path, dp.replica(0));
  dp.broadcast_parameters();
}
#if KILN_WITH_MPI
template <class Net, class In, class B, class Prec, class D>
void load_weights(const std::string& path, kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp) {
  ddp.on_every_rank([&] { load_weights_of(path, ddp.module()); }, "loading " + path);
}
#endif

/// What --resume restored: the epochs the checkpoint has done (0 for a fresh run), the learning rate it
/// held, and its schedule's base lr (NaN: none recorded).
struct Resumed {
  int epochs = 0;
  double checkpoint_lr = 0;
  double schedule_base_lr = NAN;
};

/// --resume: restores model, optimizer and scaler from o.checkpoint (refused when it was trained with
/// other settings or data: run_settings). Adam's state comes back with the checkpoint's learning rate,
/// as torch's optimizer.load_state_dict brings back its param_groups' lr; an --lr given on the command line
/// then replaces it, as setting param_groups' lr after loading does. Without --resume, nothing.
template <class Trained, class Optimizer, class Scaler>
Resumed resume_training(const TrainOptions& o, Trained& trained, Optimizer& opt, Scaler& scaler) {
  Resumed r;
  if (!o.weights.empty()) load_weights(o.weights, trained);
  if (!o.resume) return r;
  r.epochs = load_training_state(o.checkpoint, trained, opt, scaler, run_settings(o, trained), &r.schedule_base_lr);
  r.checkpoint_lr = opt.lr();
  if (o.lr_given) opt.set_lr(o.lr);
  return r;
}

/// "resumed from FILE after epoch N" (with ", lr X from --lr (the checkpoint's: Y)" when --lr changed it);
/// nothing for a fresh run.
inline void print_resumed(const TrainOptions& o, const Resumed& r) {
  if (!o.weights.empty()) std::printf("weights from %s\n", o.weights.c_str());
  if (r.epochs == 0) return;
  std::printf("resumed from %s after epoch %d", o.checkpoint.c_str(), r.epochs);
  if (o.lr_given && o.lr != r.checkpoint_lr) std::printf(", lr %g from --lr (the checkpoint's: %g)", o.lr, r.checkpoint_lr);
  std::printf("\n");
}

}  // namespace examples
