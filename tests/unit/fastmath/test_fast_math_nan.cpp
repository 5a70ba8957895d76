// torch's NaN rules hold when the user compiles kiln with -ffast-math (tests/CMakeLists.txt builds this
// module with it): kiln tests NaN through its bits (kiln/core/nan.hpp), not `x != x` or std::isnan,
// which -ffinite-math-only folds to false. The checks here read bits too, for the same reason.
#include <boost/test/unit_test.hpp>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

#if !defined(__FAST_MATH__) && !defined(__CUDACC__)
#error "test_fast_math_nan.cpp is meant to be compiled with -ffast-math (tests/CMakeLists.txt)"
#endif

const float nan_f = std::numeric_limits<float>::quiet_NaN();
const double nan_d = std::numeric_limits<double>::quiet_NaN();

bool bits_nan(float x) { return (std::bit_cast<std::uint32_t>(x) & 0x7fffffffu) > 0x7f800000u; }
bool bits_nan(double x) { return (std::bit_cast<std::uint64_t>(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
/// Equal element by element, a NaN matching a NaN (bit tests: no comparison -ffast-math may drop).
template <class T>
bool same(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (bits_nan(got[i]) != bits_nan(want[i])) return false;
    if (!bits_nan(want[i]) && std::bit_cast<std::uint64_t>(static_cast<double>(got[i])) !=
                                  std::bit_cast<std::uint64_t>(static_cast<double>(want[i])))
      return false;
  }
  return true;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(fast_math)

BOOST_AUTO_TEST_CASE_TEMPLATE(full_reductions_keep_nan, D, kt::devices) {
  const auto x = kt::make_tensor<D>(std::vector<float>{1, nan_f, 3, 2}, Extents<Shape<4>>{});
  BOOST_TEST(bits_nan(kiln::max(x).item()));  // torch.max: nan (fast-math gave 3)
  BOOST_TEST(bits_nan(kiln::min(x).item()));  // (gave 1)
  BOOST_TEST(kiln::argmax(x).item() == 1);    // the NaN's index (gave 2)
  // A NaN first, then larger and smaller numbers: it sticks.
  const auto y = kt::make_tensor<D>(std::vector<double>{nan_d, 5, -5}, Extents<Shape<3>>{});
  BOOST_TEST(bits_nan(kiln::max(y).item()));
  BOOST_TEST(bits_nan(kiln::min(y).item()));
  BOOST_TEST(kiln::argmax(y).item() == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(axis_reductions_keep_nan, D, kt::devices) {
  const auto x = kt::make_tensor<D>(std::vector<float>{1, nan_f, 2, 5, 5, 1}, Extents<Shape<2, 3>>{});
  BOOST_TEST(same(kiln::max<1>(x).to_vector(), std::vector<float>{nan_f, 5}));  // (gave {2, 5})
  BOOST_TEST(same(kiln::min<1>(x).to_vector(), std::vector<float>{nan_f, 1}));
  BOOST_TEST(same(kiln::max<0>(x).to_vector(), std::vector<float>{5, nan_f, 2}));
  BOOST_TEST(same(kiln::min<0>(x).to_vector(), std::vector<float>{1, nan_f, 1}));
  BOOST_TEST((kiln::argmax<1>(x).to_vector() == std::vector<std::int64_t>{1, 0}));  // ties: the first
  BOOST_TEST((kiln::argmax<0>(x).to_vector() == std::vector<std::int64_t>{1, 0, 0}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(elementwise_keep_nan, D, kt::devices) {
  const auto a = kt::make_tensor<D>(std::vector<float>{1, nan_f, 3, -2}, Extents<Shape<4>>{});
  const auto b = kt::make_tensor<D>(std::vector<float>{nan_f, 1, nan_f, -3}, Extents<Shape<4>>{});
  Tensor<float, Shape<4>, D> y;
  y = kiln::relu(a);  // (relu(NaN) gave 0)
  BOOST_TEST(same(y.to_vector(), std::vector<float>{1, nan_f, 3, 0}));
  y = kiln::max(a, 0.f);  // (gave 0 at the NaN)
  BOOST_TEST(same(y.to_vector(), std::vector<float>{1, nan_f, 3, 0}));
  y = kiln::min(a, 0.f);
  BOOST_TEST(same(y.to_vector(), std::vector<float>{0, nan_f, 0, -2}));
  y = kiln::max(0.f, a);
  BOOST_TEST(same(y.to_vector(), std::vector<float>{1, nan_f, 3, 0}));
  y = kiln::max(a, b);  // torch.maximum: a NaN on either side wins
  BOOST_TEST(same(y.to_vector(), std::vector<float>{nan_f, nan_f, nan_f, -2}));
  y = kiln::min(a, b);
  BOOST_TEST(same(y.to_vector(), std::vector<float>{nan_f, nan_f, nan_f, -3}));
  // Long enough for the vectorised loop body, a NaN in every lane position.
  std::vector<double> v(67);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 0 ? nan_d : (i % 3 == 1 ? -1.0 : 2.0);
  const auto z = kt::make_tensor<D>(v, Extents<Shape<67>>{});
  Tensor<double, Shape<67>, D> r;
  r = kiln::relu(z);
  std::vector<double> want = v;
  for (auto& w : want) w = bits_nan(w) ? w : (w < 0 ? 0.0 : w);
  BOOST_TEST(same(r.to_vector(), want));
  r = kiln::max(z, 0.0);
  BOOST_TEST(same(r.to_vector(), want));
}

BOOST_AUTO_TEST_SUITE_END()
