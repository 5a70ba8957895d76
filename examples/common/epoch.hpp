// One training epoch, as every training example runs it: forward, loss, backward with the loss gradient
// scaled by the loss scale / accumulate (the epoch's last, shorter step: / its micro-batches), an
// optimizer step through the GradScaler every `accumulate` micro-batches (and after the last), the
// progress bar.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>

#include <kiln/optim/grad_scaler.hpp>
#include <kiln/data/sampler.hpp>
#include <kiln/parallel/data_parallel.hpp>
#if KILN_WITH_MPI
#include <kiln/parallel/distributed.hpp>
#include <kiln/parallel/mpi.hpp>
#endif

#include "checkpoint.hpp"
#include "cli.hpp"
#include "device.hpp"
#include "report.hpp"

namespace examples {

struct EpochResult {
  double mean_loss = 0;  ///< the mean of the batch losses, weighted by batch size
  long long samples = 0;
  double seconds = 0;
};

/// The loss scaler of a model's precision: dynamic loss scaling for MixedFp16 (torch.cuda.amp.GradScaler's
/// defaults), a pass-through for Fp32 and MixedBf16.
template <class Model>
kiln::optim::GradScaler<typename Model::D> make_scaler(const Model&) {
  return kiln::optim::GradScaler<typename Model::D>({.enabled = Model::precision::loss_scaling});
}

/// ", loss scale 32768 (3 steps skipped)" after an epoch's line when loss scaling is on; "" otherwise.
template <class Scaler>
std::string scaler_note(const Scaler& scaler) {
  if (!scaler.is_enabled()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, ", loss scale %g (%lld step%s skipped)", scaler.scale(),
                static_cast<long long>(scaler.skipped_steps()), scaler.skipped_steps() == 1 ? "" : "s");
  return buf;
}

/// The epoch loop every trainer shares: `batch(b, weight)` runs forward and backward of batch b with its
/// loss gradient times `weight` (1 / the batches in its step: the examples' losses are mean-reduced, so
/// a step's gradient is the mean of its batches', also for the epoch's last step when the batches do not
/// divide by `accumulate`) and returns the batch's mean loss; `step()` runs every `accumulate` batches
/// and after the last. Shows the progress bar.
template <class Loader, class Batch, class Step>
EpochResult run_epoch(Loader& loader, int accumulate, int epoch, int epochs, Batch batch, Step step) {
  const auto t0 = Clock::now();
  loader.set_epoch(static_cast<std::uint64_t>(epoch));
  Progress progress(epoch + 1, epochs, loader.size());
  double loss_sum = 0;
  long long samples = 0, batches = 0;
  const long long in_whole_steps = loader.size() / accumulate * accumulate;  // the rest: the last step's
  for (const auto& b : loader) {
    const long long in_step = batches < in_whole_steps ? accumulate : loader.size() - in_whole_steps;
    loss_sum += batch(b, 1.0 / static_cast<double>(in_step)) * static_cast<double>(b.size());
    if (++batches % accumulate == 0 || batches == loader.size()) step();
    samples += b.size();
    progress.update(batches, loss_sum / static_cast<double>(samples), samples);
  }
  progress.finish();
  return {samples > 0 ? loss_sum / static_cast<double>(samples) : 0.0, samples, seconds_since(t0)};
}

/// What a micro-batch's forward and backward run under: DistributedDataParallel averages the gradients
/// over the ranks only in the micro-batch an optimizer step follows (`steps`); the others run under
/// no_sync(), as in torch. Nothing for one device or DataParallel.
template <class Model>
int sync_for_step(Model&, bool /*steps*/) {
  return 0;
}
#if KILN_WITH_MPI
template <class Net, class In, class B, class Prec, class D>
auto sync_for_step(kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp, bool steps) {
  using NoSync = typename kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>::NoSync;
  if (steps) return std::optional<NoSync>();
  return std::optional<NoSync>(std::in_place, ddp);
}
#endif

/// Trains one epoch (number `epoch`, from 0, of `epochs`) of `loader` with `loss` (a kiln loss:
/// loss(pred, target) and loss.backward(pred, target, scale)). The loss gradient is multiplied by the
/// scaler's scale; a step whose gradients overflowed is skipped and the scale backs off (fp16).
template <class Model, class Optimizer, class Scaler, class Loss, class Loader>
EpochResult train_epoch(Model& model, Optimizer& opt, Scaler& scaler, Loss& loss, Loader& loader, int accumulate,
                        int epoch, int epochs) {
  using D = typename Model::D;
  using T = typename Model::T;
  opt.zero_grad();
  long long seen = 0;
  const long long batches = loader.size();
  return run_epoch(
      loader, accumulate, epoch, epochs,
      [&](const auto& b, double weight) {
        const auto x = to_model_input<D, T>(b.x);
        const auto y = to_model_target<D, T>(b.y);
        ++seen;
        [[maybe_unused]] const auto sync = sync_for_step(model, seen % accumulate == 0 || seen == batches);
        const auto pred = model.forward(x);
        const double l = static_cast<double>(loss(pred, y).item());
        model.backward(loss.backward(pred, y, scaler.scale() * weight));
        return l;
      },
      [&] {
        scaler.step(opt);  // opt.step() unless a gradient is inf/NaN (fp16)
        scaler.update();
        opt.zero_grad();
      });
}

#if KILN_WITH_MPI
/// The same on one rank of DistributedDataParallel (--parallel ddp): the loader visits this rank's
/// DistributedSampler share (shuffled as the loader was asked to, from the same seed on every rank), and
/// the epoch's mean loss and sample count are the whole job's.
template <class Net, class In, class B, class Prec, class D, class Optimizer, class Scaler, class Loss, class Loader>
EpochResult train_epoch(kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp, Optimizer& opt, Scaler& scaler,
                        Loss& loss, Loader& loader, int accumulate, int epoch, int epochs) {
  loader.set_sampler(kiln::data::DistributedSampler{.world_size = ddp.world_size(), .rank = ddp.rank(),
                                                    .shuffle = loader.options().shuffle, .seed = loader.options().seed});
  using Self = std::remove_reference_t<decltype(ddp)>;  // the loop above, with ddp as the model
  EpochResult r = train_epoch<Self>(ddp, opt, scaler, loss, loader, accumulate, epoch, epochs);
  double sum = 0;  // every rank saw as many samples (DistributedSampler pads to equal shares)
  for (const double l : ddp.group().all_gather(r.mean_loss, "averaging the epoch's loss")) sum += l;
  r.mean_loss = sum / ddp.world_size();
  r.samples *= ddp.world_size();
  return r;
}
#endif

/// The same over DataParallel replicas (--parallel dp): each batch is split across them, their gradients
/// summed, and every replica's optimizer steps (`opts`: DataParallel::make_optimizers) through the
/// scaler, all of them or none.
template <class Net, class In, class Prec, class D, class Opts, class Scaler, class Loss, class Loader>
EpochResult train_epoch(kiln::parallel::DataParallel<Net, In, Prec, D>& dp, Opts& opts, Scaler& scaler, Loss& loss,
                        Loader& loader, int accumulate, int epoch, int epochs) {
  using T = typename kiln::parallel::DataParallel<Net, In, Prec, D>::T;
  opts.zero_grad();
  return run_epoch(
      loader, accumulate, epoch, epochs,
      [&](const auto& b, double weight) {
        return dp.train_step(to_model_input<kiln::Cpu, T>(b.x), to_model_target<kiln::Cpu, T>(b.y), loss,
                             scaler.scale() * weight);
      },
      [&] {
        scaler.step(opts);
        scaler.update();
        opts.zero_grad();
      });
}

/// Appends the epoch's line to --metrics (nothing without one); under --parallel ddp rank 0 writes it and
/// every rank learns whether it did (a file that cannot be written stops every rank with its message,
/// not the others with a collective's timeout).
template <class Trained>
void write_metrics(Trained&, const std::string& path, const nlohmann::json& fields, bool first) {
  append_metrics(path, fields, first);
}
#if KILN_WITH_MPI
template <class Net, class In, class B, class Prec, class D>
void write_metrics(kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp, const std::string& path,
                   const nlohmann::json& fields, bool first) {
  if (!path.empty()) ddp.on_main_rank([&] { append_metrics(path, fields, first); }, "appending to " + path);
}
#endif

/// Before the first epoch: o.metrics keeps the lines of the epochs before `start` (report.hpp's
/// keep_metrics), and a run with epochs left checks that it can write o.checkpoint (a resumed run was not
/// checked at start-up: with nothing left to train it writes nothing). Under --parallel ddp rank 0 does
/// both and every rank learns whether it could.
inline void start_outputs(const TrainOptions& o, int start) {
  if (start < o.epochs && !o.checkpoint.empty())  // first: a run that cannot go on leaves --metrics as it was
    if (const auto why = kiln::why_unwritable(o.checkpoint, true); !why.empty())
      throw kiln::FileError("--checkpoint " + o.checkpoint + ": " + why);
  keep_metrics(o.metrics, start);
}
template <class Trained>
void start_outputs(Trained&, const TrainOptions& o, int start) {
  start_outputs(o, start);
}
#if KILN_WITH_MPI
template <class Net, class In, class B, class Prec, class D>
void start_outputs(kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp, const TrainOptions& o,
                   int start) {
  if (!o.metrics.empty() || !o.checkpoint.empty())
    ddp.on_main_rank([&] { start_outputs(o, start); }, "starting the outputs");
}
#endif

/// Whether every loss in an epoch's `fields` (the keys ending in "_loss") is a finite number.
inline bool losses_finite(const nlohmann::json& fields) {
  for (const auto& [key, value] : fields.items())
    if (key.size() >= 5 && key.compare(key.size() - 5, 5, "_loss") == 0 &&
        (!value.is_number() || !std::isfinite(value.get<double>())))
      return false;
  return true;
}

/// What every epoch ends with: one JSON line in o.metrics (`fields` — the epoch's losses and test metric,
/// and the lr it trained with where a schedule has moved the optimizer's on since — plus epoch, lr,
/// samples/s, seconds, loss scale and skipped steps; a fresh run's first line replaces the file) and, with
/// o.checkpoint, the training state written atomically with `extra` metadata (also when the metrics line
/// could not be written: the error comes after, and the epoch's training is kept). An epoch whose loss is
/// not finite (the run diverged) writes no checkpoint: the last finite epoch's file stays, and a line on
/// stderr says so.
template <class Trained, class Optimizer, class Scaler>
void finish_epoch(const TrainOptions& o, Trained& trained, Optimizer& opt, const Scaler& scaler, int epoch,
                  const EpochResult& e, nlohmann::json fields, const ExtraMetadata& extra = {}) {
  const bool keep = !o.checkpoint.empty() && losses_finite(fields);
  if (!o.checkpoint.empty() && !keep)
    std::fprintf(stderr, "epoch %d: a loss is not finite: %s is not overwritten (it keeps the last finite epoch)\n",
                 epoch + 1, o.checkpoint.c_str());
  fields["epoch"] = epoch + 1;
  if (!fields.contains("lr")) fields["lr"] = opt.lr();
  fields["samples_per_s"] = static_cast<double>(e.samples) / e.seconds;
  fields["seconds"] = e.seconds;
  fields["loss_scale"] = scaler.scale();
  fields["skipped_steps"] = scaler.skipped_steps();
  try {
    write_metrics(trained, o.metrics, fields, epoch == 0);  // --parallel ddp: rank 0's line for the job
  } catch (...) {
    if (keep) save_training_state(o.checkpoint, trained, opt, scaler, epoch + 1, run_settings(o, trained), extra);
    throw;
  }
  if (keep) save_training_state(o.checkpoint, trained, opt, scaler, epoch + 1, run_settings(o, trained), extra);
}

/// The model a trainer evaluates and checkpoints: the model itself, or DataParallel's first replica.
template <class Model>
Model& eval_model(Model& m) {
  return m;
}
template <class Net, class In, class Prec, class D>
auto& eval_model(kiln::parallel::DataParallel<Net, In, Prec, D>& dp) {
  return dp.module();
}
#if KILN_WITH_MPI
template <class Net, class In, class B, class Prec, class D>
auto& eval_model(kiln::parallel::DistributedDataParallel<Net, In, B, Prec, D>& ddp) {
  return ddp.module();
}
#endif

/// --freeze K before epoch `epoch` (0-based): the network's first K layers frozen for the first
/// --freeze-epochs epochs (all of them without it), then every layer trains (torch's
/// model[:K].requires_grad_(False), later requires_grad_(True)). Each optimizer counts each parameter's
/// steps, so the unfrozen layers' Adam starts afresh as torch's. A line where it changes (rank 0's).
template <class Trained>
void freeze_for_epoch(Trained& trained, const TrainOptions& o, int epoch) {
  if (o.freeze == 0) return;  // (1 to the network's layers: add_train_options checks it)
  const bool frozen = o.freeze_epochs == 0 || epoch < o.freeze_epochs;
  if (trained.frozen_layers() == (frozen ? static_cast<std::size_t>(o.freeze) : 0u)) return;
  if (frozen)
    trained.freeze(o.freeze);
  else
    trained.unfreeze();
  if (!printing_rank()) return;
  if (frozen)
    std::printf("layers 0 to %d frozen (--freeze %d)%s\n", o.freeze - 1, o.freeze,
                o.freeze_epochs == 0   ? ""
                : o.freeze_epochs == 1 ? " for the first epoch"
                                       : (" for the first " + std::to_string(o.freeze_epochs) + " epochs").c_str());
  else
    std::printf("epoch %d: every layer trains from here (--freeze-epochs %d)\n", epoch + 1, o.freeze_epochs);
  std::fflush(stdout);
}

}  // namespace examples
