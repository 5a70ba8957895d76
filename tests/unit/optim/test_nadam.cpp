// NAdam (kiln/optim/nadam.hpp): torch's defaults; five steps against a float64 transcription of torch
// 1.13's single-tensor step (defaults; weight decay and another momentum decay; also with maximize), the
// moments and mu_product included; one pass per step, and with fusion off one pass per operation landing
// where the fused step does; the working copy under mixed precision; a GradScaler drives it (a skipped
// step leaves mu_product as it was); StepLR moves its learning rate and OneCycleLR can cycle its beta1;
// its state through a checkpoint (a resumed run steps as an unbroken one; another optimizer's state or
// another momentum decay refused); bad options refused with torch's words. (Parity with torch itself:
// tests/unit/optim/test_parity_mlp.cpp.)
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
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

/// torch 1.13's _single_tensor_nadam for one element, in double; mu_product in float, as torch's
/// float32 tensor state["mu_product"].
struct Reference {
  kiln::optim::NAdamOptions o;
  double p, m = 0, v = 0;
  float mu_product = 1.0f;
  int step = 0;
  void take(double g) {
    ++step;
    const double t = step, b1 = o.betas.beta1, b2 = o.betas.beta2, psi = o.momentum_decay;
    const double bias_correction2 = 1 - std::pow(b2, t);
    if (o.maximize) g = -g;
    if (o.weight_decay != 0) g += o.weight_decay * p;
    const double mu = b1 * (1 - 0.5 * std::pow(0.96, t * psi));
    const double mu_next = b1 * (1 - 0.5 * std::pow(0.96, (t + 1) * psi));
    mu_product = mu_product * static_cast<float>(mu);
    const float mu_product_next = mu_product * static_cast<float>(mu) * static_cast<float>(mu_next);
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double denom = std::sqrt(v / bias_correction2) + o.eps;
    p -= o.lr * (1 - mu) / (1 - double{mu_product}) * g / denom;  // (torch's .item(): a Python float)
    p -= o.lr * mu_next / (1 - double{mu_product_next}) * m / denom;
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(nadam)

BOOST_AUTO_TEST_CASE(options_default_to_torch) {
  const kiln::optim::NAdamOptions o;
  BOOST_TEST(o.lr == 2e-3);
  BOOST_TEST(o.betas.beta1 == 0.9);
  BOOST_TEST(o.betas.beta2 == 0.999);
  BOOST_TEST(o.eps == 1e-8);
  BOOST_TEST(o.weight_decay == 0.0);
  BOOST_TEST(o.momentum_decay == 4e-3);
  BOOST_TEST(!o.maximize);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(five_steps_match_a_float64_transcription_of_torch, D, kiln::test::devices) {
  const std::vector<double> p0 = kt::random_values<double>(64, -1, 1, 1);
  using O = kiln::optim::NAdamOptions;
  for (const O o :
       {O{},
        O{.lr = 0.05, .betas = {0.8f, 0.99f}, .eps = 1e-6, .weight_decay = 1e-2, .momentum_decay = 0.1},
        O{.lr = 0.05, .weight_decay = 1e-2, .momentum_decay = 0.02, .maximize = true}}) {
    BOOST_TEST_CONTEXT("weight_decay " << o.weight_decay << ", maximize " << o.maximize) {
      auto p = kt::make_tensor<D>(p0, Extents<Shape<dyn>>(64));
      Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(64));
      kiln::optim::NAdam opt(p, g, o);
      BOOST_TEST(opt.mu_product() == 1.0);
      std::vector<Reference> ref;
      for (double x : p0) ref.push_back({o, x});
      for (std::uint32_t s = 0; s < 5; ++s) {
        const auto gv = kt::random_values<double>(64, -1, 1, 10 + s);
        g.copy_from(std::span<const double>(gv));
        opt.step();
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i].take(gv[i]);
      }
      std::vector<double> want, ms, vs;
      for (const auto& r : ref) want.push_back(r.p), ms.push_back(r.m), vs.push_back(r.v);
      BOOST_TEST(kt::all_close(p.to_vector(), want, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.exp_avg().to_vector(), ms, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.exp_avg_sq().to_vector(), vs, 1e-12, 1e-12));
      BOOST_TEST(opt.mu_product() == static_cast<double>(ref[0].mu_product));  // torch's float32, exactly
      BOOST_TEST(opt.step_count() == 5);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_fused_and_torchs_order_unfused, D, kiln::test::devices) {
  using O = kiln::optim::NAdamOptions;
  kt::fused_and_unfused_steps_agree<kiln::optim::NAdam, D>(O{.lr = 1e-2}, 9);  // m 2, v 2, denom 3, p 2
  kt::fused_and_unfused_steps_agree<kiln::optim::NAdam, D>(
      O{.lr = 1e-2, .weight_decay = 1e-2, .momentum_decay = 0.1, .maximize = true}, 11);  // and -g, L2
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_working_copy_is_rewritten_under_mixed_precision, D, kiln::test::devices) {
  kt::the_working_copy_follows_the_masters<kiln::optim::NAdam, D>(kiln::optim::NAdamOptions{.lr = 0.1});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_grad_scaler_drives_nadam, D, kiln::test::devices) {
  kt::a_grad_scaler_drives_it<kiln::optim::NAdam, D>(kiln::optim::NAdamOptions{.weight_decay = 1e-2});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_scheduler_moves_its_learning_rate, D, kiln::test::devices) {
  // StepLR halves the lr every 2 epochs; the step after 4 takes a quarter of it, as the transcription does.
  kt::a_step_lr_moves_it<kiln::optim::NAdam, D>(kiln::optim::NAdamOptions{.lr = 0.1},
                                                [](double p, double g, double lr) {
                                                  Reference r{{.lr = lr}, p};
                                                  r.take(g);
                                                  return r.p;
                                                });
  // As torch's OneCycleLR, which cycles betas[0] of any optimizer with betas.
  static_assert(kiln::optim::momentum_optimizer<kiln::optim::NAdam<float, D>>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(its_state_goes_through_a_checkpoint, D, kiln::test::devices) {
  // Two steps, the state saved and loaded into a fresh NAdam, two more: as four steps of one (the
  // momentum schedule reads the restored step count and mu_product). Another optimizer's state, or
  // another momentum decay, are refused and leave the optimizer as it was.
  const kiln::OptimizerState saved = kt::resumes_through_a_checkpoint<kiln::optim::NAdam, D>(
      kiln::optim::NAdamOptions{.lr = 0.05, .betas = {0.8f, 0.99f}, .momentum_decay = 0.1});
  BOOST_TEST(saved.metadata.at("optimizer.type") == "NAdam");
  BOOST_TEST(saved.metadata.at("optimizer.momentum_decay") == "0.1");
  BOOST_TEST(std::stod(saved.metadata.at("optimizer.mu_product")) < 1.0);
  BOOST_TEST(saved.entries.contains("optimizer.exp_avg"));
  BOOST_TEST(saved.entries.contains("optimizer.exp_avg_sq"));
  knn::Model<kt::OptimizerNet, kt::OptimizerIn, kiln::Policy<kiln::Fp32, D>> m(
      3);  // a model of the same size
  kiln::optim::NAdam other(m, {.lr = 0.05, .momentum_decay = 0.2});
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(other, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError,
                        kt::says("the checkpoint's NAdam has momentum_decay = 0.1, this one 0.2"));
  BOOST_TEST(other.step_count() == 0);
  kiln::optim::NAdam fresh(m, {.lr = 0.05, .betas = {0.8f, 0.99f}, .momentum_decay = 0.1});
  auto no_product = saved.metadata;
  no_product.erase("optimizer.mu_product");
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(fresh, saved.entries, no_product, "ckpt"),
                        kiln::CheckpointError, kt::says("no metadata 'optimizer.mu_product'"));
  no_product["optimizer.mu_product"] = "1.5";
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(fresh, saved.entries, no_product, "ckpt"),
                        kiln::CheckpointError, kt::says("expected a number in [0, 1]"));
  BOOST_TEST(fresh.step_count() == 0);
  BOOST_TEST(fresh.mu_product() == 1.0);
  kiln::optim::Adam adam(m);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adam, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError, kt::says("the optimizer state is NAdam's; expected Adam's"));
  kiln::optim::RAdam radam(m);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(radam, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError, kt::says("the optimizer state is NAdam's; expected RAdam's"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_options_are_refused_with_torchs_words, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(3)), g(Extents<Shape<dyn>>(3)),
      short_g(Extents<Shape<dyn>>(2));
  using O = kiln::optim::NAdamOptions;
  BOOST_CHECK_EXCEPTION(kiln::optim::NAdam(p, g, O{.lr = -1.0}), kiln::ValueError,
                        kt::says("Invalid learning rate: -1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::NAdam(p, g, O{.eps = NAN}), kiln::ValueError,
                        kt::says("Invalid epsilon value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::NAdam(p, g, O{.betas = {1.0f, 0.999f}}), kiln::ValueError,
                        kt::says("Invalid beta parameter at index 0: 1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::NAdam(p, g, O{.betas = {0.9f, -0.5f}}), kiln::ValueError,
                        kt::says("Invalid beta parameter at index 1: -0.5"));
  BOOST_CHECK_EXCEPTION(kiln::optim::NAdam(p, g, O{.weight_decay = -1.0}), kiln::ValueError,
                        kt::says("Invalid weight_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::NAdam(p, g, O{.momentum_decay = -1e-3}), kiln::ValueError,
                        kt::says("Invalid momentum_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::NAdam(p, short_g, O{}), kiln::ShapeError,
                        kt::says("3 parameters but 2 gradients"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
