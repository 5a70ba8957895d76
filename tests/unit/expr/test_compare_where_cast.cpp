// Comparisons (bool results), where(c, a, b), and cast<T>: half and bfloat16 rounding must match an
// independent round-to-nearest-even model bit for bit, including ties, subnormals and overflow.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

/// Values that exercise every rounding rule of half and bfloat16, then random ones over a wide range.
std::vector<float> rounding_inputs() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  // Ties: half 1 + 2^-11 -> 1, 1 + 3 2^-11 -> 1 + 2^-9, just above a tie -> up; bfloat16 likewise at 2^-8.
  v.insert(v.end(), {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-20f, 1.0f + 0x1p-8f,
                     1.0f + 3 * 0x1p-8f});
  // half's largest finite value, its rounding edge to infinity, overflow.
  v.insert(v.end(), {65504.0f, 65519.0f, 65520.0f, -65520.0f, 70000.0f});
  // half's smallest normal, subnormals, and ties at the bottom (2^-25 -> 0, 3 2^-25 -> 2^-23).
  v.insert(v.end(), {0x1p-14f, 0x1p-15f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, 0x1p-26f, -0x1p-25f});
  // bfloat16: float subnormals, its overflow edge (3.3895e38 + half an ulp), float's max.
  v.insert(v.end(), {0x1p-126f, 0x1p-130f, 0x1p-149f, 3.0e38f, 3.3961e38f, -3.3961e38f,
                     std::numeric_limits<float>::max()});
  v.insert(v.end(), {0.1f, -0.3f, 3.14159265f, 1e-5f, 6.1e-5f, 1e4f});
  std::mt19937 gen(kt::base_seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-30, 17);
  for (int i = 0; i < 1001; ++i) {
    float x = std::ldexp(mant(gen), expo(gen));
    if (i % 3 == 0) x = -x;
    v.push_back(x);
  }
  return v;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)

BOOST_AUTO_TEST_CASE_TEMPLATE(comparisons_yield_bool_tensors, D, kiln::test::devices) {
  const std::size_t n = 1023;
  const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(n));
  const auto av = kt::random_integers<float>(n, -3, 3, 41);  // small integers: many exact ties
  const auto bv = kt::random_integers<float>(n, -3, 3, 42);
  const auto a = kt::make_tensor<D>(av, ext);
  const auto b = kt::make_tensor<D>(bv, ext);
  static_assert(std::is_same_v<typename decltype(a < b)::value_type, bool>);

  Tensor<bool, Shape<dyn>, D> y(ext);
  const auto check = [&](const char* what, const auto& expr, auto ref) {
    y = expr;
    std::vector<bool> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = ref(av[i], bv[i]);
    BOOST_TEST_CONTEXT(what) { BOOST_TEST(y.to_vector() == want, boost::test_tools::per_element()); }
  };
  check("a < b", a < b, [](float p, float q) { return p < q; });
  check("a <= b", a <= b, [](float p, float q) { return p <= q; });
  check("a > b", a > b, [](float p, float q) { return p > q; });
  check("a >= b", a >= b, [](float p, float q) { return p >= q; });
  check("eq(a, b)", kiln::eq(a, b), [](float p, float q) { return p == q; });
  check("ne(a, b)", kiln::ne(a, b), [](float p, float q) { return p != q; });
  check("a > 0", a > 0, [](float p, float) { return p > 0; });
  check("1 <= b", 1 <= b, [](float, float q) { return 1 <= q; });

  auto e = kiln::eval(a >= b);  // eval keeps bool
  static_assert(std::is_same_v<typename decltype(e)::element_type, bool>);

  Tensor<float, Shape<dyn>, D> as_float(ext);
  as_float = a > b;  // bool stored as 0 / 1
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = av[i] > bv[i] ? 1.0f : 0.0f;
  BOOST_TEST(kt::all_equal(as_float.to_vector(), want));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(comparisons_with_nan_are_false_except_ne, D, kiln::test::devices) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto a = kt::make_tensor<D>(std::vector<float>{nan, nan, 1.0f}, Extents<Shape<3>>{});
  const auto b = kt::make_tensor<D>(std::vector<float>{nan, 1.0f, nan}, Extents<Shape<3>>{});
  Tensor<bool, Shape<3>, D> y;
  y = a < b;
  BOOST_TEST(y.to_vector() == std::vector<bool>(3, false), boost::test_tools::per_element());
  y = a >= b;
  BOOST_TEST(y.to_vector() == std::vector<bool>(3, false), boost::test_tools::per_element());
  y = kiln::eq(a, b);
  BOOST_TEST(y.to_vector() == std::vector<bool>(3, false), boost::test_tools::per_element());
  y = kiln::ne(a, b);
  BOOST_TEST(y.to_vector() == std::vector<bool>(3, true), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(where_selects_elementwise, D, kiln::test::devices) {
  for (std::size_t n : {1u, 7u, 1023u, 100003u}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(n));
      const auto xv = kt::random_values<float>(n, -2, 2, 43);
      const auto zv = kt::random_values<float>(n, -2, 2, 44);
      const auto x = kt::make_tensor<D>(xv, ext);
      const auto z = kt::make_tensor<D>(zv, ext);
      Tensor<float, Shape<dyn>, D> y(ext);

      y = kiln::where(x > z, x, z);
      BOOST_TEST(kt::all_equal(y.to_vector(),
                               kt::reference_map([](double a, double b) { return a > b ? a : b; }, xv, zv)));
      y = kiln::where(x > 0.0f, x, 0.125f * x);  // leaky ReLU
      BOOST_TEST(kt::all_close(y.to_vector(),
                               kt::reference_map([](double a) { return a > 0 ? a : 0.125 * a; }, xv)));
      y = kiln::where(x < 0.0f, -1.0, 1.0);  // two numbers
      BOOST_TEST(
          kt::all_equal(y.to_vector(), kt::reference_map([](double a) { return a < 0 ? -1.0 : 1.0; }, xv)));
      y = kiln::where(x < z, 0.0f, z);  // a number and an operand
      BOOST_TEST(kt::all_equal(
          y.to_vector(), kt::reference_map([](double a, double b) { return a < b ? 0.0 : b; }, xv, zv)));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(where_broadcasts_its_three_operands, D, kiln::test::devices) {
  const kiln::index_t n = 33, f = 7;
  const auto xv = kt::random_values<double>(static_cast<std::size_t>(n * f), -2, 2, 45);
  const auto bv = kt::random_values<double>(static_cast<std::size_t>(f), -2, 2, 46);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 7>>(n));
  const auto b = kt::make_tensor<D>(bv, Extents<Shape<7>>{});
  Tensor<double, Shape<dyn, 7>, D> y(n);
  y = kiln::where(b > 0.0, x, b);  // condition [F] and other operand [F] over [N, F]
  std::vector<double> want(xv.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = bv[i % 7] > 0 ? xv[i] : bv[i % 7];
  BOOST_TEST(kt::all_equal(y.to_vector(), want));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cast_to_half_rounds_to_nearest_even, D, kiln::test::devices) {
  const auto v = rounding_inputs();
  const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(v.size()));
  const auto x = kt::make_tensor<D>(v, ext);
  std::vector<float> want(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) want[i] = kt::reference_round_half(v[i]);

  Tensor<float, Shape<dyn>, D> y(ext);
  y = kiln::cast<kiln::half>(x);  // the value as half holds it, computed on in float
  BOOST_TEST(kt::all_equal(y.to_vector(), want));

  Tensor<kiln::half, Shape<dyn>, D> h(ext);
  h = x;  // storing into a half tensor rounds the same way
  BOOST_TEST(kt::all_equal(h.to_vector(), want));

  // eval of a cast is a tensor of the cast's type, as torch's x.half() (a cast inside an expression is
  // computed on in float, above)
  const auto e = kiln::eval(kiln::cast<kiln::half>(x));
  static_assert(std::is_same_v<typename std::decay_t<decltype(e)>::element_type, kiln::half>);
  BOOST_TEST(kt::all_equal(e.to_vector(), want));
  static_assert(
      std::is_same_v<typename decltype(kiln::eval(kiln::cast<kiln::half>(x) * 2))::element_type, float>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cast_to_bfloat16_rounds_to_nearest_even, D, kiln::test::devices) {
  const auto v = rounding_inputs();
  const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(v.size()));
  const auto x = kt::make_tensor<D>(v, ext);
  std::vector<float> want(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) want[i] = kt::reference_round_bfloat16(v[i]);

  Tensor<float, Shape<dyn>, D> y(ext);
  y = kiln::cast<kiln::bfloat16>(x);
  BOOST_TEST(kt::all_equal(y.to_vector(), want));

  Tensor<kiln::bfloat16, Shape<dyn>, D> b(ext);
  b = x;
  BOOST_TEST(kt::all_equal(b.to_vector(), want));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cast_between_float_and_double, D, kiln::test::devices) {
  const auto dv = kt::random_values<double>(1023, -1e3, 1e3, 47);
  const auto d = kt::make_tensor<D>(dv, Extents<Shape<dyn>>(1023));
  static_assert(std::is_same_v<typename decltype(kiln::cast<float>(d))::value_type, float>);
  Tensor<double, Shape<dyn>, D> y(d.extents());
  y = kiln::cast<float>(d);  // narrowed to float, then widened exactly
  std::vector<double> want(dv.size());
  for (std::size_t i = 0; i < dv.size(); ++i) want[i] = static_cast<float>(dv[i]);
  BOOST_TEST(kt::all_equal(y.to_vector(), want));

  const auto fv = kt::random_values<float>(1023, -1e3, 1e3, 48);
  const auto f = kt::make_tensor<D>(fv, Extents<Shape<dyn>>(1023));
  y = kiln::cast<double>(f) * (1.0 / 3.0);  // widened first: the product is in double
  BOOST_TEST(kt::all_close(y.to_vector(), kt::reference_map([](double a) { return a / 3.0; }, fv)));
  static_assert(std::is_same_v<typename decltype(kiln::cast<double>(f) * 0.5f)::value_type, double>);
}

BOOST_AUTO_TEST_SUITE_END()
