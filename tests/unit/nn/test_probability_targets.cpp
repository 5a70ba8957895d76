// CrossEntropyLoss with probability targets [N, C] (torch 1.13's soft labels): float64 finite-difference
// gradients (mean, sum, smoothing, class weights, unreduced rows), fused and unfused; a one-hot target
// is the labels' loss; a mean divides by the rows; half logits with float targets; the passes; errors.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include <kiln/nn/nn.hpp>

#include "support/gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace knn = kiln::nn;

/// Six rows of five classes: softmax rows, a one-hot row (3) and a row that does not sum to 1 (4).
std::vector<double> soft_rows() {
  auto t = kiln::test::random_values<double>(30, 0.05, 1.0, 31);
  for (std::size_t n = 0; n < 6; ++n) {
    double s = 0;
    for (std::size_t j = 0; j < 5; ++j) s += t[n * 5 + j];
    for (std::size_t j = 0; j < 5 && n != 4; ++j) t[n * 5 + j] /= s;
  }
  for (std::size_t j = 0; j < 5; ++j) t[15 + j] = j == 2 ? 1.0 : 0.0;
  return t;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(probability_targets)

BOOST_AUTO_TEST_CASE_TEMPLATE(soft_cross_entropy_matches_numeric_fused_and_unfused, D, kiln::test::devices) {
  // -Σ_j w_j ((1 - eps) t_j + eps / C) log_softmax(x)_j per row, a mean over the rows: the gradient is
  // the finite difference of the loss, with a row of large logits, smoothed or not, weighted or not;
  // the unfused passes agree; unreduced rows with an upstream gradient too.
  const Extents<Shape<dyn, 5>> ext(6);
  auto v = kiln::test::random_values<double>(30, -4.0, 4.0, 32);
  for (std::size_t j = 0; j < 5; ++j) v[10 + j] *= 50.0;  // row 2
  const auto x = kiln::test::make_tensor<D>(v, ext);
  const auto t = kiln::test::make_tensor<D>(soft_rows(), ext);
  const std::vector<double> w{0.5, 2.0, 1.0, 3.0, 0.25};
  using R = knn::Reduction;
  for (const auto reduction : {R::mean, R::sum}) {
    for (const double eps : {0.0, 0.25}) {
      for (const bool weighted : {false, true}) {
        BOOST_TEST_CONTEXT((reduction == R::sum ? "sum" : "mean") << ", label_smoothing " << eps
                                                                  << (weighted ? ", weighted" : "")) {
          const knn::CrossEntropyLoss ce{.weight = weighted ? w : std::vector<double>{}, .reduction = reduction,
                                         .label_smoothing = eps};
          auto f = [&](const Tensor<double, Shape<dyn, 5>, D>& in) { return ce(in, t).item(); };
          const auto g = ce.backward(x, t);
          BOOST_TEST(kiln::test::gradcheck(f, x, g));
          kiln::Unfused off;
          BOOST_TEST(kiln::test::all_close(ce.backward(x, t).to_vector(), g.to_vector()));
        }
      }
    }
  }
  const knn::CrossEntropyLoss rows{.weight = w, .label_smoothing = 0.25};
  const Extents<Shape<dyn>> n(6);
  const auto dloss = kiln::test::make_tensor<D>(kiln::test::random_values<double>(6, -1.0, 1.0, 33), n);
  auto f_rows = [&](const Tensor<double, Shape<dyn, 5>, D>& in) { return kiln::sum(rows.unreduced(in, t) * dloss).item(); };
  const auto g_rows = rows.backward(x, t, dloss);
  BOOST_TEST(kiln::test::gradcheck(f_rows, x, g_rows));
  kiln::Unfused off;
  BOOST_TEST(kiln::test::all_close(rows.backward(x, t, dloss).to_vector(), g_rows.to_vector()));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_one_hot_target_is_the_labels_loss_and_a_mean_divides_by_the_rows, D, kiln::test::devices) {
  const Extents<Shape<dyn, 5>> ext(6);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<double>(30, -3.0, 3.0, 34), ext);
  const std::vector<std::int64_t> labels{4, 0, 2, 2, 1, 3};
  std::vector<double> one_hot(30, 0.0);
  for (std::size_t n = 0; n < labels.size(); ++n) one_hot[n * 5 + static_cast<std::size_t>(labels[n])] = 1.0;
  const auto y = kiln::test::make_tensor<D>(labels, Extents<Shape<dyn>>(6));
  const auto t = kiln::test::make_tensor<D>(one_hot, ext);
  // Without weights (a mean over the rows either way), smoothed or not; with weights summed (the labels'
  // mean divides by the weights of the rows, the probabilities' by the rows, as torch's).
  const std::vector<double> w{0.5, 2.0, 1.0, 3.0, 0.25};
  for (const knn::CrossEntropyLoss& ce : {knn::CrossEntropyLoss{}, knn::CrossEntropyLoss{.label_smoothing = 0.1},
                                          knn::CrossEntropyLoss{.weight = w, .reduction = knn::Reduction::sum,
                                                                .label_smoothing = 0.1}}) {
    BOOST_TEST(ce(x, t).item() == ce(x, y).item(), boost::test_tools::tolerance(1e-12));
    BOOST_TEST(kiln::test::all_close(ce.backward(x, t).to_vector(), ce.backward(x, y).to_vector()));
    BOOST_TEST(kiln::test::all_close(ce.unreduced(x, t).to_vector(), ce.unreduced(x, y).to_vector()));
  }
  const knn::CrossEntropyLoss mean{.weight = w}, sum{.weight = w, .reduction = knn::Reduction::sum};
  BOOST_TEST(mean(x, t).item() == sum(x, t).item() / 6.0, boost::test_tools::tolerance(1e-12));
  double weights = 0;
  for (const auto k : labels) weights += w[static_cast<std::size_t>(k)];
  BOOST_TEST(mean(x, y).item() == sum(x, y).item() / weights, boost::test_tools::tolerance(1e-12));
  // No rows: the mean is NaN (0 / 0), the sum 0, as torch's.
  const auto none = kiln::test::make_tensor<D>(std::vector<double>{}, Extents<Shape<dyn, 5>>(0));
  BOOST_TEST(std::isnan(knn::CrossEntropyLoss{}(none, none).item()));
  BOOST_TEST(sum(none, none).item() == 0.0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(half_logits_take_float_targets_in_the_compute_type, D, kiln::test::devices) {
  // Autocast's case: fp16 logits, fp32 targets. The loss is fp32 arithmetic on the halves' values: the
  // same bits as fp32 logits holding them; the gradient is that one rounded to half once.
  const Extents<Shape<dyn, 5>> ext(4);
  std::vector<kiln::half> xh;
  std::vector<float> xf;
  for (double v : kiln::test::random_values<double>(20, -3.0, 3.0, 35)) {
    xh.push_back(kiln::half(static_cast<float>(v)));
    xf.push_back(static_cast<float>(xh.back()));
  }
  std::vector<float> tv;
  for (double v : soft_rows()) tv.push_back(static_cast<float>(v));
  tv.resize(20);
  const auto t = kiln::test::make_tensor<D>(tv, ext);
  const auto logits_h = kiln::test::make_tensor<D>(xh, ext);
  const auto logits_f = kiln::test::make_tensor<D>(xf, ext);
  const knn::CrossEntropyLoss ce{.label_smoothing = 0.1};
  const auto loss = ce(logits_h, t);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(loss)>, Tensor<float, Shape<>, D>>);
  BOOST_TEST(loss.item() == ce(logits_f, t).item());
  const auto gh = ce.backward(logits_h, t).to_vector();
  const auto gf = ce.backward(logits_f, t).to_vector();
  for (std::size_t i = 0; i < gh.size(); ++i)
    BOOST_TEST_REQUIRE(static_cast<float>(gh[i]) == static_cast<float>(kiln::half(gf[i])), "element " << i);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(soft_cross_entropy_is_one_pass_per_direction_with_no_count, D, kiln::test::devices) {
  // No labels to count: the loss is its rows and their sum, the gradient one pass (three unfused).
  const Extents<Shape<dyn, 5>> ext(8);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(40, -2.0, 2.0, 36), ext);
  const auto t = kiln::test::make_tensor<D>(std::vector<float>(40, 0.2f), ext);
  const knn::CrossEntropyLoss ce;
  auto before = kiln::passes();
  (void)ce(x, t);
  BOOST_TEST(kiln::passes() - before == 2u);
  before = kiln::passes();
  (void)ce.backward(x, t);
  BOOST_TEST(kiln::passes() - before == 1u);
  kiln::Unfused off;
  before = kiln::passes();
  (void)ce.backward(x, t);
  BOOST_TEST(kiln::passes() - before == 3u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(soft_cross_entropy_refuses_ignore_index_other_rows_and_bad_settings, D, kiln::test::devices) {
  const auto x = kiln::test::make_tensor<D>(std::vector<float>(10, 0.0f), Extents<Shape<dyn, 5>>(2));
  const auto t = kiln::test::make_tensor<D>(std::vector<float>(10, 0.2f), Extents<Shape<dyn, 5>>(2));
  const auto t3 = kiln::test::make_tensor<D>(std::vector<float>(15, 0.2f), Extents<Shape<dyn, 5>>(3));
  const auto has = [](const std::string& text) {
    return [text](const std::exception& e) { return std::string(e.what()).find(text) != std::string::npos; };
  };
  const knn::CrossEntropyLoss ignoring{.ignore_index = 0};
  BOOST_CHECK_EXCEPTION((void)ignoring(x, t), kiln::ValueError, has("ignore_index is not supported for floating point target"));
  BOOST_CHECK_EXCEPTION((void)ignoring.backward(x, t), kiln::ValueError, has("ignore_index is not supported"));
  // A negative ignore_index names no class: torch 1.13 lets it be, and so does kiln.
  BOOST_TEST(knn::CrossEntropyLoss{.ignore_index = -1}(x, t).item() == knn::CrossEntropyLoss{}(x, t).item());
  const knn::CrossEntropyLoss ce;
  BOOST_CHECK_EXCEPTION((void)ce(x, t3), kiln::ShapeError,
                        has("kiln::nn::CrossEntropyLoss: logits [2, 5] but target [3, 5]; expected a probability "
                            "target of the logits' shape"));
  BOOST_CHECK_EXCEPTION((void)ce.unreduced(x, t3), kiln::ShapeError, has("but target [3, 5]"));
  // Classes the type leaves dynamic are compared when run.
  const auto xd = kiln::test::make_tensor<D>(std::vector<float>(10, 0.0f), Extents<Shape<dyn, dyn>>(2, 5));
  const auto td = kiln::test::make_tensor<D>(std::vector<float>(6, 0.2f), Extents<Shape<dyn, dyn>>(2, 3));
  BOOST_CHECK_EXCEPTION((void)ce.backward(xd, td), kiln::ShapeError, has("logits [2, 5] but target [2, 3]"));
  const knn::CrossEntropyLoss too_smooth{.label_smoothing = 1.5};
  BOOST_CHECK_EXCEPTION((void)too_smooth(x, t), kiln::ValueError, has("label_smoothing must be between 0.0 and 1.0"));
  const knn::CrossEntropyLoss two_weights{.weight = {1.0, 2.0}};
  BOOST_CHECK_EXCEPTION((void)two_weights.backward(x, t), kiln::ValueError,
                        has("weight has 2 values for 5 classes; expected one per class"));
  const auto dloss = kiln::test::make_tensor<D>(std::vector<float>(3, 1.0f), Extents<Shape<dyn>>(3));
  BOOST_CHECK_EXCEPTION((void)ce.backward(x, t, dloss), kiln::ShapeError, has("dloss [3] for 2 rows of logits"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
