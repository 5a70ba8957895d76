// Fusion: building an expression runs nothing; assigning a chain of any length is exactly one pass
// (one loop / one kernel, counted by kiln::passes()); compound assignment is one pass too.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <type_traits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)

BOOST_AUTO_TEST_CASE_TEMPLATE(expression_nodes_are_trivially_copyable_expressions, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 4>, D> x(3);
  Tensor<float, Shape<4>, D> b;
  using Chain = decltype(kiln::relu(x * 2.0f + b) - kiln::exp(-x));
  static_assert(kiln::expression<Chain>);
  static_assert(std::is_trivially_copyable_v<Chain>, "a tree is passed to a kernel by value");
  static_assert(std::is_same_v<typename Chain::shape_type, Shape<dyn, 4>>);
  static_assert(std::is_same_v<typename Chain::device, D>);
  static_assert(!kiln::expression<Tensor<float, Shape<4>, D>>, "tensors are operands, not nodes");
  static_assert(kiln::operand<Tensor<float, Shape<4>, D>> && kiln::operand<Chain> && !kiln::operand<float>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(building_an_expression_runs_nothing, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> x(1023);
  x.fill(1.0f);
  const auto before = kiln::passes();
  auto e = kiln::tanh(x * 3.0f + 1.0f) / (x + 2.0f);
  (void)e;
  BOOST_TEST(kiln::passes() == before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(chain_of_five_ops_is_one_pass, D, kiln::test::devices) {
  for (std::size_t n : {1u, 7u, 1023u, 100003u}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(n));
      const auto xv = kt::random_values<float>(n, -2, 2, 51);
      const auto zv = kt::random_values<float>(n, -2, 2, 52);
      const auto x = kt::make_tensor<D>(xv, ext);
      const auto z = kt::make_tensor<D>(zv, ext);
      Tensor<float, Shape<dyn>, D> y(ext);
      const auto before = kiln::passes();
      y = kiln::relu(x * 2.0f - z) + kiln::exp(-x);  // * - relu neg exp +: six nodes
      BOOST_TEST(kiln::passes() - before == 1u);
      // Float rounding of each step, relative to the magnitude of the terms (x * 2 - z may cancel).
      const auto want = kt::reference_map(
          [](double a, double b) { return std::max(2 * a - b, 0.0) + std::exp(-a); }, xv, zv);
      BOOST_TEST(kt::all_close(y.to_vector(), want, 1e-6, 1e-6));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(chain_of_twenty_ops_with_broadcasting_is_one_pass, D, kiln::test::devices) {
  const kiln::index_t n = 1001, f = 17;
  const auto xv = kt::random_values<double>(static_cast<std::size_t>(n * f), -1, 1, 53);
  const auto bv = kt::random_values<double>(static_cast<std::size_t>(f), -1, 1, 54);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 17>>(n));
  const auto b = kt::make_tensor<D>(bv, Extents<Shape<17>>{});
  const auto s = kt::make_tensor<D>(std::vector<double>{0.5}, Extents<Shape<>>{});
  Tensor<double, Shape<dyn, 17>, D> y(n);
  const auto before = kiln::passes();
  y = kiln::where(x > b, kiln::sigmoid(x * s + b), kiln::tanh(x - b) * 0.5) + kiln::sqrt(kiln::abs(x) + 1.0) -
      kiln::log(kiln::exp(b) + 2.0) * kiln::max(x, -0.5) / kiln::pow(b * b + 1.0, 2);
  BOOST_TEST(kiln::passes() - before == 1u);
  std::vector<double> want(xv.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double a = xv[i], c = bv[i % 17];
    want[i] = (a > c ? 1 / (1 + std::exp(-(a * 0.5 + c))) : std::tanh(a - c) * 0.5) +
              std::sqrt(std::abs(a) + 1) -
              std::log(std::exp(c) + 2) * std::max(a, -0.5) / std::pow(c * c + 1, 2);
  }
  BOOST_TEST(kt::all_close(y.to_vector(), want, 1e-12, 1e-12));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(half_storage_chain_is_one_pass_computed_in_float, D, kiln::test::devices) {
  const std::size_t n = 1023;
  const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(n));
  const auto xv = kt::random_values<kiln::half>(n, -2, 2, 55);
  const auto x = kt::make_tensor<D>(xv, ext);
  Tensor<kiln::half, Shape<dyn>, D> y(ext);
  const auto before = kiln::passes();
  y = x * x * 3.0f + 1.0f;  // no intermediate rounding to half: only the store rounds
  BOOST_TEST(kiln::passes() - before == 1u);
  BOOST_TEST(kt::all_close(y.to_vector(), kt::reference_map([](double a) { return 3 * a * a + 1; }, xv)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(compound_assignment_is_one_pass_each, D, kiln::test::devices) {
  const std::size_t n = 1023;
  const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(n));
  auto values = kt::random_values<double>(n, 1, 2, 56);
  const auto zv = kt::random_values<double>(n, 1, 2, 57);
  auto y = kt::make_tensor<D>(values, ext);
  const auto z = kt::make_tensor<D>(zv, ext);
  std::vector<double> want = kt::to_doubles(values);

  const auto step = [&](const char* what, auto apply, auto ref) {
    const auto before = kiln::passes();
    apply();
    BOOST_TEST_CONTEXT(what) {
      BOOST_TEST(kiln::passes() - before == 1u);
      for (std::size_t i = 0; i < n; ++i) want[i] = ref(want[i], zv[i]);
      BOOST_TEST(kt::all_close(y.to_vector(), want));
    }
  };
  step(
      "y += z", [&] { y += z; }, [](double a, double b) { return a + b; });
  step(
      "y -= 0.5", [&] { y -= 0.5; }, [](double a, double) { return a - 0.5; });
  step(
      "y *= z * 2", [&] { y *= z * 2.0; }, [](double a, double b) { return a * (b * 2); });
  step(
      "y /= z", [&] { y /= z; }, [](double a, double b) { return a / b; });
  step(
      "y += y", [&] { y += y; }, [](double a, double) { return a + a; });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dynamic_extent_mismatch_is_a_shape_error_naming_both, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 4>, D> x(3), z(5), y(3);
  x.fill(1.0f);
  z.fill(2.0f);
  y.fill(7.0f);
  const auto before = kiln::passes();
  BOOST_CHECK_EXCEPTION(y = x * z, kiln::ShapeError, kt::message_contains({"[3, 4]", "[5, 4]"}));
  BOOST_CHECK_EXCEPTION(y = z + 1.0f, kiln::ShapeError, kt::message_contains({"[3, 4]", "[5, 4]"}));
  BOOST_CHECK_EXCEPTION(y += z, kiln::ShapeError, kt::message_contains({"[3, 4]", "[5, 4]"}));
  BOOST_TEST(kiln::passes() == before, "nothing runs when the shapes are wrong");
  BOOST_TEST(kt::all_equal(y.to_vector(), std::vector<float>(12, 7.0f)));  // y untouched
}

BOOST_AUTO_TEST_SUITE_END()
