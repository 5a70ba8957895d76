// prod (expr/reduce.hpp), and the reductions built from the one-pass ones (ops/reductions.hpp): sum and
// mean, amax and amin over several axes against float64 loops, argmin with argmax's rules (first of ties, first NaN,
// every integer type), and var, std, logsumexp and vector_norm against their definitions in float64 and at the edges
// torch 1.13 was run on (noted).
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <kiln/nn/nn.hpp>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

/// x[a][b][c] of a [A, B, C] tensor's values.
struct Cube {
  std::vector<float> v;
  int A, B, C;
  double at(int a, int b, int c) const { return v[static_cast<std::size_t>((a * B + b) * C + c)]; }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(reduce)

BOOST_AUTO_TEST_CASE_TEMPLATE(sum_and_mean_over_several_axes, D, kiln::test::devices) {
  const Cube c{kt::random_values<float>(3 * 5 * 7, -1, 1, 91), 3, 5, 7};
  const auto x = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 5, 7>>(3));
  const auto s02 = kiln::sum<0, 2>(x);  // torch's x.sum((0, 2)): [5]
  static_assert(std::is_same_v<typename decltype(s02)::shape_type, Shape<5>>);
  const auto m12 = kiln::mean<-1, 1>(x);  // the axes in any order, negative from the end: [3]
  static_assert(std::is_same_v<typename decltype(m12)::shape_type, Shape<dyn>>);
  const auto k = kiln::sum<2, 0>(x, kiln::keepdim);  // [1, 5, 1]
  static_assert(std::is_same_v<typename decltype(k)::shape_type, Shape<1, 5, 1>>);
  std::vector<double> want_s(5, 0.0), want_m(3, 0.0);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 5; ++b)
      for (int cc = 0; cc < 7; ++cc) want_s[b] += c.at(a, b, cc), want_m[a] += c.at(a, b, cc) / 35.0;
  BOOST_TEST(kt::all_close(s02.to_vector(), want_s, 1e-6, 1e-6));
  BOOST_TEST(kt::all_close(m12.to_vector(), want_m, 1e-6, 1e-6));
  BOOST_TEST(kt::all_close(k.to_vector(), want_s, 1e-6, 1e-6));
  const auto all = kiln::sum<0, 1, 2>(x);  // every axis: rank 0
  BOOST_TEST(all.item() == kiln::sum(x).item(), boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(amax_and_amin_over_several_axes, D, kiln::test::devices) {
  const Cube c{kt::random_values<float>(3 * 5 * 7, -1, 1, 92), 3, 5, 7};
  const auto x = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 5, 7>>(3));
  const auto hi = kiln::amax<0, 2>(x);  // torch.amax(x, (0, 2)): [5]
  static_assert(std::is_same_v<typename decltype(hi)::shape_type, Shape<5>>);
  const auto lo = kiln::amin<-1, 1>(x, kiln::keepdim);  // [3, 1, 1]
  static_assert(std::is_same_v<typename decltype(lo)::shape_type, Shape<dyn, 1, 1>>);
  std::vector<double> want_hi(5, -1e9), want_lo(3, 1e9);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 5; ++b)
      for (int cc = 0; cc < 7; ++cc)
        want_hi[b] = std::max(want_hi[b], c.at(a, b, cc)), want_lo[a] = std::min(want_lo[a], c.at(a, b, cc));
  BOOST_TEST(kt::all_close(hi.to_vector(), want_hi, 0.0, 0.0));  // exact: one of x's values
  BOOST_TEST(kt::all_close(lo.to_vector(), want_lo, 0.0, 0.0));
  BOOST_TEST(kiln::amax<1>(x).to_vector() == kiln::max<1>(x).to_vector(), boost::test_tools::per_element());
  BOOST_TEST(kiln::amin(x).item() == *std::min_element(c.v.begin(), c.v.end()));
  // A NaN anywhere in what is reduced gives NaN (torch 1.13: amax([[1, nan], [3, 4]], (0, 1)) = nan);
  // elsewhere it does not reach.
  const auto n = kt::make_tensor<D>(std::vector<float>{1, nan_f, 3, 4, 5, 6, 7, 8}, Extents<Shape<2, 2, 2>>{});
  const auto per_first = kiln::amax<1, 2>(n).to_vector();  // [nan, 8]
  BOOST_TEST(std::isnan(per_first[0]));
  BOOST_TEST(per_first[1] == 8.0f);
  BOOST_TEST(std::isnan(kiln::amin<0, 1, 2>(n).item()));
  // Integers stay integers, exact.
  const auto i = kt::make_tensor<D>(std::vector<std::int64_t>{-5, 9, 3, -7}, Extents<Shape<2, 2>>{});
  BOOST_TEST((kiln::amax<0, 1>(i).item() == 9));
  BOOST_TEST((kiln::amin<1, 0>(i).item() == -7));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(prod_as_torchs, D, kiln::test::devices) {
  // Floats against a float64 loop, over everything and over an axis (kept too); a NaN stays.
  const Cube c{kt::random_values<float>(6 * 9, 0.5, 1.5, 94), 6, 9, 1};
  const auto x = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 9>>(6));
  std::vector<double> rows(6, 1.0);
  double all = 1.0;
  for (int a = 0; a < 6; ++a)
    for (int b = 0; b < 9; ++b) rows[a] *= c.at(a, b, 0), all *= c.at(a, b, 0);
  BOOST_TEST(kt::all_close(kiln::prod<1>(x).to_vector(), rows, 1e-6, 1e-7));
  const auto kept = kiln::prod<-1>(x, kiln::keepdim);
  static_assert(std::is_same_v<typename decltype(kept)::shape_type, Shape<dyn, 1>>);
  BOOST_TEST(kt::all_close(kept.to_vector(), rows, 1e-6, 1e-7));
  BOOST_TEST(kiln::prod(x).item() == all, boost::test_tools::tolerance(1e-5));
  // torch 1.13: prod([[1, 2, 3], [4, 5, nan]], 1) = [6, nan]; an empty product is 1.
  const auto n = kt::make_tensor<D>(std::vector<float>{1, 2, 3, 4, 5, nan_f}, Extents<Shape<dyn, 3>>(2));
  const auto pn = kiln::prod<1>(n).to_vector();
  BOOST_TEST((pn[0] == 6.0f && std::isnan(pn[1])));
  const Tensor<float, Shape<dyn>, D> empty(Extents<Shape<dyn>>(0));
  BOOST_TEST(kiln::prod(empty).item() == 1.0f);
  // Integers and bools in int64, wrapping as torch's: prod([2^62, 4]) = 0, prod([3, 2^62]) = -2^62;
  // uint8 is int64 too (torch: prod([200, 2], dtype uint8) is int64 400).
  const auto i = kt::make_tensor<D>(std::vector<std::int64_t>{std::int64_t{1} << 62, 4}, Extents<Shape<2>>{});
  static_assert(std::is_same_v<typename decltype(kiln::prod(i))::element_type, std::int64_t>);
  BOOST_TEST(kiln::prod(i).item() == 0);
  const auto j = kt::make_tensor<D>(std::vector<std::int64_t>{3, std::int64_t{1} << 62}, Extents<Shape<2>>{});
  BOOST_TEST(kiln::prod(j).item() == -(std::int64_t{1} << 62));
  const auto u = kt::make_tensor<D>(std::vector<std::uint8_t>{200, 2}, Extents<Shape<2>>{});
  BOOST_TEST(kiln::prod(u).item() == 400);
  const auto mask = kiln::eval(kiln::eq(i, 4));  // [false, true]: bools, whose product is int64 0
  static_assert(std::is_same_v<typename decltype(mask)::element_type, bool>);
  BOOST_TEST(kiln::prod(mask).item() == 0);
  BOOST_TEST(kiln::prod(kiln::eq(i, i)).item() == 1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(argmin_keeps_argmaxs_rules, D, kiln::test::devices) {
  // torch.argmin: the first of equal minima, the first NaN (torch 1.13: [3, 1, 1, nan, nan] -> 3).
  const auto f = kt::make_tensor<D>(std::vector<float>{3, 1, 1, nan_f, nan_f}, Extents<Shape<5>>{});
  BOOST_TEST(kiln::argmin(f).item() == 3);
  const auto g = kt::make_tensor<D>(std::vector<float>{3, 1, 1, 2, 5}, Extents<Shape<5>>{});
  BOOST_TEST(kiln::argmin(g).item() == 1);
  // Exact for every integer: INT64_MIN (which -x would wrap onto itself) and uint8 (torch: 1, 1).
  const auto i = kt::make_tensor<D>(std::vector<std::int64_t>{2, std::numeric_limits<std::int64_t>::min(), 0},
                                    Extents<Shape<3>>{});
  BOOST_TEST(kiln::argmin(i).item() == 1);
  const auto u = kt::make_tensor<D>(std::vector<std::uint8_t>{3, 0, 255}, Extents<Shape<3>>{});
  BOOST_TEST(kiln::argmin(u).item() == 1);
  // Over an axis, -0 and 0 equal (torch: [[0., -0.], [1., -1.]] -> [0, 1]); keepdim.
  const auto r = kt::make_tensor<D>(std::vector<float>{0.0f, -0.0f, 1.0f, -1.0f}, Extents<Shape<dyn, 2>>(2));
  BOOST_TEST(kiln::argmin<1>(r).to_vector() == (std::vector<std::int64_t>{0, 1}), boost::test_tools::per_element());
  const auto rk = kiln::argmin<1>(r, kiln::keepdim);
  static_assert(std::is_same_v<typename decltype(rk)::shape_type, Shape<dyn, 1>>);
  BOOST_TEST(rk.to_vector() == (std::vector<std::int64_t>{0, 1}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(var_and_std_as_torchs, D, kiln::test::devices) {
  const Cube c{kt::random_values<float>(4 * 6, -3, 3, 92), 4, 6, 1};
  const auto x = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 6>>(4));
  std::vector<double> var1(4), var0(6), std1(4);
  for (int a = 0; a < 4; ++a) {
    double m = 0, ss = 0;
    for (int b = 0; b < 6; ++b) m += c.at(a, b, 0) / 6;
    for (int b = 0; b < 6; ++b) ss += (c.at(a, b, 0) - m) * (c.at(a, b, 0) - m);
    var1[a] = ss / 5, std1[a] = std::sqrt(ss / 5);  // unbiased, torch's default
  }
  for (int b = 0; b < 6; ++b) {
    double m = 0, ss = 0;
    for (int a = 0; a < 4; ++a) m += c.at(a, b, 0) / 4;
    for (int a = 0; a < 4; ++a) ss += (c.at(a, b, 0) - m) * (c.at(a, b, 0) - m);
    var0[b] = ss / 4;  // correction 0 (unbiased=False)
  }
  BOOST_TEST(kt::all_close(kiln::var<1>(x).to_vector(), var1, 1e-5, 1e-6));
  BOOST_TEST(kt::all_close(kiln::std<-1>(x).to_vector(), std1, 1e-5, 1e-6));
  BOOST_TEST(kt::all_close(kiln::var<0>(x, 0.0).to_vector(), var0, 1e-5, 1e-6));
  const auto kept = kiln::var<1>(x, kiln::keepdim);
  static_assert(std::is_same_v<typename decltype(kept)::shape_type, Shape<dyn, 1>>);
  BOOST_TEST(kt::all_close(kept.to_vector(), var1, 1e-5, 1e-6));
  // torch 1.13: std([1, 2, 3, 4]) = 1.29099440574646; var of one value (1 degree of freedom too few) NaN.
  const auto v = kt::make_tensor<D>(std::vector<float>{1, 2, 3, 4}, Extents<Shape<4>>{});
  BOOST_TEST(kiln::std(v).item() == 1.29099440574646f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(kiln::var(v, 0.0).item() == 1.25f);
  const auto one = kt::make_tensor<D>(std::vector<float>{3}, Extents<Shape<dyn, 1>>(1));
  BOOST_TEST(std::isnan(kiln::var<1>(one).to_vector()[0]));
  // torch divides by max(0, n - correction): no element is NaN (not 0 / -1 = -0), whatever the
  // correction; a spread over too few degrees of freedom inf (torch.var([[1., 2.]], (1,), correction=2)).
  const auto none = kt::make_tensor<D>(std::vector<float>{}, Extents<Shape<dyn>>(0));
  BOOST_TEST(std::isnan(kiln::var(none).item()));
  BOOST_TEST(std::isnan(kiln::std(none, 0.0).item()));
  const auto rows_of_none = kt::make_tensor<D>(std::vector<float>{}, Extents<Shape<dyn, dyn>>(2, 0));
  const auto vn = kiln::var<1>(rows_of_none).to_vector();
  BOOST_TEST(vn.size() == 2u);
  BOOST_TEST((std::isnan(vn[0]) && std::isnan(vn[1])));
  const auto pair = kt::make_tensor<D>(std::vector<float>{1, 2}, Extents<Shape<dyn, 2>>(1));
  BOOST_TEST(std::isinf(kiln::var<1>(pair, 2.0).to_vector()[0]));
  BOOST_TEST(std::isinf(kiln::std<1>(pair, 3.0).to_vector()[0]));
}

// torch's x.var((0, 2)) and x.std((2, 0), keepdim=True): one variance over the elements of both axes
// (n = A C), not the variance of variances.
BOOST_AUTO_TEST_CASE_TEMPLATE(var_and_std_over_several_axes, D, kiln::test::devices) {
  const Cube c{kt::random_values<float>(3 * 4 * 5, -2, 2, 93), 3, 4, 5};
  const auto x = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 4, 5>>(3));
  std::vector<double> var02(4), std02(4), var12_biased(3);
  for (int b = 0; b < 4; ++b) {
    double m = 0, ss = 0;
    for (int a = 0; a < 3; ++a)
      for (int cc = 0; cc < 5; ++cc) m += c.at(a, b, cc) / 15;
    for (int a = 0; a < 3; ++a)
      for (int cc = 0; cc < 5; ++cc) ss += (c.at(a, b, cc) - m) * (c.at(a, b, cc) - m);
    var02[b] = ss / 14, std02[b] = std::sqrt(ss / 14);
  }
  for (int a = 0; a < 3; ++a) {
    double m = 0, ss = 0;
    for (int b = 0; b < 4; ++b)
      for (int cc = 0; cc < 5; ++cc) m += c.at(a, b, cc) / 20;
    for (int b = 0; b < 4; ++b)
      for (int cc = 0; cc < 5; ++cc) ss += (c.at(a, b, cc) - m) * (c.at(a, b, cc) - m);
    var12_biased[a] = ss / 20;
  }
  const auto v02 = kiln::var<0, 2>(x);
  static_assert(std::is_same_v<typename decltype(v02)::shape_type, Shape<4>>);
  BOOST_TEST(kt::all_close(v02.to_vector(), var02, 1e-5, 1e-6));
  const auto s20 = kiln::std<2, 0>(x, kiln::keepdim);
  static_assert(std::is_same_v<typename decltype(s20)::shape_type, Shape<1, 4, 1>>);
  BOOST_TEST(kt::all_close(s20.to_vector(), std02, 1e-5, 1e-6));
  BOOST_TEST(kt::all_close(kiln::var<-1, 1>(x, 0.0).to_vector(), var12_biased, 1e-5, 1e-6));
  // Over every axis: var(x) itself.
  const float every = kiln::var<0, 1, 2>(x).item();
  BOOST_TEST(every == kiln::var(x).item(), boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(logsumexp_as_torchs, D, kiln::test::devices) {
  // torch 1.13, over dim 1: [-inf, inf, nan, 1000.6931762695312] for these rows.
  const auto x = kt::make_tensor<D>(std::vector<float>{-inf, -inf, -inf, 1, inf, 2, nan_f, 1, 2, 1000, 1000, -5},
                                    Extents<Shape<dyn, 3>>(4));
  const auto l = kiln::logsumexp<1>(x);
  static_assert(std::is_same_v<typename decltype(l)::shape_type, Shape<dyn>>);
  const auto got = l.to_vector();
  BOOST_TEST((std::isinf(got[0]) && got[0] < 0));
  BOOST_TEST((std::isinf(got[1]) && got[1] > 0));
  BOOST_TEST(std::isnan(got[2]));
  BOOST_TEST(got[3] == 1000.6931762695312f, boost::test_tools::tolerance(1e-7f));
  // Against log Σ e^x in float64 on values where that does not overflow, kept as extent 1.
  const Cube c{kt::random_values<float>(5 * 8, -4, 4, 93), 5, 8, 1};
  const auto y = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 8>>(5));
  std::vector<double> want(5, 0.0);
  for (int a = 0; a < 5; ++a) {
    for (int b = 0; b < 8; ++b) want[a] += std::exp(c.at(a, b, 0));
    want[a] = std::log(want[a]);
  }
  const auto k = kiln::logsumexp<1>(y, kiln::keepdim);
  static_assert(std::is_same_v<typename decltype(k)::shape_type, Shape<dyn, 1>>);
  BOOST_TEST(kt::all_close(k.to_vector(), want, 1e-6, 1e-6));
}

// torch.logsumexp(x, (0, 2)) and (2, 1) with keepdim: one log Σ e^x over both axes' elements; a slice all
// -inf gives -inf there, a large one does not overflow.
BOOST_AUTO_TEST_CASE_TEMPLATE(logsumexp_over_several_axes, D, kiln::test::devices) {
  Cube c{kt::random_values<float>(3 * 4 * 5, -4, 4, 94), 3, 4, 5};
  for (int a = 0; a < 3; ++a)
    for (int cc = 0; cc < 5; ++cc) c.v[static_cast<std::size_t>((a * 4 + 1) * 5 + cc)] = -inf;  // b = 1
  for (int a = 0; a < 3; ++a) c.v[static_cast<std::size_t>((a * 4 + 2) * 5)] = 500.0f;         // b = 2
  const auto x = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 4, 5>>(3));
  std::vector<double> want02(4), want21(3);
  for (int b = 0; b < 4; ++b) {
    double m = -1e300, s = 0;
    for (int a = 0; a < 3; ++a)
      for (int cc = 0; cc < 5; ++cc) m = std::max(m, c.at(a, b, cc));
    for (int a = 0; a < 3; ++a)
      for (int cc = 0; cc < 5; ++cc) s += std::exp(c.at(a, b, cc) - m);
    want02[b] = std::isinf(m) ? m : std::log(s) + m;
  }
  for (int a = 0; a < 3; ++a) {
    double m = -1e300, s = 0;
    for (int b = 0; b < 4; ++b)
      for (int cc = 0; cc < 5; ++cc) m = std::max(m, c.at(a, b, cc));
    for (int b = 0; b < 4; ++b)
      for (int cc = 0; cc < 5; ++cc) s += std::exp(c.at(a, b, cc) - m);
    want21[a] = std::log(s) + m;
  }
  const auto l02 = kiln::logsumexp<0, 2>(x);
  static_assert(std::is_same_v<typename decltype(l02)::shape_type, Shape<4>>);
  const auto got = l02.to_vector();
  BOOST_TEST((std::isinf(got[1]) && got[1] < 0));
  BOOST_TEST(kt::all_close(got, want02, 1e-6, 1e-6));
  // Over no element: log 0 = -inf, as torch.logsumexp(torch.empty(2, 0), 1).
  const auto rows_of_none = kt::make_tensor<D>(std::vector<float>{}, Extents<Shape<dyn, dyn>>(2, 0));
  const auto ln = kiln::logsumexp<1>(rows_of_none).to_vector();
  BOOST_TEST(ln.size() == 2u);
  BOOST_TEST((std::isinf(ln[0]) && ln[0] < 0 && std::isinf(ln[1]) && ln[1] < 0));
  const auto k21 = kiln::logsumexp<2, 1>(x, kiln::keepdim);
  static_assert(std::is_same_v<typename decltype(k21)::shape_type, Shape<dyn, 1, 1>>);
  BOOST_TEST(kt::all_close(k21.to_vector(), want21, 1e-6, 1e-6));
}

// torch.softmax / log_softmax along the middle of three and the last: against float64, large logits,
// the layer's values, half in and half out, an empty operand.
BOOST_AUTO_TEST_CASE_TEMPLATE(softmax_and_log_softmax_functions, D, kiln::test::devices) {
  Cube c{kt::random_values<float>(2 * 4 * 3, -6, 6, 95), 2, 4, 3};
  c.v[0] = 1000.0f;  // exp would overflow without the max taken out
  const auto x = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 4, 3>>(2));
  std::vector<double> want1(c.v.size()), want_log_last(c.v.size());
  for (int a = 0; a < 2; ++a)
    for (int cc = 0; cc < 3; ++cc) {
      double m = -1e300, s = 0;
      for (int b = 0; b < 4; ++b) m = std::max(m, c.at(a, b, cc));
      for (int b = 0; b < 4; ++b) s += std::exp(c.at(a, b, cc) - m);
      for (int b = 0; b < 4; ++b) want1[static_cast<std::size_t>((a * 4 + b) * 3 + cc)] = std::exp(c.at(a, b, cc) - m) / s;
    }
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 4; ++b) {
      double m = -1e300, s = 0;
      for (int cc = 0; cc < 3; ++cc) m = std::max(m, c.at(a, b, cc));
      for (int cc = 0; cc < 3; ++cc) s += std::exp(c.at(a, b, cc) - m);
      for (int cc = 0; cc < 3; ++cc)
        want_log_last[static_cast<std::size_t>((a * 4 + b) * 3 + cc)] = c.at(a, b, cc) - m - std::log(s);
    }
  const auto p = kiln::softmax<1>(x);
  static_assert(std::is_same_v<typename decltype(p)::shape_type, Shape<dyn, 4, 3>>);
  BOOST_TEST(kt::all_close(p.to_vector(), want1, 1e-6, 1e-7));
  const auto lp = kiln::log_softmax<-1>(x * 1.0f);  // an expression operand
  BOOST_TEST(kt::all_close(lp.to_vector(), want_log_last, 1e-6, 1e-6));
  // The Softmax<1> layer's values.
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Softmax<1>>, Shape<dyn, 4, 3>, kiln::Policy<kiln::Fp32, D>> layer(0);
  BOOST_TEST(layer.forward(x).to_vector() == p.to_vector(), boost::test_tools::per_element());
  // Half in, half out (torch's dtype), within half's rounding.
  const auto h = kiln::softmax<1>(kiln::eval(kiln::cast<kiln::half>(x)));
  static_assert(std::is_same_v<typename decltype(h)::element_type, kiln::half>);
  BOOST_TEST(kt::all_close(kiln::eval(kiln::cast<float>(h)).to_vector(), want1, 4e-3, 1e-3));
  // Empty along the dimension: an empty result, as torch's.
  const auto none = kt::make_tensor<D>(std::vector<float>{}, Extents<Shape<dyn, dyn>>(2, 0));
  BOOST_TEST(kiln::softmax<1>(none).numel() == 0);
  BOOST_TEST(kiln::log_softmax<1>(none).size(0) == 2);
}

// A CPU tensor of float or double along its last axis runs a row at a time (SoftmaxRows, SoftmaxGradRows:
// ops/reductions.hpp); an expression operand, or another axis, the three passes. The same bits, rows of
// 1 to 20 logits and 1030 (the lanes, their remainder, pieces of 64), NaN and ±inf rows included; the
// Softmax and LogSoftmax layers' gradients against their two passes written out.
template <class T>
void check_softmax_rows(kiln::index_t c) {
  BOOST_TEST_CONTEXT("C = " << c << ", " << (sizeof(T) == 4 ? "float" : "double")) {
    using S = Shape<dyn, dyn>;
    const kiln::index_t n = 5;
    auto xv = kt::random_values<T>(static_cast<std::size_t>(n * c), -30, 30, static_cast<std::uint32_t>(c));
    auto dyv = kt::random_values<T>(static_cast<std::size_t>(n * c), -1, 1, static_cast<std::uint32_t>(c + 1));
    xv[static_cast<std::size_t>(c / 2)] = std::numeric_limits<T>::quiet_NaN();           // row 0
    xv[static_cast<std::size_t>(c + c - 1)] = std::numeric_limits<T>::infinity();         // row 1
    xv[static_cast<std::size_t>(2 * c)] = -std::numeric_limits<T>::infinity();            // row 2
    const auto x = kt::make_tensor<kiln::Cpu>(xv, Extents<S>(n, c));
    const auto dy = kt::make_tensor<kiln::Cpu>(dyv, Extents<S>(n, c));
    const auto same = [](const std::vector<T>& a, const std::vector<T>& b) {
      bool ok = a.size() == b.size();
      for (std::size_t i = 0; ok && i < a.size(); ++i) ok = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
      return ok;
    };
    const auto p = kiln::softmax<1>(x), lp = kiln::log_softmax<-1>(x);
    BOOST_TEST(same(p.to_vector(), kiln::softmax<1>(x * T(1)).to_vector()));
    BOOST_TEST(same(lp.to_vector(), kiln::log_softmax<1>(x * T(1)).to_vector()));
    using P = kiln::Policy<std::conditional_t<sizeof(T) == 4, kiln::Fp32, kt::Fp64>, kiln::Cpu>;
    kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Softmax<1>>, S, P> sm(0);
    kiln::nn::Model<kiln::nn::Sequential<kiln::nn::LogSoftmax<-1>>, S, P> lsm(0);
    const auto y = sm.forward(x), ly = lsm.forward(x);
    BOOST_TEST(same(y.to_vector(), p.to_vector()));
    BOOST_TEST(same(ly.to_vector(), lp.to_vector()));
    Tensor<T, S, kiln::Cpu> want(x.extents());
    want = y * (dy - kiln::sum<1>(dy * y, kiln::keepdim));
    BOOST_TEST(same(sm.backward_input(dy).to_vector(), want.to_vector()));
    want = dy - kiln::exp(ly) * kiln::sum<1>(dy, kiln::keepdim);
    BOOST_TEST(same(lsm.backward_input(dy).to_vector(), want.to_vector()));
    // And the values: row 3 against float64 (x - max rounds to a float: its error grows with |x - max|).
    double m = -1e300, sum = 0;
    for (kiln::index_t j = 0; j < c; ++j) m = std::max(m, static_cast<double>(xv[static_cast<std::size_t>(3 * c + j)]));
    for (kiln::index_t j = 0; j < c; ++j) sum += std::exp(xv[static_cast<std::size_t>(3 * c + j)] - m);
    const auto pv = p.to_vector();
    for (kiln::index_t j = 0; j < c; ++j) {
      const double want_j = std::exp(xv[static_cast<std::size_t>(3 * c + j)] - m) / sum;
      BOOST_TEST(std::abs(pv[static_cast<std::size_t>(3 * c + j)] - want_j) <= 1e-5 * want_j + 1e-38);
    }
  }
}

BOOST_AUTO_TEST_CASE(softmax_by_rows_gives_the_bits_of_its_three_passes) {
  for (kiln::index_t c = 1; c <= 20; ++c) check_softmax_rows<float>(c);
  check_softmax_rows<float>(1030);
  check_softmax_rows<double>(13);
  check_softmax_rows<double>(1030);
}

// torch.linalg.vector_norm against (Σ |x|^ord)^(1/ord) in float64 over everything, one axis and two (keepdim),
// for the orders torch computes another way (2, 1, inf, -inf, 0) and others (3, 0.5, -1); torch 1.13's
// edges: NaN with ord inf is NaN and with ord 0 counts, a zero makes a negative order 0, a negative order
// over no element raises and a non-negative one is 0; half stays half.
BOOST_AUTO_TEST_CASE_TEMPLATE(vector_norm_as_torchs, D, kiln::test::devices) {
  Cube c{kt::random_values<float>(3 * 4 * 5, -2, 2, 96), 3, 4, 5};
  c.v[7] = 0.0f;
  const auto x = kt::make_tensor<D>(c.v, Extents<Shape<dyn, 4, 5>>(3));
  const auto norm_of = [](const std::vector<double>& v, double ord) {
    double r = 0;
    if (std::isinf(ord)) {
      r = ord > 0 ? 0.0 : inf;
      for (double e : v) r = ord > 0 ? std::max(r, std::abs(e)) : std::min(r, std::abs(e));
      return r;
    }
    for (double e : v) r += ord == 0 ? (e != 0) : std::pow(std::abs(e), ord);
    return ord == 0 ? r : std::pow(r, 1 / ord);
  };
  for (double ord : {2.0, 1.0, double(inf), -double(inf), 0.0, 3.0, 0.5, -1.0}) {
    BOOST_TEST_CONTEXT("ord " << ord) {
      const auto all = kiln::vector_norm(x, ord);
      static_assert(std::is_same_v<typename decltype(all)::shape_type, Shape<>>);
      BOOST_TEST(kt::all_close(all.to_vector(), std::vector<double>{norm_of(kt::to_doubles(c.v), ord)}, 1e-6, 0.0));
      std::vector<double> want1, want02;  // over axis 1: [3, 5]; over 0 and 2 kept: [1, 4, 1]
      for (int a = 0; a < 3; ++a)
        for (int cc = 0; cc < 5; ++cc) {
          std::vector<double> v;
          for (int b = 0; b < 4; ++b) v.push_back(c.at(a, b, cc));
          want1.push_back(norm_of(v, ord));
        }
      for (int b = 0; b < 4; ++b) {
        std::vector<double> v;
        for (int a = 0; a < 3; ++a)
          for (int cc = 0; cc < 5; ++cc) v.push_back(c.at(a, b, cc));
        want02.push_back(norm_of(v, ord));
      }
      BOOST_TEST(kt::all_close(kiln::vector_norm<1>(x, ord).to_vector(), want1, 1e-6, 0.0));
      const auto k = kiln::vector_norm<0, 2>(x, kiln::keepdim, ord);
      static_assert(std::is_same_v<typename decltype(k)::shape_type, Shape<1, 4, 1>>);
      BOOST_TEST(kt::all_close(k.to_vector(), want02, 1e-6, 0.0));
    }
  }
  const auto n = kt::make_tensor<D>(std::vector<float>{nan_f, 1.0f}, Extents<Shape<2>>{});
  BOOST_TEST(std::isnan(kiln::vector_norm(n, inf).item()));
  BOOST_TEST(kiln::vector_norm(n, 0.0).item() == 2.0f);
  const auto z = kt::make_tensor<D>(std::vector<float>{0.0f, 1.0f}, Extents<Shape<2>>{});
  BOOST_TEST(kiln::vector_norm(z, -1.0).item() == 0.0f);
  const auto none = kt::make_tensor<D>(std::vector<float>{}, Extents<Shape<dyn, 3>>(0));
  BOOST_TEST(kiln::vector_norm(none).item() == 0.0f);
  BOOST_TEST(kiln::vector_norm<1>(none, inf).numel() == 0);  // the rows are empty, not the reduced axis
  BOOST_CHECK_THROW(kiln::vector_norm(none, inf), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::vector_norm<0>(none, -1.0), kiln::ValueError);
  std::vector<kiln::half> hv{kt::from_double<kiln::half>(300.0), kt::from_double<kiln::half>(300.0)};
  const auto h = kiln::vector_norm(kt::make_tensor<D>(hv, Extents<Shape<2>>{}));
  static_assert(std::is_same_v<typename decltype(h)::element_type, kiln::half>);
  BOOST_TEST(kt::to_double(h.item()) == 424.25, boost::test_tools::tolerance(1e-3));  // torch's CPU: inf
}

BOOST_AUTO_TEST_SUITE_END()
