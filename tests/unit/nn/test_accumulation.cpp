// Gradient accumulation: k micro-batches of b, each loss gradient scaled by 1/k, give the same gradients
// and the same update as one batch of k*b (mean-reduced losses), for MSE and cross entropy.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/nn/nn.hpp>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;

template <class A, class B>
void check_close(const A& a, const B& b, double tol) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  BOOST_TEST(worst <= tol * scale, "max difference " << worst << " vs scale " << scale);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(accumulation)

BOOST_AUTO_TEST_CASE_TEMPLATE(four_micro_batches_equal_one_batch_for_mse, D, kiln::test::devices) {
  using Net = Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 1>>;
  using In = Shape<dyn, 13>;
  using Out = Shape<dyn, 1>;
  constexpr int k = 4, b = 8;
  Model<Net, In, kiln::Policy<kiln::Fp32, D>> whole(5), parts(5);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(k * b * 13, -1.0, 1.0, 1), kiln::Extents<In>(k * b));
  const auto y = kiln::test::make_tensor<D>(kiln::test::random_values<float>(k * b, -1.0, 1.0, 2), kiln::Extents<Out>(k * b));
  MSELoss mse;
  kiln::optim::SGD opt_whole(whole, {.lr = 0.1, .momentum = 0.9}), opt_parts(parts, {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    whole.zero_grad();
    const auto p = whole.forward(x);
    whole.backward(mse.backward(p, y));
    parts.zero_grad();
    for (int m = 0; m < k; ++m) {
      const auto xm = x.slice(m * b, (m + 1) * b);
      const auto ym = y.slice(m * b, (m + 1) * b);
      const auto pm = parts.forward(xm);
      parts.backward(mse.backward(pm, ym, 1.0 / k));
    }
    check_close(parts.gradients().to_vector(), whole.gradients().to_vector(), 1e-5);
    opt_whole.step();
    opt_parts.step();
  }
  check_close(parts.parameters().to_vector(), whole.parameters().to_vector(), 1e-5);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(three_micro_batches_equal_one_batch_for_cross_entropy, D, kiln::test::devices) {
  using Net = Sequential<Conv2d<1, 4, 3>, ReLU, MaxPool2d<2>, Flatten, Linear<36, 5>>;
  using In = Shape<dyn, 1, 8, 8>;
  constexpr int k = 3, b = 5;
  Model<Net, In, kiln::Policy<kiln::Fp32, D>> whole(9), parts(9);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(k * b * 64, -1.0, 1.0, 3), kiln::Extents<In>(k * b));
  std::vector<std::int64_t> labels(k * b);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7) % 5);
  const auto y = kiln::test::make_tensor<D>(labels, kiln::Extents<Shape<dyn>>(k * b));
  CrossEntropyLoss ce;
  whole.zero_grad();
  const auto logits = whole.forward(x);
  whole.backward(ce.backward(logits, y));
  parts.zero_grad();
  for (int m = 0; m < k; ++m) {
    const auto lm = parts.forward(x.slice(m * b, (m + 1) * b));
    parts.backward(ce.backward(lm, y.slice(m * b, (m + 1) * b), 1.0 / k));
  }
  check_close(parts.gradients().to_vector(), whole.gradients().to_vector(), 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
