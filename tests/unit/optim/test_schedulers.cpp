// Learning-rate schedulers against torch 1.13's sequences (tests/parity/fixtures/schedulers.json):
// StepLR, MultiStepLR, ExponentialLR, LambdaLR, MultiplicativeLR, CosineAnnealingLR, CosineAnnealingWarmRestarts (T_mult 2
// and 1), LinearWarmup alone (LinearLR) and before a cosine schedule (SequentialLR), 30 epochs from lr
// 0.1, within 1e-13 relative; the optimizer holds each lr as the scheduler computed it (a double).
// ReduceLROnPlateau over a metric curve (min/rel and max/abs with cooldown and min_lr), NaN metrics,
// resuming from its state, a hand-set lr, and bad options. OneCycleLR's lr and momentum (SGD's, Adam's beta1; cosine and
// three-phase linear) step by step, its momentum turned on in an SGD without, and its errors. CyclicLR's
// (triangular, triangular2, exp_range, a scale_fn over iterations, a sawtooth; Adam's beta1) likewise.
// ChainedScheduler against torch's (products of two and three schedules), whatever order its schedules
// are built in, resumed at an epoch, and what it refuses at run time. ConstantLR, LinearLR and
// PolynomialLR past their total_iters, alone and chained; SequentialLR against torch's (three schedules,
// two milestones), resumed past a milestone, its schedules restarted from its initial lr, and its refusals.
// The warning of a first scheduler step() before the optimizer's (torch's), and kiln::set_warning_handler.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/optim/optim.hpp>
#include <limits>
#include <map>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/warnings.hpp"

namespace {
namespace parity = kiln::test::parity;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
using nlohmann::json;

// Both in double from the same Python float 0.1 (the optimizers hold doubles): rounding apart only
// (5e-15 at most, CosineAnnealingLR's cosines; it was 1.5e-8 while kiln held the lr as a float).
constexpr double rtol = 1e-13;

const json& schedule(const std::string& name) {
  static const json j = parity::load("schedulers.json");
  for (const auto& s : j.at("schedules"))
    if (s.at("name") == name) return s;
  throw std::runtime_error("schedulers.json has no schedule " + name);
}

/// An argument of a ChainedScheduler's schedule in the fixture: `key` of the i-th one built.
const json& chain_arg(const std::string& name, std::size_t i, const char* key) {
  return schedule(name).at("chain").at(i).at(key);
}

/// An argument of a SequentialLR's schedule in the fixture: `key` of the i-th one.
const json& sequence_arg(const std::string& name, std::size_t i, const char* key) {
  return schedule(name).at("sequence").at(i).at(key);
}

const json& one_cycle(const std::string& name) {
  static const json j = parity::load("schedulers.json");
  for (const auto& s : j.at("one_cycle"))
    if (s.at("name") == name) return s;
  throw std::runtime_error("schedulers.json has no one_cycle " + name);
}

/// OneCycleLR on `opt` built as the fixture says, stepped to total_steps: its lr and momentum against
/// torch's at every step, and the optimizer's (the momentum, or Adam's beta1).
template <class Opt>
void check_one_cycle(Opt& opt, const json& want) {
  kiln::optim::OneCycleOptions o;
  o.pct_start = want.value("pct_start", o.pct_start);
  if (want.value("anneal_strategy", std::string("cos")) == "linear") o.anneal_strategy = kiln::optim::AnnealStrategy::linear;
  o.cycle_momentum = want.value("cycle_momentum", o.cycle_momentum);
  o.base_momentum = want.value("base_momentum", o.base_momentum);
  o.max_momentum = want.value("max_momentum", o.max_momentum);
  o.div_factor = want.value("div_factor", o.div_factor);
  o.final_div_factor = want.value("final_div_factor", o.final_div_factor);
  o.three_phase = want.value("three_phase", o.three_phase);
  kiln::optim::OneCycleLR sched(opt, want.at("max_lr").get<double>(), want.at("total_steps").get<std::int64_t>(), o);
  const auto lr = want.at("lr").get<std::vector<double>>(), momentum = want.at("momentum").get<std::vector<double>>();
  double worst = 0.0;
  for (std::size_t k = 0; k < lr.size(); ++k) {
    if (k > 0) {
      opt.step();
      sched.step();
    }
    BOOST_TEST_CONTEXT(want.at("name").get<std::string>() << " step " << k) {
      const double rel = std::abs(sched.get_last_lr() - lr[k]) / std::abs(lr[k]);
      BOOST_TEST(rel <= rtol, "lr " << sched.get_last_lr() << " vs torch " << lr[k]);
      BOOST_TEST(opt.lr() == sched.get_last_lr());
      worst = std::max(worst, rel);
      if constexpr (requires { opt.momentum(); })
        BOOST_TEST(opt.momentum() == momentum[k], boost::test_tools::tolerance(rtol));
      else BOOST_TEST(opt.betas().beta1 == momentum[k], boost::test_tools::tolerance(rtol));
      if (o.cycle_momentum) {
        BOOST_TEST(sched.momentum_at(static_cast<std::int64_t>(k)) == momentum[k], boost::test_tools::tolerance(rtol));
      }
    }
  }
  BOOST_TEST_MESSAGE("parity schedulers: " << want.at("name").get<std::string>() << " max rel " << worst);
}

const json& cyclic(const std::string& name) {
  static const json j = parity::load("schedulers.json");
  for (const auto& s : j.at("cyclic"))
    if (s.at("name") == name) return s;
  throw std::runtime_error("schedulers.json has no cyclic " + name);
}

/// CyclicLR's options as the fixture gives torch's keywords.
kiln::optim::CyclicOptions cyclic_options(const json& want) {
  kiln::optim::CyclicOptions o;
  o.step_size_up = want.at("step_size_up").get<double>();
  if (want.contains("step_size_down")) o.step_size_down = want.at("step_size_down").get<double>();
  const std::string mode = want.value("mode", std::string("triangular"));
  o.mode = mode == "triangular2" ? kiln::optim::CyclicMode::triangular2
           : mode == "exp_range" ? kiln::optim::CyclicMode::exp_range
                                 : kiln::optim::CyclicMode::triangular;
  o.gamma = want.value("gamma", o.gamma);
  if (want.contains("scale_fn")) {
    BOOST_REQUIRE(want.at("scale_fn") == "1 / (1 + x)");
    o.scale_fn = [](double x) { return 1.0 / (1.0 + x); };
  }
  if (want.value("scale_mode", std::string("cycle")) == "iterations") o.scale_mode = kiln::optim::CyclicScaleMode::iterations;
  o.cycle_momentum = want.value("cycle_momentum", o.cycle_momentum);
  o.base_momentum = want.value("base_momentum", o.base_momentum);
  o.max_momentum = want.value("max_momentum", o.max_momentum);
  return o;
}

/// CyclicLR on `opt` built as the fixture says, stepped `steps` times: its lr and the optimizer's
/// momentum (or Adam's beta1) against torch's (SGD's momentum) at every step.
template <class Opt>
void check_cyclic(Opt& opt, const json& want) {
  const auto o = cyclic_options(want);
  kiln::optim::CyclicLR sched(opt, want.at("base_lr").get<double>(), want.at("max_lr").get<double>(), o);
  const auto lr = want.at("lr").get<std::vector<double>>(), momentum = want.at("momentum").get<std::vector<double>>();
  for (std::size_t k = 0; k < lr.size(); ++k) {
    if (k > 0) {
      opt.step();
      sched.step();
    }
    BOOST_TEST_CONTEXT(want.at("name").get<std::string>() << " step " << k) {
      BOOST_TEST(sched.get_last_lr() == lr[k], boost::test_tools::tolerance(rtol));
      BOOST_TEST(opt.lr() == sched.get_last_lr());
      if (!o.cycle_momentum) continue;
      if constexpr (requires { opt.momentum(); })
        BOOST_TEST(opt.momentum() == momentum[k], boost::test_tools::tolerance(rtol));
      else BOOST_TEST(opt.betas().beta1 == momentum[k], boost::test_tools::tolerance(rtol));
    }
  }
}

/// An optimizer with a learning rate and no momentum.
struct LrOnly {
  float lr_ = 0.1f;
  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }
};

const json& plateau(const std::string& name) {
  static const json j = parity::load("schedulers.json");
  for (const auto& s : j.at("plateaus"))
    if (s.at("name") == name) return s;
  throw std::runtime_error("schedulers.json has no plateau " + name);
}

/// An optimizer over a one-element arena on device D: what a scheduler drives.
template <class D>
struct OneParameter {
  Tensor<float, Shape<dyn>, D> p{Extents<Shape<dyn>>(1)}, g{Extents<Shape<dyn>>(1)};
  kiln::optim::SGD<float, D> opt{p, g, {.lr = 0.1}};
  OneParameter() {
    p.fill(1.0f);
    g.fill(0.0f);
  }
};

/// Steps `sched` through the fixture's epochs; lr[0] is the lr after construction.
template <class Sched, class Opt>
void check_sequence(Sched& sched, Opt& opt, const json& want_schedule) {
  const auto want = want_schedule.at("lr").get<std::vector<double>>();
  double worst = 0.0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    if (e > 0) {
      opt.step();
      sched.step();
    }
    BOOST_TEST_CONTEXT("epoch " << e) {
      BOOST_TEST(sched.last_epoch() == static_cast<std::int64_t>(e));
      const double got = sched.get_last_lr();
      // An lr of 0 (PolynomialLR from total_iters on) must be exactly 0.
      const double rel = want[e] == 0.0 ? (got == 0.0 ? 0.0 : std::numeric_limits<double>::infinity())
                                        : std::abs(got - want[e]) / std::abs(want[e]);
      BOOST_TEST(rel <= rtol, "lr " << got << " vs torch " << want[e]);
      BOOST_TEST(opt.lr() == got);
      worst = std::max(worst, rel);
    }
  }
  BOOST_TEST_MESSAGE("parity schedulers: " << want_schedule.at("name").get<std::string>() << " max rel " << worst);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)

BOOST_AUTO_TEST_CASE_TEMPLATE(step_lr_matches_pytorch, D, kiln::test::devices) {
  OneParameter<D> o;
  const auto& s = schedule("step_lr");
  kiln::optim::StepLR sched(o.opt, s.at("step_size").get<std::int64_t>(), s.at("gamma").get<double>());
  check_sequence(sched, o.opt, s);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(multi_step_lr_matches_pytorch, D, kiln::test::devices) {
  OneParameter<D> o;
  const auto& s = schedule("multi_step_lr");
  kiln::optim::MultiStepLR sched(o.opt, s.at("milestones").get<std::vector<std::int64_t>>(), s.at("gamma").get<double>());
  check_sequence(sched, o.opt, s);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cosine_annealing_lr_matches_pytorch, D, kiln::test::devices) {
  OneParameter<D> o;
  const auto& s = schedule("cosine_annealing_lr");
  kiln::optim::CosineAnnealingLR sched(o.opt, s.at("T_max").get<std::int64_t>(), s.at("eta_min").get<double>());
  check_sequence(sched, o.opt, s);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_warmup_matches_pytorch_linear_lr, D, kiln::test::devices) {
  OneParameter<D> o;
  const auto& s = schedule("linear_warmup");
  kiln::optim::LinearWarmup sched(o.opt, s.at("warmup_steps").get<std::int64_t>(), s.at("start_factor").get<double>());
  check_sequence(sched, o.opt, s);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_warmup_then_cosine_matches_pytorch_sequential_lr, D, kiln::test::devices) {
  OneParameter<D> o;
  const auto& s = schedule("linear_warmup_cosine");
  kiln::optim::LinearWarmup sched(
      kiln::optim::CosineAnnealingLR(o.opt, s.at("T_max").get<std::int64_t>(), s.at("eta_min").get<double>()),
      s.at("warmup_steps").get<std::int64_t>(), s.at("start_factor").get<double>());
  static_assert(std::is_same_v<decltype(sched), kiln::optim::LinearWarmup<kiln::optim::SGD<float, D>,
                                                                          kiln::optim::CosineAnnealingLR<kiln::optim::SGD<float, D>>>>);
  check_sequence(sched, o.opt, s);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(exponential_lr_matches_pytorch, D, kiln::test::devices) {
  OneParameter<D> o;
  const auto& s = schedule("exponential_lr");
  kiln::optim::ExponentialLR sched(o.opt, s.at("gamma").get<double>());
  check_sequence(sched, o.opt, s);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(lambda_lr_matches_pytorch, D, kiln::test::devices) {
  OneParameter<D> o;
  const auto& s = schedule("lambda_lr");  // torch: LambdaLR(lambda e: 1 / (1 + 0.1 * e))
  kiln::optim::LambdaLR sched(o.opt, [](std::int64_t e) { return 1.0 / (1.0 + 0.1 * static_cast<double>(e)); });
  check_sequence(sched, o.opt, s);
  // It wraps as any schedule does: five warm-up epochs, then the function from its epoch 0.
  kiln::optim::LinearWarmup warm(kiln::optim::LambdaLR(o.opt, [](std::int64_t e) { return e < 3 ? 1.0 : 0.5; }), 5, 0.5);
  BOOST_TEST(warm.lr_at(0) == 0.5 * warm.base_lr());
  BOOST_TEST(warm.lr_at(7) == warm.base_lr());
  BOOST_TEST(warm.lr_at(8) == 0.5 * warm.base_lr());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(multiplicative_lr_matches_pytorch, D, kiln::test::devices) {
  OneParameter<D> o;
  const auto& s = schedule("multiplicative_lr");  // torch: MultiplicativeLR(lambda e: 0.8 if e % 3 == 0 else 0.95)
  std::vector<std::int64_t> asked;
  const auto factor = [&asked](std::int64_t e) {
    asked.push_back(e);
    return e % 3 == 0 ? 0.8 : 0.95;
  };
  kiln::optim::MultiplicativeLR sched(o.opt, factor);
  check_sequence(sched, o.opt, s);
  // Each epoch's factor asked for once, in order, as torch's steps ask (a jump asks for the epochs
  // between; going back asks for none).
  const auto epochs = static_cast<std::int64_t>(asked.size());
  for (std::int64_t e = 0; e < epochs; ++e) BOOST_TEST(asked[static_cast<std::size_t>(e)] == e + 1);
  sched.set_last_epoch(epochs + 3);
  BOOST_TEST(asked.size() == static_cast<std::size_t>(epochs + 3));
  sched.set_last_epoch(2);
  BOOST_TEST(o.opt.lr() == 0.1 * 0.95 * 0.95, boost::test_tools::tolerance(1e-13));
  BOOST_TEST(asked.size() == static_cast<std::size_t>(epochs + 3));
  // Chained, it multiplies as torch's ChainedScheduler does: here by StepLR's 0.5 every 4 epochs.
  OneParameter<D> c;
  kiln::optim::ChainedScheduler chain(kiln::optim::MultiplicativeLR(c.opt, [](std::int64_t) { return 0.9; }),
                                      kiln::optim::StepLR(c.opt, 4, 0.5));
  for (int e = 0; e < 9; ++e) chain.step();
  BOOST_TEST(c.opt.lr() == 0.1 * std::pow(0.9, 9) * 0.25, boost::test_tools::tolerance(1e-13));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(constant_linear_and_polynomial_lr_match_pytorch, D, kiln::test::devices) {
  {
    OneParameter<D> o;
    const auto& s = schedule("constant_lr");
    kiln::optim::ConstantLR sched(o.opt, s.at("factor").get<double>(),
                                  s.at("total_iters").get<std::int64_t>());
    check_sequence(sched, o.opt, s);
    BOOST_TEST(sched.lr_at(2) == 0.5 * sched.base_lr());
    BOOST_TEST(sched.lr_at(3) == sched.base_lr());
  }
  {
    OneParameter<D> o;
    const auto& s = schedule("linear_lr");
    kiln::optim::LinearLR sched(o.opt, s.at("start_factor").get<double>(), s.at("end_factor").get<double>(),
                                s.at("total_iters").get<std::int64_t>());
    check_sequence(sched, o.opt, s);
    BOOST_TEST(sched.lr_at(100) == 0.75 * sched.base_lr());
  }
  {
    OneParameter<D> o;
    const auto& s = schedule("polynomial_lr");
    kiln::optim::PolynomialLR sched(o.opt, s.at("total_iters").get<std::int64_t>(),
                                    s.at("power").get<double>());
    check_sequence(sched, o.opt, s);
    BOOST_TEST(sched.lr_at(4) == 0.0);
    BOOST_TEST(o.opt.lr() == 0.0);
  }
  // torch's defaults: ConstantLR(1/3, 5), LinearLR(1/3, 1, 5), PolynomialLR(5, 1).
  OneParameter<D> o;
  const double base = 0.1;
  const kiln::optim::ConstantLR constant(o.opt);
  BOOST_TEST(constant.lr_at(4) == base / 3.0, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(constant.lr_at(5) == base);
  o.opt.set_lr(0.1);
  const kiln::optim::LinearLR linear(o.opt);
  BOOST_TEST(linear.lr_at(0) == base / 3.0, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(linear.lr_at(5) == base);
  o.opt.set_lr(0.1);
  BOOST_TEST(kiln::optim::PolynomialLR(o.opt).lr_at(1) == 0.8 * base, boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sequential_lr_matches_pytorch, D, kiln::test::devices) {
  namespace ko = kiln::optim;
  OneParameter<D> o;  // torch: SequentialLR([ConstantLR(0.5, 2), ExponentialLR(0.9), StepLR(2, 0.5)], [3, 6])
  const std::string name = "sequential_lr";
  ko::SequentialLR sched(schedule(name).at("milestones").get<std::vector<std::int64_t>>(),
                         ko::ConstantLR(o.opt, sequence_arg(name, 0, "factor").get<double>(),
                                        sequence_arg(name, 0, "total_iters").get<std::int64_t>()),
                         ko::ExponentialLR(o.opt, sequence_arg(name, 1, "gamma").get<double>()),
                         ko::StepLR(o.opt, sequence_arg(name, 2, "step_size").get<std::int64_t>(),
                                    sequence_arg(name, 2, "gamma").get<double>()));
  static_assert(
      std::is_same_v<decltype(sched),
                     ko::SequentialLR<ko::ConstantLR<ko::SGD<float, D>>, ko::ExponentialLR<ko::SGD<float, D>>,
                                      ko::StepLR<ko::SGD<float, D>>>>);
  BOOST_TEST(sched.base_lr() == 0.1);  // the lr before the first was built
  BOOST_TEST(sched.milestones() == std::vector<std::int64_t>({3, 6}), boost::test_tools::per_element());
  check_sequence(sched, o.opt, schedule(name));
  // The form of the documentation: a warm-up, a decay, then steps.
  OneParameter<D> o2;
  ko::SequentialLR doc({5, 10}, ko::LinearLR(o2.opt, 0.1, 1.0, 5), ko::ExponentialLR(o2.opt, 0.9),
                       ko::StepLR(o2.opt, 3));
  const double base = 0.1;
  BOOST_TEST(doc.lr_at(0) == 0.1 * base, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(doc.lr_at(5) == base);
  BOOST_TEST(doc.lr_at(9) == base * std::pow(0.9, 4), boost::test_tools::tolerance(1e-15));
  BOOST_TEST(doc.lr_at(12) == base);
  BOOST_TEST(doc.lr_at(13) == 0.1 * base, boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sequential_lr_resumes_past_a_milestone, D, kiln::test::devices) {
  namespace ko = kiln::optim;
  const auto want = schedule("sequential_lr").at("lr").get<std::vector<double>>();
  OneParameter<D> o;
  ko::SequentialLR sched({3, 6}, ko::ConstantLR(o.opt, 0.5, 2), ko::ExponentialLR(o.opt, 0.9),
                         ko::StepLR(o.opt, 2, 0.5));
  sched.set_last_epoch(7);  // resume from a checkpoint taken at epoch 7, in the third schedule
  BOOST_TEST(sched.last_epoch() == 7);
  BOOST_TEST(o.opt.lr() == sched.get_last_lr());
  for (std::size_t e = 7; e < want.size(); ++e) {
    BOOST_TEST(std::abs(sched.get_last_lr() - want[e]) / want[e] <= rtol, "epoch " << e);
    sched.step();
  }
  sched.set_last_epoch(4);  // back into the second schedule
  BOOST_TEST(std::abs(sched.get_last_lr() - want[4]) / want[4] <= rtol);
  BOOST_TEST(o.opt.lr() == sched.get_last_lr());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sequential_lr_starts_every_schedule_from_its_initial_lr, D,
                              kiln::test::devices) {
  namespace ko = kiln::optim;
  const double base = 0.1;
  // Built first, the ConstantLR leaves 0.05 on the optimizer, the ExponentialLR's base: torch's starts
  // both from initial_lr, whichever order they were built in.
  const auto want = schedule("sequential_lr").at("lr").get<std::vector<double>>();
  {
    OneParameter<D> o;
    ko::StepLR step(o.opt, 2, 0.5);
    ko::ExponentialLR exponential(o.opt, 0.9);
    ko::ConstantLR constant(o.opt, 0.5, 2);
    BOOST_TEST(constant.base_lr() == base);
    ko::SequentialLR sched({3, 6}, constant, exponential, step);
    BOOST_TEST(sched.base_lr() == base);
    BOOST_TEST(o.opt.lr() == want[0]);
    for (std::size_t e = 0; e < want.size(); ++e)
      BOOST_TEST(std::abs(sched.lr_at(static_cast<std::int64_t>(e)) - want[e]) / want[e] <= rtol,
                 "epoch " << e);
  }
  {
    OneParameter<D> o;
    ko::ConstantLR constant(o.opt, 0.5, 2);
    ko::ExponentialLR exponential(o.opt, 0.9);
    BOOST_TEST(exponential.base_lr() == 0.5 * base);
    ko::SequentialLR sched({3}, constant, exponential);
    BOOST_TEST(sched.lr_at(3) == base);
    BOOST_TEST(sched.lr_at(4) == 0.9 * base, boost::test_tools::tolerance(1e-15));
  }
  // What it holds that holds schedules starts them from there too: a LinearWarmup around one, another
  // SequentialLR, a ChainedScheduler.
  OneParameter<D> o;
  ko::SequentialLR nested({3, 5}, ko::LinearWarmup(ko::ExponentialLR(o.opt, 0.5), 2, 0.5),
                          ko::SequentialLR({1}, ko::ConstantLR(o.opt, 0.25, 1), ko::StepLR(o.opt, 1, 0.5)),
                          ko::ChainedScheduler(ko::ExponentialLR(o.opt, 0.9), ko::ConstantLR(o.opt, 0.5, 1)));
  BOOST_TEST(nested.base_lr() == base);
  const std::vector<double> factors{0.5, 0.75, 1.0, 0.25, 1.0, 0.5, 0.9, 0.81};
  for (std::size_t e = 0; e < factors.size(); ++e)
    BOOST_TEST(nested.lr_at(static_cast<std::int64_t>(e)) == factors[e] * base,
               boost::test_tools::tolerance(1e-15));
}

// torch's hand-over calls step(0); a MultiplicativeLR has no closed form, so it goes on from the lr it finds
// (the schedule before it at the epoch before its milestone) where every other schedule restarts from
// initial_lr: so in a SequentialLR, twice in a row, and after a LinearWarmup (a second parameter group:
// test_param_groups.cpp).
BOOST_AUTO_TEST_CASE_TEMPLATE(multiplicative_lr_handed_over_goes_on_from_the_lr_it_finds, D, kiln::test::devices) {
  namespace ko = kiln::optim;
  const auto constant = [](double f) { return [f](std::int64_t) { return f; }; };
  {
    OneParameter<D> o;  // torch: SequentialLR([ExponentialLR(0.5), MultiplicativeLR(0.9), MultiplicativeLR(0.8)], [3, 6])
    const std::string name = "sequential_multiplicative";
    ko::SequentialLR sched(schedule(name).at("milestones").get<std::vector<std::int64_t>>(),
                           ko::ExponentialLR(o.opt, sequence_arg(name, 0, "gamma").get<double>()),
                           ko::MultiplicativeLR(o.opt, constant(sequence_arg(name, 1, "factor").get<double>())),
                           ko::MultiplicativeLR(o.opt, constant(sequence_arg(name, 2, "factor").get<double>())));
    check_sequence(sched, o.opt, schedule(name));
    sched.set_last_epoch(7);  // resumed past both hand-overs
    const auto want = schedule(name).at("lr").get<std::vector<double>>();
    BOOST_TEST(std::abs(o.opt.lr() - want[7]) / want[7] <= rtol);
  }
  {
    OneParameter<D> o;  // torch: SequentialLR([LinearLR(0.25, 1.0, 4), MultiplicativeLR(0.9)], [4])
    const std::string name = "linear_warmup_multiplicative";
    ko::LinearWarmup sched(ko::MultiplicativeLR(o.opt, constant(sequence_arg(name, 1, "factor").get<double>())),
                           sequence_arg(name, 0, "total_iters").get<std::int64_t>(),
                           sequence_arg(name, 0, "start_factor").get<double>());
    check_sequence(sched, o.opt, schedule(name));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(new_schedulers_and_sequential_lr_refuse_with_torchs_words, D,
                              kiln::test::devices) {
  namespace ko = kiln::optim;
  OneParameter<D> o, other;
  const auto says = [](const std::string& want) {
    return [want](const kiln::ValueError& e) { return std::string(e.what()) == want; };
  };
  const std::string constant =
      "kiln::optim::ConstantLR: Constant multiplicative factor expected to be between 0 and 1.";
  BOOST_CHECK_EXCEPTION(ko::ConstantLR(o.opt, 1.5), kiln::ValueError, says(constant));
  BOOST_CHECK_EXCEPTION(ko::ConstantLR(o.opt, -0.1), kiln::ValueError, says(constant));
  BOOST_CHECK_EXCEPTION(ko::ConstantLR(o.opt, 0.5, 0), kiln::ValueError,
                        says("kiln::optim::ConstantLR: total_iters must be positive, got 0"));
  const std::string start =
      "kiln::optim::LinearLR: Starting multiplicative factor expected to be greater than 0 and less or "
      "equal to 1.";
  BOOST_CHECK_EXCEPTION(ko::LinearLR(o.opt, 0.0), kiln::ValueError, says(start));
  BOOST_CHECK_EXCEPTION(ko::LinearLR(o.opt, 1.5), kiln::ValueError, says(start));
  const std::string end =
      "kiln::optim::LinearLR: Ending multiplicative factor expected to be between 0 and 1.";
  BOOST_CHECK_EXCEPTION(ko::LinearLR(o.opt, 0.5, -0.1), kiln::ValueError, says(end));
  BOOST_CHECK_EXCEPTION(ko::LinearLR(o.opt, 0.5, 1.1), kiln::ValueError, says(end));
  BOOST_CHECK_EXCEPTION(ko::LinearLR(o.opt, 0.5, 1.0, 0), kiln::ValueError,
                        says("kiln::optim::LinearLR: total_iters must be positive, got 0"));
  BOOST_CHECK_EXCEPTION(ko::PolynomialLR(o.opt, 0), kiln::ValueError,
                        says("kiln::optim::PolynomialLR: total_iters must be positive, got 0"));
  BOOST_CHECK_EXCEPTION(ko::PolynomialLR(o.opt, 4, -1.0), kiln::ValueError,
                        says("kiln::optim::PolynomialLR: power must be >= 0, got -1.000000"));
  BOOST_CHECK_THROW(ko::PolynomialLR(o.opt, 4, std::nan("")), kiln::ValueError);
  BOOST_TEST(o.opt.lr() == 0.1);  // the refused ones set nothing
  BOOST_CHECK_NO_THROW(ko::ConstantLR(o.opt, 0.0, 1));
  o.opt.set_lr(0.1);
  BOOST_CHECK_NO_THROW(ko::LinearLR(o.opt, 1.0, 0.0));
  o.opt.set_lr(0.1);

  BOOST_CHECK_EXCEPTION(ko::SequentialLR({3, 6}, ko::StepLR(o.opt, 3), ko::ExponentialLR(o.opt, 0.9)),
                        kiln::ValueError,
                        says("kiln::optim::SequentialLR: Sequential Schedulers expects number of schedulers "
                             "provided to be one more than the number of milestone points, but got number of "
                             "schedulers 2 and the number of milestones to be equal to 2"));
  BOOST_CHECK_EXCEPTION(
      ko::SequentialLR({6, 3}, ko::StepLR(o.opt, 3), ko::ExponentialLR(o.opt, 0.9), ko::StepLR(o.opt, 2)),
      kiln::ValueError, says("kiln::optim::SequentialLR: milestones must be non-decreasing, got 6 then 3"));
  BOOST_CHECK_EXCEPTION(ko::SequentialLR({0}, ko::StepLR(o.opt, 3), ko::ExponentialLR(o.opt, 0.9)),
                        kiln::ValueError,
                        says("kiln::optim::SequentialLR: a milestone must be positive, got 0"));
  BOOST_CHECK_NO_THROW(
      ko::SequentialLR({3, 3}, ko::StepLR(o.opt, 3), ko::ExponentialLR(o.opt, 0.9), ko::StepLR(o.opt, 2)));
  BOOST_CHECK_EXCEPTION(
      ko::SequentialLR({2, 4}, ko::StepLR(o.opt, 3), ko::ExponentialLR(o.opt, 0.9), ko::StepLR(other.opt, 3)),
      kiln::ValueError,
      says("kiln::optim::SequentialLR: Sequential Schedulers expects all schedulers to belong to the same "
           "optimizer, but got schedulers at index 0 and 2 to be different."));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cosine_annealing_warm_restarts_matches_pytorch, D, kiln::test::devices) {
  for (const std::string name : {"cosine_warm_restarts", "cosine_warm_restarts_fixed"}) {
    BOOST_TEST_CONTEXT(name) {
      OneParameter<D> o;
      const auto& s = schedule(name);
      kiln::optim::CosineAnnealingWarmRestarts sched(o.opt, s.at("T_0").get<std::int64_t>(),
                                                     s.at("T_mult").get<std::int64_t>(), s.at("eta_min").get<double>());
      check_sequence(sched, o.opt, s);
    }
  }
  OneParameter<D> o;  // restarts at 4, 4 + 8 = 12, 12 + 16 = 28: back to the base lr there
  kiln::optim::CosineAnnealingWarmRestarts sched(o.opt, 4, 2);
  for (const std::int64_t e : {0, 4, 12, 28, 60}) BOOST_TEST(sched.lr_at(e) == sched.base_lr(), "epoch " << e);
  BOOST_TEST(sched.lr_at(27) < sched.lr_at(26));
}

// torch's per-batch use, step(epoch + i / iters), then step() from a fractional epoch (T_cur goes on
// from 2.75 to 3.75, across a restart), a jump forward, one back: lr and last_epoch against torch's.
BOOST_AUTO_TEST_CASE_TEMPLATE(cosine_annealing_warm_restarts_steps_to_fractional_epochs_as_pytorch, D,
                              kiln::test::devices) {
  static const json j = parity::load("schedulers.json");
  for (const auto& want : j.at("warm_restarts_fractional")) {
    BOOST_TEST_CONTEXT(want.at("name").get<std::string>()) {
      OneParameter<D> o;
      kiln::optim::CosineAnnealingWarmRestarts sched(o.opt, want.at("T_0").get<std::int64_t>(),
                                                     want.at("T_mult").get<std::int64_t>(),
                                                     want.at("eta_min").get<double>());
      const auto& calls = want.at("calls");
      const auto lr = want.at("lr").get<std::vector<double>>();
      const auto last_epoch = want.at("last_epoch").get<std::vector<std::int64_t>>();
      BOOST_REQUIRE_EQUAL(lr.size(), calls.size() + 1);
      BOOST_TEST(sched.get_last_lr() == lr[0], boost::test_tools::tolerance(rtol));
      for (std::size_t k = 0; k < calls.size(); ++k) {
        o.opt.step();
        if (calls[k].is_null()) sched.step();
        else sched.step(calls[k].get<double>());
        BOOST_TEST_CONTEXT("call " << k << ": step(" << calls[k].dump() << ")") {
          BOOST_TEST(sched.get_last_lr() == lr[k + 1], boost::test_tools::tolerance(rtol));
          BOOST_TEST(o.opt.lr() == sched.get_last_lr());
          BOOST_TEST(sched.last_epoch() == last_epoch[k + 1]);
        }
      }
    }
  }
  // A refused epoch changes nothing; set_last_epoch drops the fraction.
  OneParameter<D> o;
  kiln::optim::CosineAnnealingWarmRestarts sched(o.opt, 4, 2);
  o.opt.step();
  sched.step(2.5);
  const double at = sched.get_last_lr();
  const auto says = [](const std::string& part) {
    return [part](const kiln::ValueError& e) { return std::string(e.what()).find(part) != std::string::npos; };
  };
  for (const double bad : {-0.25, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 1e19})
    BOOST_CHECK_EXCEPTION(sched.step(bad), kiln::ValueError, says("kiln::optim::CosineAnnealingWarmRestarts::step: "));
  BOOST_CHECK_EXCEPTION(sched.step(-1.0), kiln::ValueError, says("Expected non-negative epoch, but got -1"));
  BOOST_CHECK_THROW(sched.set_last_epoch(-1), kiln::ValueError);
  BOOST_TEST(sched.get_last_lr() == at);
  BOOST_TEST(sched.epoch_fraction() == 0.5);
  BOOST_TEST(sched.last_epoch() == 2);
  sched.set_last_epoch(2);
  BOOST_TEST(sched.epoch_fraction() == 0.0);
  BOOST_TEST(sched.get_last_lr() == sched.lr_at(2));
  BOOST_TEST(sched.get_last_lr() > at);
}

// Far epochs: T_mult 1 takes the remainder (the walk was one step per period: 3e9 steps here), and a
// period that would pass int64 ends the walk (T_0 1000, T_mult 1e16: the second period is 1e19).
BOOST_AUTO_TEST_CASE_TEMPLATE(cosine_annealing_warm_restarts_reaches_far_epochs, D, kiln::test::devices) {
  OneParameter<D> o;
  kiln::optim::CosineAnnealingWarmRestarts fixed(o.opt, 7, 1, 0.25);
  const std::int64_t far = 3'000'000'003;  // 3e9 + 3: 3 epochs into a period (3e9 = 7 * 428571428 + 4)
  const auto cosine = [](double base, double eta_min, double t_cur, double t_i) {
    return eta_min + (base - eta_min) * (1.0 + std::cos(std::numbers::pi * t_cur / t_i)) / 2.0;
  };
  BOOST_TEST(fixed.lr_at(far) == cosine(fixed.base_lr(), 0.25, static_cast<double>(far % 7), 7.0),
             boost::test_tools::tolerance(1e-15));
  fixed.set_last_epoch(far);
  BOOST_TEST(o.opt.lr() == fixed.lr_at(far));
  kiln::optim::CosineAnnealingWarmRestarts growing(o.opt, 1000, 10'000'000'000'000'000);
  BOOST_TEST(growing.lr_at(999) < growing.lr_at(998));
  BOOST_TEST(growing.lr_at(1000) == growing.base_lr());  // the restart
  BOOST_TEST(growing.lr_at(1005) == cosine(growing.base_lr(), 0.0, 5.0, 1e19),
             boost::test_tools::tolerance(1e-15));
  BOOST_TEST(growing.lr_at(std::numeric_limits<std::int64_t>::max()) < growing.base_lr());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(chained_scheduler_matches_pytorch, D, kiln::test::devices) {
  namespace ko = kiln::optim;
  {
    OneParameter<D>
        o;  // torch: ChainedScheduler([ExponentialLR(gamma=0.9), MultiStepLR(milestones=[2], gamma=0.1)])
    const std::string name = "chained_exponential_multi_step";
    ko::ChainedScheduler sched(
        ko::ExponentialLR(o.opt, chain_arg(name, 0, "gamma").get<double>()),
        ko::MultiStepLR(o.opt, chain_arg(name, 1, "milestones").get<std::vector<std::int64_t>>(),
                        chain_arg(name, 1, "gamma").get<double>()));
    static_assert(std::is_same_v<decltype(sched), ko::ChainedScheduler<ko::ExponentialLR<ko::SGD<float, D>>,
                                                                       ko::MultiStepLR<ko::SGD<float, D>>>>);
    check_sequence(sched, o.opt, schedule(name));
  }
  {
    OneParameter<D> o;  // torch: ChainedScheduler([StepLR(step_size=7, gamma=0.5),
                        // LinearLR(start_factor=0.25, total_iters=4)])
    const std::string name = "chained_step_linear";
    ko::ChainedScheduler sched(ko::StepLR(o.opt, chain_arg(name, 0, "step_size").get<std::int64_t>(),
                                          chain_arg(name, 0, "gamma").get<double>()),
                               ko::LinearWarmup(o.opt, chain_arg(name, 1, "total_iters").get<std::int64_t>(),
                                                chain_arg(name, 1, "start_factor").get<double>()));
    check_sequence(sched, o.opt, schedule(name));
  }
  {
    OneParameter<D>
        o;  // torch: ChainedScheduler([CosineAnnealingLR(T_max=30, eta_min=0), ExponentialLR(gamma=0.95)])
    const std::string name = "chained_cosine_exponential";
    ko::ChainedScheduler sched(ko::CosineAnnealingLR(o.opt, chain_arg(name, 0, "T_max").get<std::int64_t>(),
                                                     chain_arg(name, 0, "eta_min").get<double>()),
                               ko::ExponentialLR(o.opt, chain_arg(name, 1, "gamma").get<double>()));
    check_sequence(sched, o.opt, schedule(name));
  }
  {
    OneParameter<D> o;  // torch: ChainedScheduler([MultiStepLR([0, 5], 0.5), LinearLR(0.5, total_iters=3),
                        // StepLR(4, 0.8)])
    const std::string name = "chained_multi_step_linear_step";
    ko::ChainedScheduler sched(
        ko::MultiStepLR(o.opt, chain_arg(name, 0, "milestones").get<std::vector<std::int64_t>>(),
                        chain_arg(name, 0, "gamma").get<double>()),
        ko::LinearWarmup(o.opt, chain_arg(name, 1, "total_iters").get<std::int64_t>(),
                         chain_arg(name, 1, "start_factor").get<double>()),
        ko::StepLR(o.opt, chain_arg(name, 2, "step_size").get<std::int64_t>(),
                   chain_arg(name, 2, "gamma").get<double>()));
    check_sequence(sched, o.opt, schedule(name));
  }
  {
    OneParameter<D> o;  // torch: ChainedScheduler([PolynomialLR(30, 2.0), LinearLR(0.25, 0.75, 4),
                        // ConstantLR(0.5, 3)])
    const std::string name = "chained_polynomial_linear_constant";
    ko::ChainedScheduler sched(ko::PolynomialLR(o.opt, chain_arg(name, 0, "total_iters").get<std::int64_t>(),
                                                chain_arg(name, 0, "power").get<double>()),
                               ko::LinearLR(o.opt, chain_arg(name, 1, "start_factor").get<double>(),
                                            chain_arg(name, 1, "end_factor").get<double>(),
                                            chain_arg(name, 1, "total_iters").get<std::int64_t>()),
                               ko::ConstantLR(o.opt, chain_arg(name, 2, "factor").get<double>(),
                                              chain_arg(name, 2, "total_iters").get<std::int64_t>()));
    check_sequence(sched, o.opt, schedule(name));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(chained_scheduler_does_not_depend_on_the_order_its_schedules_are_built, D,
                              kiln::test::devices) {
  namespace ko = kiln::optim;
  // Each schedule sets the optimizer's lr of its epoch 0 (x0.5 for the milestone at 0, x0.5 for the
  // warm-up's start) and the next one built takes that as its base; the chain's base is the lr before
  // the first (torch's initial_lr), whichever was built first, and it leaves the lr of its epoch 0.
  const auto want = schedule("chained_multi_step_linear_step").at("lr").get<std::vector<double>>();
  const auto check = [&](const auto& sched, const ko::SGD<float, D>& opt, const std::string& order) {
    BOOST_TEST_CONTEXT("built " << order) {
      BOOST_TEST(sched.base_lr() == 0.1);
      BOOST_TEST(sched.last_epoch() == 0);
      BOOST_TEST(opt.lr() == want[0]);
      for (std::size_t e = 0; e < want.size(); ++e)
        BOOST_TEST(std::abs(sched.lr_at(static_cast<std::int64_t>(e)) - want[e]) / want[e] <= rtol,
                   "epoch " << e);
    }
  };
  {
    OneParameter<D> o;
    ko::MultiStepLR multi(o.opt, {0, 5}, 0.5);
    ko::LinearWarmup warm(o.opt, 3, 0.5);
    ko::StepLR step(o.opt, 4, 0.8);
    check(ko::ChainedScheduler(multi, warm, step), o.opt, "multi, warm, step");
  }
  {
    OneParameter<D> o;
    ko::StepLR step(o.opt, 4, 0.8);
    ko::LinearWarmup warm(o.opt, 3, 0.5);
    ko::MultiStepLR multi(o.opt, {0, 5}, 0.5);
    BOOST_TEST(multi.base_lr() == 0.5 * 0.1);  // built last: a scaled base
    check(ko::ChainedScheduler(multi, warm, step), o.opt, "step, warm, multi");
  }
  {
    OneParameter<D> o;
    ko::LinearWarmup warm(o.opt, 3, 0.5);
    ko::MultiStepLR multi(o.opt, {0, 5}, 0.5);
    ko::StepLR step(o.opt, 4, 0.8);
    check(ko::ChainedScheduler(step, multi, warm), o.opt, "warm, multi, step; given step, multi, warm");
  }
  {
    OneParameter<D> o;  // built in the call, in the order the compiler chooses
    check(ko::ChainedScheduler(ko::LinearWarmup(o.opt, 3, 0.5), ko::StepLR(o.opt, 4, 0.8),
                               ko::MultiStepLR(o.opt, {0, 5}, 0.5)),
          o.opt, "in the call");
  }
  // Factors of epoch 0 that cancel (x2, x0.5): both orders explain the bases, but only the one built
  // (the warm-up first, from 0.1) ends at the optimizer's lr now, 0.1.
  OneParameter<D> o;
  ko::LinearWarmup warm(o.opt, 3, 0.5);
  ko::MultiStepLR doubled(o.opt, {0}, 2.0);
  BOOST_TEST(o.opt.lr() == 0.1);
  ko::ChainedScheduler sched(doubled, warm);
  BOOST_TEST(sched.base_lr() == 0.1);
  BOOST_TEST(sched.get_last_lr() == 0.1);
  BOOST_TEST(sched.lr_at(3) == 2.0 * 0.1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(chained_scheduler_resumes_at_an_epoch_and_nests, D, kiln::test::devices) {
  namespace ko = kiln::optim;
  OneParameter<D> o;
  ko::ChainedScheduler sched(ko::StepLR(o.opt, 7, 0.5), ko::LinearWarmup(o.opt, 4, 0.25));
  std::vector<double> stepped{sched.get_last_lr()};
  for (int e = 1; e < 12; ++e) {
    sched.step();
    stepped.push_back(sched.get_last_lr());
  }
  OneParameter<D> o2;
  ko::ChainedScheduler resumed(ko::StepLR(o2.opt, 7, 0.5), ko::LinearWarmup(o2.opt, 4, 0.25));
  resumed.set_last_epoch(9);  // resume from a checkpoint taken at epoch 9
  BOOST_TEST(resumed.last_epoch() == 9);
  BOOST_TEST(resumed.get_last_lr() == stepped[9]);
  BOOST_TEST(o2.opt.lr() == stepped[9]);
  resumed.step();
  resumed.step();
  BOOST_TEST(resumed.get_last_lr() == stepped[11]);
  BOOST_TEST(stepped[11] == 0.1 * 0.5, boost::test_tools::tolerance(1e-15));
  sched.set_last_epoch(2);
  BOOST_TEST(o.opt.lr() == stepped[2]);
  // A negative epoch is refused (torch: "Expected non-negative epoch") and changes nothing.
  BOOST_CHECK_EXCEPTION(sched.set_last_epoch(-1), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("expected a non-negative epoch") != std::string::npos;
  });
  BOOST_TEST(sched.last_epoch() == 2);
  BOOST_TEST(o.opt.lr() == stepped[2]);
  // A chain is a schedule: it chains, and LinearWarmup wraps it.
  OneParameter<D> o3;
  ko::ChainedScheduler nested(
      ko::ChainedScheduler(ko::StepLR(o3.opt, 7, 0.5), ko::ExponentialLR(o3.opt, 0.9)),
      ko::LinearWarmup(o3.opt, 4, 0.25));
  BOOST_TEST(nested.base_lr() == 0.1);
  BOOST_TEST(nested.lr_at(2) == 0.1 * 0.81 * 0.625, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(nested.lr_at(8) == 0.1 * 0.5 * std::pow(0.9, 8), boost::test_tools::tolerance(1e-15));
  OneParameter<D> o4;
  ko::LinearWarmup warm(ko::ChainedScheduler(ko::StepLR(o4.opt, 7, 0.5), ko::ExponentialLR(o4.opt, 0.9)), 2,
                        0.5);
  BOOST_TEST(o4.opt.lr() == 0.05);
  BOOST_TEST(warm.lr_at(2 + 8) == 0.1 * 0.5 * std::pow(0.9, 8), boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(chained_scheduler_refuses_what_torch_does_not_multiply, D,
                              kiln::test::devices) {
  namespace ko = kiln::optim;
  OneParameter<D> o, other;
  // Two optimizers: torch's message.
  BOOST_CHECK_EXCEPTION(
      ko::ChainedScheduler(ko::StepLR(o.opt, 3), ko::ExponentialLR(o.opt, 0.9), ko::StepLR(other.opt, 3)),
      kiln::ValueError, [](const kiln::ValueError& e) {
        return std::string(e.what()) ==
               "kiln::optim::ChainedScheduler: expects all schedulers to belong to the same "
               "optimizer, but got schedulers at index 0 and 2 to be different";
      });
  // A cosine with eta_min: torch's chained form is not a product (and depends on the order).
  BOOST_CHECK_EXCEPTION(
      ko::ChainedScheduler(ko::CosineAnnealingLR(o.opt, 10, 1e-4), ko::ExponentialLR(o.opt, 0.9)),
      kiln::ValueError, [](const kiln::ValueError& e) {
        return std::string(e.what()).find("CosineAnnealingLR with eta_min 0.0001 is not a factor") !=
               std::string::npos;
      });
  // Past T_max torch's chained cosine restarts from the base lr, dropping the others' factors.
  OneParameter<D> o2;
  ko::ChainedScheduler cosine(ko::ExponentialLR(o2.opt, 0.9), ko::CosineAnnealingLR(o2.opt, 3));
  for (int e = 0; e < 3; ++e) cosine.step();
  BOOST_TEST(cosine.get_last_lr() == 0.0);
  BOOST_CHECK_EXCEPTION(cosine.step(), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("epoch 4 is past CosineAnnealingLR's T_max (3)") != std::string::npos;
  });
  BOOST_CHECK_THROW(cosine.set_last_epoch(7), kiln::ValueError);
  // A refused epoch changes nothing: stepping again is refused for the same epoch.
  BOOST_TEST(cosine.last_epoch() == 3);
  BOOST_TEST(cosine.get_last_lr() == 0.0);
  BOOST_TEST(o2.opt.lr() == 0.0);
  BOOST_CHECK_EXCEPTION(cosine.step(), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("epoch 4 is past") != std::string::npos;
  });
  // Bases that no order of building explains: the lr was set by hand between two of them.
  OneParameter<D> o3;
  ko::LinearWarmup warm(o3.opt, 4, 0.25);
  o3.opt.set_lr(0.3);
  ko::StepLR step(o3.opt, 7, 0.5);
  BOOST_CHECK_EXCEPTION(ko::ChainedScheduler(warm, step), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("the schedules' base lrs do not follow from one another") !=
           std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_lr_on_plateau_matches_pytorch, D, kiln::test::devices) {
  using kiln::optim::PlateauMode;
  using kiln::optim::ThresholdMode;
  for (const std::string name : {"plateau_min", "plateau_max_abs_cooldown"}) {
    const auto& s = plateau(name);
    OneParameter<D> o;
    kiln::optim::ReduceLROnPlateau sched(
        o.opt, {.mode = s.at("mode") == "min" ? PlateauMode::min : PlateauMode::max,
                .factor = s.at("factor").get<double>(),
                .patience = s.at("patience").get<std::int64_t>(),
                .threshold = s.at("threshold").get<double>(),
                .threshold_mode = s.at("threshold_mode") == "rel" ? ThresholdMode::rel : ThresholdMode::abs,
                .cooldown = s.at("cooldown").get<std::int64_t>(),
                .min_lr = s.at("min_lr").get<double>()});
    const auto metrics = s.at("metrics").get<std::vector<double>>();
    const auto want = s.at("lr").get<std::vector<double>>();
    int reductions = 0;
    for (std::size_t k = 0; k < metrics.size(); ++k) {
      BOOST_TEST_CONTEXT(name << ", step " << k + 1 << ", metric " << metrics[k]) {
        const double before = sched.get_last_lr();
        o.opt.step();
        sched.step(metrics[k]);
        reductions += sched.get_last_lr() < before;
        BOOST_TEST(sched.last_epoch() == static_cast<std::int64_t>(k + 1));
        BOOST_TEST(std::abs(sched.get_last_lr() - want[k]) / want[k] <= rtol, "lr " << sched.get_last_lr() << " vs torch " << want[k]);
        BOOST_TEST(o.opt.lr() == sched.get_last_lr());
      }
    }
    BOOST_TEST(reductions >= 2, name << " reduces the lr");
  }
}

/// Steps a schedule 9 epochs in one run, and 4 in another whose state (state("s.")) goes to a third,
/// built on an optimizer already at the saved lr (a resume that loaded the optimizer's state first: the
/// base lr it finds is the decayed one); loaded, the third steps the last 5 epochs at the lrs of the
/// first, bit for bit.
template <class Make>
void resumes_from_its_state(const char* name, Make make) {
  BOOST_TEST_CONTEXT(name) {
    OneParameter<kiln::Cpu> a, b, c;
    auto whole = make(a.opt);
    std::vector<double> want;
    for (int e = 0; e < 9; ++e) {
      a.opt.step();
      whole.step();
      want.push_back(a.opt.lr());
    }
    auto first = make(b.opt);
    for (int e = 0; e < 4; ++e) {
      b.opt.step();
      first.step();
    }
    const auto meta = first.state("s.");
    BOOST_TEST(meta.at("s.last_epoch") == "4");
    c.opt.set_lr(b.opt.lr());
    auto resumed = make(c.opt);
    resumed.check_state(meta, "s.");
    resumed.load_state(meta, "s.");
    BOOST_TEST(resumed.last_epoch() == 4);
    BOOST_TEST(resumed.base_lr() == first.base_lr());
    BOOST_TEST(c.opt.lr() == b.opt.lr());
    for (std::size_t e = 4; e < 9; ++e) {
      c.opt.step();
      resumed.step();
      BOOST_TEST(c.opt.lr() == want[e], "epoch " << e + 1);
    }
  }
}

// Every epoch schedule's state as checkpoint metadata (last_epoch, base_lr, group_base_lrs: torch's
// scheduler.state_dict() keeps last_epoch and base_lrs): a schedule built on an optimizer whose state was
// loaded first (its lr the decayed one) and given the state back goes on as the uninterrupted one; the
// build order no longer matters. Bad states are refused, naming the key, with nothing changed.
BOOST_AUTO_TEST_CASE(every_epoch_schedule_resumes_from_its_state) {
  namespace ko = kiln::optim;
  using Opt = ko::SGD<float, kiln::Cpu>;
  resumes_from_its_state("StepLR", [](Opt& o) { return ko::StepLR(o, 3, 0.5); });
  resumes_from_its_state("MultiStepLR", [](Opt& o) { return ko::MultiStepLR(o, {2, 5}, 0.1); });
  resumes_from_its_state("ExponentialLR", [](Opt& o) { return ko::ExponentialLR(o, 0.9); });
  resumes_from_its_state("CosineAnnealingLR", [](Opt& o) { return ko::CosineAnnealingLR(o, 7, 0.001); });
  resumes_from_its_state("CosineAnnealingWarmRestarts",
                         [](Opt& o) { return ko::CosineAnnealingWarmRestarts(o, 2, 2); });
  resumes_from_its_state("LambdaLR", [](Opt& o) {
    return ko::LambdaLR(o, [](std::int64_t e) { return 1.0 / (1.0 + static_cast<double>(e)); });
  });
  resumes_from_its_state("MultiplicativeLR", [](Opt& o) {
    return ko::MultiplicativeLR(o, [](std::int64_t e) { return 1.0 - 0.05 * static_cast<double>(e); });
  });
  resumes_from_its_state("ConstantLR", [](Opt& o) { return ko::ConstantLR(o, 0.5, 6); });
  resumes_from_its_state("LinearLR", [](Opt& o) { return ko::LinearLR(o, 0.25, 1.0, 7); });
  resumes_from_its_state("PolynomialLR", [](Opt& o) { return ko::PolynomialLR(o, 8, 2.0); });
  resumes_from_its_state("OneCycleLR",
                         [](Opt& o) { return ko::OneCycleLR(o, 1.0, 12, {.cycle_momentum = false}); });
  resumes_from_its_state("CyclicLR", [](Opt& o) {
    return ko::CyclicLR(o, 0.01, 0.1, {.step_size_up = 3, .cycle_momentum = false});
  });
  resumes_from_its_state("LinearWarmup",
                         [](Opt& o) { return ko::LinearWarmup(ko::CosineAnnealingLR(o, 6), 3); });
  resumes_from_its_state("ChainedScheduler", [](Opt& o) {
    return ko::ChainedScheduler(ko::ExponentialLR(o, 0.9), ko::MultiStepLR(o, {6}, 0.1));
  });
  resumes_from_its_state("SequentialLR", [](Opt& o) {
    return ko::SequentialLR({3, 6}, ko::ConstantLR(o, 0.5, 2), ko::ExponentialLR(o, 0.9),
                            ko::StepLR(o, 2, 0.5));
  });

  // Refusals, with nothing changed.
  OneParameter<kiln::Cpu> o;
  ko::StepLR sched(o.opt, 2, 0.5);
  for (int e = 0; e < 3; ++e) {
    o.opt.step();
    sched.step();
  }
  const auto meta = sched.state("s.");
  BOOST_TEST(meta.at("s.base_lr") == "0.1");
  BOOST_TEST(meta.at("s.group_base_lrs") == "");
  const auto refused = [&](std::map<std::string, std::string> m, const std::string& text) {
    const auto says = [&](const kiln::ValueError& e) {
      return std::string(e.what()).find(text) != std::string::npos;
    };
    BOOST_CHECK_EXCEPTION(sched.check_state(m, "s."), kiln::ValueError, says);
    BOOST_CHECK_EXCEPTION(sched.load_state(m, "s."), kiln::ValueError, says);
    BOOST_TEST(sched.last_epoch() == 3);
    BOOST_TEST(sched.base_lr() == 0.1);
    BOOST_TEST(o.opt.lr() == 0.05);
  };
  auto missing = meta;
  missing.erase("s.base_lr");
  refused(missing, "no 's.base_lr' in the state; give what state(\"s.\") returned");
  const std::tuple<std::string, std::string, std::string> bad_values[] = {
      {"s.last_epoch", "-1", "'s.last_epoch' is '-1'; expected an integer >= 0"},
      {"s.base_lr", "inf", "'s.base_lr' is 'inf'; expected a finite lr >= 0"},
      {"s.group_base_lrs", "0.01", "the state has the base lrs of 2 parameter groups, the optimizer 1"},
      {"s.group_base_lrs", "0.01,", "expected finite lrs >= 0 (or nan) joined by ','"},
  };
  for (const auto& [key, value, text] : bad_values) {
    auto changed = meta;
    changed[key] = value;
    refused(changed, text);
  }
}

// ReduceLROnPlateau's state as checkpoint metadata (state(prefix), as GradScaler's): a scheduler given
// it back continues as the one that saved it, bit for bit, through a reduction and a cooldown; "inf"
// before the first step round-trips; parameter groups' lrs come back; a missing key, a bad number and
// another group count are refused (check_state and load_state alike) before anything changes.
BOOST_AUTO_TEST_CASE(reduce_lr_on_plateau_state_goes_through_checkpoint_metadata) {
  OneParameter<kiln::Cpu> o;
  kiln::optim::ReduceLROnPlateau sched(o.opt, {.factor = 0.3, .patience = 1, .cooldown = 2});
  const auto fresh = sched.state("plateau.");
  BOOST_TEST(fresh.at("plateau.best") == "inf");
  BOOST_TEST(fresh.at("plateau.group_lrs") == "");
  const std::vector<double> metrics{1.0, 0.9, 0.95, 0.97, 0.96, 0.99, 0.98, 0.5, 0.7, 0.71, 0.72, 0.73};
  for (std::size_t k = 0; k < 5; ++k) sched.step(metrics[k]);
  BOOST_TEST(sched.in_cooldown());
  const auto meta = sched.state("plateau.");
  BOOST_TEST(meta.size() == 6u);
  OneParameter<kiln::Cpu> o2;
  kiln::optim::ReduceLROnPlateau resumed(o2.opt, {.factor = 0.3, .patience = 1, .cooldown = 2});
  resumed.check_state(meta, "plateau.");
  resumed.load_state(meta, "plateau.");
  BOOST_TEST(o2.opt.lr() == o.opt.lr());
  BOOST_TEST(resumed.best() == sched.best());
  BOOST_TEST(resumed.in_cooldown());
  for (std::size_t k = 5; k < metrics.size(); ++k) {
    sched.step(metrics[k]);
    resumed.step(metrics[k]);
    BOOST_TEST(resumed.get_last_lr() == sched.get_last_lr(), "epoch " << k);
    BOOST_TEST(resumed.num_bad_epochs() == sched.num_bad_epochs());
  }
  BOOST_TEST(resumed.last_epoch() == static_cast<std::int64_t>(metrics.size()));
  // A fresh scheduler's state loads into another fresh one (best stays inf).
  OneParameter<kiln::Cpu> o3;
  kiln::optim::ReduceLROnPlateau fresh_again(o3.opt, {.factor = 0.3});
  fresh_again.load_state(fresh, "plateau.");
  BOOST_TEST(fresh_again.best() == std::numeric_limits<double>::infinity());
  // Refusals, with nothing changed.
  const auto refused = [&](std::map<std::string, std::string> m, const std::string& text) {
    const auto says = [&](const kiln::ValueError& e) { return std::string(e.what()).find(text) != std::string::npos; };
    BOOST_CHECK_EXCEPTION(resumed.check_state(m, "plateau."), kiln::ValueError, says);
    const double lr = resumed.get_last_lr();
    BOOST_CHECK_EXCEPTION(resumed.load_state(m, "plateau."), kiln::ValueError, says);
    BOOST_TEST(resumed.get_last_lr() == lr);
  };
  auto missing = meta;
  missing.erase("plateau.cooldown_counter");
  refused(missing, "no 'plateau.cooldown_counter' in the state; give what state(\"plateau.\") returned");
  // One value changed each: key, value, what the refusal says.
  const std::tuple<std::string, std::string, std::string> bad_values[] = {
      {"plateau.best", "nan", "'plateau.best' is 'nan'; expected a number"},
      {"plateau.num_bad_epochs", "-1", "'plateau.num_bad_epochs' is '-1'; expected an integer >= 0"},
      {"plateau.lr", "0.1 ", "'plateau.lr' is '0.1 '; expected a finite lr >= 0"},
      {"plateau.group_lrs", "0.01,0.02", "the state has the lrs of 3 parameter groups, the optimizer 1"},
      {"plateau.group_lrs", "0.01,", "expected finite lrs >= 0 joined by ','"},
  };
  for (const auto& [key, value, text] : bad_values) {
    auto changed = meta;
    changed[key] = value;
    refused(changed, text);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduce_lr_on_plateau_counts_nan_resumes_and_reads_a_hand_set_lr, D, kiln::test::devices) {
  // A NaN metric is never better (torch's comparisons are false): patience 1 reduces after two of them.
  OneParameter<D> o;
  kiln::optim::ReduceLROnPlateau sched(o.opt, {.factor = 0.5, .patience = 1});
  sched.step(1.0);
  sched.step(NAN);
  BOOST_TEST(sched.num_bad_epochs() == 1);
  sched.step(NAN);
  BOOST_TEST(sched.get_last_lr() == 0.5 * 0.1);
  BOOST_TEST(sched.num_bad_epochs() == 0);
  BOOST_TEST(sched.best() == 1.0);
  // Resuming: a scheduler given the state continues as the one that saved it.
  const std::vector<double> rest{0.9, 0.95, 0.97, 0.99, 0.8, 0.85, 0.86};
  OneParameter<D> o2;
  kiln::optim::ReduceLROnPlateau resumed(o2.opt, {.factor = 0.5, .patience = 1});
  resumed.load_state(sched.state());
  BOOST_TEST(o2.opt.lr() == o.opt.lr());
  for (double m : rest) {
    sched.step(m);
    resumed.step(m);
    BOOST_TEST(resumed.get_last_lr() == sched.get_last_lr());
    BOOST_TEST(resumed.num_bad_epochs() == sched.num_bad_epochs());
  }
  BOOST_TEST(resumed.last_epoch() == 10);
  // An lr set on the optimizer by hand is the one it goes on from (and reduces next), as torch reads
  // the group's lr: after a step that does not reduce, the last lr and the state hold it.
  o.opt.set_lr(0.4);
  while (sched.num_bad_epochs() != 0) sched.step(2.0);  // (to a known count: reduced just now)
  o.opt.set_lr(0.4);
  sched.step(2.0);
  BOOST_TEST(sched.get_last_lr() == 0.4);
  BOOST_TEST(sched.state().lr == 0.4);
  sched.step(2.0);
  BOOST_TEST(o.opt.lr() == 0.2);
  // The floor: min_lr, and no change below eps.
  OneParameter<D> o3;
  kiln::optim::ReduceLROnPlateau floor(o3.opt, {.factor = 0.1, .patience = 0, .min_lr = 0.05});
  floor.step(1.0);
  floor.step(1.0);
  BOOST_TEST(floor.get_last_lr() == 0.05);
  floor.step(1.0);
  BOOST_TEST(floor.get_last_lr() == 0.05);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_cycle_lr_matches_pytorch, D, kiln::test::devices) {
  {
    OneParameter<D> o;
    kiln::optim::SGD<float, D> sgd(o.p, o.g, {.lr = 0.1, .momentum = 0.9});
    check_one_cycle(sgd, one_cycle("one_cycle_sgd"));
  }
  {
    Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(1)), g(Extents<Shape<dyn>>(1));
    p.fill(1.0f);
    g.fill(0.0f);
    kiln::optim::Adam adam(p, g, {.lr = 0.1});
    check_one_cycle(adam, one_cycle("one_cycle_adam_three_phase_linear"));
  }
  OneParameter<D> o;
  check_one_cycle(o.opt, one_cycle("one_cycle_no_momentum"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_cycle_lr_turns_on_sgd_momentum_and_refuses_what_torch_does, D, kiln::test::devices) {
  // An SGD without momentum, dampening 0.5: OneCycleLR sets 0.95, so the first step starts the buffer
  // from the gradient (as torch's: buf = g, not 0.95 * 0 + 0.5 g) and the second adds its share.
  OneParameter<D> o;
  o.g.fill(1.0f);
  kiln::optim::SGD<float, D> damped(o.p, o.g, {.lr = 0.1, .dampening = 0.5});
  kiln::optim::OneCycleLR sched(damped, 0.1, 10);
  BOOST_TEST(damped.momentum() == 0.95);
  const float lr0 = damped.lr();
  damped.step();  // buf = g = 1
  BOOST_TEST(o.p.to_vector()[0] == 1.0f - lr0, boost::test_tools::tolerance(1e-6f));
  sched.step();
  const float lr1 = damped.lr(), m1 = damped.momentum();
  BOOST_TEST(m1 < 0.95f);
  damped.step();  // buf = m1 buf + (1 - 0.5) g
  const float want = (1.0f - lr0) - lr1 * (m1 * 1.0f + 0.5f);
  BOOST_TEST(o.p.to_vector()[0] == want, boost::test_tools::tolerance(1e-6f));

  // Past total_steps (step 11 of 10), torch's message, which counts one step more.
  for (int k = 1; k < 10; ++k) sched.step();
  BOOST_CHECK_EXCEPTION(sched.step(), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()) ==
           "kiln::optim::OneCycleLR: Tried to step 12 times. The specified number of total steps is 10";
  });
  BOOST_TEST(sched.last_epoch() == 10);  // the refused step changed nothing
  // pct_start * total_steps = 1: the first phase has no steps (torch divides by zero).
  const kiln::optim::OneCycleOptions tenth{.pct_start = 0.1};
  BOOST_CHECK_THROW(kiln::optim::OneCycleLR(o.opt, 0.1, 10, tenth), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::optim::OneCycleLR(o.opt, 0.1, 0), kiln::ValueError);
  const kiln::optim::OneCycleOptions beyond{.pct_start = 1.5};
  BOOST_CHECK_EXCEPTION(kiln::optim::OneCycleLR(o.opt, 0.1, 10, beyond), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()) == "kiln::optim::OneCycleLR: Expected float between 0 and 1 pct_start, but got 1.5";
  });
  // An optimizer without a momentum: cycle_momentum must be off, as torch requires.
  LrOnly plain;
  BOOST_CHECK_EXCEPTION(kiln::optim::OneCycleLR(plain, 1.0, 10), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("optimizer must support momentum with `cycle_momentum` option enabled") !=
           std::string::npos;
  });
  const kiln::optim::OneCycleOptions fixed{.cycle_momentum = false};
  kiln::optim::OneCycleLR lr_only(plain, 1.0, 10, fixed);
  BOOST_TEST(plain.lr() == 0.04f);  // max_lr / div_factor, rounded to the float this optimizer holds
  // The last step allowed may carry a linear momentum past max_momentum (beta1 1 here): torch writes
  // it unchecked, and so do the setters, so the usual loop (a step after every batch) ends quietly.
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(1)), g(Extents<Shape<dyn>>(1));
  kiln::optim::AdamW adamw(p, g, {});
  const kiln::optim::OneCycleOptions steep{.anneal_strategy = kiln::optim::AnnealStrategy::linear, .max_momentum = 0.99};
  kiln::optim::OneCycleLR past(adamw, 0.01, 20, steep);
  for (int k = 0; k < 20; ++k) past.step();
  BOOST_TEST(adamw.betas().beta1 == past.momentum_at(20));
  BOOST_TEST(past.momentum_at(20) > 0.99);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cyclic_lr_matches_pytorch, D, kiln::test::devices) {
  for (const char* name : {"cyclic_triangular", "cyclic_triangular2", "cyclic_exp_range", "cyclic_sawtooth"}) {
    OneParameter<D> o;
    kiln::optim::SGD<float, D> sgd(o.p, o.g, {.lr = 0.1, .momentum = 0.9});
    check_cyclic(sgd, cyclic(name));
  }
  {
    OneParameter<D> o;  // no momentum, cycle_momentum off
    check_cyclic(o.opt, cyclic("cyclic_scale_fn_iterations"));
  }
  // Adam's beta1 cycles as SGD's momentum does (torch 2's; torch 1.13's CyclicLR refuses Adam).
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(1)), g(Extents<Shape<dyn>>(1));
  p.fill(1.0f);
  g.fill(0.0f);
  kiln::optim::Adam adam(p, g, {.lr = 0.1});
  check_cyclic(adam, cyclic("cyclic_triangular2"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cyclic_lr_resumes_at_its_step_and_refuses_what_cannot_cycle, D, kiln::test::devices) {
  // set_last_epoch (a resumed run) sets the lr and momentum of that step.
  const auto& want = cyclic("cyclic_triangular");
  OneParameter<D> o;
  kiln::optim::SGD<float, D> sgd(o.p, o.g, {.lr = 0.1, .momentum = 0.9});
  kiln::optim::CyclicLR sched(sgd, 0.01, 0.1, cyclic_options(want));
  sched.set_last_epoch(13);
  BOOST_TEST(sgd.lr() == want.at("lr")[13].get<double>(), boost::test_tools::tolerance(rtol));
  BOOST_TEST(sgd.momentum() == want.at("momentum")[13].get<double>(), boost::test_tools::tolerance(rtol));
  // A step_size_up of 0 (torch divides by zero at the cycle's start), a negative step_size_down.
  BOOST_CHECK_EXCEPTION(kiln::optim::CyclicLR(sgd, 0.01, 0.1, {.step_size_up = 0}), kiln::ValueError,
                        [](const kiln::ValueError& e) {
                          return std::string(e.what()).starts_with(
                              "kiln::optim::CyclicLR: step_size_up is 0 and step_size_down 0; expected step_size_up > 0");
                        });
  BOOST_CHECK_THROW(kiln::optim::CyclicLR(sgd, 0.01, 0.1, {.step_size_up = 2, .step_size_down = -1.0}), kiln::ValueError);
  // An optimizer without a momentum: cycle_momentum must be off, as torch requires.
  LrOnly plain;
  BOOST_CHECK_EXCEPTION(kiln::optim::CyclicLR(plain, 0.01, 0.1), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("optimizer must support momentum with `cycle_momentum` option enabled") !=
           std::string::npos;
  });
  kiln::optim::CyclicLR lr_only(plain, 0.25, 1.0, {.step_size_up = 2, .cycle_momentum = false});
  BOOST_TEST(plain.lr() == 0.25f);  // base_lr: the optimizer's own is not used
  lr_only.step();
  BOOST_TEST(plain.lr() == 0.625f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_momentum_turned_on_after_steps_without_one_starts_from_the_gradient, D,
                              kiln::test::devices) {
  // torch: steps without a momentum make no buffer, so the first step with one starts it from its
  // gradient (buf = g), whatever ran before: a momentum-free step (or a graph captured before the
  // momentum was turned on) leaves the first-step flag. Dampening 0.5 tells buf = g from 0.5 g.
  for (const bool capturable : {false, true}) {
    BOOST_TEST_CONTEXT("capturable " << capturable) {
      Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(1)), g(Extents<Shape<dyn>>(1));
      p.fill(0.0f);
      g.fill(3.0f);
      kiln::optim::SGD<float, D> sgd(p, g, {.lr = 1.0, .dampening = 0.5, .capturable = capturable});
      sgd.set_momentum(0.9);
      sgd.set_momentum(0.0);
      sgd.step();  // p = -3, no buffer filled
      BOOST_TEST(!sgd.momentum_initialized());
      sgd.set_momentum(0.9);
      g.fill(1.0f);
      sgd.step();  // buf = g = 1: p = -4 (a filled zero buffer would give 0.9 * 0 + 0.5 * 1: -3.5)
      BOOST_TEST(p.to_vector()[0] == -4.0f);
      BOOST_TEST(sgd.momentum_initialized());
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(schedulers_drive_adam_and_resume_at_an_epoch, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(4)), g(Extents<Shape<dyn>>(4));
  kiln::optim::Adam opt(p, g, {.lr = 0.5});
  kiln::optim::StepLR sched(opt, 2, 0.5);
  BOOST_TEST(sched.base_lr() == 0.5);
  for (int e = 0; e < 5; ++e) sched.step();
  BOOST_TEST(opt.lr() == 0.5 * 0.25f);  // epoch 5: 0.5 * 0.5^2
  sched.set_last_epoch(1);               // resume from a checkpoint taken at epoch 1
  BOOST_TEST(sched.last_epoch() == 1);
  BOOST_TEST(opt.lr() == 0.5);
  BOOST_TEST(sched.lr_at(6) == 0.5 * 0.125);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(multi_step_lr_counts_a_repeated_milestone_twice, D, kiln::test::devices) {
  OneParameter<D> o;
  kiln::optim::MultiStepLR sched(o.opt, {4, 2, 4}, 0.5);  // unsorted, 4 twice: torch's Counter semantics
  BOOST_TEST(sched.lr_at(1) == sched.base_lr());
  BOOST_TEST(sched.lr_at(2) == sched.base_lr() * 0.5);
  BOOST_TEST(sched.lr_at(4) == sched.base_lr() * 0.125);
  // torch's epochs start at 0: milestone 0 counts from the start, a negative one never
  // (MultiStepLR([-1, 0, 2], 0.5) gives 0.5, 0.5, 0.25, ... in torch 1.13).
  kiln::optim::MultiStepLR early(o.opt, {-1, 0, 2}, 0.5);
  BOOST_TEST(early.lr_at(0) == early.base_lr() * 0.5);
  BOOST_TEST(early.lr_at(1) == early.base_lr() * 0.5);
  BOOST_TEST(early.lr_at(2) == early.base_lr() * 0.25);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(schedulers_reject_bad_arguments, D, kiln::test::devices) {
  OneParameter<D> o;
  BOOST_CHECK_THROW(kiln::optim::StepLR(o.opt, 0), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::optim::CosineAnnealingLR(o.opt, 0), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::optim::LinearWarmup(o.opt, 0), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::optim::LinearWarmup(o.opt, 5, 0.0), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::optim::LinearWarmup(o.opt, 5, 1.5), kiln::ValueError);
  BOOST_CHECK_EXCEPTION(kiln::optim::ReduceLROnPlateau(o.opt, {.factor = 1.0}), kiln::ValueError,
                        [](const kiln::ValueError& e) {
                          return std::string(e.what()).find("Factor should be < 1.0.") != std::string::npos;
                        });
  BOOST_CHECK_THROW(kiln::optim::ReduceLROnPlateau(o.opt, {.patience = -1}), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::optim::CosineAnnealingWarmRestarts(o.opt, 0), kiln::ValueError);
  BOOST_CHECK_EXCEPTION(kiln::optim::CosineAnnealingWarmRestarts(o.opt, 5, 0), kiln::ValueError,
                        [](const kiln::ValueError& e) {
                          return std::string(e.what()).find("Expected integer T_mult >= 1, but got 0") != std::string::npos;
                        });
}

// torch's check: the first scheduler.step() after the scheduler was built warns when the optimizer has
// not stepped in between (the schedule's first lr would never be used); once per scheduler.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_scheduler_stepped_before_its_optimizer_warns_once_as_torchs_does, D,
                              kiln::test::devices) {
  const kiln::test::CollectWarnings w;
  {
    OneParameter<D> o;
    kiln::optim::StepLR sched(o.opt, 1, 0.5);
    sched.step();  // before o.opt.step(): the lr of epoch 0 is never used
    BOOST_TEST(w.count() == 1u);
    BOOST_TEST(w.messages().front().find("a scheduler's step() ran before its optimizer's step(); call "
                                        "opt.step() first, then sched.step()") != std::string::npos,
               w.messages().front());
    o.opt.step();
    sched.step();
    sched.step();
    BOOST_TEST(w.count() == 1u);  // only the first step() is checked
  }
  {
    OneParameter<D> o;
    o.opt.step();  // a step before the scheduler was built does not count (torch resets _step_count)
    kiln::optim::CosineAnnealingLR sched(o.opt, 10);
    sched.step();
    BOOST_TEST(w.count() == 2u);
  }
  {  // the right order, also for a ChainedScheduler, a SequentialLR and OneCycleLR on Adam: no warning
    OneParameter<D> o;
    kiln::optim::StepLR sched(o.opt, 1, 0.5);
    Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(2)), g(Extents<Shape<dyn>>(2));
    p.fill(1.0f);
    g.fill(0.5f);
    kiln::optim::Adam adam(p, g, {.lr = 0.01});
    kiln::optim::OneCycleLR cycle(adam, 0.1, 10);
    OneParameter<D> c;
    kiln::optim::ChainedScheduler chain(kiln::optim::ExponentialLR(c.opt, 0.9), kiln::optim::StepLR(c.opt, 2, 0.5));
    OneParameter<D> q;
    kiln::optim::SequentialLR seq({2}, kiln::optim::LinearWarmup(q.opt, 2), kiln::optim::ExponentialLR(q.opt, 0.9));
    for (int e = 0; e < 3; ++e) {
      o.opt.step();
      sched.step();
      adam.step();
      cycle.step();
      c.opt.step();
      chain.step();
      q.opt.step();
      seq.step();
    }
    BOOST_TEST(w.count() == 2u);
  }
  {  // a step a GradScaler skipped (an inf gradient) was still called first
    OneParameter<D> o;
    kiln::optim::StepLR sched(o.opt, 1, 0.5);
    kiln::optim::GradScaler<D> scaler;
    o.g.fill(std::numeric_limits<float>::infinity());
    BOOST_TEST(!scaler.step(o.opt));
    scaler.update();
    BOOST_TEST(o.opt.step_calls() == 1);
    sched.step();
    BOOST_TEST(w.count() == 2u);
  }
  {  // an optimizer of your own does not count its steps: nothing to check
    LrOnly own;
    kiln::optim::StepLR sched(own, 1, 0.5);
    sched.step();
    BOOST_TEST(w.count() == 2u);
  }
  // nullptr drops warnings; set_warning_handler returns the handler it replaces
  BOOST_TEST(kiln::set_warning_handler(nullptr) == &kiln::test::collect_warning);
  kiln::warn("dropped");
  BOOST_TEST(kiln::set_warning_handler(&kiln::test::collect_warning) == nullptr);
  kiln::warn("kept");
  BOOST_TEST(w.count() == 3u);
  BOOST_TEST(w.messages().back() == "kept");
}

BOOST_AUTO_TEST_SUITE_END()
