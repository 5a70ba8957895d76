// Input checks that must hold when the user compiles kiln with -ffast-math (this module is built with
// it): -ffinite-math-only folds std::isfinite to true and std::isnan / std::isinf to false, so a check
// written with them would let "inf" and NaN through. kiln's read bits (kiln/core/nan.hpp): GradScaler's
// options and saved state, DDP's bucket sizes, an optimizer's saved hyperparameters, a CSV cell.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <kiln/data/csv.hpp>
#include <kiln/io/optimizer_state.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <kiln/optim/grad_scaler.hpp>
#include <kiln/parallel/buckets.hpp>
#include <limits>
#include <map>
#include <string>

#include "support/temp_dir.hpp"
#include "support/throws.hpp"

namespace {
const double inf_d = std::numeric_limits<double>::infinity();
const double nan_d = std::numeric_limits<double>::quiet_NaN();

using kiln::test::throws_with;
}  // namespace

BOOST_AUTO_TEST_SUITE(fast_math)

BOOST_AUTO_TEST_CASE(grad_scaler_options_and_state_refuse_inf_and_nan) {
  using kiln::optim::GradScaler;
  BOOST_TEST(throws_with<kiln::ValueError>([] { GradScaler<kiln::Cpu>({.backoff_factor = nan_d}); }, "invalid backoff_factor"));
  BOOST_TEST(throws_with<kiln::ValueError>([] { GradScaler<kiln::Cpu>({.growth_factor = inf_d}); }, "invalid growth_factor"));
  BOOST_TEST(throws_with<kiln::ValueError>([] { GradScaler<kiln::Cpu>({.init_scale = inf_d}); }, "invalid init_scale"));
  BOOST_TEST(throws_with<kiln::ValueError>([] { GradScaler<kiln::Cpu>({.init_scale = nan_d}); }, "invalid init_scale"));
  GradScaler<kiln::Cpu> scaler;
  const auto good = scaler.state();
  for (const char* bad : {"inf", "1e39", "nan"}) {
    auto state = good;
    state["scale"] = bad;
    BOOST_TEST(throws_with<kiln::ValueError>([&] { scaler.load_state(state); }, "a positive, finite float32"), bad);
  }
  BOOST_TEST(scaler.scale() == 65536.0);
}

BOOST_AUTO_TEST_CASE(bucket_sizes_refuse_inf_and_nan) {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<3, 2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3>> m(0);
  for (const double bad : {inf_d, nan_d})
    BOOST_TEST(throws_with<kiln::ValueError>(
        [&] { kiln::parallel::plan_buckets(m.named_parameters(), sizeof(float), {.bucket_cap_mb = bad}); },
        "bucket sizes must be positive and finite"));
}

BOOST_AUTO_TEST_CASE(saved_optimizer_hyperparameters_refuse_inf_and_nan) {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<3, 2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3>> m(0);
  kiln::optim::Adam opt(m, {.lr = 1e-3});
  const auto state = kiln::optimizer_state(opt);
  for (const char* bad : {"inf", "nan"}) {
    auto meta = state.metadata;
    meta["optimizer.lr"] = bad;
    kiln::optim::Adam fresh(m, {.lr = 1e-3});
    BOOST_TEST(throws_with<kiln::CheckpointError>(
                   [&] { kiln::load_optimizer_state(fresh, state.entries, meta, "run.safetensors"); },
                   "metadata 'optimizer.lr' is '" + std::string(bad) + "'; expected a finite number"),
               bad);
  }
}

BOOST_AUTO_TEST_CASE(a_csv_cell_of_nan_or_inf_is_refused) {
  const kiln::test::TempDir scratch;
  for (const char* bad : {"nan", "inf", "-inf"}) {
    const auto file = scratch.file("t.csv");
    std::ofstream(file) << "a,y\n1," << bad << "\n";
    BOOST_TEST(throws_with<kiln::data::DataError>([&] { kiln::data::CsvDataset<1> d(file, "y"); }, "not a finite float"), bad);
  }
}

BOOST_AUTO_TEST_SUITE_END()
