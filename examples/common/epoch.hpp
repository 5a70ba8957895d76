// One training epoch, as every training example runs it: forward, loss, backward with the loss gradient
// scaled by the loss scale / accumulate, an optimizer step through the GradScaler every `accumulate`
// micro-batches (and after the last), the progress bar.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <kiln/optim/grad_scaler.hpp>

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

/// Trains one epoch (number `epoch`, from 0, of `epochs`) of `loader` with `loss` (a kiln loss:
/// loss(pred, target) and loss.backward(pred, target, scale)). The loss gradient is multiplied by the
/// scaler's scale; a step whose gradients overflowed is skipped and the scale backs off (fp16).
template <class Model, class Optimizer, class Scaler, class Loss, class Loader>
EpochResult train_epoch(Model& model, Optimizer& opt, Scaler& scaler, Loss& loss, Loader& loader, int accumulate,
                        int epoch, int epochs) {
  using D = typename Model::D;
  using T = typename Model::T;
  const auto t0 = Clock::now();
  loader.set_epoch(static_cast<std::uint64_t>(epoch));
  Progress progress(epoch + 1, epochs, loader.size());
  double loss_sum = 0;
  long long samples = 0, batches = 0;
  opt.zero_grad();
  for (const auto& b : loader) {
    const auto x = to_model_input<D, T>(b.x);
    const auto y = to_model_input<D, T>(b.y);
    const auto pred = model.forward(x);
    loss_sum += static_cast<double>(loss(pred, y).item()) * static_cast<double>(b.size());
    model.backward(loss.backward(pred, y, scaler.scale() / accumulate));
    if (++batches % accumulate == 0 || batches == loader.size()) {
      scaler.step(opt);  // opt.step() unless a gradient is inf/NaN (fp16)
      scaler.update();
      opt.zero_grad();
    }
    samples += b.size();
    progress.update(batches, loss_sum / static_cast<double>(samples), samples);
  }
  progress.finish();
  return {samples > 0 ? loss_sum / static_cast<double>(samples) : 0.0, samples, seconds_since(t0)};
}

}  // namespace examples
