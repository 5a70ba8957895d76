// CUDA reductions against a float64 host reference with the CPU's rules: sum/mean/max/min/argmax over
// everything (CUB), the last axis (CUB segmented), the first and a middle axis (the axis kernel); odd
// sizes; ties give the first index, NaN propagates and argmax finds the first NaN; empty axes.
#include <kiln/cuda.hpp>

#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {
using kiln::Cuda;
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::ReduceKind;
using kiln::Shape;
using kiln::Tensor;
namespace kc = kiln::cuda;
using Vec = Shape<dyn>;
using Cube = Shape<dyn, dyn, dyn>;
constexpr double nan_d = std::numeric_limits<double>::quiet_NaN();

template <class T>
std::vector<T> random_values(std::size_t n, double lo, double hi, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = kiln::from_compute<T>(u(g));
  return v;
}

/// Values k / 4 for k in [-8, 8]: many ties, so argmax's "first index" rule is exercised everywhere.
std::vector<float> quantized_values(std::size_t n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int> u(-8, 8);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(u(g)) / 4.0f;
  return v;
}

template <class T, class S>
Tensor<T, S, Cuda> device_tensor(const std::vector<T>& v, const Extents<S>& e) {
  return Tensor<T, S, Cuda>::from(std::span<const T>(v.data(), v.size()), e);
}

/// What backend::cpu::Reducer computes over v[0..len) (in float64 for sums): the reference.
struct Ref {
  double sum = 0, mean = 0, max = 0, min = 0;
  std::int64_t argmax = 0;
};
Ref reference(const std::vector<double>& v) {
  Ref r;
  bool started = false;
  double mx = 0, mn = 0;
  for (std::size_t k = 0; k < v.size(); ++k) {
    const double x = v[k];
    r.sum += x;
    const bool x_nan = x != x;
    if (!started || (mx == mx && (x_nan || x > mx))) mx = x, r.argmax = static_cast<std::int64_t>(k);
    if (!started || (mn == mn && (x_nan || x < mn))) mn = x;
    started = true;
  }
  r.max = mx;
  r.min = mn;
  r.mean = r.sum / static_cast<double>(v.size());
  return r;
}

bool same_value(double got, double want) { return (got != got && want != want) || got == want; }
/// |got - want| <= tol (1 + |want|), NaN equal to NaN.
bool near(double got, double want, double tol) {
  return (got != got && want != want) || std::abs(got - want) <= tol * (1 + std::abs(want));
}

/// The [outer, len, inner] view of axis `axis` of extents (a, b, c), and slice k of output (o, j).
struct AxisView {
  index_t outer, len, inner;
};
AxisView axis_view(std::array<index_t, 3> e, int axis) {
  AxisView v{1, e[static_cast<std::size_t>(axis)], 1};
  for (int d = 0; d < axis; ++d) v.outer *= e[static_cast<std::size_t>(d)];
  for (int d = axis + 1; d < 3; ++d) v.inner *= e[static_cast<std::size_t>(d)];
  return v;
}

/// Checks every kind of reduction over axis Axis of x (values xv, extents e) against the reference.
template <int Axis>
void check_axis(const Tensor<float, Cube, Cuda>& x, const std::vector<float>& xv, std::array<index_t, 3> e) {
  const AxisView a = axis_view(e, Axis < 0 ? Axis + 3 : Axis);
  const auto s = kiln::sum<Axis>(x).to_vector();
  const auto m = kiln::mean<Axis>(x).to_vector();
  const auto mx = kiln::max<Axis>(x).to_vector();
  const auto mn = kiln::min<Axis>(x).to_vector();
  const auto am = kiln::argmax<Axis>(x).to_vector();
  BOOST_TEST_REQUIRE(s.size() == static_cast<std::size_t>(a.outer * a.inner));
  std::size_t bad = 0;
  std::string first;
  for (index_t o = 0; o < a.outer; ++o)
    for (index_t j = 0; j < a.inner; ++j) {
      std::vector<double> v(static_cast<std::size_t>(a.len));
      for (index_t k = 0; k < a.len; ++k) v[static_cast<std::size_t>(k)] = xv[static_cast<std::size_t>((o * a.len + k) * a.inner + j)];
      const Ref r = reference(v);
      const auto i = static_cast<std::size_t>(o * a.inner + j);
      const bool ok = near(s[i], r.sum, 1e-6) && near(m[i], r.mean, 1e-6) && same_value(mx[i], r.max) &&
                      same_value(mn[i], r.min) && am[i] == r.argmax;
      if (!ok && bad++ == 0)
        first = "output " + std::to_string(i) + ": sum " + std::to_string(s[i]) + " vs " + std::to_string(r.sum) +
                ", mean " + std::to_string(m[i]) + " vs " + std::to_string(r.mean) + ", max " + std::to_string(mx[i]) +
                " vs " + std::to_string(r.max) + ", min " + std::to_string(mn[i]) + " vs " + std::to_string(r.min) +
                ", argmax " + std::to_string(am[i]) + " vs " + std::to_string(r.argmax);
    }
  BOOST_TEST(bad == 0u, bad << " wrong outputs over axis " << Axis << "; first: " << first);
}

void check_all_axes(std::array<index_t, 3> e, unsigned seed, bool quantized, bool with_nans) {
  const auto n = static_cast<std::size_t>(e[0] * e[1] * e[2]);
  auto xv = quantized ? quantized_values(n, seed) : random_values<float>(n, -1, 1, seed);
  if (with_nans)
    for (std::size_t i = 3; i < n; i += 97) xv[i] = std::numeric_limits<float>::quiet_NaN();
  const Extents<Cube> ext(e[0], e[1], e[2]);

  const auto x = device_tensor(xv, ext);
  check_axis<0>(x, xv, e);
  check_axis<1>(x, xv, e);
  check_axis<2>(x, xv, e);
  check_axis<-1>(x, xv, e);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(reduce)
BOOST_AUTO_TEST_SUITE(cuda)

BOOST_AUTO_TEST_CASE(full_reductions_match_a_float64_reference) {
  for (std::size_t n : {1u, 7u, 1000u, 1000003u, (1u << 24) + 3u}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      const auto xv = random_values<float>(n, -1, 1, 7);
      const auto x = device_tensor(xv, Extents<Vec>(static_cast<index_t>(n)));
      const Ref r = reference(std::vector<double>(xv.begin(), xv.end()));
      BOOST_TEST(near(kiln::sum(x).item(), r.sum, 1e-6));
      BOOST_TEST(near(kiln::mean(x).item(), r.mean, 1e-6));
      BOOST_TEST(kiln::max(x).item() == r.max);
      BOOST_TEST(kiln::min(x).item() == r.min);
      BOOST_TEST(kiln::argmax(x).item() == r.argmax);
      // The same through the axis entry point of a rank-1 tensor (one output, len = n).
      BOOST_TEST(kiln::argmax<0>(x).item() == r.argmax);
      BOOST_TEST(kiln::max<0>(x).item() == r.max);
    }
  }
}

BOOST_AUTO_TEST_CASE(argmax_returns_the_first_of_tied_maxima) {
  const std::size_t n = 1000003;
  auto xv = random_values<float>(n, -1, 1, 8);
  for (std::size_t i : {999999u, 500000u, 777u, 123456u}) xv[i] = 5.0f;  // first: 777
  xv[n - 1] = 5.0f;
  const auto x = device_tensor(xv, Extents<Vec>(static_cast<index_t>(n)));
  BOOST_TEST(kiln::argmax(x).item() == 777);
  BOOST_TEST(kiln::max(x).item() == 5.0f);
  std::vector<float> same(n, 2.5f);
  BOOST_TEST(kiln::argmax(device_tensor(same, Extents<Vec>(static_cast<index_t>(n)))).item() == 0);
  // -0.0 and 0.0 are equal: the first one is the maximum.
  std::vector<float> zeros = {-1.0f, -0.0f, 0.0f, -2.0f};
  BOOST_TEST(kiln::argmax(device_tensor(zeros, Extents<Vec>(4))).item() == 1);
}

BOOST_AUTO_TEST_CASE(nan_propagates_and_argmax_finds_the_first_nan) {
  for (std::size_t n : {5u, 1000003u}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      auto xv = random_values<float>(n, -1, 1, 9);
      const std::size_t first = n / 3, second = n / 2;
      xv[second] = std::numeric_limits<float>::quiet_NaN();
      xv[first] = std::numeric_limits<float>::quiet_NaN();
      xv[n - 1] = 100.0f;  // a larger value after the NaNs does not win
      const auto x = device_tensor(xv, Extents<Vec>(static_cast<index_t>(n)));
      BOOST_TEST(std::isnan(kiln::max(x).item()));
      BOOST_TEST(std::isnan(kiln::min(x).item()));
      BOOST_TEST(std::isnan(kiln::sum(x).item()));
      BOOST_TEST(std::isnan(kiln::mean(x).item()));
      BOOST_TEST(kiln::argmax(x).item() == static_cast<std::int64_t>(first));
    }
  }
}

BOOST_AUTO_TEST_CASE(per_axis_reductions_match_the_reference_on_odd_shapes) {
  // Each axis of each shape: first (axis kernel, outer 1), middle (axis kernel), last (CUB segmented).
  const std::array<std::array<index_t, 3>, 5> shapes = {{{5, 7, 9}, {1, 1, 1}, {3, 2049, 2}, {37, 129, 65}, {1, 300, 1}}};
  unsigned seed = 100;
  for (const auto& e : shapes)
    BOOST_TEST_CONTEXT("extents [" << e[0] << ", " << e[1] << ", " << e[2] << "]") {
      check_all_axes(e, seed++, false, false);
    }
}

BOOST_AUTO_TEST_CASE(per_axis_ties_and_nans_follow_the_cpu_rules) {
  const std::array<std::array<index_t, 3>, 3> shapes = {{{5, 7, 9}, {3, 2049, 2}, {37, 129, 65}}};
  unsigned seed = 200;
  for (const auto& e : shapes)
    BOOST_TEST_CONTEXT("extents [" << e[0] << ", " << e[1] << ", " << e[2] << "]") {
      check_all_axes(e, seed++, true, false);  // many ties
      check_all_axes(e, seed++, true, true);   // ties and NaNs
    }
}

BOOST_AUTO_TEST_CASE(matrix_rows_and_columns) {
  // [N, F] logits: argmax<1> is the predicted class per row (CUB segmented), sum<0> a column sum.
  const index_t rows = 1025, cols = 10;
  const auto xv = quantized_values(static_cast<std::size_t>(rows * cols), 300);
  const auto x = device_tensor(xv, Extents<Shape<dyn, 10>>(rows));
  const auto am = kiln::argmax<1>(x).to_vector();
  const auto cs = kiln::sum<0>(x).to_vector();
  std::size_t bad = 0;
  for (index_t r = 0; r < rows; ++r) {
    std::vector<double> row(xv.begin() + r * cols, xv.begin() + (r + 1) * cols);
    bad += am[static_cast<std::size_t>(r)] != reference(row).argmax;
  }
  for (index_t c = 0; c < cols; ++c) {
    double s = 0;
    for (index_t r = 0; r < rows; ++r) s += xv[static_cast<std::size_t>(r * cols + c)];
    bad += !near(cs[static_cast<std::size_t>(c)], s, 1e-6);
  }
  BOOST_TEST(bad == 0u);
}

BOOST_AUTO_TEST_CASE(empty_inputs_give_zero_sums_and_nan_means) {
  Tensor<float, Shape<dyn, 3>, Cuda> e(0);
  const auto s = kiln::sum<0>(e).to_vector();
  const auto m = kiln::mean<0>(e).to_vector();
  BOOST_TEST_REQUIRE(s.size() == 3u);
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(s[static_cast<std::size_t>(i)] == 0.0f);
    BOOST_TEST(std::isnan(m[static_cast<std::size_t>(i)]));
  }
  Tensor<float, Vec, Cuda> v(0);
  BOOST_TEST(kiln::sum(v).item() == 0.0f);
  BOOST_TEST(std::isnan(kiln::mean(v).item()));
  BOOST_CHECK_THROW(kiln::max(v), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::argmax<0>(e), kiln::ValueError);
}

BOOST_AUTO_TEST_CASE(reducing_an_expression_is_one_pass) {
  const std::size_t n = 100003;
  const auto xv = random_values<float>(n, -1, 1, 400);
  const auto x = device_tensor(xv, Extents<Vec>(static_cast<index_t>(n)));
  const auto passes = kiln::passes();
  const auto s = kiln::sum(x * x - 0.25f);
  BOOST_TEST(kiln::passes() - passes == 1u);
  double want = 0;
  for (float v : xv) want += static_cast<double>(v * v - 0.25f);
  BOOST_TEST(near(s.item(), want, 1e-6));
}

BOOST_AUTO_TEST_CASE(half_bfloat16_double_and_int_inputs) {
  const std::size_t n = 10007;
  const auto hv = random_values<kiln::half>(n, -4, 4, 500);
  const auto bv = random_values<kiln::bfloat16>(n, -4, 4, 501);
  const auto dv = random_values<double>(n, -4, 4, 502);
  std::vector<double> hd(n), bd(n);
  for (std::size_t i = 0; i < n; ++i) hd[i] = kiln::to_compute(hv[i]), bd[i] = kiln::to_compute(bv[i]);
  const Extents<Vec> ext(static_cast<index_t>(n));
  const auto h = device_tensor(hv, ext);
  const auto b = device_tensor(bv, ext);
  const auto d = device_tensor(dv, ext);
  const Ref rh = reference(hd), rb = reference(bd), rd = reference(dv);
  BOOST_TEST(near(kiln::sum(h).item(), rh.sum, 1e-6));  // float results, accumulated in double
  BOOST_TEST(kiln::max(h).item() == rh.max);
  BOOST_TEST(kiln::argmax(h).item() == rh.argmax);
  BOOST_TEST(near(kiln::mean(b).item(), rb.mean, 1e-6));
  BOOST_TEST(kiln::argmax(b).item() == rb.argmax);  // bfloat16: many ties
  BOOST_TEST(kiln::min(b).item() == rb.min);
  BOOST_TEST(near(kiln::sum(d).item(), rd.sum, 1e-12));
  BOOST_TEST(kiln::argmax(d).item() == rd.argmax);

  std::vector<std::int32_t> iv(n);
  for (std::size_t i = 0; i < n; ++i) iv[i] = static_cast<std::int32_t>((i * 7919) % 1009) - 500;
  const auto it = device_tensor(iv, ext);
  std::int64_t isum = 0;
  for (auto v : iv) isum += v;
  BOOST_TEST(static_cast<std::int64_t>(kiln::sum(it).item()) == isum);
  BOOST_TEST(kiln::max(it).item() == 508);
  std::int64_t first_max = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (iv[i] > iv[static_cast<std::size_t>(first_max)]) first_max = static_cast<std::int64_t>(i);
  BOOST_TEST(kiln::argmax(it).item() == first_max);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
