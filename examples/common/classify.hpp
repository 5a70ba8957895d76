// What every classification example does after building its data and model: the epoch loop (training
// steps with gradient accumulation, a progress bar, an evaluation without gradients, a line per epoch, JSON
// metrics, an atomic checkpoint) and the closing `result:` line.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <kiln/core/config.hpp>
#include <kiln/core/index.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/policy/policy.hpp>

#include "checkpoint.hpp"
#include "cli.hpp"
#include "device.hpp"
#include "epoch.hpp"
#include "report.hpp"
#include "schedule.hpp"

namespace examples::classification {

using examples::to_device;

/// The first `limit` samples of a dataset, all of them when `limit` < 0 (--limit for a reader without
/// one of its own). A view: `base` must outlive it.
template <kiln::data::dataset D>
class FirstSamples {
 public:
  using sample_shape = typename D::sample_shape;
  using sample_type = kiln::data::sample_type_t<D>;
  using target_type = typename D::target_type;
  using target_shape = typename D::target_shape;

  FirstSamples(const D& base, long long limit)
      : base_(&base),
        size_(limit >= 0 && limit < static_cast<long long>(base.size()) ? static_cast<kiln::index_t>(limit)
                                                                        : base.size()) {}
  FirstSamples(const D&&, long long) = delete;  // a temporary base would dangle
  kiln::index_t size() const { return size_; }
  void read(kiln::index_t i, std::span<sample_type> x, std::span<target_type> y) const { base_->read(i, x, y); }
  void read_bytes(kiln::index_t i, std::span<std::uint8_t> x, std::span<target_type> y) const
    requires kiln::data::byte_dataset<D>
  {
    base_->read_bytes(i, x, y);
  }

 private:
  const D* base_;
  kiln::index_t size_;
};

/// Test loss (mean) and accuracy, without gradients (NoGrad + eval(); train() again afterwards).
template <class Trained, class Loader>
std::pair<double, double> evaluate(Trained& trained, Loader& loader) {
  auto& model = eval_model(trained);  // DataParallel: its first replica
  using Model = std::remove_reference_t<decltype(model)>;
  using D = typename Model::D;
  using T = typename Model::T;
  model.eval();
  kiln::nn::NoGrad guard(model);
  kiln::nn::CrossEntropyLoss ce;
  double loss = 0;
  long long correct = 0, seen = 0;
  for (const auto& b : loader) {
    const auto logits = model.forward(to_model_input<D, T>(b.x));  // [N, classes]
    const auto y = to_device<D>(b.y);                                // [N]
    loss += static_cast<double>(ce(logits, y).item()) * static_cast<double>(b.size());
    const auto l = logits.to_vector();
    const auto labels = b.y.to_vector();
    const kiln::index_t classes = logits.size(1);
    for (kiln::index_t i = 0; i < b.size(); ++i) {
      const T* row = l.data() + i * classes;
      kiln::index_t best = 0;
      for (kiln::index_t c = 1; c < classes; ++c)
        if (kiln::to_compute(row[c]) > kiln::to_compute(row[best])) best = c;
      correct += best == labels[static_cast<std::size_t>(i)];
    }
    seen += b.size();
  }
  model.train();
  return {loss / static_cast<double>(seen), static_cast<double>(correct) / static_cast<double>(seen)};
}

/// Where training ended.
struct FitResult {
  double train_loss = NAN;     ///< mean cross entropy of the last epoch's training batches (NaN: none ran)
  double test_loss = NAN;      ///< mean cross entropy on the test set after the last epoch
  double test_accuracy = NAN;  ///< fraction of test samples classified right after the last epoch
  double samples_per_s = 0;    ///< training throughput of the last epoch
  bool finite = true;          ///< every epoch's train and test losses were finite
  int trained = 0;             ///< epochs run by this call (0 when resumed at or past the last)
  int epochs = 0;              ///< epochs the model has had: the checkpoint's and this run's
};

/// Trains epochs [start, o.epochs) with cross entropy (start: the epochs `resumed` has done): each epoch
/// shuffles afresh (set_epoch), steps the optimizer through `scaler` every o.accumulate micro-batches (and
/// after the last batch), evaluates on `test`, prints `epoch e/E: ...`, steps the lr schedule (if any),
/// appends a JSON line to o.metrics (with the loss scale and the skipped steps) and writes o.checkpoint
/// (when given).
template <class Model, class Optimizer, class Scaler, class TrainLoader, class TestLoader>
FitResult fit(const TrainOptions& o, Model& model, Optimizer& opt, Scaler& scaler, TrainLoader& train_loader,
              TestLoader& test_loader, const Resumed& resumed) {
  const int start = resumed.epochs;
  EpochSchedule schedule(o, opt, resumed);  // --lr-step-size: StepLR (schedule.hpp); else the lr stays
  kiln::nn::CrossEntropyLoss ce;
  FitResult r;
  start_outputs(model, o, start);  // a fresh run starts --metrics; a resumed one keeps its epochs
  for (int epoch = start; epoch < o.epochs; ++epoch) {
    freeze_for_epoch(model, o, epoch);  // --freeze K (--freeze-epochs E)
    const EpochResult e = train_epoch(model, opt, scaler, ce, train_loader, o.accumulate, epoch, o.epochs);
    const double train_seconds = e.seconds;
    r.train_loss = e.mean_loss;
    std::tie(r.test_loss, r.test_accuracy) = evaluate(model, test_loader);
    r.finite = r.finite && std::isfinite(r.train_loss) && std::isfinite(r.test_loss);
    r.samples_per_s = static_cast<double>(e.samples) / train_seconds;
    ++r.trained;
    std::printf("epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.0f samples/s, %.1f s%s\n",
                epoch + 1, o.epochs, shown(r.train_loss), shown(r.test_loss), 100.0 * r.test_accuracy, r.samples_per_s,
                train_seconds, scaler_note(scaler).c_str());
    std::fflush(stdout);
    const double lr = opt.lr();  // this epoch's
    schedule.step();             // the next epoch's lr, which the checkpoint holds (as torch's after scheduler.step())
    finish_epoch(o, model, opt, scaler, epoch, e,
                 {{"train_loss", r.train_loss}, {"test_loss", r.test_loss}, {"test_accuracy", r.test_accuracy},
                  {"lr", lr}},
                 schedule.metadata());
  }
  r.epochs = std::max(start, o.epochs);
  if (r.trained == 0) {  // resumed at or past --epochs: report the checkpoint's model as it is
    std::printf("nothing to train: the checkpoint has done %d of %d epochs (raise --epochs to continue)\n", start,
                o.epochs);
    std::tie(r.test_loss, r.test_accuracy) = evaluate(model, test_loader);
    r.finite = std::isfinite(r.test_loss);
  }
  return r;
}

/// Prints `result: test_accuracy=... ok=0|1` and returns the exit status (0 when ok). ok: the losses
/// stayed finite and the model beats chance (10 classes) clearly, test accuracy above 0.2. A run that
/// trained nothing (resumed at or past --epochs) has no train_loss= or samples_per_s= (trained_key).
inline int report_result(const FitResult& r, Clock::time_point t_start, const std::string& device,
                         const std::string& precision) {
  const bool ok = r.finite && r.test_accuracy > 0.2;
  if (!ok && !secondary_rank()) {  // why, before the result line (the last line printed); rank 0's alone
    std::fflush(stdout);
    const std::string why = r.finite
                                ? "the test accuracy " + std::to_string(r.test_accuracy) + " is not above 0.2"
                                : std::string("a loss was not finite");
    std::fprintf(stderr, "ok=0: %s\n", why.c_str());
  }
  std::printf("result: test_accuracy=%.4f test_loss=%.4f%s epochs=%d seconds=%.1f%s device=%s precision=%s ok=%d\n",
              r.test_accuracy, shown(r.test_loss), trained_key("train_loss", 4, r.trained, r.train_loss).c_str(),
              r.epochs, seconds_since(t_start), trained_key("samples_per_s", 0, r.trained, r.samples_per_s).c_str(),
              device.c_str(), precision.c_str(), ok ? 1 : 0);
  return ok ? 0 : 1;
}

}  // namespace examples::classification
