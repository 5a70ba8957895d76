// torch's maximize (torch 1.13: grad = -grad first, before the weight decay, the momentum and the
// moments; torch >= 2.1 for NAdam and RAdam): SGD, Adam, AdamW, RMSprop, Adagrad, NAdam and RAdam with
// {.maximize = true} step as the same optimizer given the negated gradients, element for element over
// several steps, across the options that touch the gradient (weight decay, momentum, dampening, Nesterov,
// amsgrad, centered, momentum_decay), fused and unfused (kiln::Unfused), capturable ones too, and under a
// GradScaler (capturable: step_unless); the gradients are left as they were. (Parity with torch:
// test_parity_mlp.cpp; checkpoints: test_optimizer_state.cpp.)
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <kiln/core/fusion.hpp>
#include <kiln/optim/optim.hpp>

#include "support/optimizer_checks.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
constexpr kiln::index_t n = 1031;  // odd: a vector loop's tail too

template <class M, class D>
Tensor<M, Shape<dyn>, D> arena(const std::vector<M>& v) {
  return Tensor<M, Shape<dyn>, D>::from(std::span<const M>(v), Extents<Shape<dyn>>(static_cast<kiln::index_t>(v.size())));
}
template <class M>
std::vector<M> negated(std::vector<M> v) {
  for (M& x : v) x = -x;
  return v;
}
/// Step s's gradients: random, with an exact zero (its negation is -0).
template <class M>
std::vector<M> gradient(std::uint32_t s) {
  auto g = kt::random_values<M>(static_cast<std::size_t>(n), -1, 1, 820 + s);
  g[5] = M(0);
  return g;
}

/// 4 steps of two optimizers from the same parameters: `up` with o.maximize = true on the gradients g,
/// `down` without it on -g. The parameters and every state arena agree element for element; up's
/// gradients are still g after each step (torch's step leaves p.grad as it is); the parameters moved.
template <class Opt, class M, class D, class Options>
void maximize_steps_on_the_negated_gradient(Options o, bool fused) {
  const auto start = kt::random_values<M>(static_cast<std::size_t>(n), -1, 1, 819);
  auto p_up = arena<M, D>(start), p_down = arena<M, D>(start);
  Tensor<M, Shape<dyn>, D> g_up(n), g_down(n);
  o.maximize = true;
  Opt up(p_up, g_up, o);
  o.maximize = false;
  Opt down(p_down, g_down, o);
  BOOST_TEST(up.options().maximize);
  for (std::uint32_t s = 0; s < 4; ++s) {
    const auto g = gradient<M>(s);
    g_up.copy_from(std::span<const M>(g));
    g_down.copy_from(std::span<const M>(negated(g)));
    std::optional<kiln::Unfused> off;
    if (!fused) off.emplace();
    up.step();
    down.step();
    BOOST_TEST(g_up.to_vector() == g, boost::test_tools::per_element());
  }
  const auto p = p_up.to_vector();
  BOOST_TEST(p == p_down.to_vector(), boost::test_tools::per_element());
  BOOST_TEST((p != start));
  const auto a = kt::state_of(up), b = kt::state_of(down);
  for (std::size_t k = 0; k < a.size(); ++k) BOOST_TEST(a[k] == b[k], boost::test_tools::per_element());
}

/// maximize_steps_on_the_negated_gradient for each options, fused and unfused.
template <class Opt, class M, class D, class Options>
void maximize_steps_on_the_negated_gradient(std::initializer_list<Options> all) {
  int k = 0;
  for (const Options& o : all) {
    for (const bool fused : {true, false}) {
      BOOST_TEST_CONTEXT("options #" << k << (fused ? ", fused" : ", unfused")) {
        maximize_steps_on_the_negated_gradient<Opt, M, D>(o, fused);
      }
    }
    ++k;
  }
}

/// A GradScaler (capturable or not) drives an optimizer with maximize: gradients scaled by 1024 (exact
/// in both directions) step as the optimizer without maximize on the unscaled negated ones.
template <class Opt, class D, class Options>
void a_grad_scaler_drives(Options o, bool capturable) {
  const auto start = kt::random_values<float>(static_cast<std::size_t>(n), -1, 1, 818);
  auto p_up = arena<float, D>(start), p_down = arena<float, D>(start);
  Tensor<float, Shape<dyn>, D> g_up(n), g_down(n);
  if constexpr (requires { o.capturable; }) o.capturable = capturable;
  o.maximize = true;
  Opt up(p_up, g_up, o);
  if constexpr (requires { o.capturable; }) o.capturable = false;
  o.maximize = false;
  Opt down(p_down, g_down, o);
  kiln::optim::GradScaler<D> scaler({.init_scale = 1024.0, .capturable = capturable});
  for (std::uint32_t s = 0; s < 3; ++s) {
    auto g = gradient<float>(s);
    g_down.copy_from(std::span<const float>(negated(g)));
    for (float& v : g) v *= 1024.0f;
    g_up.copy_from(std::span<const float>(g));
    scaler.step(up);
    scaler.update();
    down.step();
  }
  BOOST_TEST(p_up.to_vector() == p_down.to_vector(), boost::test_tools::per_element());
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(maximize)

BOOST_AUTO_TEST_CASE(maximize_is_off_by_default_and_in_torchs_keyword_order) {
  BOOST_TEST(!kiln::optim::SGDOptions{}.maximize);
  BOOST_TEST(!kiln::optim::AdamOptions{}.maximize);
  BOOST_TEST(!kiln::optim::AdamWOptions{}.maximize);
  BOOST_TEST(!kiln::optim::RMSpropOptions{}.maximize);
  BOOST_TEST(!kiln::optim::NAdamOptions{}.maximize);
  BOOST_TEST(!kiln::optim::RAdamOptions{}.maximize);
  // Designated initializers follow the declaration order: these compile only with maximize after
  // nesterov / amsgrad / centered and before capturable, torch's order.
  constexpr kiln::optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9, .nesterov = true, .maximize = true, .capturable = true};
  constexpr kiln::optim::AdamOptions adam{.amsgrad = true, .maximize = true, .capturable = true};
  constexpr kiln::optim::AdamWOptions adamw{.amsgrad = true, .maximize = true, .capturable = true};
  constexpr kiln::optim::RMSpropOptions rms{.centered = true, .maximize = true};
  static_assert(sgd.maximize && adam.maximize && adamw.maximize && rms.maximize);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sgd_maximize_steps_on_the_negated_gradient, D, kt::devices) {
  using O = kiln::optim::SGDOptions;
  maximize_steps_on_the_negated_gradient<kiln::optim::SGD<float, D>, float, D>({
      O{.lr = 0.1},
      O{.lr = 0.1, .weight_decay = 0.05},
      O{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.05},
      O{.lr = 0.1, .momentum = 0.9, .nesterov = true},
      O{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true},
      O{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true, .capturable = true},
      O{.lr = 0.1, .weight_decay = 0.05, .capturable = true},
  });
  maximize_steps_on_the_negated_gradient<kiln::optim::SGD<double, D>, double, D>(
      {O{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true}});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_and_adamw_maximize_step_on_the_negated_gradient, D, kt::devices) {
  using O = kiln::optim::AdamOptions;
  maximize_steps_on_the_negated_gradient<kiln::optim::Adam<float, D>, float, D>({
      O{.lr = 1e-2},
      O{.lr = 1e-2, .weight_decay = 0.1},
      O{.lr = 1e-2, .betas = {0.8f, 0.99f}, .weight_decay = 0.1, .amsgrad = true},
      O{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true, .capturable = true},
  });
  maximize_steps_on_the_negated_gradient<kiln::optim::Adam<double, D>, double, D>(
      {O{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true}});
  using W = kiln::optim::AdamWOptions;
  maximize_steps_on_the_negated_gradient<kiln::optim::AdamW<float, D>, float, D>({
      W{.lr = 1e-2},
      W{.lr = 1e-2, .weight_decay = 0.3, .amsgrad = true},
      W{.lr = 1e-2, .weight_decay = 0.3, .capturable = true},
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rmsprop_maximize_steps_on_the_negated_gradient, D, kt::devices) {
  using O = kiln::optim::RMSpropOptions;
  maximize_steps_on_the_negated_gradient<kiln::optim::RMSprop<float, D>, float, D>({
      O{},
      O{.weight_decay = 0.05},
      O{.momentum = 0.9},
      O{.centered = true},
      O{.weight_decay = 0.05, .momentum = 0.5, .centered = true},
  });
  maximize_steps_on_the_negated_gradient<kiln::optim::RMSprop<double, D>, double, D>(
      {O{.weight_decay = 0.05, .momentum = 0.5, .centered = true}});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adagrad_maximize_steps_on_the_negated_gradient, D, kt::devices) {
  using O = kiln::optim::AdagradOptions;
  maximize_steps_on_the_negated_gradient<kiln::optim::Adagrad<float, D>, float, D>({
      O{},
      O{.lr_decay = 0.1, .weight_decay = 0.05, .initial_accumulator_value = 0.1},
  });
  maximize_steps_on_the_negated_gradient<kiln::optim::Adagrad<double, D>, double, D>(
      {O{.lr_decay = 0.1, .weight_decay = 0.05}});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nadam_and_radam_maximize_step_on_the_negated_gradient, D, kt::devices) {
  using N = kiln::optim::NAdamOptions;
  using R = kiln::optim::RAdamOptions;
  maximize_steps_on_the_negated_gradient<kiln::optim::NAdam<float, D>, float, D>({
      N{},
      N{.lr = 1e-2, .weight_decay = 0.05, .momentum_decay = 0.1},
  });
  maximize_steps_on_the_negated_gradient<kiln::optim::NAdam<double, D>, double, D>(
      {N{.weight_decay = 0.05}});
  // (four steps: RAdam's un-rectified ones; its rectified ones with maximize: test_radam.cpp)
  maximize_steps_on_the_negated_gradient<kiln::optim::RAdam<float, D>, float, D>({
      R{},
      R{.lr = 1e-2, .weight_decay = 0.05},
  });
  maximize_steps_on_the_negated_gradient<kiln::optim::RAdam<double, D>, double, D>(
      {R{.weight_decay = 0.05}});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_grad_scaler_steps_an_optimizer_that_maximizes, D, kt::devices) {
  for (const bool capturable : {false, true}) {
    BOOST_TEST_CONTEXT((capturable ? "capturable" : "host") << " scaler") {
      a_grad_scaler_drives<kiln::optim::SGD<float, D>, D>(
          kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true}, capturable);
      a_grad_scaler_drives<kiln::optim::Adam<float, D>, D>(
          kiln::optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true}, capturable);
      a_grad_scaler_drives<kiln::optim::AdamW<float, D>, D>(kiln::optim::AdamWOptions{.lr = 1e-2}, capturable);
    }
  }
  // RMSprop, Adagrad, NAdam and RAdam have no capturable mode (torch 1.13's have none either): the host
  // scaler only.
  a_grad_scaler_drives<kiln::optim::RMSprop<float, D>, D>(
      kiln::optim::RMSpropOptions{.weight_decay = 0.05, .momentum = 0.5, .centered = true}, false);
  a_grad_scaler_drives<kiln::optim::Adagrad<float, D>, D>(
      kiln::optim::AdagradOptions{.lr_decay = 0.1, .weight_decay = 0.05}, false);
  a_grad_scaler_drives<kiln::optim::NAdam<float, D>, D>(
      kiln::optim::NAdamOptions{.lr = 1e-2, .weight_decay = 0.05, .momentum_decay = 0.1}, false);
  a_grad_scaler_drives<kiln::optim::RAdam<float, D>, D>(
      kiln::optim::RAdamOptions{.lr = 1e-2, .weight_decay = 0.05}, false);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
