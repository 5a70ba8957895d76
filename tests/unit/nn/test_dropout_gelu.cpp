// Dropout (keep rate, scaling, p = 1, reproducibility, backward uses the forward's mask, identity in eval) and
// GELU (values of torch.nn.functional.gelu, float64 finite-difference gradient).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <kiln/nn/nn.hpp>
#include <vector>

#include "support/gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
struct Fp64Gelu {
  using storage = double;
  using compute = double;
  using master = double;
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "fp64";
};
using kiln::dyn;
using kiln::Shape;
using Flat = Shape<dyn, 1001>;
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(dropout_and_gelu)

BOOST_AUTO_TEST_CASE_TEMPLATE(dropout_keeps_about_1_minus_p_and_scales_them, D, kiln::test::devices) {
  using Model = kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Dropout<0.3f>>, Flat, kiln::Policy<kiln::Fp32, D>>;
  Model a(42), b(42), c(43);
  const auto x = kiln::test::make_tensor<D>(std::vector<float>(20 * 1001, 1.0f), kiln::Extents<Flat>(20));
  const auto ya = a.forward(x).to_vector(), yb = b.forward(x).to_vector(), yc = c.forward(x).to_vector();
  std::size_t kept = 0;
  for (float v : ya) {
    BOOST_TEST((v == 0.0f || std::abs(v - 1.0f / 0.7f) < 1e-6f));
    kept += v != 0.0f;
  }
  const double rate = static_cast<double>(kept) / static_cast<double>(ya.size());
  BOOST_TEST(std::abs(rate - 0.7) < 0.01);  // 20020 draws: 3.5 standard deviations is 0.0114
  BOOST_TEST(ya == yb);                     // same seed, same mask
  BOOST_TEST(ya != yc);                     // another seed, another mask
  const auto ya2 = a.forward(x).to_vector();
  BOOST_TEST(ya != ya2);  // a fresh mask every call
  // backward applies the mask of the last forward
  const auto dx = a.backward_input(x).to_vector();
  BOOST_TEST(dx == ya2);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dropout_is_the_identity_in_eval_mode, D, kiln::test::devices) {
  using Model = kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Dropout<>>, Flat, kiln::Policy<kiln::Fp32, D>>;
  Model m(1);
  m.eval();
  const auto xs = kiln::test::random_values<float>(3 * 1001, -1.0, 1.0, 5);
  const auto x = kiln::test::make_tensor<D>(xs, kiln::Extents<Flat>(3));
  const auto before = kiln::passes();
  BOOST_TEST(m.forward(x).to_vector() == xs);
  BOOST_TEST(kiln::passes() == before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dropout_with_p_1_zeroes_everything_and_its_gradient, D, kiln::test::devices) {
  // torch.nn.Dropout(p=1.0) in training: zeros, and a zero gradient (not 0 * inf = NaN).
  using Model = kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Dropout<1.0f>>, Flat, kiln::Policy<kiln::Fp32, D>>;
  Model m(3);
  const auto xs = kiln::test::random_values<float>(2 * 1001, -1.0, 1.0, 6);
  const auto x = kiln::test::make_tensor<D>(xs, kiln::Extents<Flat>(2));
  const std::vector<float> zeros(xs.size(), 0.0f);
  BOOST_TEST(m.forward(x).to_vector() == zeros, boost::test_tools::per_element());
  BOOST_TEST(m.backward_input(x).to_vector() == zeros, boost::test_tools::per_element());
  m.eval();
  BOOST_TEST(m.forward(x).to_vector() == xs, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gelu_matches_torch_and_its_gradient_is_exact, D, kiln::test::devices) {
  using Model = kiln::nn::Model<kiln::nn::Sequential<kiln::nn::GELU>, Shape<dyn, 5>, kiln::Policy<Fp64Gelu, D>>;
  Model m(0);
  // torch.nn.functional.gelu(torch.tensor([-3., -1., 0., 0.5, 2.], dtype=torch.float64))
  const std::vector<double> xs{-3.0, -1.0, 0.0, 0.5, 2.0};
  const std::vector<double> ref{-0.0040496940948903104, -0.15865525393145707, 0.0, 0.34573123063700656, 1.9544997361036416};
  const auto x = kiln::test::make_tensor<D>(xs, kiln::Extents<Shape<dyn, 5>>(1));
  const auto y = m.forward(x).to_vector();
  for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y[i] == ref[i], boost::test_tools::tolerance(1e-7));
  const auto w = kiln::test::make_tensor<D>(std::vector<double>{0.3, -1.2, 0.7, 2.0, -0.4}, kiln::Extents<Shape<dyn, 5>>(1));
  auto f = [&](const kiln::Tensor<double, Shape<dyn, 5>, D>& in) { return kiln::sum(m.forward(in) * w).item(); };
  m.forward(x);
  BOOST_TEST(kiln::test::gradcheck(f, x, m.backward_input(w)));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
