// The gradient checker itself: it accepts correct gradients of elementwise, reduction, broadcast and
// matmul functions, and rejects a wrong one with a message naming the element.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "support/gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
}  // namespace

BOOST_AUTO_TEST_SUITE(gradcheck)

BOOST_AUTO_TEST_CASE_TEMPLATE(elementwise_gradients_pass, D, kiln::test::devices) {
  const auto xv = kt::random_values<double>(7 * 3, -1, 1, 101);
  const auto wv = kt::random_values<double>(7 * 3, -1, 1, 102);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 3>>(7));
  const auto w = kt::make_tensor<D>(wv, Extents<Shape<dyn, 3>>(7));

  const auto cubic = [](const auto& t) { return kiln::sum(t * t * t); };  // a rank-0 tensor is fine
  BOOST_TEST(kt::gradcheck(cubic, x, kiln::eval(3.0 * x * x)));

  const auto weighted_tanh = [&](const auto& t) { return kiln::sum(kiln::tanh(t) * w).item(); };
  BOOST_TEST(kt::gradcheck(weighted_tanh, x, kiln::eval(w * (1.0 - kiln::tanh(x) * kiln::tanh(x)))));

  const auto softplus = [](const auto& t) { return kiln::sum(kiln::log(1.0 + kiln::exp(t))).item(); };
  BOOST_TEST(kt::gradcheck(softplus, x, kiln::eval(kiln::sigmoid(x))));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reduction_and_broadcast_gradients_pass, D, kiln::test::devices) {
  const kiln::index_t n = 5, f = 3;
  const auto xv = kt::random_values<double>(static_cast<std::size_t>(n * f), -1, 1, 103);
  const auto bv = kt::random_values<double>(static_cast<std::size_t>(f), -1, 1, 104);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 3>>(n));
  const auto b = kt::make_tensor<D>(bv, Extents<Shape<3>>{});

  // Mean squared error against a broadcast target: d/dx mean((x - b)^2) = 2 (x - b) / (N F).
  const auto mse = [&](const auto& t) { return kiln::mean((t - b) * (t - b)).item(); };
  BOOST_TEST(kt::gradcheck(mse, x, kiln::eval((x - b) * (2.0 / static_cast<double>(n * f)))));

  // log-sum-exp: the gradient is the softmax.
  const auto lse = [](const auto& t) { return std::log(kiln::sum(kiln::exp(t)).item()); };
  const double z = kiln::sum(kiln::exp(x)).item();
  BOOST_TEST(kt::gradcheck(lse, x, kiln::eval(kiln::exp(x) / z)));

  // Gradient with respect to the broadcast operand: d/db sum((x - b)^2) = -2 sum over rows of (x - b).
  const auto wrt_b = [&](const auto& c) { return kiln::sum((x - c) * (x - c)).item(); };
  BOOST_TEST(kt::gradcheck(wrt_b, b, kiln::eval(kiln::sum<0>(x - b) * -2.0)));
}

BOOST_AUTO_TEST_CASE(matmul_gradient_passes) {
  // Y = X W^T (a Linear layer), loss = sum(Y * G): dL/dW = G^T X. Double GEMM: CPU only.
  const kiln::index_t n = 4;  // X [4, 3], W [2, 3], G [4, 2]
  const auto x =
      kt::make_tensor<kiln::Cpu>(kt::random_values<double>(12, -1, 1, 105), Extents<Shape<dyn, 3>>(n));
  const auto g =
      kt::make_tensor<kiln::Cpu>(kt::random_values<double>(8, -1, 1, 106), Extents<Shape<dyn, 2>>(n));
  const auto w = kt::make_tensor<kiln::Cpu>(kt::random_values<double>(6, -1, 1, 107), Extents<Shape<2, 3>>{});
  const auto loss = [&](const auto& weight) {
    return kiln::sum(kiln::matmul(x, kiln::transposed(weight)) * g).item();
  };
  BOOST_TEST(kt::gradcheck(loss, w, kiln::matmul(kiln::transposed(g), x)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(wrong_gradient_is_reported_with_its_element, D, kiln::test::devices) {
  const auto x = kt::make_tensor<D>(std::vector<double>{0.5, -1.0, 2.0}, Extents<Shape<3>>{});
  const auto cubic = [](const auto& t) { return kiln::sum(t * t * t).item(); };
  auto wrong = kiln::eval(3.0 * x * x);
  wrong = wrong + kt::make_tensor<D>(std::vector<double>{0.0, 0.0, 1.0}, Extents<Shape<3>>{});  // off at [2]
  const auto r = kt::gradcheck(cubic, x, wrong);
  BOOST_TEST(!r);
  const auto view = r.message();  // a view of r's message
  const std::string msg(view.begin(), view.end());
  BOOST_TEST(msg.find("1 of 3") != std::string::npos, msg);
  BOOST_TEST(msg.find("flat index 2") != std::string::npos, msg);

  const auto numeric = kt::numeric_gradient(cubic, x);
  BOOST_TEST(kt::all_close(numeric, std::vector<double>{0.75, 3.0, 12.0}, 1e-8, 1e-8));
}

BOOST_AUTO_TEST_SUITE_END()
