// One training epoch, as every training example runs it: forward, loss, backward with the loss gradient
// scaled by 1 / accumulate, an optimizer step every `accumulate` micro-batches (and after the last), the
// progress bar.
#pragma once
#include <cstdint>

#include "device.hpp"
#include "report.hpp"

namespace examples {

struct EpochResult {
  double mean_loss = 0;  ///< the mean of the batch losses, weighted by batch size
  long long samples = 0;
  double seconds = 0;
};

/// Trains one epoch (number `epoch`, from 0, of `epochs`) of `loader` on device D with `loss` (a kiln
/// loss: loss(pred, target) and loss.backward(pred, target, scale)).
template <class D, class Model, class Optimizer, class Loss, class Loader>
EpochResult train_epoch(Model& model, Optimizer& opt, Loss& loss, Loader& loader, int accumulate, int epoch,
                        int epochs) {
  const auto t0 = Clock::now();
  loader.set_epoch(static_cast<std::uint64_t>(epoch));
  Progress progress(epoch + 1, epochs, loader.size());
  double loss_sum = 0;
  long long samples = 0, batches = 0;
  opt.zero_grad();
  for (const auto& b : loader) {
    const auto x = to_device<D>(b.x);
    const auto y = to_device<D>(b.y);
    const auto pred = model.forward(x);
    loss_sum += static_cast<double>(loss(pred, y).item()) * static_cast<double>(b.size());
    model.backward(loss.backward(pred, y, 1.0 / accumulate));
    if (++batches % accumulate == 0 || batches == loader.size()) {
      opt.step();
      opt.zero_grad();
    }
    samples += b.size();
    progress.update(batches, loss_sum / static_cast<double>(samples), samples);
  }
  progress.finish();
  return {samples > 0 ? loss_sum / static_cast<double>(samples) : 0.0, samples, seconds_since(t0)};
}

}  // namespace examples
