// Adagrad (kiln/optim/adagrad.hpp): torch's defaults; four steps against a float64 transcription of torch
// 1.13's single-tensor step (defaults; lr_decay, weight decay and a starting accumulator; also with
// maximize); one pass per step, and with fusion off one pass per operation landing where the fused step
// does; the working copy under mixed precision; a GradScaler drives it; StepLR moves its learning rate;
// its state through a checkpoint (a resumed run steps as an unbroken one; another optimizer's state or
// other hyperparameters refused); bad options refused with torch's words. (Parity with torch itself:
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

/// torch 1.13's _single_tensor_adagrad for one element, in double.
struct Reference {
  kiln::optim::AdagradOptions o;
  double p, sum = o.initial_accumulator_value;
  int step = 0;
  void take(double g) {
    ++step;
    if (o.maximize) g = -g;
    if (o.weight_decay != 0) g += o.weight_decay * p;
    const double clr = o.lr / (1 + (step - 1) * o.lr_decay);
    sum += g * g;
    p -= clr * g / (std::sqrt(sum) + o.eps);
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(adagrad)

BOOST_AUTO_TEST_CASE(options_default_to_torch) {
  const kiln::optim::AdagradOptions o;
  BOOST_TEST(o.lr == 1e-2);
  BOOST_TEST(o.lr_decay == 0.0);
  BOOST_TEST(o.weight_decay == 0.0);
  BOOST_TEST(o.initial_accumulator_value == 0.0);
  BOOST_TEST(o.eps == 1e-10);
  BOOST_TEST(!o.maximize);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(four_steps_match_a_float64_transcription_of_torch, D, kiln::test::devices) {
  const std::vector<double> p0 = kt::random_values<double>(64, -1, 1, 1);
  using O = kiln::optim::AdagradOptions;
  for (const O o : {O{},
                    O{.lr = 0.1,
                    .lr_decay = 0.5,
                    .weight_decay = 1e-2,
                    .initial_accumulator_value = 0.25,
                    .eps = 1e-6},
                    O{.lr = 0.1, .lr_decay = 0.5, .weight_decay = 1e-2, .eps = 1e-6, .maximize = true}}) {
    BOOST_TEST_CONTEXT("lr_decay " << o.lr_decay << ", maximize " << o.maximize) {
      auto p = kt::make_tensor<D>(p0, Extents<Shape<dyn>>(64));
      Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(64));
      kiln::optim::Adagrad opt(p, g, o);
      BOOST_TEST(opt.sum().to_vector() == std::vector<double>(64, o.initial_accumulator_value),
                 boost::test_tools::per_element());
      std::vector<Reference> ref;
      for (double x : p0) ref.push_back({o, x});
      for (std::uint32_t s = 0; s < 4; ++s) {
        const auto gv = kt::random_values<double>(64, -1, 1, 10 + s);
        g.copy_from(std::span<const double>(gv));
        opt.step();
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i].take(gv[i]);
      }
      std::vector<double> want, sums;
      for (const auto& r : ref) want.push_back(r.p), sums.push_back(r.sum);
      BOOST_TEST(kt::all_close(p.to_vector(), want, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.sum().to_vector(), sums, 1e-12, 1e-12));
      BOOST_TEST(opt.step_count() == 4);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_fused_and_torchs_order_unfused, D, kiln::test::devices) {
  using O = kiln::optim::AdagradOptions;
  kt::fused_and_unfused_steps_agree<kiln::optim::Adagrad, D>(O{}, 4);  // sum, sqrt, + eps, p
  kt::fused_and_unfused_steps_agree<kiln::optim::Adagrad, D>(
      O{.lr_decay = 0.1, .weight_decay = 1e-2, .maximize = true}, 6);  // and maximize, L2
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_working_copy_is_rewritten_under_mixed_precision, D, kiln::test::devices) {
  kt::the_working_copy_follows_the_masters<kiln::optim::Adagrad, D>(kiln::optim::AdagradOptions{.lr = 0.1});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_grad_scaler_drives_adagrad, D, kiln::test::devices) {
  // With weight decay: without it Adagrad's step is scale invariant, and the parameters would not show an
  // unscale skipped (the state would).
  kt::a_grad_scaler_drives_it<kiln::optim::Adagrad, D>(
      kiln::optim::AdagradOptions{.lr_decay = 0.1, .weight_decay = 1e-2});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_scheduler_moves_its_learning_rate, D, kiln::test::devices) {
  // StepLR halves the lr every 2 epochs; the step after 4 takes a quarter of it, as the transcription does.
  kt::a_step_lr_moves_it<kiln::optim::Adagrad, D>(kiln::optim::AdagradOptions{.lr = 0.1},
                                                  [](double p, double g, double lr) {
                                                    Reference r{{.lr = lr}, p};
                                                    r.take(g);
                                                    return r.p;
                                                  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(its_state_goes_through_a_checkpoint, D, kiln::test::devices) {
  // Two steps, the state saved and loaded into a fresh Adagrad, two more: as four steps of one (lr_decay
  // reads the restored step count, the sums go on). Another optimizer's state, or other hyperparameters
  // that shape the steps, are refused and leave the optimizer as it was.
  const kiln::OptimizerState saved = kt::resumes_through_a_checkpoint<kiln::optim::Adagrad, D>(
      kiln::optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.5, .initial_accumulator_value = 0.1});
  BOOST_TEST(saved.metadata.at("optimizer.type") == "Adagrad");
  BOOST_TEST(saved.entries.contains("optimizer.sum"));
  knn::Model<kt::OptimizerNet, kt::OptimizerIn, kiln::Policy<kiln::Fp32, D>> m(
      3);  // a model of the same size
  kiln::optim::Adagrad other(m, {.lr = 0.1, .lr_decay = 0.25, .initial_accumulator_value = 0.1});
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(other, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError,
                        kt::says("the checkpoint's Adagrad has lr_decay = 0.5, this one 0.25"));
  BOOST_TEST(other.step_count() == 0);
  kiln::optim::Adam adam(m);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adam, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError, kt::says("the optimizer state is Adagrad's; expected Adam's"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_options_are_refused_with_torchs_words, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(3)), g(Extents<Shape<dyn>>(3)),
      short_g(Extents<Shape<dyn>>(2));
  using O = kiln::optim::AdagradOptions;
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.lr = -1.0}), kiln::ValueError,
                        kt::says("Invalid learning rate: -1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.lr_decay = -0.5}), kiln::ValueError,
                        kt::says("Invalid lr_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.weight_decay = -1.0}), kiln::ValueError,
                        kt::says("Invalid weight_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.initial_accumulator_value = -1.0}), kiln::ValueError,
                        kt::says("Invalid initial_accumulator_value value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.eps = NAN}), kiln::ValueError,
                        kt::says("Invalid epsilon value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, short_g, O{}), kiln::ShapeError,
                        kt::says("3 parameters but 2 gradients"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
