// Arithmetic operators against float64 on odd sizes (not multiples of any vector width), for float,
// double and half storage; numbers inside expressions keep the tensor's type (integers: test_promotion.cpp).
#include <boost/test/unit_test.hpp>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

constexpr std::size_t sizes[] = {1, 7, 1023, 100003};

/// y = build(x, z) on device D for random x in [-4, 4) and z in +-[0.25, 4), against ref in double.
template <class D, class T, class Build, class Ref>
void check_binary(const char* what, Build build, Ref ref) {
  for (std::size_t n : sizes) {
    BOOST_TEST_CONTEXT(what << " on " << kiln::dtype_name<T>() << ", n = " << n) {
      const auto xv = kt::random_values<T>(n, -4.0, 4.0, 1);
      const auto zv = kt::random_nonzero<T>(n, -4.0, 4.0, 0.25, 2);
      const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(n));
      const auto x = kt::make_tensor<D>(xv, ext);
      const auto z = kt::make_tensor<D>(zv, ext);
      Tensor<T, Shape<dyn>, D> y(ext);
      y = build(x, z);
      BOOST_TEST(kt::all_close(y.to_vector(), kt::reference_map(ref, xv, zv)));
    }
  }
}

template <class D, class T>
void check_operators() {
  check_binary<D, T>(
      "x + z", [](const auto& x, const auto& z) { return x + z; }, [](double x, double z) { return x + z; });
  check_binary<D, T>(
      "x - z", [](const auto& x, const auto& z) { return x - z; }, [](double x, double z) { return x - z; });
  check_binary<D, T>(
      "x * z", [](const auto& x, const auto& z) { return x * z; }, [](double x, double z) { return x * z; });
  check_binary<D, T>(
      "x / z", [](const auto& x, const auto& z) { return x / z; }, [](double x, double z) { return x / z; });
  check_binary<D, T>(
      "-x", [](const auto& x, const auto&) { return -x; }, [](double x, double) { return -x; });
  check_binary<D, T>(
      "-(x - z)", [](const auto& x, const auto& z) { return -(x - z); },
      [](double x, double z) { return z - x; });
}
// Numbers on either side: converted to the tensor's value type first (0.5 and 2 are exact in every type).
template <class D, class T>
void check_number_operands() {
  check_binary<D, T>(
      "x + 2", [](const auto& x, const auto&) { return x + 2; }, [](double x, double) { return x + 2; });
  check_binary<D, T>(
      "2 - x", [](const auto& x, const auto&) { return 2 - x; }, [](double x, double) { return 2 - x; });
  check_binary<D, T>(
      "x * 0.5", [](const auto& x, const auto&) { return x * 0.5; },
      [](double x, double) { return x * 0.5; });
  check_binary<D, T>(
      "0.5f * x", [](const auto& x, const auto&) { return 0.5f * x; },
      [](double x, double) { return 0.5 * x; });
  check_binary<D, T>(
      "x / 2", [](const auto& x, const auto&) { return x / 2; }, [](double x, double) { return x / 2; });
  check_binary<D, T>(
      "3 / z", [](const auto&, const auto& z) { return 3 / z; }, [](double, double z) { return 3 / z; });
}
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)

BOOST_AUTO_TEST_CASE_TEMPLATE(operators_match_float64_on_odd_sizes, D, kiln::test::devices) {
  check_operators<D, float>();
  check_operators<D, double>();
  check_operators<D, kiln::half>();
  check_operators<D, kiln::bfloat16>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(numbers_on_either_side_of_an_operator, D, kiln::test::devices) {
  check_number_operands<D, float>();
  check_number_operands<D, double>();
  check_number_operands<D, kiln::half>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mixed_element_types_compute_in_the_wider_type, D, kiln::test::devices) {
  const std::size_t n = 1023;
  const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(n));
  const auto hv = kt::random_values<kiln::half>(n, -4, 4, 3);
  const auto fv = kt::random_values<float>(n, -4, 4, 4);
  const auto dv = kt::random_values<double>(n, -4, 4, 5);
  const auto h = kt::make_tensor<D>(hv, ext);
  const auto f = kt::make_tensor<D>(fv, ext);
  const auto d = kt::make_tensor<D>(dv, ext);
  static_assert(std::is_same_v<typename decltype(h * f)::value_type, float>);
  static_assert(std::is_same_v<typename decltype(f * d)::value_type, double>);

  Tensor<double, Shape<dyn>, D> y(ext);
  y = f * d + h;  // f * d in double: exact products of float and double inputs, one rounding each
  BOOST_TEST(kt::all_close(
      y.to_vector(), kt::reference_map([](double a, double b, double c) { return a * b + c; }, fv, dv, hv)));

  Tensor<kiln::half, Shape<dyn>, D> yh(ext);
  yh = h * f;  // float arithmetic, stored rounded to half
  BOOST_TEST(
      kt::all_close(yh.to_vector(), kt::reference_map([](double a, double b) { return a * b; }, hv, fv)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(numbers_keep_float_without_promotion_to_double, D, kiln::test::devices) {
  const std::size_t n = 1023;
  const auto xv = kt::random_values<float>(n, -10, 10, 6);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(static_cast<kiln::index_t>(n)));
  static_assert(std::is_same_v<typename decltype(x * 0.1)::value_type, float>,
                "a double literal stays float");
  static_assert(std::is_same_v<typename decltype(0.1 + x)::value_type, float>);
  static_assert(std::is_same_v<typename decltype(kiln::max(x, 0.0))::value_type, float>);
  static_assert(std::is_same_v<typename decltype(kiln::pow(x, 2.0))::value_type, float>);

  Tensor<float, Shape<dyn>, D> y(x.extents());
  y = (x + 0.1) - x;  // in float: the rounding of x + 0.1f shows; in double it would cancel to 0.1f
  std::vector<float> want(n);
  std::size_t differ_from_tenth = 0;
  for (std::size_t i = 0; i < n; ++i) {
    volatile float s = xv[i] + 0.1f;
    want[i] = s - xv[i];
    differ_from_tenth += want[i] != 0.1f;
  }
  BOOST_TEST(differ_from_tenth > n / 2);  // the check below can tell float from double arithmetic
  BOOST_TEST(kt::all_equal(y.to_vector(), want));
}

BOOST_AUTO_TEST_SUITE_END()
