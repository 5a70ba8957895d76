// SGD: each step is one fused pass whose result equals a float64 model of torch.optim.SGD's update
// (plain, momentum, dampening, Nesterov, weight decay) after one and three steps; invalid options throw;
// and an MLP trained with MSE + SGD(momentum) on a seeded regression task fits it.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <kiln/nn/nn.hpp>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using kiln::optim::SGD;
using kiln::optim::SGDOptions;

using Mlp = knn::Sequential<knn::Linear<13, 16>, knn::ReLU, knn::Linear<16, 32>, knn::ReLU, knn::Linear<32, 1>>;
template <class D>
using MlpModel = knn::Model<Mlp, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, D>>;

/// torch.optim.SGD.step for one parameter tensor, in float64 (torch/optim/sgd.py, _single_tensor_sgd):
///   d_p = grad + weight_decay * p
///   buf = d_p (first step) | momentum * buf + (1 - dampening) * d_p;  d_p = nesterov ? d_p + momentum * buf : buf
///   p -= lr * d_p
/// The hyper-parameters are torch's Python floats, the doubles kiln holds: a step that rounded lr,
/// momentum or 1 - dampening through float would miss the double arena's 1e-13 (0.1f is 1.5e-8 off 0.1).
struct TorchSgd {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  std::vector<double> buf{};
  explicit TorchSgd(const SGDOptions& o)
      : lr(o.lr), momentum(o.momentum), dampening(o.dampening), weight_decay(o.weight_decay), nesterov(o.nesterov) {}
  void step(std::vector<double>& p, const std::vector<double>& grad) {
    const bool first = buf.empty();
    if (momentum != 0 && first) buf.resize(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = grad[i];
      if (weight_decay != 0) d += weight_decay * p[i];
      if (momentum != 0) {
        buf[i] = first ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

struct Variant {
  const char* name;
  SGDOptions options;
};
const std::vector<Variant> variants{
    {"plain", {.lr = 0.1}},
    {"momentum 0.9", {.lr = 0.1, .momentum = 0.9}},
    {"momentum 0.9, dampening 0.1", {.lr = 0.1, .momentum = 0.9, .dampening = 0.1}},
    {"momentum 0.5, dampening 0.09", {.lr = 0.1, .momentum = 0.5, .dampening = 0.09}},
    {"Nesterov 0.9", {.lr = 0.1, .momentum = 0.9, .nesterov = true}},
    {"weight decay 0.01", {.lr = 0.1, .weight_decay = 0.01}},
    {"momentum 0.9, weight decay 0.01, Nesterov", {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}},
};

/// Three steps of `opt` over `params`/`grads` (fresh random gradients each step) against TorchSgd;
/// each step must be one pass, and the whole arena must match after steps 1 and 3.
template <class T, class D, class Opt>
void check_steps(Opt& opt, kiln::Tensor<T, Shape<dyn>, D>& params, kiln::Tensor<T, Shape<dyn>, D>& grads,
                 const SGDOptions& o, double rel, double abs) {
  const auto n = static_cast<std::size_t>(params.numel());
  std::vector<double> want = kt::to_doubles(params.to_vector());
  TorchSgd ref(o);
  for (int step = 1; step <= 3; ++step) {
    const auto g = kt::random_values<T>(n, -1, 1, 100 + static_cast<std::uint32_t>(step));
    grads.copy_from(std::span<const T>(g.data(), g.size()));
    const auto before = kiln::passes();
    opt.step();
    BOOST_TEST(kiln::passes() - before == 1u, "step " << step << " is one pass");
    ref.step(want, kt::to_doubles(g));
    if (step == 1 || step == 3) BOOST_TEST_CONTEXT("after step " << step) {
        BOOST_TEST(kt::all_close(params.to_vector(), want, rel, abs));
      }
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(sgd)

BOOST_AUTO_TEST_CASE_TEMPLATE(model_steps_match_torch_sgd_in_float64, D, kiln::test::devices) {
  for (const auto& v : variants) {
    BOOST_TEST_CONTEXT(v.name) {
      MlpModel<D> model(5);
      SGD opt(model, v.options);
      // float arithmetic: a few roundings of terms up to ~1 per step (FMA on the GPU rounds fewer), so
      // 1e-6 relative with a 1e-6 floor for parameters that pass near 0.
      check_steps(opt, model.parameters(), model.gradients(), v.options, 1e-6, 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(double_arena_steps_match_torch_sgd_without_float_rounding, D, kiln::test::devices) {
  const index_t n = 1001;
  for (const auto& v : variants) {
    BOOST_TEST_CONTEXT(v.name) {
      auto params = kt::make_tensor<D>(kt::random_values<double>(n, -1, 1, 99), Extents<Shape<dyn>>(n));
      kiln::Tensor<double, Shape<dyn>, D> grads(n);
      SGD<double, D> opt(params, grads, v.options);
      check_steps(opt, params, grads, v.options, 1e-13, 1e-14);  // double master weights stay double
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nesterov_needs_momentum_and_no_dampening, D, kiln::test::devices) {
  MlpModel<D> model(0);
  BOOST_CHECK_EXCEPTION(SGD(model, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                        kiln::ValueError, kt::message_contains({"Nesterov", "dampening"}));
  BOOST_CHECK_THROW(SGD(model, {.lr = 0.1, .nesterov = true}), kiln::ValueError);
  // torch.optim.SGD's other checks: lr is required, and none of lr, momentum, weight_decay is negative.
  BOOST_CHECK_EXCEPTION(SGD(model, {.momentum = 0.9}), kiln::ValueError,
                        kt::message_contains({"no learning rate", "{.lr = 0.01}"}));
  // SGD(model) without options does not compile: one error saying the lr is needed
  // (tests/compile_fail/sgd_without_lr.cpp).
  BOOST_CHECK_EXCEPTION(SGD(model, {.lr = -0.1}), kiln::ValueError, kt::message_contains({"invalid learning rate"}));
  BOOST_CHECK_EXCEPTION(SGD(model, {.lr = 0.1, .momentum = -0.5}), kiln::ValueError,
                        kt::message_contains({"invalid momentum"}));
  BOOST_CHECK_EXCEPTION(SGD(model, {.lr = 0.1, .weight_decay = -1e-4}), kiln::ValueError,
                        kt::message_contains({"invalid weight_decay"}));
  // Arenas of different lengths (as Adam and RMSprop refuse them): the step would read past the shorter.
  auto params = kt::make_tensor<D>(std::vector<float>{1, 2, 3}, Extents<Shape<dyn>>(3));
  auto short_grads = kt::make_tensor<D>(std::vector<float>{1, 2}, Extents<Shape<dyn>>(2));
  BOOST_CHECK_EXCEPTION((SGD<float, D>(params, short_grads, {.lr = 0.1})), kiln::ShapeError,
                        kt::message_contains({"SGD", "3 parameters but 2 gradients"}));
  // From two arenas, the element type and device are deduced (as Adam's, RMSprop's and Adagrad's).
  auto grads = kt::make_tensor<D>(std::vector<float>{1, 1, 1}, Extents<Shape<dyn>>(3));
  SGD from_arenas(params, grads, {.lr = 0.5});
  static_assert(std::is_same_v<decltype(from_arenas), SGD<float, D>>);
  from_arenas.step();
  BOOST_TEST(params.to_vector() == (std::vector<float>{0.5f, 1.5f, 2.5f}), boost::test_tools::per_element());
  SGD opt(model, {.lr = 0.1});
  BOOST_TEST(opt.momentum_buffer().empty(), "no momentum: no buffer");
  // With momentum, the buffer holds zeros until the first step (a checkpoint taken before it is zeros,
  // not whatever the memory held).
  {
    kiln::Tensor<float, Shape<dyn>, D> garbage(3);  // freed memory the buffer may be given
    garbage.fill(7.0f);
  }
  SGD<float, D> with_momentum(params, params, {.lr = 0.1, .momentum = 0.9});
  for (float b : with_momentum.momentum_buffer().to_vector()) BOOST_TEST(b == 0.0f);
  opt.set_lr(0.5);
  BOOST_TEST(opt.lr() == 0.5);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mlp_fits_a_linear_regression_with_mse_and_momentum, D, kiln::test::devices) {
  // y = x w + 0.5 for a fixed w: 128 seeded samples of 13 features, full-batch SGD(momentum) for 200 steps.
  const index_t n = 128;
  const auto xv = kt::random_values<float>(n * 13, -1, 1, 41);
  const auto w = kt::random_values<double>(13, -1, 1, 42);
  std::vector<float> yv(n);
  for (index_t i = 0; i < n; ++i) {
    double s = 0.5;
    for (index_t j = 0; j < 13; ++j) s += xv[static_cast<std::size_t>(i * 13 + j)] * w[static_cast<std::size_t>(j)];
    yv[static_cast<std::size_t>(i)] = static_cast<float>(s);
  }
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 13>>(n));
  const auto y = kt::make_tensor<D>(yv, Extents<Shape<dyn, 1>>(n));

  MlpModel<D> model(2024);
  SGD opt(model, {.lr = 0.02, .momentum = 0.9});
  const knn::MSELoss mse;
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    const auto pred = model.forward(x);  // [N, 1]
    last = mse(pred, y).item();
    if (step == 0) first = last;
    model.backward(mse.backward(pred, y));
    opt.step();
  }
  {
    knn::NoGrad guard(model);
    last = mse(model.forward(x), y).item();
  }
  BOOST_TEST_MESSAGE("MSE: initial " << first << ", after 200 steps " << last);
  BOOST_TEST(last < 0.05 * first);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
