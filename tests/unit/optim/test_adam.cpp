// Adam and AdamW: torch's defaults, one fused pass per step, a float64 reference of torch 1.13's
// single-tensor formulas on an arena large enough for the parallel CPU loop and many GPU blocks,
// decoupled decay, amsgrad, maximize, the moment arenas, zero_grad, lr and step count, and option checks.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace kt = kiln::test;
namespace parity = kiln::test::parity;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

/// torch 1.13 _single_tensor_adam / _single_tensor_adamw on one element, in double.
struct ReferenceAdam {
  double lr, b1, b2, eps, wd;
  bool decoupled, amsgrad, maximize;
  std::vector<double> m, v, vmax;
  std::int64_t t = 0;
  void step(std::vector<double>& p, const std::vector<double>& g) {
    ++t;
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0), vmax.assign(p.size(), 0.0);
    const double bc1 = 1 - std::pow(b1, double(t)), bc2 = 1 - std::pow(b2, double(t));
    for (std::size_t i = 0; i < p.size(); ++i) {
      double gi = maximize ? -g[i] : g[i];
      if (decoupled) p[i] *= 1 - lr * wd;
      else gi += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      vmax[i] = std::max(vmax[i], v[i]);
      const double denom = std::sqrt(amsgrad ? vmax[i] : v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
  }
};

template <class M, class D>
Tensor<M, Shape<dyn>, D> arena(const std::vector<M>& v) {
  return Tensor<M, Shape<dyn>, D>::from(std::span<const M>(v), Extents<Shape<dyn>>(static_cast<kiln::index_t>(v.size())));
}

/// Runs `Opt` and the reference for three steps with a new gradient each step; returns the largest
/// relative error (denominator at least `floor`: parameters that pass near zero).
template <class M, class D, class Opt, class Options>
double against_reference(const Options& o, bool decoupled, std::size_t n, double floor) {
  auto pv = kt::random_values<M>(n, -1, 1, 301);
  auto p = arena<M, D>(pv);
  Tensor<M, Shape<dyn>, D> g(Extents<Shape<dyn>>(static_cast<kiln::index_t>(n)));
  Opt opt(p, g, o);
  ReferenceAdam ref{o.lr, o.betas.beta1, o.betas.beta2, o.eps, o.weight_decay, decoupled, o.amsgrad,
                    o.maximize, {}, {}, {}};
  std::vector<double> rp(pv.begin(), pv.end());
  for (std::uint32_t s = 0; s < 3; ++s) {
    // Gradients of mixed scale, some exactly zero, one step with smaller ones (amsgrad keeps the max).
    auto gv = kt::random_values<M>(n, -1, 1, 302 + s);
    for (std::size_t i = 0; i < n; ++i) {
      if (i % 97 == 0) gv[i] = M(0);
      if (s == 2) gv[i] *= M(0.01);
    }
    g.copy_from(std::span<const M>(gv));
    const auto before = kiln::passes();
    opt.step();
    BOOST_TEST(kiln::passes() - before == 1u);
    ref.step(rp, std::vector<double>(gv.begin(), gv.end()));
  }
  BOOST_TEST(opt.step_count() == 3);
  const auto got = p.to_vector();
  const auto d = parity::compare(std::span<const M>(got), std::span<const double>(rp), floor);
  BOOST_TEST_MESSAGE("adam reference (" << (decoupled ? "AdamW" : "Adam") << (o.amsgrad ? ", amsgrad" : "")
                                        << (o.maximize ? ", maximize" : "") << ", " << sizeof(M) * 8 << "-bit): " << parity::describe(d));
  return d.max_rel;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)

BOOST_AUTO_TEST_CASE(adam_options_default_to_torch) {
  constexpr kiln::optim::AdamOptions a{};
  static_assert(a.lr == 1e-3 && a.betas.beta1 == 0.9 && a.betas.beta2 == 0.999 && a.eps == 1e-8 &&
                a.weight_decay == 0.0 && !a.amsgrad && !a.maximize);
  constexpr kiln::optim::AdamWOptions w{};
  static_assert(w.lr == 1e-3 && w.betas.beta1 == 0.9 && w.betas.beta2 == 0.999 && w.eps == 1e-8 &&
                w.weight_decay == 1e-2 && !w.amsgrad && !w.maximize);
  // [doc:adam_options]
  constexpr kiln::optim::AdamOptions o{.lr = 1e-3, .betas = {0.9, 0.999}, .eps = 1e-8, .amsgrad = true};
  // [doc:adam_options]
  static_assert(o.amsgrad && o.betas.beta2 == 0.999);
  BOOST_TEST(kiln::optim::AdamOptions{}.lr == 1e-3);
  BOOST_TEST(kiln::optim::AdamWOptions{}.weight_decay == 1e-2);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_step_is_one_pass_over_the_model, D, kiln::test::devices) {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<13, 16>, kiln::nn::ReLU, kiln::nn::Linear<16, 1>>;
  kiln::nn::Model<Net, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, D>> model(/*seed=*/0);
  model.gradients().fill(0.5f);
  // [doc:adam_model]
  kiln::optim::Adam opt(model, {.lr = 1e-2});
  const auto before = kiln::passes();
  opt.step();  // parameters, exp_avg and exp_avg_sq updated together
  BOOST_TEST(kiln::passes() - before == 1u);
  // [doc:adam_model]
  static_assert(std::is_same_v<decltype(opt), kiln::optim::Adam<float, D>>);
  kiln::optim::AdamW optw(model, {.weight_decay = 0.1, .amsgrad = true});
  const auto before_w = kiln::passes();
  optw.step();
  BOOST_TEST(kiln::passes() - before_w == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_matches_a_float64_reference_of_torch, D, kiln::test::devices) {
  constexpr std::size_t n = 100003;  // above the CPU's parallel threshold; many GPU blocks
  // Parameters start in [-1, 1) and move by ~lr per step: a denominator floor of 1e-2 keeps the few
  // that pass through zero from turning a 1e-9 absolute error into a large relative one.
  using Adam = kiln::optim::Adam<float, D>;
  using AdamW = kiln::optim::AdamW<float, D>;
  BOOST_TEST((against_reference<float, D, Adam>(kiln::optim::AdamOptions{.lr = 1e-2}, false, n, 1e-2)) <= 1e-5);
  BOOST_TEST((against_reference<float, D, Adam>(
                 kiln::optim::AdamOptions{.lr = 1e-2, .betas = {0.8f, 0.99f}, .weight_decay = 0.1, .amsgrad = true},
                 false, n, 1e-2)) <= 1e-5);
  BOOST_TEST((against_reference<float, D, AdamW>(kiln::optim::AdamWOptions{.lr = 1e-2}, true, n, 1e-2)) <= 1e-5);
  BOOST_TEST((against_reference<float, D, AdamW>(
                 kiln::optim::AdamWOptions{.lr = 3e-2, .weight_decay = 0.5, .amsgrad = true}, true, n, 1e-2)) <= 1e-5);
  // maximize: the gradient negated before the L2 term and the moments.
  BOOST_TEST((against_reference<float, D, Adam>(
                 kiln::optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true, .maximize = true}, false,
                 n, 1e-2)) <= 1e-5);
  BOOST_TEST((against_reference<float, D, AdamW>(
                 kiln::optim::AdamWOptions{.lr = 3e-2, .weight_decay = 0.5, .maximize = true}, true, n, 1e-2)) <= 1e-5);
  // Double master weights compute in double.
  using AdamD = kiln::optim::Adam<double, D>;
  BOOST_TEST((against_reference<double, D, AdamD>(kiln::optim::AdamOptions{.lr = 1e-2, .amsgrad = true}, false, 1000,
                                                  1e-2)) <= 1e-12);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_moments_zero_grad_lr_and_step_count, D, kiln::test::devices) {
  const std::vector<float> pv = {1.0f, -2.0f, 0.5f, 0.0f}, gv = {0.1f, -0.2f, 0.0f, 3.0f};
  auto p = arena<float, D>(pv);
  auto g = arena<float, D>(gv);
  kiln::optim::Adam opt(p, g);
  static_assert(std::is_same_v<decltype(opt), kiln::optim::Adam<float, D>>);
  BOOST_TEST(opt.lr() == 1e-3);
  BOOST_TEST(opt.step_count() == 0);
  BOOST_TEST(opt.max_exp_avg_sq().empty());  // amsgrad off
  opt.step();
  BOOST_TEST(opt.step_count() == 1);
  const auto m = opt.exp_avg().to_vector(), v = opt.exp_avg_sq().to_vector();
  for (std::size_t i = 0; i < gv.size(); ++i) {
    // 1 - beta in double from torch's Python floats 0.9 and 0.999 (1 - 0.999f would be 1.3e-5 off).
    BOOST_TEST(m[i] == float((1.0 - 0.9) * gv[i]), boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(v[i] == float((1.0 - 0.999) * gv[i] * gv[i]), boost::test_tools::tolerance(1e-6f));
  }
  // First step: m̂ / sqrt(v̂) = sign(g), so each parameter moves by lr (none where g == 0).
  const auto after = p.to_vector();
  BOOST_TEST(after[0] == 1.0f - 1e-3f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(after[1] == -2.0f + 1e-3f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(after[2] == 0.5f);
  opt.zero_grad();
  BOOST_TEST(g.to_vector() == std::vector<float>(4, 0.0f), boost::test_tools::per_element());
  opt.set_lr(0.25);
  BOOST_TEST(opt.lr() == 0.25);
  BOOST_TEST(opt.options().lr == 0.25);
  opt.set_step_count(10);
  BOOST_TEST(opt.step_count() == 10);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adamw_decay_is_decoupled_from_the_gradient, D, kiln::test::devices) {
  // With a zero gradient Adam's update is 0, so AdamW only scales by 1 - lr wd per step, and Adam's L2
  // term (added to the gradient) moves each weight by about lr instead.
  const std::vector<float> pv = {1.0f, -4.0f, 0.25f};
  auto p = arena<float, D>(pv), g = arena<float, D>(std::vector<float>(3, 0.0f));
  kiln::optim::AdamW opt(p, g, {.lr = 0.1, .weight_decay = 0.5});
  static_assert(std::is_same_v<decltype(opt), kiln::optim::AdamW<float, D>>);
  opt.step();
  opt.step();
  const auto got = p.to_vector();
  for (std::size_t i = 0; i < pv.size(); ++i) BOOST_TEST(got[i] == pv[i] * 0.95f * 0.95f, boost::test_tools::tolerance(1e-6f));

  auto q = arena<float, D>(pv), h = arena<float, D>(std::vector<float>(3, 0.0f));
  kiln::optim::Adam l2(q, h, {.lr = 0.1, .weight_decay = 0.5});
  l2.step();
  const auto got_l2 = q.to_vector();
  for (std::size_t i = 0; i < pv.size(); ++i)
    BOOST_TEST(got_l2[i] == pv[i] - 0.1f * (pv[i] > 0 ? 1.0f : -1.0f), boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(amsgrad_keeps_the_largest_second_moment, D, kiln::test::devices) {
  auto p = arena<float, D>(std::vector<float>{0.0f, 0.0f}), g = arena<float, D>(std::vector<float>{1.0f, -1.0f});
  kiln::optim::Adam opt(p, g, {.amsgrad = true});
  BOOST_TEST(opt.max_exp_avg_sq().numel() == 2);
  opt.step();
  const auto first = opt.max_exp_avg_sq().to_vector();
  g.fill(0.0f);
  opt.step();  // v decays; its running maximum does not
  BOOST_TEST(opt.max_exp_avg_sq().to_vector() == first, boost::test_tools::per_element());
  BOOST_TEST(opt.exp_avg_sq().to_vector()[0] < first[0]);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_rejects_invalid_options, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(2)), g(Extents<Shape<dyn>>(2)), g3(Extents<Shape<dyn>>(3));
  using Adam = kiln::optim::Adam<float, D>;
  using AdamW = kiln::optim::AdamW<float, D>;
  BOOST_CHECK_THROW(Adam(p, g, {.lr = -1.0}), kiln::ValueError);
  BOOST_CHECK_THROW(Adam(p, g, {.betas = {1.0f, 0.999f}}), kiln::ValueError);
  BOOST_CHECK_THROW(Adam(p, g, {.betas = {0.9f, -0.1f}}), kiln::ValueError);
  BOOST_CHECK_THROW(Adam(p, g, {.eps = -1e-8}), kiln::ValueError);
  BOOST_CHECK_THROW(AdamW(p, g, {.weight_decay = -0.1}), kiln::ValueError);
  BOOST_CHECK_THROW(Adam(p, g3), kiln::ShapeError);
}

BOOST_AUTO_TEST_SUITE_END()
