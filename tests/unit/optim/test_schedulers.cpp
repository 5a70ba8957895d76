// Learning-rate schedulers against torch 1.13's sequences (tests/parity/fixtures/schedulers.json):
// StepLR, MultiStepLR, CosineAnnealingLR, LinearWarmup alone (LinearLR) and before a cosine schedule
// (SequentialLR), 30 epochs from lr 0.1, within 1e-7 relative; the optimizer holds each lr rounded to float.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/optim/optim.hpp>

#include "support/parity.hpp"
#include "support/policies.hpp"

namespace {
namespace parity = kiln::test::parity;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
using nlohmann::json;

constexpr double rtol = 1e-7;

const json& schedule(const std::string& name) {
  static const json j = parity::load("schedulers.json");
  for (const auto& s : j.at("schedules"))
    if (s.at("name") == name) return s;
  throw std::runtime_error("schedulers.json has no schedule " + name);
}

/// An optimizer over a one-element arena on device D: what a scheduler drives.
template <class D>
struct OneParameter {
  Tensor<float, Shape<dyn>, D> p{Extents<Shape<dyn>>(1)}, g{Extents<Shape<dyn>>(1)};
  kiln::optim::SGD<float, D> opt{p, g, {.lr = 0.1f}};
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
      const double rel = std::abs(got - want[e]) / std::abs(want[e]);
      BOOST_TEST(rel <= rtol, "lr " << got << " vs torch " << want[e]);
      BOOST_TEST(opt.lr() == static_cast<float>(got));  // the optimizer holds it rounded to float
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

BOOST_AUTO_TEST_CASE_TEMPLATE(schedulers_drive_adam_and_resume_at_an_epoch, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(4)), g(Extents<Shape<dyn>>(4));
  kiln::optim::Adam opt(p, g, {.lr = 0.5f});
  kiln::optim::StepLR sched(opt, 2, 0.5);
  BOOST_TEST(sched.base_lr() == 0.5);
  for (int e = 0; e < 5; ++e) sched.step();
  BOOST_TEST(opt.lr() == 0.5f * 0.25f);  // epoch 5: 0.5 * 0.5^2
  sched.set_last_epoch(1);               // resume from a checkpoint taken at epoch 1
  BOOST_TEST(sched.last_epoch() == 1);
  BOOST_TEST(opt.lr() == 0.5f);
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
}

BOOST_AUTO_TEST_SUITE_END()
