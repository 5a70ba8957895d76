// Types meeting in one expression promote as torch's do: a floating number next to integers is float,
// int / int is a true division, uint8 stays uint8, sums of integers are int64; what torch refuses
// (mean of integers, floats stored in place into integers) does not compile (tests/compile_fail).
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

template <class T, class X>
void expect_element(const X&) {
  static_assert(std::is_same_v<typename X::element_type, T>, "the promoted element type differs from torch's");
}
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)

BOOST_AUTO_TEST_CASE_TEMPLATE(floating_numbers_next_to_integers_are_float, D, kiln::test::devices) {
  const auto i = kt::make_tensor<D>(std::vector<std::int32_t>{1, 2, 3, -7}, Extents<Shape<dyn>>(4));

  const auto half_i = kiln::eval(i * 0.5);  // torch: float32 [0.5, 1, 1.5, -3.5]
  expect_element<float>(half_i);
  BOOST_TEST(kt::all_equal(half_i.to_vector(), std::vector<float>{0.5f, 1.0f, 1.5f, -3.5f}));

  const auto below = kiln::eval(i < 2.5);  // compares with 2.5, not 2
  BOOST_TEST(kt::all_equal(below.to_vector(), std::vector<bool>{true, true, false, true}));

  const auto picked = kiln::eval(kiln::where(i > 1, i, 0.5));
  expect_element<float>(picked);
  BOOST_TEST(kt::all_equal(picked.to_vector(), std::vector<float>{0.5f, 2.0f, 3.0f, 0.5f}));

  const auto floor_half = kiln::eval(kiln::max(i, 0.5));
  expect_element<float>(floor_half);
  BOOST_TEST(kt::all_equal(floor_half.to_vector(), std::vector<float>{1.0f, 2.0f, 3.0f, 0.5f}));

  const auto either = kiln::eval(kiln::where(i > 1, 1, 0.5));  // two numbers: float, as torch.where
  expect_element<float>(either);
  BOOST_TEST(kt::all_equal(either.to_vector(), std::vector<float>{0.5f, 1.0f, 1.0f, 0.5f}));
  expect_element<std::int64_t>(kiln::eval(kiln::where(i > 1, 1, 0)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(integer_numbers_keep_integer_tensors_integer, D, kiln::test::devices) {
  // Odd length: the vector loop's tails too.
  const auto av = kt::random_integers<std::int32_t>(1023, -1000, 1000, 7);
  const auto bv = kt::random_integers<std::int32_t>(1023, -50, 50, 8);
  const Extents<Shape<dyn>> ext(1023);
  const auto a = kt::make_tensor<D>(av, ext);
  const auto b = kt::make_tensor<D>(bv, ext);
  const auto y = kiln::eval(kiln::max(a * 3 - b, -100) + 1);
  expect_element<std::int32_t>(y);
  std::vector<std::int32_t> want(av.size());
  for (std::size_t k = 0; k < av.size(); ++k) want[k] = std::max(av[k] * 3 - bv[k], -100) + 1;
  BOOST_TEST(kt::all_equal(y.to_vector(), want));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(integer_division_is_true_division, D, kiln::test::devices) {
  const auto av = kt::random_integers<std::int32_t>(1023, -1000, 1000, 7);
  const auto bv = kt::random_integers<std::int32_t>(1023, 1, 50, 8);
  const Extents<Shape<dyn>> ext(1023);
  const auto a = kt::make_tensor<D>(av, ext);
  const auto b = kt::make_tensor<D>(bv, ext);
  const auto q = kiln::eval(a / b);
  expect_element<float>(q);
  std::vector<float> want(av.size());
  for (std::size_t k = 0; k < av.size(); ++k) want[k] = static_cast<float>(av[k]) / static_cast<float>(bv[k]);
  BOOST_TEST(kt::all_equal(q.to_vector(), want));

  // By zero: infinities and NaN, as torch (an integer division would trap).
  const auto i = kt::make_tensor<D>(std::vector<std::int32_t>{3, -3, 0}, Extents<Shape<dyn>>(3));
  const float inf = std::numeric_limits<float>::infinity();
  BOOST_TEST(kt::all_equal(kiln::eval(i / 0).to_vector(), std::vector<float>{inf, -inf, std::nanf("")}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(integer_functions_follow_torch, D, kiln::test::devices) {
  const Extents<Shape<dyn>> ext(4);
  const auto i = kt::make_tensor<D>(std::vector<std::int32_t>{1, 2, 3, -7}, ext);

  const auto squares = kiln::eval(kiln::pow(i, 2));  // integer ** integer: exact, int32
  expect_element<std::int32_t>(squares);
  BOOST_TEST(kt::all_equal(squares.to_vector(), std::vector<std::int32_t>{1, 4, 9, 49}));

  const auto roots = kiln::eval(kiln::pow(i, 0.5));  // a floating exponent: float
  expect_element<float>(roots);
  // (an int32 exponent would truncate 0.5 to 0 and give ones)
  BOOST_TEST(kt::all_close(roots.to_vector(), std::vector<double>{1.0, std::sqrt(2.0), std::sqrt(3.0), NAN}));

  const auto e = kiln::eval(kiln::exp(i));
  expect_element<float>(e);
  BOOST_TEST(kt::all_close(e.to_vector(), std::vector<double>{std::exp(1.0), std::exp(2.0), std::exp(3.0),
                                                              std::exp(-7.0)}));
  const auto s = kiln::eval(kiln::sigmoid(i) + kiln::sqrt(kiln::abs(i)));
  expect_element<float>(s);
  std::vector<double> want_s;
  for (double v : {1.0, 2.0, 3.0, -7.0}) want_s.push_back(1.0 / (1.0 + std::exp(-v)) + std::sqrt(std::abs(v)));
  BOOST_TEST(kt::all_close(s.to_vector(), want_s));

  const auto mask_squared = kiln::eval(kiln::pow(i > 1, 2));  // torch: bool ** 2 is int64
  expect_element<std::int64_t>(mask_squared);
  BOOST_TEST(kt::all_equal(mask_squared.to_vector(), std::vector<std::int64_t>{0, 1, 1, 0}));
  // An integer to a negative number power: torch raises; so does kiln (on the host, before any pass).
  BOOST_CHECK_EXCEPTION(kiln::pow(i, -1), kiln::ValueError, kt::message_contains({"negative integer powers"}));

  // Negative exponents in a tensor truncate 1 / a^n (torch: [-7, 7, 1, -1] ** [-1, -2, -3, -3] = [0, 0, 1, -1]).
  const auto base = kt::make_tensor<D>(std::vector<std::int64_t>{-7, 7, 1, -1}, ext);
  const auto expo = kt::make_tensor<D>(std::vector<std::int64_t>{-1, -2, -3, -3}, ext);
  BOOST_TEST(kt::all_equal(kiln::eval(kiln::pow(base, expo)).to_vector(), std::vector<std::int64_t>{0, 0, 1, -1}));
  // 3^41 wraps in int64 as torch's does (-420491770248316829).
  const auto three = kt::make_tensor<D>(std::vector<std::int64_t>{3}, Extents<Shape<dyn>>(1));
  std::uint64_t wrapped = 1;
  for (int k = 0; k < 41; ++k) wrapped *= 3u;
  BOOST_TEST(kiln::eval(kiln::pow(three, 41)).to_vector()[0] == static_cast<std::int64_t>(wrapped));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(small_integers_and_bools_keep_torch_types, D, kiln::test::devices) {
  const Extents<Shape<dyn>> ext(2);
  const auto u = kt::make_tensor<D>(std::vector<std::uint8_t>{200, 100}, ext);
  const auto v = kt::make_tensor<D>(std::vector<std::uint8_t>{100, 1}, ext);
  const auto wrapped = kiln::eval(u + v);  // torch: uint8 [44, 101]
  expect_element<std::uint8_t>(wrapped);
  BOOST_TEST(kt::all_equal(wrapped.to_vector(), std::vector<std::uint8_t>{44, 101}));
  expect_element<std::int32_t>(kiln::eval(u + kt::make_tensor<D>(std::vector<std::int32_t>{1, 2}, ext)));

  const auto m = kiln::eval(u > 150);
  const auto counts = kiln::eval(m * 2);  // torch: bool * 2 is int64 [2, 0]
  expect_element<std::int64_t>(counts);
  BOOST_TEST(kt::all_equal(counts.to_vector(), std::vector<std::int64_t>{2, 0}));
  const auto either = kiln::eval(m + m);  // bool + bool: bool (logical or)
  expect_element<bool>(either);
  BOOST_TEST(kt::all_equal(either.to_vector(), std::vector<bool>{true, false}));
}

// Integer arithmetic wraps as torch's (done in the unsigned type: signed overflow is undefined in C++),
// and a float stored into uint8 goes through int64 as torch converts (-1.0 -> 255 on every machine).
BOOST_AUTO_TEST_CASE_TEMPLATE(integer_overflow_wraps_as_torch, D, kiln::test::devices) {
  const Extents<Shape<dyn>> ext(2);
  const auto i = kt::make_tensor<D>(std::vector<std::int32_t>{2147483647, -2147483647 - 1}, ext);
  // torch: i + 1 [-2147483648, -2147483647], -i [-2147483647, -2147483648], i.abs() [2147483647,
  // -2147483648], i * 2 [-2, 0]
  BOOST_TEST(
      kt::all_equal(kiln::eval(i + 1).to_vector(), std::vector<std::int32_t>{-2147483647 - 1, -2147483647}));
  BOOST_TEST(
      kt::all_equal(kiln::eval(-i).to_vector(), std::vector<std::int32_t>{-2147483647, -2147483647 - 1}));
  BOOST_TEST(kt::all_equal(kiln::eval(kiln::abs(i)).to_vector(),
                           std::vector<std::int32_t>{2147483647, -2147483647 - 1}));
  BOOST_TEST(kt::all_equal(kiln::eval(i * 2).to_vector(), std::vector<std::int32_t>{-2, 0}));
  BOOST_TEST(kt::all_equal(kiln::eval(i - (-1)).to_vector(),
                           std::vector<std::int32_t>{-2147483647 - 1, -2147483647}));
  // torch: tensor([-1.0, -3.7, 300.5]).to(torch.uint8) is [255, 253, 44]
  const auto f = kt::make_tensor<D>(std::vector<float>{-1.0f, -3.7f, 300.5f}, Extents<Shape<dyn>>(3));
  kiln::Tensor<std::uint8_t, Shape<dyn>, D> u(Extents<Shape<dyn>>(3));
  u = f;
  BOOST_TEST(kt::all_equal(u.to_vector(), std::vector<std::uint8_t>{255, 253, 44}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(integer_sums_are_int64, D, kiln::test::devices) {
  // Four times 2^30 overflows int32; torch's sum is int64.
  const auto big = kt::make_tensor<D>(std::vector<std::int32_t>(4, 1 << 30), Extents<Shape<4>>{});
  const auto total = kiln::sum(big);
  expect_element<std::int64_t>(total);
  BOOST_TEST(total.item() == std::int64_t{1} << 32);

  const auto cols = kiln::sum<0>(kt::make_tensor<D>(std::vector<std::int32_t>(6, 1 << 30), Extents<Shape<3, 2>>{}));
  expect_element<std::int64_t>(cols);
  BOOST_TEST(kt::all_equal(cols.to_vector(), std::vector<std::int64_t>{3ll << 30, 3ll << 30}));

  const auto bytes = kiln::sum(kt::make_tensor<D>(std::vector<std::uint8_t>(1000, 255), Extents<Shape<dyn>>(1000)));
  BOOST_TEST(bytes.item() == 255000);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(in_place_ops_that_fit_the_tensor_run, D, kiln::test::devices) {
  auto i = kt::make_tensor<D>(std::vector<std::int32_t>{1, 2, 3, -7}, Extents<Shape<dyn>>(4));
  i *= 3;
  i -= 1;
  BOOST_TEST(kt::all_equal(i.to_vector(), std::vector<std::int32_t>{2, 5, 8, -22}));
  auto x = kt::make_tensor<D>(std::vector<float>{1.0f, 2.0f}, Extents<Shape<dyn>>(2));
  x /= kt::make_tensor<D>(std::vector<std::int32_t>{2, 4}, Extents<Shape<dyn>>(2));  // float /= int is float
  BOOST_TEST(kt::all_equal(x.to_vector(), std::vector<float>{0.5f, 0.5f}));
  auto m = kiln::eval(i > 4);
  m += i < 3;  // bool += bool: or
  BOOST_TEST(kt::all_equal(m.to_vector(), std::vector<bool>{true, true, true, true}));
  m *= i > 4;  // bool *= bool: and
  BOOST_TEST(kt::all_equal(m.to_vector(), std::vector<bool>{false, true, true, false}));
}

BOOST_AUTO_TEST_SUITE_END()
