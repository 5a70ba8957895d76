// mlp_boston: the seeds' regression. Trains a 13-16-32-1 MLP on Boston housing (506 suburbs of Boston,
// 13 features each, the median house value MEDV in $1000s) and reports the test RMSE after every epoch.
//
// What it shows:
//   1. A network is a type: Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 1>> on
//      [N, 13] (801 parameters); each Linear + ReLU pair runs as one fused layer.
//   2. Tabular data: kiln::data::CsvDataset<13> reads the CSV as scikit-learn ships it (a count line
//      "506,13", then a quoted header), the --target column is the target; random_split makes a seeded
//      80/20 split (405 + 101 rows, PyTorch's rule); a Standardizer fitted on the training rows only
//      scales the features of both splits; a DataLoader shuffles the training rows every epoch.
//   3. Training: Adam(0.01), MSELoss, batch 128, 100 epochs, optional gradient accumulation
//      (--accumulate K: K micro-batches, each loss gradient scaled by 1/K, one step); each epoch ends with
//      the test RMSE computed without gradients (NoGrad + eval()), a JSON line in --metrics and an atomic
//      checkpoint in --checkpoint (--resume continues). The loop is examples/common/regress.hpp.
//   4. A baseline: the test RMSE of predicting the training targets' mean for every row. The run is ok
//      when the losses stay finite and the model beats it.
//
// Data: Debian's python3-sklearn installs the file this reads by default (apt-get install python3-sklearn);
// any numeric CSV with a header, 13 feature columns and a target column works with --data and --target.
//   ./build/cpu/examples/mlp_boston                       # 100 epochs in 0.02 s; test RMSE about 3-4
//   ./build/cpu/examples/mlp_boston --seed 1 --metrics m.jsonl
//   ./build/cpu/examples/mlp_boston --data houses.csv --target PRICE
// Flags: --help. The last line is `result: test_rmse=... baseline_rmse=... epochs=... seconds=... ok=1`.
#include <kiln/backend/cpu/threads.hpp>
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#else
#include <kiln/kiln.hpp>
#endif
#include <kiln/data/data.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "../common/checkpoint.hpp"
#include "../common/cli.hpp"
#include "../common/regress.hpp"
#include "../common/report.hpp"
#include "../common/trainer.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;

using Mlp = Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 1>>;
using Row = Shape<dyn, 13>;
using Table = kiln::data::CsvDataset<13>;
constexpr const char* program = "mlp_boston";
constexpr const char* default_data = "/usr/lib/python3/dist-packages/sklearn/datasets/data/boston_house_prices.csv";

template <class D, class Precision>
int run(examples::TrainOptions o, const std::string& device) {  // a copy: o.data_summary is set below
  namespace reg = examples::regression;
  using P = kiln::Policy<Precision, D>;
  const auto t_start = examples::Clock::now();
  std::error_code ec;
  if (o.data == default_data && !std::filesystem::exists(o.data, ec))
    throw kiln::Error(std::string(default_data) + ": no such file; it comes with Debian's python3-sklearn " +
                      "(apt-get install python3-sklearn), or pass --data FILE.csv --target COLUMN");

  Table table(o.data, o.target);                                   // [13] -> [1], in file order
  auto parts = kiln::data::random_split(table, {0.8, 0.2}, o.seed);  // views of `table`: 80 % / 20 %
  std::vector<kiln::index_t> train_rows = parts[0].indices();
  if (o.limit >= 0 && o.limit < static_cast<long long>(train_rows.size()))  // --limit N: the first N
    train_rows.resize(static_cast<std::size_t>(o.limit));
  const kiln::data::Subset<Table> train(table, train_rows);
  const kiln::data::Subset<Table>& test = parts[1];
  if (train.size() == 0 || test.size() == 0)
    throw kiln::ValueError(o.data + ": " + std::to_string(table.size()) + " rows give " +
                           std::to_string(train.size()) + " training and " + std::to_string(test.size()) +
                           " test rows; the 80/20 split needs at least 5 rows (and --limit at least 1)");
  // What checkpoints record of the data (a resume on another file, or on this one changed, is refused): the
  // rows, the feature columns and a checksum of the values as read.
  std::string columns;
  for (const auto& name : table.feature_names()) columns += (columns.empty() ? "" : ",") + name;
  o.data_summary = std::to_string(table.size()) + " rows, columns " + columns + " -> " + table.target_name() +
                   ", checksum " + examples::checksum<float>({table.features(), table.targets()});
  table.standardize(kiln::data::Standardizer::fit(train));  // training statistics, applied to both splits
  const double train_mean = reg::mean(reg::targets(train));
  const double baseline_rmse = reg::constant_rmse(reg::targets(test), train_mean);

  kiln::data::DataLoader train_loader(train, {.batch_size = o.batch_size, .shuffle = true,
                                              .num_workers = o.workers, .seed = o.seed});
  kiln::data::DataLoader test_loader(test, {.batch_size = 1024, .num_workers = 0});

  // Resume, the run's line, then per epoch (examples/common/regress.hpp): MSE, the step every --accumulate
  // batches, the test RMSE without gradients (NoGrad + eval()), the epoch's line, --metrics, --checkpoint.
  const auto fit_and_report = [&](auto& trained, auto& opt, auto& scaler, const std::string& where) {
    // (examples/common/checkpoint.hpp: refused when trained with other settings or data; --lr replaces its lr)
    const examples::Resumed resumed = examples::resume_training(o, trained, opt, scaler);
    const int threads = kiln::backend::cpu::threads();
    std::printf("%s: %lld train / %lld test rows of %s (13 features -> %s, standardized on the train rows); "
                "MLP 13-16-32-1 (%lld parameters) on %s (%d thread%s), batch %d x %d, %s, %d loader worker%s\n",
                program, static_cast<long long>(train.size()), static_cast<long long>(test.size()), o.data.c_str(),
                o.target.c_str(), static_cast<long long>(Model<Mlp, Row, P>::parameter_count), where.c_str(), threads,
                threads == 1 ? "" : "s", o.batch_size, o.accumulate, examples::describe_optimizer(o, opt).c_str(), o.workers, o.workers == 1 ? "" : "s");
    std::printf("baseline: predicting the training mean %.4f for every test row gives test RMSE %.4f\n", train_mean,
                baseline_rmse);
    examples::print_resumed(o, resumed);
    std::fflush(stdout);  // (a pipe or a log file sees these lines before the first epoch ends)
    const auto r = reg::fit(o, trained, opt, scaler, train_loader, test_loader, resumed);
    return reg::report_result(r, baseline_rmse, t_start, device, o.precision);
  };
  return examples::with_trainer<Mlp, Row, Precision, D>(o, device, {.lr = o.lr, .weight_decay = o.weight_decay},
                                                        fit_and_report);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains the seeds' 13-16-32-1 MLP on Boston housing (regression)", program};
  examples::TrainOptions o;
  o.data = default_data;
  o.target = "MEDV";
  o.epochs = 100;
  o.lr = 0.01;
  o.workers = 0;  // 405 rows in memory: collating on the training thread is cheapest
  examples::add_train_options(app, o, Mlp::layer_count);
  examples::regression::add_regression_options(app, o);
  if (const int status = examples::parse_options(app, argc, argv, program); status >= 0) return status;
  return examples::run_training(
      program, o, [&]<class D, class Precision>(const std::string& device) { return run<D, Precision>(o, device); });
}
