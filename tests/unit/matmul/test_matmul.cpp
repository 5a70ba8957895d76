// matmul / matmul_into: the four transpose combinations with odd M, N, K against a float64 reference
// (float; double on the CPU only), half and bfloat16 within their tolerance, half and bfloat16 operands
// into a float result, beta accumulation, and run-time shape errors.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

struct Dims {
  kiln::index_t m, n, k;
};
constexpr Dims dims[] = {{1, 1, 1}, {37, 29, 41}, {3, 130, 7}, {129, 5, 257}};

/// Error scale of a GEMM in T: one rounding of the result plus sqrt(K) roundings of the accumulation
/// (fp32 accumulation for half and bfloat16), relative to sum |a_ik b_kj|.
template <class T>
double gemm_rel(kiln::index_t k) {
  const double acc = std::is_same_v<T, double> ? 1e-15 : 1e-7;
  return kt::tolerance<T>::rel + acc * std::sqrt(static_cast<double>(k));
}

template <class D, class T>
void check_gemm(Dims d, bool ta, bool tb) {
  BOOST_TEST_CONTEXT(kiln::dtype_name<T>() << " M=" << d.m << " N=" << d.n << " K=" << d.k
                                           << (ta ? " A^T" : "") << (tb ? " B^T" : "")) {
    using Mat = Shape<dyn, dyn>;
    const auto av = kt::random_values<T>(static_cast<std::size_t>(d.m * d.k), -1, 1, 91);
    const auto bv = kt::random_values<T>(static_cast<std::size_t>(d.k * d.n), -1, 1, 92);
    // Stored [K, M] when transposed.
    const auto a = kt::make_tensor<D>(av, ta ? Extents<Mat>(d.k, d.m) : Extents<Mat>(d.m, d.k));
    const auto b = kt::make_tensor<D>(bv, tb ? Extents<Mat>(d.n, d.k) : Extents<Mat>(d.k, d.n));
    const auto ref = kt::reference_gemm(kt::to_doubles(av), kt::to_doubles(bv), static_cast<std::size_t>(d.m),
                                        static_cast<std::size_t>(d.n), static_cast<std::size_t>(d.k), ta, tb);
    const auto run = [&] {
      if (ta && tb) return kiln::matmul(kiln::transposed(a), kiln::transposed(b));
      if (ta) return kiln::matmul(kiln::transposed(a), b);
      if (tb) return kiln::matmul(a, kiln::transposed(b));
      return kiln::matmul(a, b);
    };
    const auto before = kiln::passes();
    const auto c = run();
    BOOST_TEST(kiln::passes() - before == 1u, "one GEMM is one pass");
    BOOST_TEST(kiln::to_string(c.extents()) == kiln::to_string(Extents<Mat>(d.m, d.n)));
    BOOST_TEST(kt::all_close_scaled(c.to_vector(), ref.c, ref.magnitude, gemm_rel<T>(d.k)));
  }
}

template <class D, class T>
void check_all_transposes() {
  for (Dims d : dims)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_gemm<D, T>(d, ta, tb);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(matmul)

BOOST_AUTO_TEST_CASE_TEMPLATE(all_four_transpose_combinations_match_float64, D, kiln::test::devices) {
  check_all_transposes<D, float>();
  if constexpr (std::is_same_v<D, kiln::Cpu>) check_all_transposes<D, double>();  // no FP64 GEMM on the GPU
}

BOOST_AUTO_TEST_CASE_TEMPLATE(half_and_bfloat16_are_within_tolerance, D, kiln::test::devices) {
  check_all_transposes<D, kiln::half>();
  check_all_transposes<D, kiln::bfloat16>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(result_shapes_follow_the_operands, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 4>, D> x(3);
  Tensor<float, Shape<4, 5>, D> w;
  Tensor<float, Shape<5, 4>, D> wt;
  x.fill(1.0f);
  w.fill(1.0f);
  wt.fill(1.0f);
  static_assert(std::is_same_v<decltype(kiln::matmul(x, w)), Tensor<float, Shape<dyn, 5>, D>>);
  static_assert(
      std::is_same_v<decltype(kiln::matmul(x, kiln::transposed(wt))), Tensor<float, Shape<dyn, 5>, D>>);
  static_assert(
      std::is_same_v<decltype(kiln::matmul(kiln::transposed(x), x)), Tensor<float, Shape<4, 4>, D>>);
  static_assert(std::is_same_v<decltype(kiln::matmul(kiln::transposed(w), kiln::transposed(x))),
                               Tensor<float, Shape<5, dyn>, D>>);
  const auto y = kiln::matmul(x, kiln::transposed(wt));  // a Linear layer: x W^T
  BOOST_TEST(kiln::to_string(y.extents()) == "[3, 5]");
  BOOST_TEST(kt::all_equal(y.to_vector(), std::vector<float>(15, 4.0f)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(matmul_into_scales_and_accumulates, D, kiln::test::devices) {
  const kiln::index_t m = 37, n = 29, k = 41;
  const auto av = kt::random_values<float>(static_cast<std::size_t>(m * k), -1, 1, 93);
  const auto bv = kt::random_values<float>(static_cast<std::size_t>(n * k), -1, 1, 94);
  const auto cv = kt::random_values<float>(static_cast<std::size_t>(m * n), -1, 1, 95);
  const auto a = kt::make_tensor<D>(av, Extents<Shape<dyn, 41>>(m));
  const auto b = kt::make_tensor<D>(bv, Extents<Shape<29, 41>>{});
  auto c = kt::make_tensor<D>(cv, Extents<Shape<dyn, 29>>(m));
  const auto ref = kt::reference_gemm(kt::to_doubles(av), kt::to_doubles(bv), m, n, k, false, true);

  kiln::matmul_into(c, a, kiln::transposed(b), 1.0f, 1.0f);  // beta = 1: C += A B^T (gradient accumulation)
  std::vector<double> want(ref.c.size()), scale(ref.c.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    want[i] = ref.c[i] + cv[i], scale[i] = ref.magnitude[i] + std::abs(cv[i]);
  BOOST_TEST(kt::all_close_scaled(c.to_vector(), want, scale, gemm_rel<float>(k)));

  kiln::matmul_into(c, a, kiln::transposed(b), 1.0f, 1.0f);  // again: twice the product
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += ref.c[i], scale[i] += ref.magnitude[i];
  BOOST_TEST(kt::all_close_scaled(c.to_vector(), want, scale, gemm_rel<float>(k)));

  kiln::matmul_into(c, a, kiln::transposed(b), -0.5f, 0.0f);  // beta = 0 overwrites (even NaN garbage)
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = -0.5 * ref.c[i];
  BOOST_TEST(kt::all_close_scaled(c.to_vector(), want, ref.magnitude, gemm_rel<float>(k)));

  kiln::matmul_into(c, a, kiln::transposed(b), 0.0f, 2.0f);  // alpha = 0: only scales C
  for (std::size_t i = 0; i < want.size(); ++i) want[i] *= 2.0;
  BOOST_TEST(kt::all_close_scaled(c.to_vector(), want, ref.magnitude, gemm_rel<float>(k)));
}

// alpha and beta are doubles, as torch.addmm's: a double product scaled by 0.1 is 0.1 in double, not the
// float nearest 0.1 (1.0000000149e-1); beta 0.3 the same, and k = 0 scales C by beta alone.
BOOST_AUTO_TEST_CASE_TEMPLATE(matmul_into_takes_double_scales, D, kiln::test::devices) {
  const auto one = kt::make_tensor<D>(std::vector<double>{1.0}, Extents<Shape<dyn, 1>>(1));
  auto c = kt::make_tensor<D>(std::vector<double>{1.0}, Extents<Shape<dyn, 1>>(1));
  kiln::matmul_into(c, one, one, 0.1, 0.3);
  BOOST_TEST(c.to_vector()[0] == 0.1 + 0.3);
  kiln::Tensor<double, Shape<dyn, 0>, D> a0(Extents<Shape<dyn, 0>>(1));
  kiln::Tensor<double, Shape<0, 1>, D> b0(Extents<Shape<0, 1>>{});
  kiln::matmul_into(c, a0, b0, 1.0, 0.1);
  BOOST_TEST(c.to_vector()[0] == (0.1 + 0.3) * 0.1);
}

// Mixed precision's weight gradient: half or bfloat16 operands accumulated into a float C (beta = 1), with
// float accumulation and no rounding of C to the low type.
template <class D, class T>
void check_low_precision_into_float() {
  BOOST_TEST_CONTEXT(kiln::dtype_name<T>()) {
    const kiln::index_t m = 37, n = 29, k = 257;
    const auto av = kt::random_values<T>(static_cast<std::size_t>(k * m), -1, 1, 96);
    const auto bv = kt::random_values<T>(static_cast<std::size_t>(k * n), -1, 1, 97);
    const auto cv = kt::random_values<float>(static_cast<std::size_t>(m * n), -1, 1, 98);
    const auto a = kt::make_tensor<D>(av, Extents<Shape<dyn, 37>>(k));  // stored [K, M]: dyᵀ x's layout
    const auto b = kt::make_tensor<D>(bv, Extents<Shape<dyn, 29>>(k));
    auto c = kt::make_tensor<D>(cv, Extents<Shape<37, 29>>{});
    const auto ref = kt::reference_gemm(kt::to_doubles(av), kt::to_doubles(bv), m, n, k, true, false);
    const auto before = kiln::passes();
    kiln::matmul_into(c, kiln::transposed(a), b, 1.0f, 1.0f);  // C[float] += Aᵀ B
    BOOST_TEST(kiln::passes() - before == 1u);
    std::vector<double> want(ref.c.size()), scale(ref.c.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      want[i] = ref.c[i] + cv[i], scale[i] = ref.magnitude[i] + std::abs(cv[i]);
    // Exact products of the low-precision values, summed in float: float's tolerance, not T's.
    BOOST_TEST(kt::all_close_scaled(c.to_vector(), want, scale, gemm_rel<float>(k)));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(half_and_bfloat16_operands_accumulate_into_float, D, kiln::test::devices) {
  check_low_precision_into_float<D, kiln::half>();
  check_low_precision_into_float<D, kiln::bfloat16>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dynamic_extent_mismatch_is_a_shape_error, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, dyn>, D> a(3, 4), b(5, 2);
  a.fill(1.0f);
  b.fill(1.0f);
  BOOST_CHECK_EXCEPTION(kiln::matmul(a, b), kiln::ShapeError, kt::message_contains({"[3, 4]", "[5, 2]"}));
  BOOST_CHECK_EXCEPTION(kiln::matmul(kiln::transposed(a), b), kiln::ShapeError,
                        kt::message_contains({"[4, 3]", "[5, 2]"}));

  Tensor<float, Shape<dyn, 2>, D> c(7);
  Tensor<float, Shape<4, 2>, D> w;
  w.fill(1.0f);
  const auto before = kiln::passes();
  BOOST_CHECK_EXCEPTION(kiln::matmul_into(c, a, w), kiln::ShapeError,
                        kt::message_contains({"[3, 4]", "[7, 2]"}));
  BOOST_TEST(kiln::passes() == before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_output_that_overlaps_an_operand_is_refused, D, kiln::test::devices) {
  Tensor<float, Shape<3, 3>, D> a, b;
  a.fill(1.0f);
  b.fill(2.0f);
  BOOST_CHECK_EXCEPTION(kiln::matmul_into(a, a, b), kiln::ValueError, kt::message_contains({"shares memory with A"}));
  BOOST_CHECK_EXCEPTION(kiln::matmul_into(b, a, kiln::transposed(b)), kiln::ValueError,
                        kt::message_contains({"shares memory with B"}));
  BOOST_TEST(kt::all_equal(a.to_vector(), std::vector<float>(9, 1.0f)));  // nothing was written
  BOOST_TEST(kt::all_equal(b.to_vector(), std::vector<float>(9, 2.0f)));
}

#if KILN_WITH_BLAS
BOOST_AUTO_TEST_CASE(a_dimension_past_the_blas_integer_is_an_error_not_a_wrapped_call) {
  // Checked before any pointer is read, so no 8 GiB operand is needed to reach it.
  const kiln::index_t m = kiln::index_t{1} << 31;
  BOOST_CHECK_EXCEPTION(kiln::backend::cpu::gemm<float>(false, false, m, 1, 1, 1.0f, nullptr, 1, nullptr, 1, 0.0f,
                                                        static_cast<float*>(nullptr), 1),
                        kiln::ValueError, kt::message_contains({"2147483648", "exceeds"}));
}
#endif

BOOST_AUTO_TEST_CASE_TEMPLATE(empty_inner_dimension_gives_zeros, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, dyn>, D> a(3, 0), b(0, 5);
  const auto c = kiln::matmul(a, b);  // a sum over nothing
  BOOST_TEST(kiln::to_string(c.extents()) == "[3, 5]");
  BOOST_TEST(kt::all_equal(c.to_vector(), std::vector<float>(15, 0.0f)));

  Tensor<float, Shape<dyn, dyn>, D> d(3, 5);
  d.fill(7.0f);
  kiln::matmul_into(d, a, b, 1.0f, 1.0f);  // beta = 1: C unchanged
  BOOST_TEST(kt::all_equal(d.to_vector(), std::vector<float>(15, 7.0f)));
  kiln::matmul_into(d, a, b, 1.0f, 0.5f);  // C = beta C
  BOOST_TEST(kt::all_equal(d.to_vector(), std::vector<float>(15, 3.5f)));
  kiln::matmul_into(d, a, b);  // beta = 0: zeros, whatever C held
  BOOST_TEST(kt::all_equal(d.to_vector(), std::vector<float>(15, 0.0f)));

  Tensor<float, Shape<dyn, dyn>, D> rows0(0, 4), w(4, 6);
  w.fill(1.0f);
  const auto e = kiln::matmul(rows0, w);  // an empty batch
  BOOST_TEST(e.numel() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
