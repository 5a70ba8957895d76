// Broadcasting (numpy rules, aligned on the right): a bias [F] over [N, F], a column [N, 1], a rank-0
// tensor over anything, outer sums, middle axes; and the errors when run-time extents disagree.
#include <boost/test/unit_test.hpp>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

struct Case {
  kiln::index_t n, f;
};
// Small odd extents, and one large enough for the parallel CPU loop (and many CUDA blocks).
constexpr Case cases[] = {{1, 1}, {1, 7}, {7, 1}, {33, 17}, {1001, 129}};

template <class T>
std::vector<double> ref_rows(const std::vector<T>& x, const std::vector<T>& r, Case c,
                             double (*f)(double, double), bool column) {
  std::vector<double> out(static_cast<std::size_t>(c.n * c.f));
  for (kiln::index_t i = 0; i < c.n; ++i)
    for (kiln::index_t j = 0; j < c.f; ++j) {
      const auto k = static_cast<std::size_t>(i * c.f + j);
      out[k] = f(kt::to_double(x[k]), kt::to_double(r[static_cast<std::size_t>(column ? i : j)]));
    }
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)

BOOST_AUTO_TEST_CASE_TEMPLATE(bias_of_features_broadcasts_over_rows, D, kiln::test::devices) {
  for (Case c : cases) {
    BOOST_TEST_CONTEXT("[" << c.n << ", " << c.f << "] + [" << c.f << "]") {
      const auto xv = kt::random_values<float>(static_cast<std::size_t>(c.n * c.f), -2, 2, 21);
      const auto bv = kt::random_values<float>(static_cast<std::size_t>(c.f), -2, 2, 22);
      const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, dyn>>(c.n, c.f));
      const auto b = kt::make_tensor<D>(bv, Extents<Shape<dyn>>(c.f));
      Tensor<float, Shape<dyn, dyn>, D> y(c.n, c.f);
      y = x + b;
      BOOST_TEST(
          kt::all_close(y.to_vector(), ref_rows(
                                           xv, bv, c, [](double a, double r) { return a + r; }, false)));
      y = b * x;  // the lower-rank operand on the left
      BOOST_TEST(
          kt::all_close(y.to_vector(), ref_rows(
                                           xv, bv, c, [](double a, double r) { return r * a; }, false)));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(static_bias_broadcasts_over_a_dynamic_batch, D, kiln::test::devices) {
  const auto xv = kt::random_values<double>(33 * 5, -2, 2, 23);
  const auto bv = kt::random_values<double>(5, -2, 2, 24);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 5>>(33));
  const auto b = kt::make_tensor<D>(bv, Extents<Shape<5>>{});
  using Sum = decltype(x - b);
  static_assert(std::is_same_v<typename Sum::shape_type, Shape<dyn, 5>>);
  Tensor<double, Shape<dyn, 5>, D> y(33);
  y = x - b;
  BOOST_TEST(
      kt::all_close(y.to_vector(), ref_rows(
                                       xv, bv, {33, 5}, [](double a, double r) { return a - r; }, false)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(column_broadcasts_over_features, D, kiln::test::devices) {
  for (Case c : cases) {
    BOOST_TEST_CONTEXT("[" << c.n << ", " << c.f << "] * [" << c.n << ", 1]") {
      const auto xv = kt::random_values<float>(static_cast<std::size_t>(c.n * c.f), -2, 2, 25);
      const auto cv = kt::random_nonzero<float>(static_cast<std::size_t>(c.n), -2, 2, 0.25, 26);
      const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, dyn>>(c.n, c.f));
      const auto col = kt::make_tensor<D>(cv, Extents<Shape<dyn, 1>>(c.n));
      Tensor<float, Shape<dyn, dyn>, D> y(c.n, c.f);
      y = x * col;
      BOOST_TEST(
          kt::all_close(y.to_vector(), ref_rows(
                                           xv, cv, c, [](double a, double r) { return a * r; }, true)));
      y = x / col;
      BOOST_TEST(
          kt::all_close(y.to_vector(), ref_rows(
                                           xv, cv, c, [](double a, double r) { return a / r; }, true)));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rank_zero_tensor_broadcasts_over_anything, D, kiln::test::devices) {
  const auto s = kt::make_tensor<D>(std::vector<float>{1.5f}, Extents<Shape<>>{});
  for (kiln::index_t n : {1, 7, 1023}) {
    const auto xv = kt::random_values<float>(static_cast<std::size_t>(n * 3 * 5), -2, 2, 27);
    const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 3, 5>>(n));
    Tensor<float, Shape<dyn, 3, 5>, D> y(n);
    y = x - s;
    BOOST_TEST(kt::all_close(y.to_vector(), kt::reference_map([](double a) { return a - 1.5; }, xv)));
    y = s * x;
    BOOST_TEST(kt::all_close(y.to_vector(), kt::reference_map([](double a) { return 1.5 * a; }, xv)));
  }
  Tensor<float, Shape<dyn>, D> v(9);
  v = s;  // a rank-0 tensor assigned to anything fills it
  BOOST_TEST(kt::all_equal(v.to_vector(), std::vector<float>(9, 1.5f)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(column_and_row_broadcast_to_an_outer_sum, D, kiln::test::devices) {
  const kiln::index_t n = 37, f = 29;
  const auto cv = kt::random_values<double>(n, -2, 2, 28);
  const auto rv = kt::random_values<double>(f, -2, 2, 29);
  const auto col = kt::make_tensor<D>(cv, Extents<Shape<dyn, 1>>(n));
  const auto row = kt::make_tensor<D>(rv, Extents<Shape<1, dyn>>(f));
  using Outer = decltype(col + row);
  static_assert(std::is_same_v<typename Outer::shape_type, Shape<dyn, dyn>>);
  auto y = kiln::eval(col + row);
  BOOST_TEST(kiln::to_string(y.extents()) == "[37, 29]");
  std::vector<double> want(static_cast<std::size_t>(n * f));
  for (kiln::index_t i = 0; i < n; ++i)
    for (kiln::index_t j = 0; j < f; ++j)
      want[static_cast<std::size_t>(i * f + j)] =
          cv[static_cast<std::size_t>(i)] + rv[static_cast<std::size_t>(j)];
  BOOST_TEST(kt::all_close(y.to_vector(), want));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(middle_axis_of_extent_one_broadcasts, D, kiln::test::devices) {
  const kiln::index_t a = 5, b = 7, c = 3;
  const auto xv = kt::random_values<float>(static_cast<std::size_t>(a * b * c), -2, 2, 30);
  const auto mv = kt::random_values<float>(static_cast<std::size_t>(a * c), -2, 2, 31);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 7, 3>>(a));
  const auto m = kt::make_tensor<D>(mv, Extents<Shape<dyn, 1, 3>>(a));
  Tensor<float, Shape<dyn, 7, 3>, D> y(a);
  y = x - m;
  std::vector<double> want(xv.size());
  for (kiln::index_t i = 0; i < a; ++i)
    for (kiln::index_t j = 0; j < b; ++j)
      for (kiln::index_t k = 0; k < c; ++k) {
        const auto at = static_cast<std::size_t>((i * b + j) * c + k);
        want[at] = double(xv[at]) - double(mv[static_cast<std::size_t>(i * c + k)]);
      }
  BOOST_TEST(kt::all_close(y.to_vector(), want));

  // A leading [1, 1, C] operand too (trailing-aligned, broadcast over two axes).
  const auto tv = kt::random_values<float>(3, -2, 2, 32);
  const auto t = kt::make_tensor<D>(tv, Extents<Shape<1, 1, 3>>{});
  y = x + t;
  for (std::size_t at = 0; at < xv.size(); ++at) want[at] = double(xv[at]) + double(tv[at % 3]);
  BOOST_TEST(kt::all_close(y.to_vector(), want));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(lower_rank_source_broadcasts_into_the_destination, D, kiln::test::devices) {
  const auto bv = kt::random_values<float>(13, -2, 2, 33);
  const auto b = kt::make_tensor<D>(bv, Extents<Shape<13>>{});
  Tensor<float, Shape<dyn, 13>, D> y(101);
  const auto before = kiln::passes();
  y = b * 2.0f;  // every row gets 2 b, in one pass
  BOOST_TEST(kiln::passes() - before == 1u);
  std::vector<double> want(101 * 13);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = 2.0 * bv[i % 13];
  BOOST_TEST(kt::all_close(y.to_vector(), want));

  y += b;  // compound assignment with a lower-rank operand
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 13];
  BOOST_TEST(kt::all_close(y.to_vector(), want));
}

// torch's copy_ broadcasts a source of the destination's rank too: y[:] = column ([N, 1] into [N, F]),
// t[32:64] = t[0:32, :, 39:40]. kiln does where the source's static shape has the 1 (as an operator's
// broadcasting is decided, design.md); a dyn extent that is 1 at run time stays a ShapeError.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_source_of_the_same_rank_broadcasts_where_its_shape_has_a_1, D, kiln::test::devices) {
  const auto col = kt::make_tensor<D>(std::vector<float>{1, 2, 3}, Extents<Shape<dyn, 1>>(3));
  Tensor<float, Shape<dyn, 4>, D> y(3);
  const auto before = kiln::passes();
  y = col * 2.0f;
  BOOST_TEST(kiln::passes() - before == 1u);
  BOOST_TEST(kt::all_equal(y.to_vector(), std::vector<float>{2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6}));
  // A static [2, 3] from a static [1, 3]; a 3-d tensor's last column into its other half (torch:
  // t[2:4] = t[0:2, :, 3:4]).
  Tensor<float, Shape<2, 3>, D> m;
  m = kiln::Tensor<float, Shape<1, 3>, D>::from({7, 8, 9});
  BOOST_TEST(kt::all_equal(m.to_vector(), std::vector<float>{7, 8, 9, 7, 8, 9}));
  std::vector<float> tv(4 * 2 * 4);
  for (std::size_t i = 0; i < tv.size(); ++i) tv[i] = static_cast<float>(i);
  auto t = kt::make_tensor<D>(tv, Extents<Shape<dyn, 2, 4>>(4));
  t.slice(2, 4) = kiln::narrow<2, 1>(t.slice(0, 2), 3);
  const auto got = t.to_vector();
  for (std::size_t i = 16; i < 32; ++i) BOOST_TEST(got[i] == tv[(i - 16) / 4 * 4 + 3]);
  // Not broadcast: a dyn extent of 1, or an extent that is neither the destination's nor 1.
  const auto dyn_col = kt::make_tensor<D>(std::vector<float>{1, 2, 3}, Extents<Shape<dyn, dyn>>(3, 1));
  Tensor<float, Shape<dyn, dyn>, D> z(3, 4);
  BOOST_CHECK_EXCEPTION(z = dyn_col, kiln::ShapeError, kt::message_contains({"[3, 4]", "[3, 1]"}));
  const auto two = kt::make_tensor<D>(std::vector<float>(6, 1.0f), Extents<Shape<dyn, dyn>>(3, 2));
  BOOST_CHECK_EXCEPTION(z = two, kiln::ShapeError, kt::message_contains({"[3, 4]", "[3, 2]"}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(run_time_extents_that_do_not_broadcast_name_both_shapes, D,
                              kiln::test::devices) {
  Tensor<float, Shape<dyn, 4>, D> x(3), z(5);
  x.fill(1.0f);
  z.fill(1.0f);
  BOOST_CHECK_EXCEPTION(x + z, kiln::ShapeError, kt::message_contains({"[3, 4]", "[5, 4]", "operator+"}));
  BOOST_CHECK_EXCEPTION(kiln::max(x, z), kiln::ShapeError, kt::message_contains({"[3, 4]", "[5, 4]"}));

  Tensor<float, Shape<dyn>, D> bias(5);
  bias.fill(0.0f);
  BOOST_CHECK_EXCEPTION(x * bias, kiln::ShapeError, kt::message_contains({"[3, 4]", "[5]"}));
  BOOST_CHECK_EXCEPTION(x = bias, kiln::ShapeError, kt::message_contains({"[3, 4]", "[5]"}));

  Tensor<float, Shape<dyn, dyn>, D> w(3, 5);
  w.fill(0.0f);
  BOOST_CHECK_EXCEPTION(kiln::where(x > 0.0f, x, w), kiln::ShapeError,
                        kt::message_contains({"[3, 4]", "[3, 5]"}));
}

// A dynamic extent meets a static one: the result has the static extent, and the dynamic operand is
// broadcast when it is 1 at run time (torch: [1, 3] + [4, 3] is [4, 3]).
BOOST_AUTO_TEST_CASE_TEMPLATE(a_dynamic_extent_of_one_broadcasts_against_a_static_one, D, kiln::test::devices) {
  const auto row = kt::make_tensor<D>(std::vector<float>{1, 2, 3}, Extents<Shape<dyn, 3>>(1));
  Tensor<float, Shape<4, 3>, D> m;
  m.fill(10.0f);
  using Sum = decltype(row + m);
  static_assert(std::is_same_v<typename Sum::shape_type, Shape<4, 3>>);
  const auto y = kiln::eval(row + m);
  BOOST_TEST(kt::all_equal(y.to_vector(), std::vector<float>{11, 12, 13, 11, 12, 13, 11, 12, 13, 11, 12, 13}));
  const auto same = kt::make_tensor<D>(std::vector<float>(12, 1.0f), Extents<Shape<dyn, 3>>(4));
  BOOST_TEST(kt::all_equal(kiln::eval(m - same).to_vector(), std::vector<float>(12, 9.0f)));
  Tensor<float, Shape<dyn, 3>, D> wrong(2);
  wrong.fill(0.0f);
  BOOST_CHECK_EXCEPTION(wrong + m, kiln::ShapeError, kt::message_contains({"[2, 3]", "[4, 3]"}));
}

// An operand whose static shape is the result's is not broadcast at run time (design.md): a column
// [3, 1] typed Shape<dyn, dyn> against a bias [4] is a ShapeError that says how to type it (torch: [3, 4]);
// typed Shape<dyn, 1>, it broadcasts.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_dynamic_extent_of_one_in_the_results_own_shape_says_to_make_it_static, D,
                              kiln::test::devices) {
  const auto column = kt::make_tensor<D>(std::vector<float>{1, 2, 3}, Extents<Shape<dyn, dyn>>(3, 1));
  const auto bias = kt::make_tensor<D>(std::vector<float>{10, 20, 30, 40}, Extents<Shape<dyn>>(4));
  BOOST_CHECK_EXCEPTION(column + bias, kiln::ShapeError,
                        kt::message_contains({"[3, 1]", "[3, 4]", "a static 1, Shape<dyn, 1>"}));
  const auto typed = kt::make_tensor<D>(std::vector<float>{1, 2, 3}, Extents<Shape<dyn, 1>>(3));
  BOOST_TEST(kt::all_equal(kiln::eval(typed + bias).to_vector(),
                           std::vector<float>{11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43}));
}

BOOST_AUTO_TEST_SUITE_END()
