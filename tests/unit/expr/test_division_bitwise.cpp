// fmod, remainder (and operator%), floor_divide against torch 1.13's bits
// (tests/parity/fixtures/elementwise_division.json), their integer edges (zero divisors, INT_MIN / -1),
// the bitwise operations and nan_to_num, on every device.
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <type_traits>
#include <vector>

#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/throws.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

std::vector<float> floats_of(const nlohmann::json& bits) {
  std::vector<float> v;
  for (const auto& b : bits) v.push_back(std::bit_cast<float>(b.get<std::uint32_t>()));
  return v;
}

/// The same float, bit for bit (any NaN for a NaN; the signs of zeros count).
bool same_float(float got, float want) {
  return std::isnan(want) ? std::isnan(got) : std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)

// torch's vectorised CPU fmod computes through the quotient: where x / y overflows float (1e30 by 1e-30)
// its vector lanes give NaN and its scalar tail and CUDA the exact fmod, which kiln gives on both devices:
// there the test asks for the C library's value (and counts such pairs, so the exception cannot grow).
BOOST_AUTO_TEST_CASE_TEMPLATE(division_family_matches_torch_bit_for_bit, D, kiln::test::devices) {
  const nlohmann::json f = kiln::test::parity::load("elementwise_division.json");
  const auto xv = floats_of(f.at("x_bits")), yv = floats_of(f.at("y_bits"));
  const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(xv.size()));
  const auto x = kt::make_tensor<D>(xv, ext);
  const auto y = kt::make_tensor<D>(yv, ext);
  const auto quotient_overflows = [&](std::size_t i) {
    return std::isfinite(xv[i]) && std::isfinite(yv[i]) && yv[i] != 0.0f && std::isinf(xv[i] / yv[i]);
  };
  const auto exact_remainder = [](float a, float b) {
    const float m = std::fmod(a, b);
    return m != 0.0f && (m < 0.0f) != (b < 0.0f) ? m + b : m;
  };
  Tensor<float, Shape<dyn>, D> r(ext);
  const auto check = [&](const char* what, const char* key, auto exact) {
    const auto want = floats_of(f.at(key));
    const auto got = r.to_vector();
    int wrong = 0, overflows = 0;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const bool overflow = quotient_overflows(i);
      overflows += overflow;
      const float w = overflow ? exact(xv[i], yv[i]) : want[i];
      if (!same_float(got[i], w) && ++wrong <= 5)
        BOOST_ERROR(std::setprecision(9) << what << "(" << xv[i] << ", " << yv[i] << "): kiln " << got[i]
                                         << ", torch " << want[i] << (overflow ? ", C's " : "") << w);
    }
    BOOST_TEST(wrong == 0, what << ": " << wrong << " of " << xv.size() << " differ from torch's");
    BOOST_TEST(overflows == 1);
  };
  const auto c_fmod = [](float a, float b) { return std::fmod(a, b); };
  r = kiln::fmod(x, y);
  check("fmod", "fmod_bits", c_fmod);
  r = kiln::remainder(x, y);
  check("remainder", "remainder_bits", exact_remainder);
  r = x % y;
  check("operator%", "remainder_bits", exact_remainder);
  r = kiln::floor_divide(x, y);
  check("floor_divide", "floor_divide_bits", [](float a, float b) { return a / b; });

  const auto iv = f.at("i").get<std::vector<std::int64_t>>(), jv = f.at("j").get<std::vector<std::int64_t>>();
  const Extents<Shape<dyn>> iext(static_cast<kiln::index_t>(iv.size()));
  const auto i = kt::make_tensor<D>(iv, iext);
  const auto j = kt::make_tensor<D>(jv, iext);
  static_assert(std::is_same_v<typename decltype(kiln::floor_divide(i, j))::value_type, std::int64_t>);
  Tensor<std::int64_t, Shape<dyn>, D> q(iext);
  q = kiln::fmod(i, j);
  BOOST_TEST(q.to_vector() == f.at("i_fmod").get<std::vector<std::int64_t>>(), boost::test_tools::per_element());
  q = i % j;
  BOOST_TEST(q.to_vector() == f.at("i_remainder").get<std::vector<std::int64_t>>(), boost::test_tools::per_element());
  q = kiln::floor_divide(i, j);
  BOOST_TEST(q.to_vector() == f.at("i_floor_divide").get<std::vector<std::int64_t>>(),
             boost::test_tools::per_element());
}

// Where torch's CPU raises (a zero integer divisor) or dies (INT64_MIN % -1 is SIGFPE in torch 1.13),
// kiln gives 0 from a tensor divisor and refuses the number 0 before any kernel runs; INT64_MIN // -1
// wraps to itself. Promotion as torch's: an int32 fmod a float number is float, uint8 stays uint8.
BOOST_AUTO_TEST_CASE_TEMPLATE(integer_division_never_traps, D, kiln::test::devices) {
  constexpr std::int64_t lowest = std::numeric_limits<std::int64_t>::min();
  const auto i = kt::make_tensor<D>(std::vector<std::int64_t>{7, -7, lowest, lowest}, Extents<Shape<4>>{});
  const auto j = kt::make_tensor<D>(std::vector<std::int64_t>{0, 0, -1, 0}, Extents<Shape<4>>{});
  Tensor<std::int64_t, Shape<4>, D> q;
  q = kiln::fmod(i, j);
  BOOST_TEST(q.to_vector() == (std::vector<std::int64_t>{0, 0, 0, 0}), boost::test_tools::per_element());
  q = kiln::remainder(i, j);
  BOOST_TEST(q.to_vector() == (std::vector<std::int64_t>{0, 0, 0, 0}), boost::test_tools::per_element());
  q = kiln::floor_divide(i, j);
  BOOST_TEST(q.to_vector() == (std::vector<std::int64_t>{0, 0, lowest, 0}), boost::test_tools::per_element());

  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { q = i % 0; }, "operator%: integer division by zero"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { q = kiln::floor_divide(i, 0); }, "floor_divide"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { q = kiln::fmod(i, false); }, "fmod"));
  // A number that wraps to 0 in the operands' type is a division by zero too (torch: u8 % 256 raises
  // ZeroDivisionError); as a dividend it is just 0 (256 % u8 is 0).
  const auto u8 = kt::make_tensor<D>(std::vector<std::uint8_t>{7, 200, 255, 1}, Extents<Shape<4>>{});
  Tensor<std::uint8_t, Shape<4>, D> r;
  BOOST_TEST(kt::throws_with<kiln::ValueError>(
      [&] { r = u8 % 256; }, "operator%: integer division by zero (torch's ZeroDivisionError): the divisor 256 is 0 in "
                            "the operands' 8-bit integer type, as it wraps"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { r = kiln::floor_divide(u8, -256); }, "the divisor -256 is 0"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { r = kiln::fmod(u8, 512); }, "kiln::fmod: integer division by zero"));
  r = u8 % 257;  // 257 is 1 in uint8
  BOOST_TEST(r.to_vector() == (std::vector<std::uint8_t>{0, 0, 0, 0}), boost::test_tools::per_element());
  r = 256 % u8;
  BOOST_TEST(r.to_vector() == (std::vector<std::uint8_t>{0, 0, 0, 0}), boost::test_tools::per_element());
  const auto w = kt::make_tensor<D>(std::vector<std::int32_t>{7, -7, 1, 2}, Extents<Shape<4>>{});
  Tensor<std::int32_t, Shape<4>, D> wq;
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { wq = kiln::floor_divide(w, 4294967296LL); }, "32-bit"));
  Tensor<float, Shape<4>, D> y;
  y = kiln::fmod(i, 0.0);  // a float divisor: NaN, as torch's
  BOOST_TEST(std::isnan(y.to_vector()[0]));

  const auto s = kt::make_tensor<D>(std::vector<std::int32_t>{5, -5, 7, 9}, Extents<Shape<4>>{});
  static_assert(std::is_same_v<typename decltype(kiln::fmod(s, 2.5))::value_type, float>);
  y = kiln::remainder(s, 2.5);
  const auto rv = y.to_vector();  // -5 % 2.5 is -0.0 in torch: fmod's zero is kept
  BOOST_TEST((rv[0] == 0.0f && rv[1] == 0.0f && std::signbit(rv[1]) && rv[2] == 2.0f && rv[3] == 1.5f));
  const auto u = kt::make_tensor<D>(std::vector<std::uint8_t>{7, 200, 255, 0}, Extents<Shape<4>>{});
  static_assert(std::is_same_v<typename decltype(u % 3)::value_type, std::uint8_t>);
  Tensor<std::uint8_t, Shape<4>, D> v;
  v = kiln::floor_divide(u, 2);
  BOOST_TEST(v.to_vector() == (std::vector<std::uint8_t>{3, 100, 127, 0}), boost::test_tools::per_element());
  v %= 3;  // in place, as torch's x %= 3
  BOOST_TEST(v.to_vector() == (std::vector<std::uint8_t>{0, 1, 1, 0}), boost::test_tools::per_element());
}

// torch.bitwise_and / or / xor / not and libtorch's &, |, ^, ~: integers in the promoted type (bool & int64
// is int64), bools as bools (~True is False), uint8's ~ is 255 - x. The values were run in torch 1.13.
BOOST_AUTO_TEST_CASE_TEMPLATE(bitwise_operations_are_torchs, D, kiln::test::devices) {
  const auto a = kt::make_tensor<D>(std::vector<std::int64_t>{12, -1, 0, 5}, Extents<Shape<4>>{});
  const auto b = kt::make_tensor<D>(std::vector<std::int64_t>{10, 7, -3, 5}, Extents<Shape<4>>{});
  Tensor<std::int64_t, Shape<4>, D> r;
  r = a & b;
  BOOST_TEST(r.to_vector() == (std::vector<std::int64_t>{8, 7, 0, 5}), boost::test_tools::per_element());
  r = kiln::bitwise_or(a, b);
  BOOST_TEST(r.to_vector() == (std::vector<std::int64_t>{14, -1, -3, 5}), boost::test_tools::per_element());
  r = a ^ b;
  BOOST_TEST(r.to_vector() == (std::vector<std::int64_t>{6, -8, -3, 0}), boost::test_tools::per_element());
  r = ~a;
  BOOST_TEST(r.to_vector() == (std::vector<std::int64_t>{-13, 0, -1, -6}), boost::test_tools::per_element());
  r |= 16;
  BOOST_TEST(r.to_vector() == (std::vector<std::int64_t>{-13, 16, -1, -6}), boost::test_tools::per_element());

  Tensor<bool, Shape<4>, D> m, n;
  m = kiln::ne(kt::make_tensor<D>(std::vector<std::int32_t>{1, 0, 1, 0}, Extents<Shape<4>>{}), 0);
  n = kiln::ne(kt::make_tensor<D>(std::vector<std::int32_t>{1, 1, 0, 0}, Extents<Shape<4>>{}), 0);
  static_assert(std::is_same_v<typename decltype(m & n)::value_type, bool>);
  static_assert(std::is_same_v<typename decltype(m & b)::value_type, std::int64_t>);
  Tensor<bool, Shape<4>, D> k;
  k = (m ^ n) | ~m;
  BOOST_TEST(k.to_vector() == (std::vector<bool>{false, true, true, true}), boost::test_tools::per_element());
  k &= n;
  BOOST_TEST(k.to_vector() == (std::vector<bool>{false, true, false, false}), boost::test_tools::per_element());
  r = m & b;
  BOOST_TEST(r.to_vector() == (std::vector<std::int64_t>{0, 0, 1, 0}), boost::test_tools::per_element());

  const auto u = kt::make_tensor<D>(std::vector<std::uint8_t>{0, 5, 255, 128}, Extents<Shape<4>>{});
  Tensor<std::uint8_t, Shape<4>, D> v;
  v = ~u;
  BOOST_TEST(v.to_vector() == (std::vector<std::uint8_t>{255, 250, 0, 127}), boost::test_tools::per_element());
}

// torch.nan_to_num: the defaults are the largest finite values of the tensor's own type (±65504 for half,
// as torch 1.13 prints them), given values replace them, a value beyond float is inf (torch's too), and
// integers are themselves.
BOOST_AUTO_TEST_CASE_TEMPLATE(nan_to_num_is_torchs, D, kiln::test::devices) {
  constexpr float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {nan, inf, -inf, 1.5f, -0.0f};
  const auto x = kt::make_tensor<D>(special, Extents<Shape<5>>{});
  Tensor<float, Shape<5>, D> y;
  y = kiln::nan_to_num(x);
  constexpr float big = std::numeric_limits<float>::max();
  BOOST_TEST(y.to_vector() == (std::vector<float>{0.0f, big, -big, 1.5f, -0.0f}), boost::test_tools::per_element());
  y = kiln::nan_to_num(x, 2.0, 1e300, -7.0);
  BOOST_TEST(y.to_vector() == (std::vector<float>{2.0f, inf, -7.0f, 1.5f, -0.0f}), boost::test_tools::per_element());
  y = kiln::nan_to_num(x * 2.0f, -1.0);  // an expression: its values' type, float
  BOOST_TEST(y.to_vector() == (std::vector<float>{-1.0f, big, -big, 3.0f, -0.0f}), boost::test_tools::per_element());

  std::vector<kiln::half> hv;
  std::vector<kiln::bfloat16> bv;
  for (float v : special) {
    hv.push_back(kt::from_double<kiln::half>(v));
    bv.push_back(kt::from_double<kiln::bfloat16>(v));
  }
  Tensor<kiln::half, Shape<5>, D> yh;
  yh = kiln::nan_to_num(kt::make_tensor<D>(hv, Extents<Shape<5>>{}));
  BOOST_TEST(kt::to_doubles(yh.to_vector()) == (std::vector<double>{0.0, 65504.0, -65504.0, 1.5, 0.0}),
             boost::test_tools::per_element());
  Tensor<kiln::bfloat16, Shape<5>, D> yb;
  yb = kiln::nan_to_num(kt::make_tensor<D>(bv, Extents<Shape<5>>{}));
  BOOST_TEST(kt::to_doubles(yb.to_vector())[1] == 3.3895313892515355e38);

  const auto i = kt::make_tensor<D>(std::vector<std::int64_t>{3, -4}, Extents<Shape<2>>{});
  static_assert(std::is_same_v<typename decltype(kiln::nan_to_num(i))::value_type, std::int64_t>);
  Tensor<std::int64_t, Shape<2>, D> yi;
  yi = kiln::nan_to_num(i);
  BOOST_TEST(yi.to_vector() == (std::vector<std::int64_t>{3, -4}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
