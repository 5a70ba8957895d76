// Adadelta (kiln/optim/adadelta.hpp): torch's defaults; five steps against a float64 transcription of
// torch 1.13's single-tensor step (defaults; weight decay and another rho; also with maximize); one pass
// per step, and with fusion off one pass per operation landing where the fused step does; the working
// copy under mixed precision; a GradScaler drives it; StepLR moves its learning rate, and OneCycleLR
// refuses to cycle a momentum it has not (as torch); its state through a checkpoint (a resumed run steps
// as an unbroken one; another optimizer's state or other hyperparameters refused); bad options refused
// with torch's words. (Parity with torch itself: tests/unit/optim/test_parity_mlp.cpp.)
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

/// torch 1.13's _single_tensor_adadelta for one element, in double.
struct Reference {
  kiln::optim::AdadeltaOptions o;
  double p, v = 0, a = 0;
  void take(double g) {
    if (o.maximize) g = -g;
    if (o.weight_decay != 0) g += o.weight_decay * p;
    const double rho = o.rho;
    v = rho * v + (1 - rho) * g * g;
    const double delta = std::sqrt(a + o.eps) / std::sqrt(v + o.eps) * g;
    a = rho * a + (1 - rho) * delta * delta;
    p -= o.lr * delta;
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(adadelta)

BOOST_AUTO_TEST_CASE(options_default_to_torch) {
  const kiln::optim::AdadeltaOptions o;
  BOOST_TEST(o.lr == 1.0);
  BOOST_TEST(o.rho == 0.9);
  BOOST_TEST(o.eps == 1e-6);
  BOOST_TEST(o.weight_decay == 0.0);
  BOOST_TEST(!o.maximize);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(five_steps_match_a_float64_transcription_of_torch, D, kiln::test::devices) {
  const std::vector<double> p0 = kt::random_values<double>(64, -1, 1, 1);
  using O = kiln::optim::AdadeltaOptions;
  for (const O o : {O{}, O{.lr = 0.5, .rho = 0.8, .eps = 1e-4, .weight_decay = 1e-2},
                    O{.lr = 0.5, .rho = 0.8, .eps = 1e-4, .weight_decay = 1e-2, .maximize = true}}) {
    BOOST_TEST_CONTEXT("rho " << o.rho << ", maximize " << o.maximize) {
      auto p = kt::make_tensor<D>(p0, Extents<Shape<dyn>>(64));
      Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(64));
      kiln::optim::Adadelta opt(p, g, o);
      std::vector<Reference> ref;
      for (double x : p0) ref.push_back({o, x});
      for (std::uint32_t s = 0; s < 5; ++s) {
        const auto gv = kt::random_values<double>(64, -1, 1, 10 + s);
        g.copy_from(std::span<const double>(gv));
        opt.step();
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i].take(gv[i]);
      }
      std::vector<double> want, vs, as;
      for (const auto& r : ref) want.push_back(r.p), vs.push_back(r.v), as.push_back(r.a);
      BOOST_TEST(kt::all_close(p.to_vector(), want, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.square_avg().to_vector(), vs, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.acc_delta().to_vector(), as, 1e-12, 1e-12));
      BOOST_TEST(opt.step_count() == 5);
      BOOST_TEST(p.to_vector() != p0);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_fused_and_torchs_order_unfused, D, kiln::test::devices) {
  using O = kiln::optim::AdadeltaOptions;
  kt::fused_and_unfused_steps_agree<kiln::optim::Adadelta, D>(O{}, 11);  // v twice, std twice, delta four
  kt::fused_and_unfused_steps_agree<kiln::optim::Adadelta, D>(           // times, a twice, p
      O{.rho = 0.8, .weight_decay = 1e-2, .maximize = true}, 13);       // and maximize, L2
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_working_copy_is_rewritten_under_mixed_precision, D, kiln::test::devices) {
  kt::the_working_copy_follows_the_masters<kiln::optim::Adadelta, D>(kiln::optim::AdadeltaOptions{});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_grad_scaler_drives_adadelta, D, kiln::test::devices) {
  kt::a_grad_scaler_drives_it<kiln::optim::Adadelta, D>(kiln::optim::AdadeltaOptions{.weight_decay = 1e-2});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(schedulers_move_its_learning_rate, D, kiln::test::devices) {
  // StepLR halves the lr every 2 epochs; the step after 4 takes a quarter of it, as the transcription does.
  kt::a_step_lr_moves_it<kiln::optim::Adadelta, D>(kiln::optim::AdadeltaOptions{},
                                                   [](double p, double g, double lr) {
                                                     Reference r{{.lr = lr}, p};
                                                     r.take(g);
                                                     return r.p;
                                                   });

  Tensor<double, Shape<dyn>, D> p(Extents<Shape<dyn>>(16)), g(Extents<Shape<dyn>>(16));
  kiln::optim::Adadelta opt(p, g);
  // Adadelta has no momentum or betas: OneCycleLR refuses to cycle one (torch: ValueError), and drives
  // the lr alone when told not to.
  BOOST_CHECK_THROW(kiln::optim::OneCycleLR(opt, 0.1, 10), kiln::ValueError);
  kiln::optim::OneCycleLR one(opt, 0.1, 10, {.cycle_momentum = false});
  BOOST_TEST(opt.lr() == 0.1 / 25, boost::test_tools::tolerance(1e-12));  // torch's cosine formula at its start
}

BOOST_AUTO_TEST_CASE_TEMPLATE(its_state_goes_through_a_checkpoint, D, kiln::test::devices) {
  // Two steps, the state saved and loaded into a fresh Adadelta, two more: as four steps of one. Another
  // optimizer's state, or other hyperparameters that shape the steps, are refused and leave the
  // optimizer as it was.
  const kiln::OptimizerState saved = kt::resumes_through_a_checkpoint<kiln::optim::Adadelta, D>(
      kiln::optim::AdadeltaOptions{.lr = 0.5, .rho = 0.8, .weight_decay = 1e-2});
  BOOST_TEST(saved.metadata.at("optimizer.type") == "Adadelta");
  BOOST_TEST(saved.metadata.at("optimizer.rho") == "0.8");
  BOOST_TEST(saved.entries.contains("optimizer.square_avg"));
  BOOST_TEST(saved.entries.contains("optimizer.acc_delta"));
  knn::Model<kt::OptimizerNet, kt::OptimizerIn, kiln::Policy<kiln::Fp32, D>> m(
      3);  // a model of the same size
  kiln::optim::Adadelta other(m, {.lr = 0.5, .weight_decay = 1e-2});
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(other, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError,
                        kt::says("the checkpoint's Adadelta has rho = 0.8, this one 0.9"));
  BOOST_TEST(other.step_count() == 0);
  BOOST_TEST(
      other.square_avg().to_vector() == std::vector<float>(static_cast<std::size_t>(m.parameter_count), 0.0f),
      boost::test_tools::per_element());
  kiln::optim::Adagrad adagrad(m);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adagrad, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError,
                        kt::says("the optimizer state is Adadelta's; expected Adagrad's"));
  kiln::optim::RMSprop rmsprop(m);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(rmsprop, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError,
                        kt::says("the optimizer state is Adadelta's; expected RMSprop's"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_options_are_refused_with_torchs_words, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(3)), g(Extents<Shape<dyn>>(3)),
      short_g(Extents<Shape<dyn>>(2));
  using O = kiln::optim::AdadeltaOptions;
  BOOST_CHECK_EXCEPTION(kiln::optim::Adadelta(p, g, O{.lr = -1.0}), kiln::ValueError,
                        kt::says("Invalid learning rate: -1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adadelta(p, g, O{.rho = 1.5}), kiln::ValueError,
                        kt::says("Invalid rho value: 1.5"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adadelta(p, g, O{.rho = NAN}), kiln::ValueError,
                        kt::says("Invalid rho value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adadelta(p, g, O{.eps = -1e-6}), kiln::ValueError,
                        kt::says("Invalid epsilon value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adadelta(p, g, O{.weight_decay = -1.0}), kiln::ValueError,
                        kt::says("Invalid weight_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adadelta(p, short_g, O{}), kiln::ShapeError,
                        kt::says("3 parameters but 2 gradients"));
  // rho = 1 is allowed, as torch: the averages never move from 0, so every step is lr g (sqrt(eps) over
  // sqrt(eps)).
  kiln::optim::Adadelta still(p, g, O{.rho = 1.0});
  p.fill(1.0f);
  g.fill(0.5f);
  still.step();
  still.step();
  BOOST_TEST(p.to_vector() == std::vector<float>(3, 0.0f), boost::test_tools::per_element());
  BOOST_TEST(still.square_avg().to_vector() == std::vector<float>(3, 0.0f), boost::test_tools::per_element());
  BOOST_TEST(still.acc_delta().to_vector() == std::vector<float>(3, 0.0f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
