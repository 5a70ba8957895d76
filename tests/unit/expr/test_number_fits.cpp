// A number stored into a tensor (a fill, an assignment, clamp's and where's numbers) must fit its element
// type, as torch 1.13 checks one ("value cannot be converted to type uint8_t without overflow"): the cases
// below were run in torch 1.13. Arithmetic with a number wraps instead, as torch's does.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/throws.hpp"

namespace {
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
constexpr double inf = std::numeric_limits<double>::infinity();
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)

BOOST_AUTO_TEST_CASE(which_numbers_fit_as_torch_decides) {
  using kiln::detail::number_fits;
  using kiln::half;
  // uint8: integers down to -255 wrap (fill_(-1) is 255, fill_(-255) 1), -256 and 256 do not fit; a
  // floating number must lie in [0, 255] (-1.0, 255.5 and NaN do not).
  BOOST_TEST(number_fits<std::uint8_t>(-1));
  BOOST_TEST(number_fits<std::uint8_t>(-255));
  BOOST_TEST(!number_fits<std::uint8_t>(-256));
  BOOST_TEST(!number_fits<std::uint8_t>(256));
  BOOST_TEST(!number_fits<std::uint8_t>(-1.0));
  BOOST_TEST(!number_fits<std::uint8_t>(255.5));
  BOOST_TEST(!number_fits<std::uint8_t>(std::nan("")));
  BOOST_TEST(!number_fits<std::uint8_t>(inf));
  // int32: 2.7 fits (stored as 2), INT32_MIN fits, 2147483647.5, 3e9, NaN and inf do not.
  BOOST_TEST(number_fits<std::int32_t>(2.7));
  BOOST_TEST(number_fits<std::int32_t>(std::int64_t{-2147483648}));
  BOOST_TEST(!number_fits<std::int32_t>(2147483647.5));
  BOOST_TEST(!number_fits<std::int32_t>(3e9));
  BOOST_TEST(!number_fits<std::int32_t>(std::int64_t{1} << 40));
  BOOST_TEST(!number_fits<std::int32_t>(inf));
  // int64: 2^63 as a double is past INT64_MAX (which rounds up to it); -2^63 is INT64_MIN.
  BOOST_TEST(!number_fits<std::int64_t>(9223372036854775808.0));
  BOOST_TEST(number_fits<std::int64_t>(-9223372036854775808.0));
  BOOST_TEST(number_fits<std::int64_t>(std::numeric_limits<std::int64_t>::max()));
  // Floating types: NaN and inf fit; a finite number past the largest does not, even where it would round
  // to it (65504.5 in half, 3.4028235e38 in float).
  BOOST_TEST(number_fits<half>(65504.0));
  BOOST_TEST(!number_fits<half>(65504.5));
  BOOST_TEST(!number_fits<half>(1e5));
  BOOST_TEST(number_fits<half>(inf));
  BOOST_TEST(number_fits<half>(std::nan("")));
  BOOST_TEST(!number_fits<float>(3.4028235e38));
  BOOST_TEST(!number_fits<float>(1e40));
  BOOST_TEST(number_fits<float>(-inf));
  BOOST_TEST(number_fits<double>(1e300));
  BOOST_TEST(number_fits<bool>(7));
  BOOST_TEST(number_fits<bool>(0.5));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_number_that_does_not_fit_is_refused_not_wrapped, D, kiln::test::devices) {
  auto u = kt::make_tensor<D>(std::vector<std::uint8_t>{0, 128, 255}, Extents<Shape<3>>{});
  auto f = kt::make_tensor<D>(std::vector<float>{1, 2, 3}, Extents<Shape<3>>{});
  auto i = kt::make_tensor<D>(std::vector<std::int32_t>{1, 2, 3}, Extents<Shape<3>>{});
  const auto m = kiln::eval(kiln::ne(f, 2.0f));  // [true, false, true]
  const std::string says = "does not fit uint8";
  // Fills and assignments (torch's fill_): nothing is written.
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { u.fill(300); }, "kiln::assign: the number 300 " + says));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { u = -1.5; }, says));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { i = 3e9; }, "does not fit int32"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { f = 1e40; }, "does not fit float32"));
  BOOST_TEST(u.to_vector() == (std::vector<std::uint8_t>{0, 128, 255}), boost::test_tools::per_element());
  // clamp's and where's numbers (clamp(u8, 0, 300) had a bound of 44: 255 came out as 44).
  Tensor<std::uint8_t, Shape<3>, D> y;
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { y = kiln::clamp(u, 0, 300); }, "kiln::clamp: the number 300 " + says));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { y = kiln::clamp_min(u, 256); }, "kiln::clamp_min"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { y = kiln::where(m, u, 300); }, "kiln::where: the number 300 " + says));
  Tensor<float, Shape<3>, D> g;
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { g = kiln::where(m, f, 1e40); }, "does not fit float32"));
  // Next to half or bfloat16, the number must fit the stored type, as torch checks it (kiln computes in float).
  std::vector<kiln::half> hv;
  for (double d : {1.0, 2.0, 3.0}) hv.push_back(kt::from_double<kiln::half>(d));
  const auto h = kt::make_tensor<D>(hv, Extents<Shape<3>>{});
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { g = kiln::where(m, h, 70000.); },
                                               "kiln::where: the number 70000 does not fit float16"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { g = kiln::where(m, 70000, h); }, "does not fit float16"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { g = kiln::clamp(h, 0.0f, 70000.0f); }, "does not fit float16"));
  const auto b = kiln::eval(kiln::cast<kiln::bfloat16>(f));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { g = kiln::clamp_max(b, 1e39); }, "does not fit bfloat16"));
  g = kiln::where(m, h, 65504.);
  BOOST_TEST(g.to_vector() == (std::vector<float>{1.0f, 65504.0f, 3.0f}), boost::test_tools::per_element());
  g = kiln::where(m, i, 3e9);  // a floating number next to int32 makes it float: 3e9 fits
  BOOST_TEST(g.to_vector()[1] == 3e9f);
  // What fits is stored as torch stores it: -1 wraps to 255, 2.7 truncates, inf stays, bool is any != 0.
  u = -1;
  BOOST_TEST(u.to_vector() == (std::vector<std::uint8_t>{255, 255, 255}), boost::test_tools::per_element());
  i = 2.7;
  BOOST_TEST(i.to_vector() == (std::vector<std::int32_t>{2, 2, 2}), boost::test_tools::per_element());
  f.fill(inf);
  BOOST_TEST(std::isinf(f.to_vector()[0]));
  y = kiln::clamp(u, -1, 5);  // -1 is 255 in uint8 (torch: [5, 5])
  BOOST_TEST(y.to_vector() == (std::vector<std::uint8_t>{5, 5, 5}), boost::test_tools::per_element());
  g = kiln::where(m, u, -1.5);  // a floating number makes it float, as torch's
  BOOST_TEST(g.to_vector() == (std::vector<float>{255.0f, -1.5f, 255.0f}), boost::test_tools::per_element());
  // Arithmetic wraps, as torch's u8 + 300 does (300 is 44 in uint8): 255 + 44 = 43.
  y = u + 300;
  BOOST_TEST(y.to_vector() == (std::vector<std::uint8_t>{43, 43, 43}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
