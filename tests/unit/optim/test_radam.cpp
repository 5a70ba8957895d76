// RAdam (kiln/optim/radam.hpp): torch's defaults; eight steps against a float64 transcription of torch
// 1.13's single-tensor step (defaults; weight decay; also with maximize), the first five un-rectified
// (rho_t <= 5), the last three rectified; one pass per step, and with fusion off one pass per operation
// landing where the fused step does, in both branches; the working copy under mixed precision; a
// GradScaler drives it; StepLR moves its learning rate and OneCycleLR can cycle its beta1; its state
// through a checkpoint across the switch to rectified steps (a resumed run steps as an unbroken one;
// another optimizer's state or another eps refused); bad options refused with torch's words. (Parity
// with torch itself: tests/unit/optim/test_parity_mlp.cpp.)
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/core/fusion.hpp>
#include <kiln/io/optimizer_state.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "support/optimizer_checks.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using Net = knn::Sequential<knn::Linear<7, 5>, knn::Tanh, knn::Linear<5, 3>>;
using In = Shape<dyn, 7>;

/// torch 1.13's _single_tensor_radam for one element, in double; `rectified` counts the steps with
/// rho_t > 5.
struct Reference {
  kiln::optim::RAdamOptions o;
  double p, m = 0, v = 0;
  int step = 0, rectified = 0;
  void take(double g) {
    ++step;
    const double t = step, b1 = o.betas.beta1, b2 = o.betas.beta2;
    const double bias_correction1 = 1 - std::pow(b1, t), bias_correction2 = 1 - std::pow(b2, t);
    if (o.maximize) g = -g;
    if (o.weight_decay != 0) g += o.weight_decay * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / bias_correction1;
    const double rho_inf = 2 / (1 - b2) - 1;
    const double rho_t = rho_inf - 2 * t * std::pow(b2, t) / bias_correction2;
    if (rho_t > 5) {
      ++rectified;
      const double rect =
          std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
      const double adaptive_lr = std::sqrt(bias_correction2) / (std::sqrt(v) + o.eps);
      p -= mhat * o.lr * adaptive_lr * rect;
    } else {
      p -= mhat * o.lr;
    }
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(radam)

BOOST_AUTO_TEST_CASE(options_default_to_torch) {
  const kiln::optim::RAdamOptions o;
  BOOST_TEST(o.lr == 1e-3);
  BOOST_TEST(o.betas.beta1 == 0.9);
  BOOST_TEST(o.betas.beta2 == 0.999);
  BOOST_TEST(o.eps == 1e-8);
  BOOST_TEST(o.weight_decay == 0.0);
  BOOST_TEST(!o.maximize);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(eight_steps_match_a_float64_transcription_of_torch, D, kiln::test::devices) {
  const std::vector<double> p0 = kt::random_values<double>(64, -1, 1, 1);
  using O = kiln::optim::RAdamOptions;
  for (const O o : {O{}, O{.lr = 0.05, .betas = {0.8f, 0.99f}, .eps = 1e-6, .weight_decay = 1e-2},
                    O{.lr = 0.05, .weight_decay = 1e-2, .maximize = true}}) {
    BOOST_TEST_CONTEXT("weight_decay " << o.weight_decay << ", maximize " << o.maximize) {
      auto p = kt::make_tensor<D>(p0, Extents<Shape<dyn>>(64));
      Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(64));
      kiln::optim::RAdam opt(p, g, o);
      std::vector<Reference> ref;
      for (double x : p0) ref.push_back({o, x});
      for (std::uint32_t s = 0; s < 8; ++s) {
        const auto gv = kt::random_values<double>(64, -1, 1, 10 + s);
        g.copy_from(std::span<const double>(gv));
        opt.step();
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i].take(gv[i]);
      }
      BOOST_TEST(ref[0].rectified == 3);  // steps 6, 7 and 8 (rho_t = 5.994 at step 6)
      std::vector<double> want, ms, vs;
      for (const auto& r : ref) want.push_back(r.p), ms.push_back(r.m), vs.push_back(r.v);
      BOOST_TEST(kt::all_close(p.to_vector(), want, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.exp_avg().to_vector(), ms, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.exp_avg_sq().to_vector(), vs, 1e-12, 1e-12));
      BOOST_TEST(opt.step_count() == 8);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_fused_and_torchs_order_unfused, D, kiln::test::devices) {
  using O = kiln::optim::RAdamOptions;
  // The first four steps are un-rectified: m 2, v 2, mhat, mhat lr, p.
  kt::fused_and_unfused_steps_agree<kiln::optim::RAdam, D>(O{.lr = 1e-2}, 7);
  kt::fused_and_unfused_steps_agree<kiln::optim::RAdam, D>(
      O{.lr = 1e-2, .weight_decay = 1e-2, .maximize = true}, 9);  // and -g, L2
  // Rectified steps (from a step count of 5 on): m 2, v 2, mhat, sqrt, + eps, reciprocal, * sqrt(bc2),
  // * lr, * adaptive_lr, * rect, p.
  for (const O o : {O{.lr = 1e-2}, O{.lr = 1e-2, .weight_decay = 1e-2, .maximize = true}}) {
    using P = kiln::Policy<kiln::Fp32, D>;
    knn::Model<Net, In, P> a(3), b(3);
    kiln::optim::RAdam fa(a, o), fb(b, o);
    fa.set_step_count(5);
    fb.set_step_count(5);
    const auto n = static_cast<std::size_t>(a.parameter_count);
    std::uint64_t fused = 0, unfused = 0;
    for (std::uint32_t s = 0; s < 4; ++s) {
      const auto g = kt::random_values<float>(n, -1, 1, 90 + s);
      a.gradients().copy_from(std::span<const float>(g));
      b.gradients().copy_from(std::span<const float>(g));
      auto before = kiln::passes();
      fa.step();
      fused = kiln::passes() - before;
      kiln::Unfused off;
      before = kiln::passes();
      fb.step();
      unfused = kiln::passes() - before;
    }
    BOOST_TEST(fused == 1u);
    BOOST_TEST(unfused >= (o.maximize ? 15u : 13u));
    BOOST_TEST(
        kt::all_close(b.parameters().to_vector(), kt::to_doubles(a.parameters().to_vector()), 1e-5, 1e-6));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_working_copy_is_rewritten_under_mixed_precision, D, kiln::test::devices) {
  kt::the_working_copy_follows_the_masters<kiln::optim::RAdam, D>(kiln::optim::RAdamOptions{.lr = 0.1});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_grad_scaler_drives_radam, D, kiln::test::devices) {
  kt::a_grad_scaler_drives_it<kiln::optim::RAdam, D>(kiln::optim::RAdamOptions{.weight_decay = 1e-2});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_scheduler_moves_its_learning_rate, D, kiln::test::devices) {
  // StepLR halves the lr every 2 epochs; the step after 4 takes a quarter of it, as the transcription does.
  kt::a_step_lr_moves_it<kiln::optim::RAdam, D>(kiln::optim::RAdamOptions{.lr = 0.1},
                                                [](double p, double g, double lr) {
                                                  Reference r{{.lr = lr}, p};
                                                  r.take(g);
                                                  return r.p;
                                                });
  // As torch's OneCycleLR, which cycles betas[0] of any optimizer with betas.
  static_assert(kiln::optim::momentum_optimizer<kiln::optim::RAdam<float, D>>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(its_state_goes_through_a_checkpoint, D, kiln::test::devices) {
  // Four steps, the state saved and loaded into a fresh RAdam, four more: as eight steps of one (the
  // rectification starts at the sixth, from the restored step count). Another optimizer's state, or
  // another eps, are refused and leave the optimizer as it was.
  const kiln::OptimizerState saved = kt::resumes_through_a_checkpoint<kiln::optim::RAdam, D>(
      kiln::optim::RAdamOptions{.lr = 0.05, .betas = {0.8, 0.999}, .weight_decay = 1e-3}, 4);
  BOOST_TEST(saved.metadata.at("optimizer.type") == "RAdam");
  BOOST_TEST(saved.metadata.at("optimizer.beta1") == "0.8");
  BOOST_TEST(!saved.metadata.contains("optimizer.mu_product"));
  BOOST_TEST(saved.entries.contains("optimizer.exp_avg"));
  BOOST_TEST(saved.entries.contains("optimizer.exp_avg_sq"));
  knn::Model<kt::OptimizerNet, kt::OptimizerIn, kiln::Policy<kiln::Fp32, D>> m(
      3);  // a model of the same size
  kiln::optim::RAdam other(m, {.lr = 0.05, .eps = 1e-6, .weight_decay = 1e-3});
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(other, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError,
                        kt::says("the checkpoint's RAdam has eps = 1e-08, this one 1e-06"));
  BOOST_TEST(other.step_count() == 0);
  kiln::optim::Adam adam(m);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adam, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError, kt::says("the optimizer state is RAdam's; expected Adam's"));
  kiln::optim::NAdam nadam(m);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(nadam, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError, kt::says("the optimizer state is RAdam's; expected NAdam's"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_options_are_refused_with_torchs_words, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(3)), g(Extents<Shape<dyn>>(3)),
      short_g(Extents<Shape<dyn>>(2));
  using O = kiln::optim::RAdamOptions;
  BOOST_CHECK_EXCEPTION(kiln::optim::RAdam(p, g, O{.lr = -1.0}), kiln::ValueError,
                        kt::says("Invalid learning rate: -1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RAdam(p, g, O{.eps = -1e-8}), kiln::ValueError,
                        kt::says("Invalid epsilon value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RAdam(p, g, O{.betas = {NAN, 0.999f}}), kiln::ValueError,
                        kt::says("Invalid beta parameter at index 0"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RAdam(p, g, O{.betas = {0.9f, 1.0f}}), kiln::ValueError,
                        kt::says("Invalid beta parameter at index 1: 1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RAdam(p, g, O{.weight_decay = -1.0}), kiln::ValueError,
                        kt::says("Invalid weight_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RAdam(p, short_g, O{}), kiln::ShapeError,
                        kt::says("3 parameters but 2 gradients"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
