// RMSprop (kiln/optim/rmsprop.hpp): torch's defaults; three steps against a float64 transcription of
// torch 1.13's single-tensor step (plain; centered with momentum and weight decay, also with maximize);
// one pass per step, and with fusion off one pass per operation landing where the fused step does; the working copy under
// mixed precision; a GradScaler drives it; a momentum turned on before the first step is the one built in; OneCycleLR cycles it;
// bad options refused with torch's words. (Parity with torch itself: tests/unit/optim/test_parity_mlp.cpp.)
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <kiln/optim/rmsprop.hpp>

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

/// torch 1.13's _single_tensor_rmsprop for one element, in double.
struct Reference {
  kiln::optim::RMSpropOptions o;
  double p, v = 0, m = 0, buf = 0;
  void step(double g) {
    if (o.maximize) g = -g;
    if (o.weight_decay != 0) g += o.weight_decay * p;
    v = v * o.alpha + (1 - o.alpha) * g * g;
    double avg;
    if (o.centered) {
      m = m * o.alpha + (1 - o.alpha) * g;
      avg = std::sqrt(v - m * m) + o.eps;
    } else {
      avg = std::sqrt(v) + o.eps;
    }
    if (o.momentum > 0) {
      buf = buf * o.momentum + g / avg;
      p -= o.lr * buf;
    } else {
      p -= o.lr * g / avg;
    }
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(rmsprop)

BOOST_AUTO_TEST_CASE(options_default_to_torch) {
  const kiln::optim::RMSpropOptions o;
  BOOST_TEST(o.lr == 1e-2);
  BOOST_TEST(o.alpha == 0.99);
  BOOST_TEST(o.eps == 1e-8);
  BOOST_TEST(o.weight_decay == 0.0);
  BOOST_TEST(o.momentum == 0.0);
  BOOST_TEST(!o.centered);
  BOOST_TEST(!o.maximize);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(three_steps_match_a_float64_transcription_of_torch, D, kiln::test::devices) {
  const std::vector<double> p0 = kt::random_values<double>(64, -1, 1, 1);
  for (const kiln::optim::RMSpropOptions o :
       {kiln::optim::RMSpropOptions{},
        kiln::optim::RMSpropOptions{
            .lr = 1e-3, .alpha = 0.9, .eps = 1e-6, .weight_decay = 1e-2, .momentum = 0.9, .centered = true},
        kiln::optim::RMSpropOptions{.lr = 1e-3,
                                    .alpha = 0.9,
                                    .eps = 1e-6,
                                    .weight_decay = 1e-2,
                                    .momentum = 0.9,
                                    .centered = true,
                                    .maximize = true}}) {
    BOOST_TEST_CONTEXT("centered " << o.centered << ", maximize " << o.maximize) {
      auto p = kt::make_tensor<D>(p0, Extents<Shape<dyn>>(64));
      Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(64));
      kiln::optim::RMSprop opt(p, g, o);
      std::vector<Reference> ref;
      for (double x : p0) ref.push_back({o, x});
      for (std::uint32_t s = 0; s < 3; ++s) {
        const auto gv = kt::random_values<double>(64, -1, 1, 10 + s);
        g.copy_from(std::span<const double>(gv));
        opt.step();
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i].step(gv[i]);
      }
      std::vector<double> want;
      for (const auto& r : ref) want.push_back(r.p);
      BOOST_TEST(kt::all_close(p.to_vector(), want, 1e-12, 1e-12));
      BOOST_TEST(opt.step_count() == 3);
      BOOST_TEST(opt.grad_avg().empty() == !o.centered);
      BOOST_TEST(opt.momentum_buffer().empty() == (o.momentum == 0.0));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_fused_and_torchs_order_unfused, D, kiln::test::devices) {
  using O = kiln::optim::RMSpropOptions;
  kt::fused_and_unfused_steps_agree<kiln::optim::RMSprop, D>(O{}, 5);
  kt::fused_and_unfused_steps_agree<kiln::optim::RMSprop, D>(
      O{.weight_decay = 1e-2, .momentum = 0.5, .centered = true}, 5);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_working_copy_is_rewritten_under_mixed_precision, D, kiln::test::devices) {
  kt::the_working_copy_follows_the_masters<kiln::optim::RMSprop, D>(
      kiln::optim::RMSpropOptions{.momentum = 0.9});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_grad_scaler_drives_rmsprop, D, kiln::test::devices) {
  kt::a_grad_scaler_drives_it<kiln::optim::RMSprop, D>(kiln::optim::RMSpropOptions{.weight_decay = 1e-2, .momentum = 0.9});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_momentum_set_before_the_first_step_is_one_built_in, D, kiln::test::devices) {
  // torch's state starts its momentum buffer at zero: turned on by set_momentum (OneCycleLR) before the
  // first step, the steps are those of an RMSprop built with it.
  using P = kiln::Policy<kiln::Fp32, D>;
  knn::Model<Net, In, P> a(3), b(3);
  kiln::optim::RMSprop built(a, {.momentum = 0.9});
  kiln::optim::RMSprop later(b);
  BOOST_TEST(later.momentum_buffer().empty());
  later.set_momentum(0.9);
  const auto n = static_cast<std::size_t>(a.parameter_count);
  for (std::uint32_t s = 0; s < 3; ++s) {
    const auto g = kt::random_values<float>(n, -1, 1, 50 + s);
    a.gradients().copy_from(std::span<const float>(g));
    b.gradients().copy_from(std::span<const float>(g));
    built.step();
    later.step();
  }
  BOOST_TEST(a.parameters().to_vector() == b.parameters().to_vector(), boost::test_tools::per_element());
  // OneCycleLR drives its lr and momentum.
  kiln::optim::OneCycleLR sched(later, 0.05, 10);
  sched.step();
  BOOST_TEST(later.lr() == sched.get_last_lr());
  BOOST_TEST(later.momentum() == sched.momentum_at(1));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_options_are_refused_with_torchs_words, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(3)), g(Extents<Shape<dyn>>(3)), short_g(Extents<Shape<dyn>>(2));
  const auto says = [](const std::string& text) {
    return [text](const kiln::Error& e) { return std::string(e.what()).find(text) != std::string::npos; };
  };
  using O = kiln::optim::RMSpropOptions;
  BOOST_CHECK_EXCEPTION(kiln::optim::RMSprop(p, g, O{.lr = -1.0}), kiln::ValueError, says("Invalid learning rate: -1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RMSprop(p, g, O{.alpha = -0.5}), kiln::ValueError, says("Invalid alpha value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RMSprop(p, g, O{.eps = NAN}), kiln::ValueError, says("Invalid epsilon value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RMSprop(p, g, O{.weight_decay = -1.0}), kiln::ValueError,
                        says("Invalid weight_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RMSprop(p, g, O{.momentum = -0.1}), kiln::ValueError, says("Invalid momentum value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::RMSprop(p, short_g, O{}), kiln::ShapeError, says("3 parameters but 2 gradients"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
