// CUDA fusion: a chain of elementwise ops is exactly one kernel launch and one pass; the vector path
// (aligned operands) and the scalar path (a view one element in) agree with a float64 host reference,
// for float, double, half and bfloat16 storage, odd sizes, broadcasting, bool results and aliasing.
#include <kiln/cuda.hpp>

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <tuple>
#include <vector>

namespace {
using kiln::Cuda;
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kc = kiln::cuda;
using Vec = Shape<dyn>;

/// n values of T uniform in [lo, hi), rounded to T, from a fixed seed.
template <class T>
std::vector<T> random_values(std::size_t n, double lo, double hi, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = kiln::from_compute<T>(u(g));
  return v;
}

template <class T, class S = Vec>
Tensor<T, S, Cuda> device_tensor(const std::vector<T>& v, const Extents<S>& e) {
  return Tensor<T, S, Cuda>::from(std::span<const T>(v.data(), v.size()), e);
}

template <class T>
double as_double(T v) {
  return static_cast<double>(kiln::to_compute(v));
}

/// relu(a x + b) c + d in float64, from the values as stored.
template <class T>
std::vector<double> reference(const std::vector<T>& a, const std::vector<T>& x, const std::vector<T>& b,
                              const std::vector<T>& c, const std::vector<T>& d) {
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double t = as_double(a[i]) * as_double(x[i]) + as_double(b[i]);
    r[i] = (t < 0 ? 0.0 : t) * as_double(c[i]) + as_double(d[i]);
  }
  return r;
}

/// Largest |got - want| / (1 + |want|); the first index where it exceeds tol is reported.
template <class T>
bool close(const std::vector<T>& got, const std::vector<double>& want, double tol) {
  if (got.size() != want.size()) {
    BOOST_TEST_MESSAGE("size " << got.size() << " vs " << want.size());
    return false;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = as_double(got[i]);
    if (!(std::abs(g - want[i]) <= tol * (1 + std::abs(want[i])))) {
      BOOST_TEST_MESSAGE("element " << i << ": got " << g << ", want " << want[i]);
      return false;
    }
  }
  return true;
}

/// Relative tolerance of one stored result of type T computed in float.
template <class T>
constexpr double tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  else if constexpr (std::is_same_v<T, float>) return 2e-6;
  else if constexpr (std::is_same_v<T, kiln::half>) return 2e-3;  // half: 2^-11 rounding of the result
  else return 1.6e-2;                                               // bfloat16: 2^-8
}

using storage_types = std::tuple<float, double, kiln::half, kiln::bfloat16>;

/// Inputs of the test chain, n elements each.
template <class T>
struct Chain {
  std::vector<T> a, x, b, c, d;
  explicit Chain(std::size_t n, unsigned seed)
      : a(random_values<T>(n, -2, 2, seed)),
        x(random_values<T>(n, -2, 2, seed + 1)),
        b(random_values<T>(n, -1, 1, seed + 2)),
        c(random_values<T>(n, -2, 2, seed + 3)),
        d(random_values<T>(n, -1, 1, seed + 4)) {}
};
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)
BOOST_AUTO_TEST_SUITE(cuda)

BOOST_AUTO_TEST_CASE_TEMPLATE(fused_chain_is_one_launch_and_one_pass, T, storage_types) {
  for (std::size_t n : {1u, 7u, 4099u, 1000003u}) {
    BOOST_TEST_CONTEXT("n = " << n << ", " << kiln::dtype_name<T>()) {
      const Chain<T> in(n, 11);
      const Extents<Vec> ext(static_cast<index_t>(n));
      const auto a = device_tensor(in.a, ext), x = device_tensor(in.x, ext), b = device_tensor(in.b, ext);
      const auto c = device_tensor(in.c, ext), d = device_tensor(in.d, ext);
      Tensor<T, Vec, Cuda> y(ext);
      const auto launches = kc::launches(), passes = kiln::passes(), vector = kc::detail::vector_launches();
      y = kiln::relu(a * x + b) * c + d;
      BOOST_TEST(kc::launches() - launches == 1u);
      BOOST_TEST(kiln::passes() - passes == 1u);
      BOOST_TEST(kc::detail::vector_launches() - vector == 1u, "fresh allocations are aligned: the vector path");
      BOOST_TEST(close(y.to_vector(), reference(in.a, in.x, in.b, in.c, in.d), tolerance<T>()));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unaligned_views_take_the_scalar_path, T, storage_types) {
  for (std::size_t n : {1u, 6u, 4099u, 1000003u}) {
    BOOST_TEST_CONTEXT("n = " << n << ", " << kiln::dtype_name<T>()) {
      const Chain<T> in(n + 2, 21);  // operands and destination are rows [1, n + 1) of n + 2
      const Extents<Vec> ext(static_cast<index_t>(n + 2));
      const auto a = device_tensor(in.a, ext), x = device_tensor(in.x, ext), b = device_tensor(in.b, ext);
      const auto c = device_tensor(in.c, ext), d = device_tensor(in.d, ext);
      const index_t lo = 1, hi = static_cast<index_t>(n) + 1;
      Tensor<T, Vec, Cuda> y_all(ext);
      y_all.fill(-7.0f);
      auto y = y_all.slice(lo, hi);
      const auto launches = kc::launches(), passes = kiln::passes(), vector = kc::detail::vector_launches();
      y = kiln::relu(a.slice(lo, hi) * x.slice(lo, hi) + b.slice(lo, hi)) * c.slice(lo, hi) + d.slice(lo, hi);
      BOOST_TEST(kc::launches() - launches == 1u);
      BOOST_TEST(kiln::passes() - passes == 1u);
      BOOST_TEST(kc::detail::vector_launches() == vector, "misaligned operands must not use vector loads");
      const auto want_all = reference(in.a, in.x, in.b, in.c, in.d);
      const std::vector<double> want(want_all.begin() + lo, want_all.begin() + hi);
      BOOST_TEST(close(y.to_vector(), want, tolerance<T>()));
      const auto all = y_all.to_vector();
      BOOST_TEST(as_double(all.front()) == -7.0, "the element before the view is untouched");
      BOOST_TEST(as_double(all.back()) == -7.0, "the element after the view is untouched");
    }
  }
}

BOOST_AUTO_TEST_CASE(one_misaligned_leaf_is_enough_for_the_scalar_path) {
  const std::size_t n = 1001;
  const auto xv = random_values<float>(n + 1, -1, 1, 31);
  const auto x = device_tensor(xv, Extents<Vec>(static_cast<index_t>(n + 1)));
  Tensor<float, Vec, Cuda> y(static_cast<index_t>(n));
  const auto aligned = x.slice(0, static_cast<index_t>(n)), shifted = x.slice(1, static_cast<index_t>(n) + 1);
  const auto vector = kc::detail::vector_launches();
  y = aligned * 2.0f + shifted;
  BOOST_TEST(kc::detail::vector_launches() == vector);
  std::vector<double> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = 2.0 * xv[i] + xv[i + 1];
  BOOST_TEST(close(y.to_vector(), want, 1e-6));
}

BOOST_AUTO_TEST_CASE(fill_copy_and_in_place_update_are_one_launch_each) {
  const index_t n = 100003;
  Tensor<float, Vec, Cuda> x(n), y(n);
  auto launches = kc::launches();
  x.fill(1.5f);
  BOOST_TEST(kc::launches() - launches == 1u);
  launches = kc::launches();
  y = x;
  BOOST_TEST(kc::launches() - launches == 1u);
  launches = kc::launches();
  y += x;  // the destination is also a leaf
  BOOST_TEST(kc::launches() - launches == 1u);
  for (float v : y.to_vector())
    if (v != 3.0f) {
      BOOST_TEST(v == 3.0f);
      break;
    }
  BOOST_TEST(x.clone().to_vector() == x.to_vector());
}

BOOST_AUTO_TEST_CASE(bias_broadcast_over_rows_matches_reference) {
  const index_t rows = 1001;
  constexpr index_t f = 17;
  const auto xv = random_values<float>(static_cast<std::size_t>(rows * f), -1, 1, 41);
  const auto bv = random_values<float>(static_cast<std::size_t>(f), -1, 1, 42);
  const auto x = device_tensor(xv, Extents<Shape<dyn, f>>(rows));
  const auto b = device_tensor(bv, Extents<Shape<f>>{});
  Tensor<float, Shape<dyn, f>, Cuda> y(rows);
  const auto launches = kc::launches();
  y = kiln::tanh(x * 0.5f + b);
  BOOST_TEST(kc::launches() - launches == 1u);
  std::vector<double> want(xv.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = std::tanh(0.5 * xv[i] + bv[i % f]);
  BOOST_TEST(close(y.to_vector(), want, 2e-6));
}

BOOST_AUTO_TEST_CASE(comparisons_write_bool_and_casts_round) {
  const std::size_t n = 4097;
  const auto xv = random_values<float>(n, -1, 1, 51);
  const auto x = device_tensor(xv, Extents<Vec>(static_cast<index_t>(n)));
  Tensor<bool, Vec, Cuda> m(static_cast<index_t>(n));
  m = x > 0.25f;
  Tensor<double, Vec, Cuda> w(static_cast<index_t>(n));
  w = kiln::where(x > 0.25f, kiln::cast<double>(x) * 2.0, kiln::cast<double>(kiln::cast<kiln::half>(x)));
  const auto mv = m.to_vector();
  const auto wv = w.to_vector();
  bool ok_m = true, ok_w = true;
  for (std::size_t i = 0; i < n; ++i) {
    ok_m = ok_m && mv[i] == (xv[i] > 0.25f);
    const double want = xv[i] > 0.25f ? 2.0 * xv[i] : static_cast<double>(kiln::to_compute(kiln::from_compute<kiln::half>(xv[i])));
    ok_w = ok_w && wv[i] == want;
  }
  BOOST_TEST(ok_m);
  BOOST_TEST(ok_w);
}

BOOST_AUTO_TEST_CASE(a_large_tensor_is_covered_by_the_grid_stride_loop) {
  // More elements than one grid sweep covers (the grid is capped at a few waves of resident blocks).
  const std::size_t n = (std::size_t{3} << 24) + 5;
  std::vector<float> xv(n);
  for (std::size_t i = 0; i < n; ++i) xv[i] = static_cast<float>(i % 1000) - 500.0f;
  const auto x = device_tensor(xv, Extents<Vec>(static_cast<index_t>(n)));
  Tensor<float, Vec, Cuda> y(static_cast<index_t>(n));
  y = kiln::relu(x) * 2.0f + 1.0f;
  const auto yv = y.to_vector();
  std::size_t bad = n;
  for (std::size_t i = 0; i < n && bad == n; ++i)
    if (yv[i] != (xv[i] < 0 ? 0.0f : xv[i]) * 2.0f + 1.0f) bad = i;
  BOOST_TEST(bad == n, "first wrong element: " << bad);
}

BOOST_AUTO_TEST_CASE(an_empty_destination_launches_nothing) {
  Tensor<float, Vec, Cuda> x(0), y(0);
  const auto launches = kc::launches(), passes = kiln::passes();
  y = x * 2.0f;
  BOOST_TEST(kc::launches() == launches);
  BOOST_TEST(kiln::passes() - passes == 1u);  // like the CPU: one (empty) pass
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
