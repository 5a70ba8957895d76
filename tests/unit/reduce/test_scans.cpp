// cumsum and cumprod (ops/scans.hpp) against running sums and products in double along every dimension of
// a [3, 4, 5] operand, bit for bit (torch 1.13's CPU cumsum accumulates in double and rounds each prefix,
// which kiln does on both devices); int64 for integers and bools, wrapping; half stays half; NaN carries
// along its line; an expression operand is read in the same pass; empty operands.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <kiln/ops/scans.hpp>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

/// Running sums (products) of v [3, 4, 5] along dim, accumulated in double, each rounded to float.
std::vector<float> running(const std::vector<float>& v, int dim, bool product) {
  const int ext[3] = {3, 4, 5};
  const int stride[3] = {20, 5, 1};
  std::vector<float> out(v.size());
  for (int i = 0; i < 60; ++i) {
    const int k = (i / stride[dim]) % ext[dim];
    if (k != 0) continue;  // a line starts here
    double acc = product ? 1.0 : 0.0;
    for (int s = 0; s < ext[dim]; ++s) {
      const int at = i + s * stride[dim];
      acc = product ? acc * v[static_cast<std::size_t>(at)] : acc + v[static_cast<std::size_t>(at)];
      out[static_cast<std::size_t>(at)] = static_cast<float>(acc);
    }
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(reduce)

BOOST_AUTO_TEST_CASE_TEMPLATE(cumsum_and_cumprod_along_every_dimension, D, kiln::test::devices) {
  const auto v = kt::random_values<float>(60, -2, 2, 97);
  const auto x = kt::make_tensor<D>(v, Extents<Shape<dyn, 4, 5>>(3));
  BOOST_TEST(same_bits(kiln::cumsum<0>(x).to_vector(), running(v, 0, false)));
  BOOST_TEST(same_bits(kiln::cumsum<1>(x).to_vector(), running(v, 1, false)));
  BOOST_TEST(same_bits(kiln::cumsum<-1>(x).to_vector(), running(v, 2, false)));
  BOOST_TEST(same_bits(kiln::cumprod<0>(x).to_vector(), running(v, 0, true)));
  BOOST_TEST(same_bits(kiln::cumprod<-2>(x).to_vector(), running(v, 1, true)));
  BOOST_TEST(same_bits(kiln::cumprod<2>(x).to_vector(), running(v, 2, true)));
  static_assert(std::is_same_v<typename decltype(kiln::cumsum<1>(x))::shape_type, Shape<dyn, 4, 5>>);
  // An expression, read in the scan's own pass: cumsum(2x) is 2 cumsum(x) exactly.
  std::vector<float> twice(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) twice[i] = 2.0f * v[i];
  BOOST_TEST(same_bits(kiln::cumsum<1>(x * 2.0f).to_vector(), running(twice, 1, false)));
  // A NaN carries along the rest of its line only.
  auto n = v;
  n[5] = std::numeric_limits<float>::quiet_NaN();  // [0, 1, 0]
  const auto c = kiln::cumsum<1>(kt::make_tensor<D>(n, Extents<Shape<dyn, 4, 5>>(3))).to_vector();
  BOOST_TEST((std::isnan(c[5]) && std::isnan(c[10]) && std::isnan(c[15]) && !std::isnan(c[0]) && !std::isnan(c[6])));
}

// torch: cumsum and cumprod of integers and bools are int64 (uint8 and int32 too), wrapping on overflow;
// half stays half (torch 1.13's CPU refuses half; its GPU keeps it); empty operands give empty results.
BOOST_AUTO_TEST_CASE_TEMPLATE(scans_of_integers_bools_half_and_nothing, D, kiln::test::devices) {
  const auto u = kt::make_tensor<D>(std::vector<std::uint8_t>{200, 100, 3, 255}, Extents<Shape<4>>{});
  const auto s = kiln::cumsum<0>(u);
  static_assert(std::is_same_v<typename decltype(s)::element_type, std::int64_t>);
  BOOST_TEST(s.to_vector() == (std::vector<std::int64_t>{200, 300, 303, 558}), boost::test_tools::per_element());
  const auto i = kt::make_tensor<D>(std::vector<std::int64_t>{std::int64_t{1} << 62, 4, -1}, Extents<Shape<3>>{});
  BOOST_TEST(kiln::cumprod<0>(i).to_vector() == (std::vector<std::int64_t>{std::int64_t{1} << 62, 0, 0}),
             boost::test_tools::per_element());  // 2^64 wraps to 0
  Tensor<bool, Shape<4>, D> m;
  m = kiln::ne(u, 100);
  BOOST_TEST(kiln::cumsum<0>(m).to_vector() == (std::vector<std::int64_t>{1, 1, 2, 3}), boost::test_tools::per_element());
  std::vector<kiln::half> hv;
  for (double d : {0.5, 1.25, 60000.0, 10000.0}) hv.push_back(kt::from_double<kiln::half>(d));
  const auto h = kiln::cumsum<0>(kt::make_tensor<D>(hv, Extents<Shape<4>>{}));
  static_assert(std::is_same_v<typename decltype(h)::element_type, kiln::half>);
  const auto hd = kt::to_doubles(h.to_vector());
  BOOST_TEST((hd[0] == 0.5 && hd[1] == 1.75 && hd[2] == 60000.0 && std::isinf(hd[3])));  // 70001.75 > 65504
  // Each prefix rounded to half once, from the double: 2049 + 2^-13 is 2050, where rounding to float first
  // gives the tie 2049, then 2048.
  std::vector<kiln::half> tie;
  for (double d : {2048.0, 1.0, std::ldexp(1.0, -13)}) tie.push_back(kt::from_double<kiln::half>(d));
  const auto t = kt::to_doubles(kiln::cumsum<0>(kt::make_tensor<D>(tie, Extents<Shape<3>>{})).to_vector());
  BOOST_TEST(t == (std::vector<double>{2048.0, 2048.0, 2050.0}), boost::test_tools::per_element());
  const auto none = kt::make_tensor<D>(std::vector<float>{}, Extents<Shape<dyn, 3>>(0));
  BOOST_TEST(kiln::cumsum<0>(none).numel() == 0);
  BOOST_TEST(kiln::cumprod<1>(none).size(1) == 3);
}

BOOST_AUTO_TEST_SUITE_END()
