// The rules at the edges: max/min propagate NaN, argmax returns the first NaN's index and the first of
// tied maxima (also across the blocks of a parallel reduction), empty inputs throw or give NaN.
#include <algorithm>
#include <bit>
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
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
}  // namespace

BOOST_AUTO_TEST_SUITE(reduce)

BOOST_AUTO_TEST_CASE_TEMPLATE(max_and_min_propagate_nan, D, kiln::test::devices) {
  for (std::size_t n : {1u, 7u, 1023u, 100003u}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      auto xv = kt::random_values<float>(n, -1, 1, 81);
      xv[n / 2] = nan_f;
      const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(static_cast<kiln::index_t>(n)));
      BOOST_TEST(std::isnan(kiln::max(x).item()));
      BOOST_TEST(std::isnan(kiln::min(x).item()));
      BOOST_TEST(std::isnan(kiln::sum(x).item()));
      BOOST_TEST(std::isnan(kiln::mean(x).item()));
    }
  }
  // Over an axis: only the columns holding a NaN.
  std::vector<double> xv = {1, 2,
                            3,  //
                            4, std::numeric_limits<double>::quiet_NaN(),
                            6,  //
                            7, 8,
                            9};
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<3, 3>>{});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  BOOST_TEST(kt::all_equal(kiln::max<0>(x).to_vector(), std::vector<double>{7, nan, 9}));
  BOOST_TEST(kt::all_equal(kiln::min<0>(x).to_vector(), std::vector<double>{1, nan, 3}));
  BOOST_TEST(kt::all_equal(kiln::max<1>(x).to_vector(), std::vector<double>{3, nan, 9}));
  BOOST_TEST(kt::all_equal(kiln::min<1>(x).to_vector(), std::vector<double>{1, nan, 7}));
}

BOOST_AUTO_TEST_CASE(max_and_min_in_lanes_give_one_running_max_s_value) {
  // core/lane_sums.hpp's lane_extreme (the CPU's float max and min, and cross entropy's row maxima):
  // eight running maxima, then the lanes'. Against one running max over every length from 1 to 40 and
  // 1031, the extreme at each position (every lane, the remainder), with -inf and +inf, and NaNs with
  // payloads: the first NaN comes back, bits and all.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan1 = std::bit_cast<float>(0x7fc00001u), nan2 = std::bit_cast<float>(0xffc00002u);
  const auto one_running = [](const std::vector<float>& v, bool min) {
    float m = min ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    for (float x : v) {
      if (std::isnan(m)) break;
      if (std::isnan(x) || (min ? x < m : x > m)) m = x;
    }
    return m;
  };
  const auto same_bits = [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); };
  int checked = 0;
  for (std::size_t n = 1; n <= 1031; n = n < 40 ? n + 1 : n == 40 ? 1031 : 1032) {
    for (std::size_t at = 0; at < n; at += n < 40 ? 1 : 97) {
      for (int what = 0; what < 4; ++what) {  // an extreme, an infinity, a NaN, two NaNs
        auto v = kt::random_values<float>(n, -1, 1, static_cast<std::uint32_t>(n * 7 + at));
        if (what == 0) v[at] = 5.0f, v[n - 1 - at] = -5.0f;
        if (what == 1) v[at] = inf, v[n - 1 - at] = -inf;
        if (what >= 2) v[at] = nan1;
        if (what == 3) v[n - 1 - at] = nan2;
        for (bool min : {false, true}) {
          const float want = one_running(v, min);
          const float got = min ? kiln::detail::lane_extreme<true, float>(v.data(), 0, static_cast<kiln::index_t>(n))
                                : kiln::detail::lane_extreme<false, float>(v.data(), 0, static_cast<kiln::index_t>(n));
          BOOST_TEST(same_bits(got, want), (min ? "min" : "max") << " of " << n << ", " << what << " at " << at
                                                                 << ": " << got << ", one running max " << want);
          ++checked;
        }
      }
    }
  }
  BOOST_TEST(checked > 3000);
  // An empty range: the identity (-inf for a max), as a running max starts.
  const float empty = kiln::detail::lane_extreme<false, float>(static_cast<const float*>(nullptr), 0, 0);
  BOOST_TEST(empty == -inf);
  // Through the reduction, over rows of 13 (a lane's worth and a remainder), in double.
  const std::vector<double> rows = kt::random_values<double>(13 * 5, -3, 3, 83);
  const auto r = kt::make_tensor<kiln::Cpu>(rows, Extents<Shape<dyn, 13>>(5));
  const auto mx = kiln::max<1>(r).to_vector();
  for (std::size_t i = 0; i < 5; ++i)
    BOOST_TEST(mx[i] == *std::max_element(rows.begin() + 13 * i, rows.begin() + 13 * (i + 1)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nan_first_then_numbers_still_gives_nan, D, kiln::test::devices) {
  // A NaN at the start must not be replaced by a later larger (or smaller) number.
  const auto x = kt::make_tensor<D>(std::vector<float>{nan_f, 5.0f, -5.0f}, Extents<Shape<3>>{});
  BOOST_TEST(std::isnan(kiln::max(x).item()));
  BOOST_TEST(std::isnan(kiln::min(x).item()));
  BOOST_TEST(kiln::argmax(x).item() == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(argmax_returns_the_first_nan, D, kiln::test::devices) {
  const std::size_t n = 100003;  // several blocks of the parallel full reduction
  auto xv = kt::random_values<float>(n, -1, 1, 82);
  xv[99000] = 100.0f;
  xv[20001] = nan_f;  // the first NaN, in an early block
  xv[90000] = nan_f;
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(static_cast<kiln::index_t>(n)));
  BOOST_TEST(kiln::argmax(x).item() == 20001);

  const std::vector<float> rows = {1,     nan_f, 3, nan_f,  //
                                   nan_f, 9,     9, 1,      //
                                   2,     2,     2, 2};
  const auto r = kt::make_tensor<D>(rows, Extents<Shape<dyn, 4>>(3));
  BOOST_TEST(kt::all_equal(kiln::argmax<1>(r).to_vector(), std::vector<std::int64_t>{1, 0, 0}));
  BOOST_TEST(kt::all_equal(kiln::argmax<0>(r).to_vector(), std::vector<std::int64_t>{1, 0, 1, 0}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(ties_return_the_first_index, D, kiln::test::devices) {
  const std::size_t n = 100003;
  std::vector<float> xv(n, 0.0f);
  xv[9000] = 3.0f;  // the same maximum in three blocks
  xv[50000] = 3.0f;
  xv[100002] = 3.0f;
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(static_cast<kiln::index_t>(n)));
  BOOST_TEST(kiln::argmax(x).item() == 9000);
  BOOST_TEST(kiln::max(x).item() == 3.0f);

  const auto zeros =
      kt::make_tensor<D>(std::vector<float>(n, -1.0f), Extents<Shape<dyn>>(static_cast<kiln::index_t>(n)));
  BOOST_TEST(kiln::argmax(zeros).item() == 0);  // all equal: the first

  // Per axis: small integers, many ties, against the first-index reference.
  const auto iv = kt::random_integers<float>(5 * 7 * 9, 0, 2, 83);
  const auto t = kt::make_tensor<D>(iv, Extents<Shape<5, 7, 9>>{});
  const auto id = kt::to_doubles(iv);
  BOOST_TEST(kt::all_equal(kiln::argmax<0>(t).to_vector(), kt::reference_argmax(id, {1, 5, 63})));
  BOOST_TEST(kt::all_equal(kiln::argmax<1>(t).to_vector(), kt::reference_argmax(id, {5, 7, 9})));
  BOOST_TEST(kt::all_equal(kiln::argmax<2>(t).to_vector(), kt::reference_argmax(id, {35, 9, 1})));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(max_of_an_empty_input_is_a_value_error, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> empty(0);
  BOOST_CHECK_EXCEPTION(kiln::max(empty), kiln::ValueError, kt::message_contains({"empty"}));
  BOOST_CHECK_THROW(kiln::min(empty), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::argmax(empty), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::max(empty * 2.0f), kiln::ValueError);

  Tensor<float, Shape<dyn, dyn>, D> no_columns(3, 0);
  BOOST_CHECK_EXCEPTION(kiln::max<1>(no_columns), kiln::ValueError,
                        kt::message_contains({"empty", "[3, 0]"}));
  BOOST_CHECK_THROW(kiln::argmax<-1>(no_columns), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::min<1>(no_columns), kiln::ValueError);
  BOOST_TEST(kiln::max<0>(no_columns).numel() == 0);  // nothing to reduce into: an empty result
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mean_of_an_empty_axis_is_nan_and_sum_is_zero, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, dyn>, D> no_columns(3, 0);
  const auto m = kiln::mean<1>(no_columns);
  BOOST_TEST(m.numel() == 3);
  for (float v : m.to_vector()) BOOST_TEST(std::isnan(v));
  BOOST_TEST(kt::all_equal(kiln::sum<1>(no_columns).to_vector(), std::vector<float>(3, 0.0f)));

  Tensor<double, Shape<dyn>, D> empty(0);
  BOOST_TEST(std::isnan(kiln::mean(empty).item()));
  BOOST_TEST(kiln::sum(empty).item() == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
