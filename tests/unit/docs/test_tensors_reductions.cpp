// docs/tensors.md's printing, reductions-and-matmul and keeping-an-expression snippets, compiled and run
// as the page shows them (cmake/KilnDocSnippets.cmake writes each block to <page>.<name>.inc): each case
// checks the values the page's comments give, against a loop over the operand where one computes them.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <kiln/kiln.hpp>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {
using kiln::dyn;
using kiln::Shape;
using kiln::Tensor;

/// Restores std::cout's buffer at scope end: a snippet's output is read from `out`.
struct CaptureCout {
  std::ostringstream out;
  std::streambuf* saved = std::cout.rdbuf(out.rdbuf());
  ~CaptureCout() { std::cout.rdbuf(saved); }
};

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}
}  // namespace

BOOST_AUTO_TEST_SUITE(docs)

BOOST_AUTO_TEST_CASE(tensors_print_writes_what_torch_prints) {
  CaptureCout capture;
#include "tensors.print.inc"
  // str(torch.tensor([[1., 2.], [3., 4.]])) in torch 1.13
  const std::string torch_text = "tensor([[1., 2.],\n        [3., 4.]])";
  BOOST_TEST(text == torch_text);
  BOOST_TEST(capture.out.str() == torch_text + "\n");
}

BOOST_AUTO_TEST_CASE(tensors_more_reductions_give_the_values_the_page_shows) {
#include "tensors.reductions.inc"
#include "tensors.more_reductions.inc"
  BOOST_TEST(total == over_rows_and_cols.item());  // over every axis as the whole sum
  static_assert(std::is_same_v<decltype(over_rows_and_cols)::shape_type, Shape<>>);
  static_assert(std::is_same_v<decltype(row_std)::shape_type, Shape<2, 1>>);
  BOOST_TEST(over_rows_and_cols.item() == 21.0f);
  BOOST_TEST(row_prod.to_vector() == (std::vector<float>{15, 48}), boost::test_tools::per_element());
  BOOST_TEST(top.item() == 6.0f);
  static_assert(std::is_same_v<decltype(row_min_kept)::shape_type, Shape<2, 1>>);
  BOOST_TEST(row_min_kept.to_vector() == (std::vector<float>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(row_argmin.to_vector() == (std::vector<std::int64_t>{0, 1}), boost::test_tools::per_element());
  BOOST_TEST(row_var.to_vector() == (std::vector<float>{4, 4}), boost::test_tools::per_element());
  BOOST_TEST(col_var.to_vector() == (std::vector<float>{2.25f, 2.25f, 2.25f}), boost::test_tools::per_element());
  BOOST_TEST(row_std.to_vector() == (std::vector<float>{2, 2}), boost::test_tools::per_element());
  BOOST_TEST(both_var.item() == 3.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(length.item() == std::sqrt(91.0f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(row_l1.to_vector() == (std::vector<float>{9, 12}), boost::test_tools::per_element());
  BOOST_TEST(running.to_vector() == (std::vector<float>{1, 6, 9, 4, 6, 12}), boost::test_tools::per_element());
  // log Σ e^x from x's values, in double.
  const auto xv = x.to_vector();
  const auto lse = row_lse.to_vector();
  for (int r = 0; r != 2; ++r) {
    double s = 0;
    for (int c = 0; c != 3; ++c) s += std::exp(static_cast<double>(xv[static_cast<std::size_t>(r * 3 + c)]));
    BOOST_TEST(lse[static_cast<std::size_t>(r)] == std::log(s), boost::test_tools::tolerance(1e-6));
    for (int c = 0; c != 3; ++c) {  // softmax: e^x / Σ e^x
      const auto i = static_cast<std::size_t>(r * 3 + c);
      BOOST_TEST(probs.to_vector()[i] == std::exp(static_cast<double>(xv[i])) / s, boost::test_tools::tolerance(1e-6));
    }
  }
}

BOOST_AUTO_TEST_CASE(tensors_reductions_give_the_values_the_page_shows) {
#include "tensors.reductions.inc"
  static_assert(std::is_same_v<decltype(row_sums)::shape_type, Shape<2>>);
  static_assert(std::is_same_v<decltype(row_sums_kept)::shape_type, Shape<2, 1>>);
  static_assert(std::is_same_v<decltype(col_means)::shape_type, Shape<3>>);
  static_assert(std::is_same_v<decltype(row_argmax)::element_type, std::int64_t>);
  static_assert(std::is_same_v<decltype(h)::shape_type, Shape<2, 2>>);
  static_assert(std::is_same_v<decltype(g)::shape_type, Shape<2, 4>>);
  // The page's numbers.
  BOOST_TEST(total == 21.0f);
  BOOST_TEST(row_sums.to_vector() == (std::vector<float>{9, 12}), boost::test_tools::per_element());
  BOOST_TEST(row_sums_kept.to_vector() == (std::vector<float>{9, 12}), boost::test_tools::per_element());
  BOOST_TEST(row_means.to_vector() == (std::vector<float>{3, 4}), boost::test_tools::per_element());
  BOOST_TEST(col_means.to_vector() == (std::vector<float>{2.5f, 3.5f, 4.5f}),
             boost::test_tools::per_element());
  BOOST_TEST(row_max.to_vector() == (std::vector<float>{5, 6}), boost::test_tools::per_element());
  BOOST_TEST(row_argmax.to_vector() == (std::vector<std::int64_t>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(row_min.to_vector() == (std::vector<float>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(h.to_vector() == (std::vector<float>{4, 8, 10, 8}), boost::test_tools::per_element());
  BOOST_TEST(g.to_vector() == (std::vector<float>{1, 5, 3, 9, 4, 2, 6, 12}),
             boost::test_tools::per_element());

  // The same from loops over x's values.
  const auto xv = x.to_vector();  // [2, 3]
  const auto at = [&](int r, int c) { return static_cast<double>(xv[static_cast<std::size_t>(r * 3 + c)]); };
  std::vector<double> sums(2, 0.0), maxes(2), mins(2), argmaxes(2, 0.0), shares_ref, h_ref(4, 0.0),
      g_ref(8, 0.0);
  for (int r = 0; r != 2; ++r) {
    maxes[r] = mins[r] = at(r, 0);
    for (int c = 0; c != 3; ++c) {
      sums[r] += at(r, c);
      if (at(r, c) > maxes[r]) maxes[r] = at(r, c), argmaxes[r] = c;
      mins[r] = std::min(mins[r], at(r, c));
    }
  }
  for (int r = 0; r != 2; ++r)
    for (int c = 0; c != 3; ++c) shares_ref.push_back(at(r, c) / sums[r]);
  const auto wv = w.to_vector(), vv = v.to_vector();  // [3, 2], [4, 3]
  for (int r = 0; r != 2; ++r)
    for (int k = 0; k != 3; ++k) {
      for (int c = 0; c != 2; ++c) h_ref[r * 2 + c] += at(r, k) * wv[static_cast<std::size_t>(k * 2 + c)];
      for (int c = 0; c != 4; ++c) g_ref[r * 4 + c] += at(r, k) * vv[static_cast<std::size_t>(c * 3 + k)];
    }
  BOOST_TEST(total == sums[0] + sums[1]);
  BOOST_TEST(as_double(row_sums.to_vector()) == sums, boost::test_tools::per_element());
  BOOST_TEST(row_means[0] == sums[0] / 3);
  BOOST_TEST(row_means[1] == sums[1] / 3);
  BOOST_TEST(as_double(row_max.to_vector()) == maxes, boost::test_tools::per_element());
  BOOST_TEST(as_double(row_min.to_vector()) == mins, boost::test_tools::per_element());
  BOOST_TEST(as_double(row_argmax.to_vector()) == argmaxes, boost::test_tools::per_element());
  BOOST_TEST(as_double(shares.to_vector()) == shares_ref, boost::test_tools::tolerance(1e-6)
                                                              << boost::test_tools::per_element());
  BOOST_TEST(as_double(h.to_vector()) == h_ref, boost::test_tools::per_element());
  BOOST_TEST(as_double(g.to_vector()) == g_ref, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(tensors_keeping_evaluates_in_the_statement_that_builds_it) {
  auto x = Tensor<float, Shape<2, 3>>::from({1.0f, 5.0f, 3.0f, 4.0f, 2.0f, 6.0f});
  Tensor<float, Shape<2, 3>> y;
#include "tensors.keeping.inc"
  // The wrong line compiles: e is an expression (views, no storage of its own), not a tensor. It is never
  // evaluated here (its sum is gone).
  static_assert(kiln::expression<decltype(e)> && !kiln::tensor<decltype(e)>);
  static_assert(std::is_same_v<decltype(kept), Tensor<float, Shape<2, 3>>>);
  const std::vector<float> want{21, 105, 63, 84, 42, 126};  // x * 21
  BOOST_TEST(y.to_vector() == want, boost::test_tools::per_element());
  BOOST_TEST(kept.to_vector() == want, boost::test_tools::per_element());
  // kept has storage of its own: new tensors from the allocator's cache (where sum's result went) leave it.
  for (int k = 0; k != 4; ++k) {
    auto other = kiln::eval(x * 0.0f - 1.0f);
    const float zero = kiln::sum(x * 0.0f).item();
    BOOST_TEST((other[0] == -1.0f && zero == 0.0f));
  }
  BOOST_TEST(kept.to_vector() == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
