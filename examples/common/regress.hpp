// What every regression example does after building its data and model: the epoch loop (MSE training
// steps with gradient accumulation, a progress bar, an evaluation of the test RMSE without gradients, the
// epoch's line, JSON metrics, an atomic checkpoint), the baseline of predicting the training mean, and the
// closing `result:` line.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

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

namespace examples::regression {

/// The flags a regression example adds to the shared ones: --target, the column to predict.
inline void add_regression_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--target", o.target, "the CSV column to predict (every other column is a feature)")
      ->capture_default_str()
      ->check(path_flag("a column name"));
}

using examples::to_device;

/// Every target of a dataset with one float target per sample (a CsvDataset or a Subset of one), in order.
template <kiln::data::dataset Ds>
std::vector<double> targets(const Ds& d) {
  static_assert(std::is_same_v<typename Ds::target_type, float> && Ds::target_shape::static_numel() == 1,
                "examples::regression::targets: the dataset must have one float target per sample");
  std::vector<float> x(static_cast<std::size_t>(Ds::sample_shape::static_numel()));
  float y = 0;
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(d.size()));
  for (kiln::index_t i = 0; i < d.size(); ++i) {
    d.read(i, std::span<float>(x), std::span<float>(&y, 1));
    out.push_back(static_cast<double>(y));
  }
  return out;
}

/// The mean of `v` (NaN when empty).
inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return v.empty() ? NAN : s / static_cast<double>(v.size());
}

/// The RMSE of predicting the constant `c` for every value of `v`: the baseline a model must beat
/// (with c = the training targets' mean, what a model that learned nothing from the features scores).
inline double constant_rmse(const std::vector<double>& v, double c) {
  double s = 0;
  for (double e : v) s += (e - c) * (e - c);
  return v.empty() ? NAN : std::sqrt(s / static_cast<double>(v.size()));
}

/// Test loss (mean squared error over the samples) and its square root, the RMSE.
struct Evaluation {
  double loss = NAN;
  double rmse = NAN;
};

/// MSE and RMSE of the model on every batch of `loader`, without gradients (NoGrad + eval(); train()
/// again afterwards).
template <class Trained, class Loader>
Evaluation evaluate(Trained& trained, Loader& loader) {
  auto& model = eval_model(trained);  // DataParallel: its first replica
  using Model = std::remove_reference_t<decltype(model)>;
  using D = typename Model::D;
  using T = typename Model::T;
  model.eval();
  kiln::nn::NoGrad guard(model);
  kiln::nn::MSELoss mse;
  double squares = 0;
  long long seen = 0;
  for (const auto& b : loader) {
    const auto pred = model.forward(to_model_input<D, T>(b.x));  // [N, 1]
    const auto y = to_model_target<D, T>(b.y);                   // [N, 1]
    squares += static_cast<double>(mse(pred, y).item()) * static_cast<double>(b.size());
    seen += b.size();
  }
  model.train();
  const double loss = squares / static_cast<double>(seen);
  return {loss, std::sqrt(loss)};
}

/// Whether epoch `epoch` (1-based) of `epochs` gets its line: every epoch on a terminal or for runs of up
/// to 20 epochs; otherwise every 10th and the last (the progress bar and --metrics cover the rest).
inline bool prints_epoch(int epoch, int epochs, bool terminal) {
  return terminal || epochs <= 20 || epoch % 10 == 0 || epoch == epochs;
}

/// Where training ended.
struct FitResult {
  double train_loss = NAN;   ///< mean squared error of the last epoch's training batches (NaN: none ran)
  double test_loss = NAN;    ///< mean squared error on the test set after the last epoch
  double test_rmse = NAN;    ///< its square root, in the target's units
  double samples_per_s = 0;  ///< training throughput of the last epoch
  bool finite = true;        ///< every epoch's train and test losses were finite
  int trained = 0;           ///< epochs run by this call (0 when resumed at or past the last)
  int epochs = 0;            ///< epochs the model has had: the checkpoint's and this run's
};

/// Trains epochs [start, o.epochs) with MSELoss (start: the epochs `resumed` has done): each epoch shuffles
/// afresh (set_epoch), steps the optimizer every o.accumulate micro-batches (and after the last batch; each
/// micro-batch's loss gradient scaled by 1 / o.accumulate, by 1 / r in a last step of r), evaluates on `test`, prints `epoch e/E: ...`
/// (see prints_epoch), steps the lr schedule (if any), appends a JSON line to o.metrics and writes
/// o.checkpoint (when given). With no epoch left, it only evaluates.
template <class Model, class Optimizer, class Scaler, class TrainLoader, class TestLoader>
FitResult fit(const TrainOptions& o, Model& model, Optimizer& opt, Scaler& scaler, TrainLoader& train_loader,
              TestLoader& test_loader, const Resumed& resumed) {
  const int start = resumed.epochs;
  EpochSchedule schedule(o, opt, resumed);  // --lr-step-size: StepLR (schedule.hpp); else the lr stays
  kiln::nn::MSELoss mse;
  const bool terminal = progress_terminal();  // (not mpirun's pseudo-terminals)
  FitResult r;
  start_outputs(model, o, start);  // a fresh run starts --metrics; a resumed one keeps its epochs
  for (int epoch = start; epoch < o.epochs; ++epoch) {
    freeze_for_epoch(model, o, epoch);  // --freeze K (--freeze-epochs E)
    const EpochResult e = train_epoch(model, opt, scaler, mse, train_loader, o.accumulate, epoch, o.epochs);
    const double train_seconds = e.seconds;
    r.train_loss = e.mean_loss;
    const Evaluation test = evaluate(model, test_loader);
    r.test_loss = test.loss;
    r.test_rmse = test.rmse;
    r.finite = r.finite && std::isfinite(r.train_loss) && std::isfinite(r.test_loss);
    r.samples_per_s = static_cast<double>(e.samples) / train_seconds;
    ++r.trained;
    if (prints_epoch(epoch + 1, o.epochs, terminal)) {
      std::printf("epoch %d/%d: train loss %.4f, test loss %.4f, test RMSE %.4f, %.0f samples/s, %.2f ms%s\n",
                  epoch + 1, o.epochs, shown(r.train_loss), shown(r.test_loss), shown(r.test_rmse), r.samples_per_s,
                  1e3 * train_seconds,
                  scaler_note(scaler).c_str());
      std::fflush(stdout);
    }
    const double lr = opt.lr();  // this epoch's
    schedule.step();             // the next epoch's lr, which the checkpoint holds (as torch's after scheduler.step())
    finish_epoch(o, model, opt, scaler, epoch, e,
                 {{"train_loss", r.train_loss}, {"test_loss", r.test_loss}, {"test_rmse", r.test_rmse}, {"lr", lr}},
                 schedule.metadata());
  }
  r.epochs = std::max(start, o.epochs);
  if (r.trained == 0) {  // resumed at or past --epochs: report the checkpoint's model as it is
    std::printf("nothing to train: the checkpoint has done %d of %d epochs (raise --epochs to continue)\n", start,
                o.epochs);
    const Evaluation test = evaluate(model, test_loader);
    r.test_loss = test.loss;
    r.test_rmse = test.rmse;
    r.finite = std::isfinite(r.test_loss);
  }
  return r;
}

/// Prints `result: test_rmse=... baseline_rmse=... ok=0|1` and returns the exit status (0 when ok). ok: the
/// losses stayed finite and the test RMSE is below `baseline_rmse` (predicting the training mean). A run
/// that trained nothing has no train_loss= or samples_per_s= (trained_key).
inline int report_result(const FitResult& r, double baseline_rmse, Clock::time_point t_start,
                         const std::string& device, const std::string& precision) {
  const bool ok = r.finite && std::isfinite(r.test_rmse) && r.test_rmse < baseline_rmse;
  if (!ok && !secondary_rank()) {  // why, before the result line (the last line printed); rank 0's alone
    std::fflush(stdout);
    const std::string why = r.finite && std::isfinite(r.test_rmse)
                                ? "the test RMSE " + std::to_string(r.test_rmse) +
                                      " is not below the baseline's " + std::to_string(baseline_rmse)
                                : std::string("a loss was not finite");
    std::fprintf(stderr, "ok=0: %s\n", why.c_str());
  }
  std::printf("result: test_rmse=%.4f baseline_rmse=%.4f test_loss=%.4f%s epochs=%d seconds=%.2f%s device=%s "
              "precision=%s ok=%d\n",
              shown(r.test_rmse), baseline_rmse, shown(r.test_loss), trained_key("train_loss", 4, r.trained, r.train_loss).c_str(),
              r.epochs, seconds_since(t_start), trained_key("samples_per_s", 0, r.trained, r.samples_per_s).c_str(),
              device.c_str(), precision.c_str(), ok ? 1 : 0);
  return ok ? 0 : 1;
}

}  // namespace examples::regression
