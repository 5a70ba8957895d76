// Adamax (kiln/optim/adamax.hpp): torch's defaults; five steps against a float64 transcription of torch
// 1.13's single-tensor step (defaults; weight decay and other betas; also with maximize); the infinity
// norm keeps a NaN as torch.amax does; one pass per step, and with fusion off one pass per operation
// landing where the fused step does; the working copy under mixed precision; a GradScaler drives it;
// StepLR moves its learning rate and OneCycleLR its beta1; its state through a checkpoint (a resumed run
// steps as an unbroken one; another optimizer's state or other hyperparameters refused); bad options
// refused with torch's words. (Parity with torch itself: tests/unit/optim/test_parity_mlp.cpp.)
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

/// torch 1.13's _single_tensor_adamax for one element, in double.
struct Reference {
  kiln::optim::AdamaxOptions o;
  double p, m = 0, u = 0;
  int step = 0;
  void take(double g) {
    ++step;
    if (o.maximize) g = -g;
    if (o.weight_decay != 0) g += o.weight_decay * p;
    const double b1 = o.betas.beta1, b2 = o.betas.beta2;
    m = b1 * m + (1 - b1) * g;
    u = std::max(b2 * u, std::abs(g) + o.eps);
    const double clr = o.lr / (1 - std::pow(b1, step));
    p -= clr * m / u;
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(adamax)

BOOST_AUTO_TEST_CASE(options_default_to_torch) {
  const kiln::optim::AdamaxOptions o;
  BOOST_TEST(o.lr == 2e-3);
  BOOST_TEST(o.betas.beta1 == 0.9);
  BOOST_TEST(o.betas.beta2 == 0.999);
  BOOST_TEST(o.eps == 1e-8);
  BOOST_TEST(o.weight_decay == 0.0);
  BOOST_TEST(!o.maximize);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(five_steps_match_a_float64_transcription_of_torch, D, kiln::test::devices) {
  const std::vector<double> p0 = kt::random_values<double>(64, -1, 1, 1);
  using O = kiln::optim::AdamaxOptions;
  for (const O o :
       {O{}, O{.lr = 0.1, .betas = {0.8f, 0.9f}, .eps = 1e-3, .weight_decay = 1e-2},
        O{.lr = 0.1, .betas = {0.8f, 0.9f}, .eps = 1e-3, .weight_decay = 1e-2, .maximize = true}}) {
    BOOST_TEST_CONTEXT("weight decay " << o.weight_decay << ", maximize " << o.maximize) {
      auto p = kt::make_tensor<D>(p0, Extents<Shape<dyn>>(64));
      Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(64));
      kiln::optim::Adamax opt(p, g, o);
      std::vector<Reference> ref;
      for (double x : p0) ref.push_back({o, x});
      for (std::uint32_t s = 0; s < 5; ++s) {
        // Gradients that shrink: from the third step on, the decayed norm beta2 u is the larger for some
        // elements, so both sides of the maximum are taken.
        auto gv = kt::random_values<double>(64, -1, 1, 10 + s);
        for (double& x : gv) x /= (1 + 4 * s);
        g.copy_from(std::span<const double>(gv));
        opt.step();
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i].take(gv[i]);
      }
      std::vector<double> want, ms, us;
      std::size_t decayed = 0;
      for (const auto& r : ref) {
        want.push_back(r.p), ms.push_back(r.m), us.push_back(r.u);
        decayed += r.u > 1.0 / 17 + r.o.eps;  // larger than the last step's bound: beta2 u won
      }
      BOOST_TEST(decayed > 0u);
      BOOST_TEST(kt::all_close(p.to_vector(), want, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.exp_avg().to_vector(), ms, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.exp_inf().to_vector(), us, 1e-12, 1e-12));
      BOOST_TEST(opt.step_count() == 5);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_nan_gradient_stays_in_the_norm_as_torchs_amax, D, kiln::test::devices) {
  // torch.amax propagates NaN: the element's exp_inf and parameter become NaN, the others step as usual
  // (fused and unfused alike).
  for (const bool fused : {true, false}) {
    auto p = kt::make_tensor<D>(std::vector<float>{1.0f, 2.0f}, Extents<Shape<dyn>>(2));
    auto g = kt::make_tensor<D>(std::vector<float>{NAN, 0.5f}, Extents<Shape<dyn>>(2));
    kiln::optim::Adamax opt(p, g, {.lr = 0.1});
    {
      std::optional<kiln::Unfused> off;
      if (!fused) off.emplace();
      opt.step();
    }
    const auto u = opt.exp_inf().to_vector();
    const auto pv = p.to_vector();
    BOOST_TEST(std::isnan(u[0]), (fused ? "fused" : "unfused"));
    BOOST_TEST(std::isnan(pv[0]));
    BOOST_TEST(u[1] == 0.5f + 1e-8f);
    BOOST_TEST(pv[1] == 1.9f, boost::test_tools::tolerance(1e-6f));  // 2 - 0.1 (m / (1 - 0.9)) / u
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_fused_and_torchs_order_unfused, D, kiln::test::devices) {
  using O = kiln::optim::AdamaxOptions;
  kt::fused_and_unfused_steps_agree<kiln::optim::Adamax, D>(O{}, 7);  // m twice, u, |g|, + eps, max, p
  kt::fused_and_unfused_steps_agree<kiln::optim::Adamax, D>(          // and maximize, L2; an eps that shows
      O{.eps = 0.1, .weight_decay = 1e-2, .maximize = true}, 9);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_working_copy_is_rewritten_under_mixed_precision, D, kiln::test::devices) {
  kt::the_working_copy_follows_the_masters<kiln::optim::Adamax, D>(kiln::optim::AdamaxOptions{.lr = 0.1});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_grad_scaler_drives_adamax, D, kiln::test::devices) {
  kt::a_grad_scaler_drives_it<kiln::optim::Adamax, D>(kiln::optim::AdamaxOptions{.weight_decay = 1e-2});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(schedulers_move_its_learning_rate_and_beta1, D, kiln::test::devices) {
  // StepLR halves the lr every 2 epochs; the step after 4 takes a quarter of it, as the transcription does.
  kt::a_step_lr_moves_it<kiln::optim::Adamax, D>(kiln::optim::AdamaxOptions{.lr = 0.1},
                                                 [](double p, double g, double lr) {
                                                   Reference r{{.lr = lr}, p};
                                                   r.take(g);
                                                   return r.p;
                                                 });

  auto p = kt::make_tensor<D>(kt::random_values<double>(16, -1, 1, 2), Extents<Shape<dyn>>(16));
  Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(16));
  // OneCycleLR cycles beta1 against the lr, as Adam's: max_momentum 0.95 at the start.
  kiln::optim::Adamax cycled(p, g);
  kiln::optim::OneCycleLR one(cycled, 0.01, 10);
  BOOST_TEST(cycled.betas().beta1 == 0.95);
  BOOST_TEST(cycled.betas().beta2 == 0.999);
  for (int s = 0; s < 3; ++s) one.step();
  BOOST_TEST(cycled.betas().beta1 < 0.95);  // falls while the lr rises
  BOOST_TEST(cycled.lr() > 0.01f / 25);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(its_state_goes_through_a_checkpoint, D, kiln::test::devices) {
  // Two steps, the state saved and loaded into a fresh Adamax, two more: as four steps of one (the bias
  // correction reads the restored step count, the moments go on). Another optimizer's state, or other
  // hyperparameters that shape the steps, are refused and leave the optimizer as it was.
  const kiln::OptimizerState saved = kt::resumes_through_a_checkpoint<kiln::optim::Adamax, D>(
      kiln::optim::AdamaxOptions{.lr = 0.1, .betas = {0.8, 0.9}, .weight_decay = 1e-2});
  BOOST_TEST(saved.metadata.at("optimizer.type") == "Adamax");
  BOOST_TEST(saved.metadata.at("optimizer.beta1") == "0.8");
  BOOST_TEST(saved.entries.contains("optimizer.exp_avg"));
  BOOST_TEST(saved.entries.contains("optimizer.exp_inf"));
  BOOST_TEST(!saved.entries.contains("optimizer.exp_avg_sq"));
  knn::Model<kt::OptimizerNet, kt::OptimizerIn, kiln::Policy<kiln::Fp32, D>> m(
      3);  // a model of the same size
  kiln::optim::Adamax other(m, {.lr = 0.1, .eps = 1e-6, .weight_decay = 1e-2});
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(other, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError,
                        kt::says("the checkpoint's Adamax has eps = 1e-08, this one 1e-06"));
  BOOST_TEST(other.step_count() == 0);
  kiln::optim::Adam adam(m);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adam, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError, kt::says("the optimizer state is Adamax's; expected Adam's"));
  const kiln::OptimizerState adams = kiln::optimizer_state(adam);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(other, adams.entries, adams.metadata, "ckpt"),
                        kiln::CheckpointError, kt::says("the optimizer state is Adam's; expected Adamax's"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_options_are_refused_with_torchs_words, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(3)), g(Extents<Shape<dyn>>(3)),
      short_g(Extents<Shape<dyn>>(2));
  using O = kiln::optim::AdamaxOptions;
  BOOST_CHECK_EXCEPTION(kiln::optim::Adamax(p, g, O{.lr = -1.0}), kiln::ValueError,
                        kt::says("Invalid learning rate: -1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adamax(p, g, O{.eps = NAN}), kiln::ValueError,
                        kt::says("Invalid epsilon value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adamax(p, g, O{.betas = {1.0f, 0.999f}}), kiln::ValueError,
                        kt::says("Invalid beta parameter at index 0: 1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adamax(p, g, O{.betas = {0.9f, -0.5f}}), kiln::ValueError,
                        kt::says("Invalid beta parameter at index 1: -0.5"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adamax(p, g, O{.weight_decay = -1.0}), kiln::ValueError,
                        kt::says("Invalid weight_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adamax(p, short_g, O{}), kiln::ShapeError,
                        kt::says("3 parameters but 2 gradients"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
