// Reductions (sum mean max min argmax) against float64: full reductions on odd sizes, and over every
// axis of rank-3 tensors with odd extents; a fused argument costs no extra pass; keepdim keeps the axis;
// an int64 sum wraps as torch's; a tree reduces to the bits of the tensor it makes.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

/// Tolerance of a sum: one rounding of the result, or (on a device that accumulates in T) the
/// rounding of partial sums, relative to the sum of magnitudes.
template <class T>
std::vector<double> magnitudes(const std::vector<double>& x, kt::ReduceDims d, bool mean) {
  std::vector<double> a(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) a[i] = std::abs(x[i]);
  auto s = kt::reference_sum(a, d);
  if (mean)
    for (auto& v : s) v /= static_cast<double>(d.len ? d.len : 1);
  return s;
}

template <class D, class T>
void check_full(std::size_t n) {
  BOOST_TEST_CONTEXT(kiln::dtype_name<T>() << ", n = " << n) {
    const auto xv = kt::random_values<T>(n, -10, 10, 61);
    const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(static_cast<kiln::index_t>(n)));
    const auto xd = kt::to_doubles(xv);
    const kt::ReduceDims all{1, n, 1};
    using V = typename Tensor<T, Shape<dyn>, D>::value_type;

    auto s = kiln::sum(x);
    static_assert(std::is_same_v<decltype(s), Tensor<V, Shape<>, D>>, "a full reduction is a rank-0 tensor");
    const double n_scale = std::sqrt(static_cast<double>(n));
    BOOST_TEST(kt::all_close_scaled(s.to_vector(), kt::reference_sum(xd, all), magnitudes<T>(xd, all, false),
                                    kt::tolerance<T>::rel * n_scale));
    BOOST_TEST(kt::all_close_scaled(kiln::mean(x).to_vector(), kt::reference_mean(xd, all),
                                    magnitudes<T>(xd, all, true), kt::tolerance<T>::rel * n_scale));
    BOOST_TEST(kt::all_equal(kiln::max(x).to_vector(), kt::reference_extreme(xd, all, +1)));
    BOOST_TEST(kt::all_equal(kiln::min(x).to_vector(), kt::reference_extreme(xd, all, -1)));
    auto am = kiln::argmax(x);
    static_assert(std::is_same_v<typename decltype(am)::element_type, std::int64_t>);
    BOOST_TEST(kt::all_equal(am.to_vector(), kt::reference_argmax(xd, all)));
    BOOST_TEST(kiln::max(x).item() == xd[static_cast<std::size_t>(am.item())]);
  }
}

/// Every reduction over axis A of x (extents e), against the reference over [outer, len, inner].
template <int A, class D, class T, class S>
void check_axis(const Tensor<T, S, D>& x, const std::vector<T>& xv) {
  constexpr std::size_t axis =
      A < 0 ? static_cast<std::size_t>(A + static_cast<int>(S::rank)) : static_cast<std::size_t>(A);
  kt::ReduceDims d{1, static_cast<std::size_t>(x.size(axis)), 1};
  // != rather than <: with axis 0, nvcc warns that i < 0 is a pointless comparison (#186).
  for (std::size_t i = 0; i != axis; ++i) d.outer *= static_cast<std::size_t>(x.size(i));
  for (std::size_t i = axis + 1; i < S::rank; ++i) d.inner *= static_cast<std::size_t>(x.size(i));
  const auto xd = kt::to_doubles(xv);
  BOOST_TEST_CONTEXT(kiln::dtype_name<T>() << " " << kiln::to_string(x.extents()) << ", axis " << A) {
    auto s = kiln::sum<A>(x);
    BOOST_TEST(s.numel() == static_cast<kiln::index_t>(d.outer * d.inner));
    const double len_scale = std::sqrt(static_cast<double>(d.len));
    BOOST_TEST(kt::all_close_scaled(s.to_vector(), kt::reference_sum(xd, d), magnitudes<T>(xd, d, false),
                                    kt::tolerance<T>::rel * len_scale));
    BOOST_TEST(kt::all_close_scaled(kiln::mean<A>(x).to_vector(), kt::reference_mean(xd, d),
                                    magnitudes<T>(xd, d, true), kt::tolerance<T>::rel * len_scale));
    BOOST_TEST(kt::all_equal(kiln::max<A>(x).to_vector(), kt::reference_extreme(xd, d, +1)));
    BOOST_TEST(kt::all_equal(kiln::min<A>(x).to_vector(), kt::reference_extreme(xd, d, -1)));
    BOOST_TEST(kt::all_equal(kiln::argmax<A>(x).to_vector(), kt::reference_argmax(xd, d)));
  }
}

template <class D, class T>
void check_every_axis(kiln::index_t a, kiln::index_t b, kiln::index_t c, std::uint32_t stream) {
  const auto xv = kt::random_values<T>(static_cast<std::size_t>(a * b * c), -10, 10, stream);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, dyn, dyn>>(a, b, c));
  check_axis<0>(x, xv);
  check_axis<1>(x, xv);
  check_axis<2>(x, xv);
  check_axis<-1>(x, xv);
  check_axis<-3>(x, xv);
}

/// Every reduction over axis A with keepdim: the shape with that extent 1 (in the type and at run time),
/// the values of the reduction without it.
template <int A, class D, class T, class S>
void check_keepdim(const Tensor<T, S, D>& x) {
  constexpr std::size_t axis =
      A < 0 ? static_cast<std::size_t>(A + static_cast<int>(S::rank)) : static_cast<std::size_t>(A);
  using K = kiln::detail::keep_axis_t<S, axis>;
  using V = typename Tensor<T, S, D>::value_type;  // half reduces to float, as without keepdim
  Extents<K> want = {};
  for (std::size_t d = 0; d != S::rank; ++d) want[d] = d == axis ? 1 : x.size(d);
  BOOST_TEST_CONTEXT(kiln::to_string(x.extents()) << ", axis " << A) {
    const auto s = kiln::sum<A>(x, kiln::keepdim);
    const auto m = kiln::mean<A>(x, kiln::keepdim);
    const auto hi = kiln::max<A>(x, kiln::keepdim);
    const auto lo = kiln::min<A>(x, kiln::keepdim);
    const auto am = kiln::argmax<A>(x, kiln::keepdim);
    static_assert(std::is_same_v<decltype(s), const Tensor<V, K, D>>);
    static_assert(std::is_same_v<decltype(m), const Tensor<V, K, D>>);
    static_assert(std::is_same_v<decltype(hi), const Tensor<V, K, D>>);
    static_assert(std::is_same_v<decltype(lo), const Tensor<V, K, D>>);
    static_assert(std::is_same_v<decltype(am), const Tensor<std::int64_t, K, D>>);
    BOOST_TEST((s.extents() == want));
    BOOST_TEST((m.extents() == want));
    BOOST_TEST((hi.extents() == want));
    BOOST_TEST((lo.extents() == want));
    BOOST_TEST((am.extents() == want));
    BOOST_TEST(kt::all_equal(s.to_vector(), kiln::sum<A>(x).to_vector()));
    BOOST_TEST(kt::all_equal(m.to_vector(), kiln::mean<A>(x).to_vector()));
    BOOST_TEST(kt::all_equal(hi.to_vector(), kiln::max<A>(x).to_vector()));
    BOOST_TEST(kt::all_equal(lo.to_vector(), kiln::min<A>(x).to_vector()));
    BOOST_TEST(kt::all_equal(am.to_vector(), kiln::argmax<A>(x).to_vector()));
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(reduce)

static_assert(std::is_same_v<kiln::detail::remove_axis_t<Shape<dyn, 7, 9>, 1>, Shape<dyn, 9>>);
static_assert(std::is_same_v<kiln::detail::remove_axis_t<Shape<dyn, 7, 9>, 0>, Shape<7, 9>>);
static_assert(std::is_same_v<kiln::detail::keep_axis_t<Shape<dyn, 7, 9>, 1>, Shape<dyn, 1, 9>>);
static_assert(std::is_same_v<kiln::detail::keep_axis_t<Shape<dyn, 7, 9>, 0>, Shape<1, 7, 9>>);
static_assert(std::is_same_v<kiln::detail::keep_axis_t<Shape<dyn>, 0>, Shape<1>>);

BOOST_AUTO_TEST_CASE_TEMPLATE(full_reductions_match_float64_on_odd_sizes, D, kiln::test::devices) {
  for (std::size_t n : {1u, 7u, 1023u, 100003u}) {
    check_full<D, float>(n);
    check_full<D, double>(n);
  }
  check_full<D, kiln::half>(1023);
  check_full<D, kiln::bfloat16>(1023);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reductions_over_every_axis_of_a_rank_3_tensor, D, kiln::test::devices) {
  check_every_axis<D, float>(5, 7, 9, 62);
  check_every_axis<D, double>(5, 7, 9, 63);
  check_every_axis<D, float>(1, 1, 1, 64);
  check_every_axis<D, float>(3, 1001, 13, 65);  // large enough for the parallel loop
  check_every_axis<D, double>(3, 11, 131, 66);  // an inner extent wider than one column block
  check_every_axis<D, kiln::half>(5, 7, 9, 67);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(axis_reductions_drop_the_axis_from_the_shape, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 7, 9>, D> x(5);
  x.fill(1.0f);
  static_assert(std::is_same_v<decltype(kiln::sum<1>(x)), Tensor<float, Shape<dyn, 9>, D>>);
  static_assert(std::is_same_v<decltype(kiln::mean<0>(x)), Tensor<float, Shape<7, 9>, D>>);
  static_assert(std::is_same_v<decltype(kiln::argmax<-1>(x)), Tensor<std::int64_t, Shape<dyn, 7>, D>>);
  auto s = kiln::sum<1>(x);
  BOOST_TEST(kiln::to_string(s.extents()) == "[5, 9]");
  BOOST_TEST(kt::all_equal(s.to_vector(), std::vector<float>(45, 7.0f)));

  Tensor<kiln::half, Shape<dyn, 3>, D> h(2);
  h.fill(0.5f);
  static_assert(std::is_same_v<decltype(kiln::sum(h)), Tensor<float, Shape<>, D>>, "half sums in float");
  BOOST_TEST(kiln::sum(h).item() == 3.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reducing_the_only_axis_gives_a_rank_0_tensor, D, kiln::test::devices) {
  const auto xv = kt::random_values<double>(1023, -1, 1, 75);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(1023));
  auto s = kiln::sum<0>(x);
  static_assert(std::is_same_v<decltype(s), Tensor<double, Shape<>, D>>);
  BOOST_TEST(std::abs(s.item() - kiln::sum(x).item()) <= 1e-12);
  BOOST_TEST(kiln::argmax<-1>(x).item() == kiln::argmax(x).item());

  const auto one = kt::make_tensor<D>(std::vector<double>{-2.5}, Extents<Shape<>>{});  // rank 0 itself
  BOOST_TEST(kiln::sum(one).item() == -2.5);
  BOOST_TEST(kiln::mean(one).item() == -2.5);
  BOOST_TEST(kiln::argmax(one).item() == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(argmax_over_classes_gives_labels, D, kiln::test::devices) {
  const kiln::index_t n = 37;
  const auto logits_v = kt::random_values<float>(static_cast<std::size_t>(n * 10), -5, 5, 68);
  const auto logits = kt::make_tensor<D>(logits_v, Extents<Shape<dyn, 10>>(n));
  auto labels = kiln::argmax<1>(logits);  // [N, 10] -> [N]
  static_assert(std::is_same_v<decltype(labels), Tensor<std::int64_t, Shape<dyn>, D>>);
  BOOST_TEST(kt::all_equal(labels.to_vector(), kt::reference_argmax(kt::to_doubles(logits_v),
                                                                    {static_cast<std::size_t>(n), 10, 1})));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fused_argument_is_one_pass, D, kiln::test::devices) {
  const std::size_t n = 100003;
  const Extents<Shape<dyn>> ext(static_cast<kiln::index_t>(n));
  const auto av = kt::random_values<float>(n, -1, 1, 69);
  const auto bv = kt::random_values<float>(n, -1, 1, 70);
  const auto a = kt::make_tensor<D>(av, ext);
  const auto b = kt::make_tensor<D>(bv, ext);

  auto before = kiln::passes();
  auto dot = kiln::sum(a * b);  // the product is never stored
  BOOST_TEST(kiln::passes() - before == 1u);
  double want = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) want += double(av[i]) * bv[i], scale += std::abs(double(av[i]) * bv[i]);
  BOOST_TEST(std::abs(dot.item() - want) <= 1e-6 * scale);

  before = kiln::passes();
  auto m = kiln::max(kiln::relu(a - b) * 2.0f);
  BOOST_TEST(kiln::passes() - before == 1u);
  float want_max = 0;
  for (std::size_t i = 0; i < n; ++i) want_max = std::max(want_max, std::max(av[i] - bv[i], 0.0f) * 2.0f);
  BOOST_TEST(m.item() == want_max);

  const kiln::index_t rows = 101, cols = 33;
  const auto xv = kt::random_values<double>(static_cast<std::size_t>(rows * cols), -1, 1, 71);
  const auto cv = kt::random_values<double>(static_cast<std::size_t>(cols), -1, 1, 72);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 33>>(rows));
  const auto c = kt::make_tensor<D>(cv, Extents<Shape<33>>{});
  before = kiln::passes();
  auto centered = kiln::mean<0>((x - c) * (x - c));  // a broadcast inside the argument
  BOOST_TEST(kiln::passes() - before == 1u);
  std::vector<double> want_var(static_cast<std::size_t>(cols), 0.0);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double d = xv[i] - cv[i % 33];
    want_var[i % 33] += d * d / static_cast<double>(rows);
  }
  BOOST_TEST(kt::all_close(centered.to_vector(), want_var));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sum_of_a_comparison_counts_the_true_elements, D, kiln::test::devices) {
  const std::size_t n = 1023;
  const auto xv = kt::random_values<float>(n, -1, 1, 73);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 31>>(33));
  const auto count = kiln::sum(x > 0.0f);
  static_assert(std::is_same_v<typename decltype(count)::element_type, std::int64_t>,
                "bool sums count, as int64");
  std::int64_t want = 0;
  for (float v : xv) want += v > 0.0f;
  BOOST_TEST(count.item() == want);

  const auto per_column = kiln::sum<0>(x > 0.0f);
  std::vector<std::int64_t> want_col(31, 0);
  for (std::size_t i = 0; i < n; ++i) want_col[i % 31] += xv[i] > 0.0f;
  BOOST_TEST(kt::all_equal(per_column.to_vector(), want_col));

  const auto fraction = kiln::mean(x > 0.0f);  // accuracy = mean(eq(predicted, labels))
  static_assert(std::is_same_v<typename decltype(fraction)::element_type, float>, "bool means are fractions");
  BOOST_TEST(fraction.item() == static_cast<float>(static_cast<double>(want) / n));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(integer_reductions_are_exact, D, kiln::test::devices) {
  const auto xv = kt::random_integers<std::int32_t>(1023, -1000, 1000, 74);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(1023));
  BOOST_TEST(kiln::sum(x).item() == std::accumulate(xv.begin(), xv.end(), 0));
  BOOST_TEST(kiln::max(x).item() == *std::max_element(xv.begin(), xv.end()));
  BOOST_TEST(kiln::min(x).item() == *std::min_element(xv.begin(), xv.end()));
  BOOST_TEST(kiln::argmax(x).item() == std::max_element(xv.begin(), xv.end()) - xv.begin());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_int64_sum_wraps_as_torchs, D, kiln::test::devices) {
  // torch.tensor([2**63 - 1, 1]).sum() is -2**63 (two's complement; signed overflow is undefined in C++).
  constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
  const std::vector<std::int64_t> xv = {top, 1, top, 3};
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(4));
  BOOST_TEST(kiln::sum(x).item() == std::numeric_limits<std::int64_t>::min() + top + 3);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(keepdim_keeps_the_axis_as_extent_1, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 10>, D> x(4);
  static_assert(std::is_same_v<decltype(kiln::sum<1>(x, kiln::keepdim)), Tensor<float, Shape<dyn, 1>, D>>);
  static_assert(std::is_same_v<decltype(kiln::sum<-1>(x, kiln::keepdim)), Tensor<float, Shape<dyn, 1>, D>>);
  static_assert(std::is_same_v<decltype(kiln::mean<0>(x, kiln::keepdim)), Tensor<float, Shape<1, 10>, D>>);
  static_assert(std::is_same_v<decltype(kiln::sum<0>(x > 0.0f, kiln::keepdim)),
                               Tensor<std::int64_t, Shape<1, 10>, D>>, "bool sums count, as int64");

  const auto v = kt::random_values<float>(5 * 7 * 9, -10, 10, 76);
  const auto y = kt::make_tensor<D>(v, Extents<Shape<dyn, 7, dyn>>(5, 9));
  check_keepdim<0>(y);
  check_keepdim<1>(y);
  check_keepdim<2>(y);
  check_keepdim<-1>(y);
  check_keepdim<-3>(y);
  const auto h = kt::make_tensor<D>(kt::random_values<kiln::half>(3 * 11, -4, 4, 77), Extents<Shape<3, 11>>{});
  check_keepdim<0>(h);
  check_keepdim<1>(h);
  const auto r1 = kt::make_tensor<D>(kt::random_values<double>(13, -1, 1, 78), Extents<Shape<dyn>>(13));
  check_keepdim<0>(r1);  // rank 1: [13] -> [1], as torch (rank 0 without keepdim)

  auto fused = kiln::sum<1>(y * y, kiln::keepdim);  // the argument is fused, as without keepdim
  static_assert(std::is_same_v<decltype(fused), Tensor<float, Shape<dyn, 1, dyn>, D>>);
  BOOST_TEST(kt::all_equal(fused.to_vector(), kiln::sum<1>(y * y).to_vector()));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(keepdim_sums_normalise_rows, D, kiln::test::devices) {
  // torch: x / x.sum(1, keepdim=True). Without keepdim the sums [N] align with F (numpy's rule).
  const auto x = kt::make_tensor<D>(std::vector<float>{1, 2, 3, 4, 4, 2}, Extents<Shape<dyn, 3>>(2));
  const auto sums = kiln::sum<1>(x, kiln::keepdim);
  BOOST_TEST(kiln::to_string(sums.extents()) == "[2, 1]");
  BOOST_TEST(kt::all_equal(sums.to_vector(), std::vector<float>{6, 10}));
  auto p = kiln::eval(x / sums);
  static_assert(std::is_same_v<decltype(p), Tensor<float, Shape<dyn, 3>, D>>);
  BOOST_TEST(kiln::to_string(p.extents()) == "[2, 3]");
  BOOST_TEST(kt::all_close(p.to_vector(), std::vector<double>{1. / 6, 2. / 6, 3. / 6, 0.4, 0.4, 0.2}));
  const auto inline_sum = kiln::eval(x / kiln::sum<1>(x, kiln::keepdim));
  BOOST_TEST(kt::all_equal(inline_sum.to_vector(), p.to_vector()));
  BOOST_CHECK_THROW(kiln::eval(x / kiln::sum<1>(x)), kiln::ShapeError);  // [2, 3] / [2]: 3 against 2

  // and softmax's stabiliser: x - max over the row, kept
  const auto shifted = kiln::eval(x - kiln::max<1>(x, kiln::keepdim));
  BOOST_TEST(kt::all_equal(shifted.to_vector(), std::vector<float>{-2, -1, 0, 0, 0, -2}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(keepdim_mean_over_the_middle_axis_broadcasts_back, D, kiln::test::devices) {
  std::vector<double> v(24);
  std::iota(v.begin(), v.end(), 0.0);  // x[a, b, c] = 12 a + 4 b + c
  const auto x = kt::make_tensor<D>(v, Extents<Shape<dyn, 3, 4>>(2));
  auto m = kiln::mean<1>(x, kiln::keepdim);  // [2, 3, 4] -> [2, 1, 4]: 12 a + 4 + c
  static_assert(std::is_same_v<decltype(m), Tensor<double, Shape<dyn, 1, 4>, D>>);
  BOOST_TEST(kiln::to_string(m.extents()) == "[2, 1, 4]");
  BOOST_TEST(kt::all_equal(m.to_vector(), std::vector<double>{4, 5, 6, 7, 16, 17, 18, 19}));
  auto centred = kiln::eval(x - m);  // [2, 3, 4]: 4 (b - 1)
  static_assert(std::is_same_v<decltype(centred), Tensor<double, Shape<dyn, 3, 4>, D>>);
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) want.push_back(4.0 * (b - 1));
  BOOST_TEST(kt::all_equal(centred.to_vector(), want));
  BOOST_TEST(kt::all_equal(kiln::sum<1>(centred, kiln::keepdim).to_vector(), std::vector<double>(8, 0.0)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(keepdim_max_over_axis_0_and_argmax_as_int64, D, kiln::test::devices) {
  const auto x = kt::make_tensor<D>(std::vector<float>{1, 9, -3, 7, 2, -1, 7, 5, 4, -8, 9, 0},
                                    Extents<Shape<dyn, 3>>(4));  // [4, 3]
  auto hi = kiln::max<0>(x, kiln::keepdim);
  static_assert(std::is_same_v<decltype(hi), Tensor<float, Shape<1, 3>, D>>);
  BOOST_TEST(kiln::to_string(hi.extents()) == "[1, 3]");
  BOOST_TEST(kt::all_equal(hi.to_vector(), std::vector<float>{7, 9, 4}));
  auto lo = kiln::min<-2>(x, kiln::keepdim);
  static_assert(std::is_same_v<decltype(lo), Tensor<float, Shape<1, 3>, D>>);
  BOOST_TEST(kt::all_equal(lo.to_vector(), std::vector<float>{-8, 2, -3}));
  BOOST_TEST(kt::all_equal(kiln::eval(x - hi).to_vector(),
                           std::vector<float>{-6, 0, -7, 0, -7, -5, 0, -4, 0, -15, 0, -4}));

  auto at = kiln::argmax<0>(x, kiln::keepdim);  // the first of ties: rows 1 and 2 both hold 7
  static_assert(std::is_same_v<decltype(at), Tensor<std::int64_t, Shape<1, 3>, D>>);
  BOOST_TEST(kt::all_equal(at.to_vector(), std::vector<std::int64_t>{1, 0, 2}));
  auto labels = kiln::argmax<1>(x, kiln::keepdim);  // [4, 3] -> [4, 1]
  static_assert(std::is_same_v<decltype(labels), Tensor<std::int64_t, Shape<dyn, 1>, D>>);
  BOOST_TEST(kiln::to_string(labels.extents()) == "[4, 1]");
  BOOST_TEST(kt::all_equal(labels.to_vector(), std::vector<std::int64_t>{1, 0, 0, 1}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(keepdim_of_an_empty_operand, D, kiln::test::devices) {
  const Tensor<float, Shape<dyn, 3>, D> x(0);  // [0, 3]
  const auto rows = kiln::sum<1>(x, kiln::keepdim);
  BOOST_TEST(kiln::to_string(rows.extents()) == "[0, 1]");
  const auto cols = kiln::sum<0>(x, kiln::keepdim);  // torch: zeros [1, 3]
  BOOST_TEST(kiln::to_string(cols.extents()) == "[1, 3]");
  BOOST_TEST(kt::all_equal(cols.to_vector(), std::vector<float>(3, 0.0f)));
  BOOST_CHECK_THROW(kiln::max<0>(x, kiln::keepdim), kiln::ValueError);
}

// The CPU's floating sums and means add in eight interleaved lanes in an order fixed by the code
// (core/lane_sums.hpp, backend/cpu/executor.hpp): a full reduction (blocks in parallel), one over the last
// axis (rows in parallel) and one over the first (columns) give the same bits on any thread count, each
// the float nearest a double sum.
BOOST_AUTO_TEST_CASE(cpu_sums_are_the_same_bits_on_any_thread_count) {
  constexpr kiln::index_t rows = 300, cols = 1001;  // past the parallel threshold; rows not a multiple of 8
  const auto v = kt::random_values<float>(rows * cols, -1, 1, 91);
  const auto x = kt::make_tensor<kiln::Cpu>(v, Extents<Shape<dyn, cols>>{rows});
  std::vector<std::vector<float>> first;
  for (const int threads : {1, 2, 3}) {
    BOOST_TEST_CONTEXT(threads << " threads") {
      const kiln::backend::cpu::ScopedThreads scope(threads);
      const std::vector<std::vector<float>> got{
          kiln::sum(x).to_vector(),     kiln::mean(x).to_vector(),     kiln::sum<1>(x).to_vector(),
          kiln::mean<-1>(x).to_vector(), kiln::sum<0>(x).to_vector(), kiln::sum(x * x).to_vector()};
      if (first.empty()) first = got;
      for (std::size_t k = 0; k < got.size(); ++k)
        BOOST_TEST(got[k] == first[k], boost::test_tools::per_element());
    }
  }
  double total = 0;
  for (kiln::index_t r = 0; r < rows; ++r) {
    double row = 0;
    for (kiln::index_t c = 0; c < cols; ++c)
      row += static_cast<double>(v[static_cast<std::size_t>(r * cols + c)]);
    total += row;
    // rounded once: within half a float ulp (2^-24 relative) of the double sum
    const float got = first[2][static_cast<std::size_t>(r)];
    BOOST_TEST(std::abs(got - row) <= std::abs(row) * 6e-8 + 1e-12, "row " << r);
  }
  BOOST_TEST(std::abs(first[0][0] - total) <= std::abs(total) * 1e-7);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_tree_is_reduced_to_the_bits_of_the_tensor_it_makes, D, kiln::test::devices) {
  // Along the last axis the CPU reads a tree with a broadcast row by row (expr/detail/row.hpp), and a
  // tree that calls exp, erf, tanh or log1p 64 elements at a time into a vector loop (core/lane_sums.hpp,
  // Stage): the same sums, in the same lanes, as over the tensor the tree makes. Rows of 10 (under a
  // piece of 64), 67, 200 and 1031; exp(x - max) and tanh(x) * m as a softmax and a layer compute them.
  for (kiln::index_t len : {10, 67, 200, 1031}) {
    BOOST_TEST_CONTEXT("rows of " << len) {
      const auto x = kt::make_tensor<D>(kt::random_values<float>(static_cast<std::size_t>(5 * len), -8, 8, 17),
                                        Extents<Shape<dyn, dyn>>(5, len));
      const auto m = kiln::max<1>(x, kiln::keepdim);
      const auto e = kiln::eval(kiln::exp(x - m));
      BOOST_TEST(kiln::sum<1>(kiln::exp(x - m)).to_vector() == kiln::sum<1>(e).to_vector(),
                 boost::test_tools::per_element());
      BOOST_TEST(kiln::sum<1>(kiln::exp(x)).to_vector() == kiln::sum<1>(kiln::eval(kiln::exp(x))).to_vector(),
                 boost::test_tools::per_element());
      const auto t = kiln::eval(kiln::tanh(x) * m);
      BOOST_TEST(kiln::mean<1>(kiln::tanh(x) * m).to_vector() == kiln::mean<1>(t).to_vector(),
                 boost::test_tools::per_element());
      BOOST_TEST(kiln::max<1>(x - m).to_vector() == kiln::max<1>(kiln::eval(x - m)).to_vector(),
                 boost::test_tools::per_element());
      BOOST_TEST(kiln::argmax<1>(kiln::exp(x - m)).to_vector() == kiln::argmax<1>(e).to_vector(),
                 boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
