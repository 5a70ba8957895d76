// cuBLAS GEMM: row-major results equal a float64 host reference for all four transpose combinations
// on odd M, N, K; float is full fp32 (no TF32); half and bfloat16 accumulate in fp32; alpha and beta.
#include <kiln/cuda.hpp>

#include <boost/test/unit_test.hpp>

#include <cmath>
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
using Mat = Shape<dyn, dyn>;

template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = kiln::from_compute<T>(u(g));
  return v;
}

template <class T>
double as_double(T v) {
  return static_cast<double>(kiln::to_compute(v));
}

template <class T>
Tensor<T, Mat, Cuda> device_matrix(const std::vector<T>& v, index_t rows, index_t cols) {
  return Tensor<T, Mat, Cuda>::from(std::span<const T>(v.data(), v.size()), Extents<Mat>(rows, cols));
}

/// C[M, N] = op(A) op(B) in float64, row-major; A stored [K, M] when ta, B stored [N, K] when tb.
template <class T>
std::vector<double> reference(bool ta, bool tb, index_t m, index_t n, index_t k, const std::vector<T>& a,
                              const std::vector<T>& b) {
  std::vector<double> c(static_cast<std::size_t>(m * n));
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double s = 0;
      for (index_t p = 0; p < k; ++p) {
        const double x = as_double(a[static_cast<std::size_t>(ta ? p * m + i : i * k + p)]);
        const double y = as_double(b[static_cast<std::size_t>(tb ? j * k + p : p * n + j)]);
        s += x * y;
      }
      c[static_cast<std::size_t>(i * n + j)] = s;
    }
  return c;
}

/// max |got - want| / (1 + |want|)
template <class T>
double max_error(const std::vector<T>& got, const std::vector<double>& want) {
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    e = std::max(e, std::abs(as_double(got[i]) - want[i]) / (1 + std::abs(want[i])));
  return got.size() == want.size() ? e : 1e30;
}

/// op(A) op(B) through kiln::matmul with A and B stored as the flags say.
template <class T>
Tensor<T, Mat, Cuda> product(bool ta, bool tb, const Tensor<T, Mat, Cuda>& a, const Tensor<T, Mat, Cuda>& b) {
  if (ta && tb) return kiln::matmul(kiln::transposed(a), kiln::transposed(b));
  if (ta) return kiln::matmul(kiln::transposed(a), b);
  if (tb) return kiln::matmul(a, kiln::transposed(b));
  return kiln::matmul(a, b);
}

template <class T>
constexpr double tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  else if constexpr (std::is_same_v<T, float>) return 1e-5;      // TF32 would be ~1e-3
  else if constexpr (std::is_same_v<T, kiln::half>) return 2e-3;  // the result rounds to half
  else return 1.6e-2;                                              // bfloat16
}

using gemm_types = std::tuple<float, double, kiln::half, kiln::bfloat16>;
}  // namespace

BOOST_AUTO_TEST_SUITE(matmul)
BOOST_AUTO_TEST_SUITE(cuda)

BOOST_AUTO_TEST_CASE_TEMPLATE(all_transpose_combinations_match_a_float64_reference, T, gemm_types) {
  const index_t m = 37, n = 29, k = 53;
  unsigned seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      BOOST_TEST_CONTEXT(kiln::dtype_name<T>() << " ta = " << ta << ", tb = " << tb) {
        const auto av = random_values<T>(static_cast<std::size_t>(m * k), seed++);
        const auto bv = random_values<T>(static_cast<std::size_t>(k * n), seed++);
        const auto a = ta ? device_matrix(av, k, m) : device_matrix(av, m, k);
        const auto b = tb ? device_matrix(bv, n, k) : device_matrix(bv, k, n);
        const auto passes = kiln::passes();
        const auto c = product(ta, tb, a, b);
        BOOST_TEST(kiln::passes() - passes == 1u);
        BOOST_TEST(c.size(0) == m);
        BOOST_TEST(c.size(1) == n);
        const double err = max_error(c.to_vector(), reference(ta, tb, m, n, k, av, bv));
        BOOST_TEST(err <= tolerance<T>(), "max relative error " << err);
      }
}

BOOST_AUTO_TEST_CASE(float_gemm_is_full_fp32_not_tf32) {
  // A long inner dimension: TF32 (10-bit mantissa inputs) errs ~1e-3 here, fp32 ~1e-6.
  const index_t m = 65, n = 63, k = 1023;
  const auto av = random_values<float>(static_cast<std::size_t>(m * k), 77);
  const auto bv = random_values<float>(static_cast<std::size_t>(k * n), 78);
  const auto c = kiln::matmul(device_matrix(av, m, k), device_matrix(bv, k, n));
  const double err = max_error(c.to_vector(), reference(false, false, m, n, k, av, bv));
  BOOST_TEST(err <= 2e-5, "max relative error " << err << " (TF32 would be ~1e-3)");
}

BOOST_AUTO_TEST_CASE(alpha_and_beta_scale_and_accumulate) {
  const index_t m = 17, n = 19, k = 23;
  const auto av = random_values<float>(static_cast<std::size_t>(m * k), 90);
  const auto bv = random_values<float>(static_cast<std::size_t>(n * k), 91);
  const auto cv = random_values<float>(static_cast<std::size_t>(m * n), 92);
  auto c = device_matrix(cv, m, n);
  kiln::matmul_into(c, device_matrix(av, m, k), kiln::transposed(device_matrix(bv, n, k)), 0.5f, 2.0f);
  auto want = reference(false, true, m, n, k, av, bv);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + 2.0 * cv[i];
  const double err = max_error(c.to_vector(), want);
  BOOST_TEST(err <= 1e-5, "max relative error " << err);
}

BOOST_AUTO_TEST_CASE(degenerate_extents) {
  // K = 0: C = beta C (zero for a fresh product); M = 1 and N = 1: a row and a column.
  Tensor<float, Mat, Cuda> a(Extents<Mat>(3, 0)), b(Extents<Mat>(0, 4));
  auto c = kiln::matmul(a, b);
  c.fill(5.0f);
  kiln::matmul_into(c, a, b, 1.0f, 0.0f);
  for (float v : c.to_vector()) BOOST_TEST(v == 0.0f);
  const auto rv = random_values<float>(7, 3), cv = random_values<float>(7, 4);
  const auto dot = kiln::matmul(device_matrix(rv, 1, 7), device_matrix(cv, 7, 1));
  double want = 0;
  for (int i = 0; i < 7; ++i) want += static_cast<double>(rv[static_cast<std::size_t>(i)]) * cv[static_cast<std::size_t>(i)];
  BOOST_TEST(std::abs(dot.to_vector()[0] - want) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(handles_follow_the_current_stream) {
  kc::Stream s;
  const index_t m = 33, n = 31, k = 35;
  const auto av = random_values<float>(static_cast<std::size_t>(m * k), 5);
  const auto bv = random_values<float>(static_cast<std::size_t>(k * n), 6);
  const auto a = device_matrix(av, m, k), b = device_matrix(bv, k, n);
  Tensor<float, Mat, Cuda> c(Extents<Mat>(m, n));
  {
    kc::StreamGuard g(s);
    kiln::matmul_into(c, a, b);
    s.synchronize();
  }
  BOOST_TEST(max_error(c.to_vector(), reference(false, false, m, n, k, av, bv)) <= 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
