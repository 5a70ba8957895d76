// Softmax, LogSoftmax, CrossEntropyLoss and NLLLoss: float64 finite-difference gradients, stability on
// large logits, the values of torch.nn.functional on a fixed case, ignore_index, label smoothing, sum
// reduction and unreduced rows, LogSoftmax + NLLLoss = CrossEntropyLoss, and labels out of range.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <kiln/nn/nn.hpp>
#include <vector>

#include "support/gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
/// Everything in double, for finite differences.
struct Fp64Check {
  using storage = double;
  using compute = double;
  using master = double;
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "fp64";
};
using kiln::dyn;
using kiln::Shape;
using Rows = Shape<dyn, 7>;  // [N, 7]

/// L = Σ w ⊙ layer(x) for fixed weights w, so dL/dy = w; on 5 samples of shape In.
template <class Layer, class D, class In = Rows>
void check_layer_gradient() {
  using Net = kiln::nn::Sequential<Layer>;
  kiln::nn::Model<Net, In, kiln::Policy<Fp64Check, D>> model(0);
  const kiln::Extents<In> ext = [] {
    kiln::Extents<In> e;
    e[0] = 5;
    for (std::size_t d = 1; d < In::rank; ++d) e[d] = In::extents[d];
    return e;
  }();
  const auto n = static_cast<std::size_t>(ext.numel());
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<double>(n, -3.0, 3.0, 1), ext);
  const auto w = kiln::test::make_tensor<D>(kiln::test::random_values<double>(n, -1.0, 1.0, 2), ext);
  auto f = [&](const kiln::Tensor<double, In, D>& in) { return kiln::sum(model.forward(in) * w).item(); };
  model.forward(x);
  const auto dx = model.backward_input(w);
  BOOST_TEST(kiln::test::gradcheck(f, x, dx));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(softmax_and_cross_entropy)

BOOST_AUTO_TEST_CASE_TEMPLATE(softmax_backward_matches_numeric, D, kiln::test::devices) {
  check_layer_gradient<kiln::nn::Softmax<>, D>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(log_softmax_backward_matches_numeric, D, kiln::test::devices) {
  check_layer_gradient<kiln::nn::LogSoftmax<>, D>();
}

// Along the channels of [N, C, H, W], the last of three, the middle one and the batch: the sums run
// along that dimension alone (a wrong axis makes the finite differences disagree).
BOOST_AUTO_TEST_CASE_TEMPLATE(softmax_along_any_dimension_backward_matches_numeric, D, kiln::test::devices) {
  check_layer_gradient<kiln::nn::Softmax<1>, D, Shape<dyn, 3, 2, 2>>();
  check_layer_gradient<kiln::nn::LogSoftmax<1>, D, Shape<dyn, 3, 2, 2>>();
  check_layer_gradient<kiln::nn::Softmax<-1>, D, Shape<dyn, 2, 4>>();
  check_layer_gradient<kiln::nn::LogSoftmax<-2>, D, Shape<dyn, 4, 2>>();
  check_layer_gradient<kiln::nn::Softmax<0>, D, Shape<dyn, 3>>();
}

// Each slice along the dimension sums to one, whichever it is.
BOOST_AUTO_TEST_CASE_TEMPLATE(softmax_over_channels_sums_to_one_per_pixel, D, kiln::test::devices) {
  using Image = Shape<dyn, 3, 2, 2>;
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Softmax<1>>, Image, kiln::Policy<kiln::Fp32, D>> model(0);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(24, -5.0, 5.0, 3),
                                            kiln::Extents<Image>(2));
  const auto per_pixel = kiln::sum<1>(model.forward(x)).to_vector();  // [2, 2, 2]
  BOOST_TEST(per_pixel.size() == 8u);
  for (float v : per_pixel) BOOST_TEST(v == 1.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(model.net().template layer<0>().name() == "Softmax(dim=1)");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(softmax_rows_sum_to_one_even_for_large_logits, D, kiln::test::devices) {
  using Net = kiln::nn::Sequential<kiln::nn::Softmax<>>;
  kiln::nn::Model<Net, Shape<dyn, 3>, kiln::Policy<kiln::Fp32, D>> model(0);
  const std::vector<float> v{1e4f, 0.0f, -1e4f, 88.0f, 89.0f, 90.0f};
  const auto y = model.forward(kiln::test::make_tensor<D>(v, kiln::Extents<Shape<dyn, 3>>(2))).to_vector();
  BOOST_TEST(y[0] == 1.0f);
  BOOST_TEST(y[2] == 0.0f);
  // softmax([88, 89, 90]) = [0.09003057, 0.24472847, 0.66524096]
  BOOST_TEST(y[3] == 0.09003057f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(y[5] == 0.66524096f, boost::test_tools::tolerance(1e-5f));
}

// torch.softmax / log_softmax of a [2, 0] tensor is a [2, 0] tensor (max over no features would throw).
BOOST_AUTO_TEST_CASE_TEMPLATE(softmax_of_no_features_is_empty, D, kiln::test::devices) {
  using Wide = Shape<dyn, dyn>;
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Softmax<>>, Wide, kiln::Policy<kiln::Fp32, D>> soft(0);
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::LogSoftmax<>>, Wide, kiln::Policy<kiln::Fp32, D>> log_soft(0);
  const kiln::Tensor<float, Wide, D> x(kiln::Extents<Wide>(2, 0));
  const auto y = soft.forward(x);
  BOOST_TEST(y.size(0) == 2);
  BOOST_TEST(y.size(1) == 0);
  soft.backward(y);
  BOOST_TEST(log_soft.forward(x).numel() == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_backward_matches_numeric, D, kiln::test::devices) {
  const kiln::Extents<Rows> ext(6);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<double>(42, -4.0, 4.0, 3), ext);
  const std::vector<std::int64_t> labels{0, 6, 3, 3, 1, 5};
  const auto y = kiln::test::make_tensor<D>(labels, kiln::Extents<Shape<dyn>>(6));
  kiln::nn::CrossEntropyLoss ce;
  auto f = [&](const kiln::Tensor<double, Rows, D>& in) { return ce(in, y).item(); };
  BOOST_TEST(kiln::test::gradcheck(f, x, ce.backward(x, y)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_matches_torch_and_survives_large_logits, D, kiln::test::devices) {
  // torch.nn.functional.cross_entropy(torch.tensor([[1., 2, 3], [1e4, 0, -1e4]]), torch.tensor([2, 1]))
  //   = (0.40760596 + 10000.0) / 2 = 5000.203803
  const std::vector<float> v{1.0f, 2.0f, 3.0f, 1e4f, 0.0f, -1e4f};
  const auto x = kiln::test::make_tensor<D>(v, kiln::Extents<Shape<dyn, 3>>(2));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{2, 1}, kiln::Extents<Shape<dyn>>(2));
  kiln::nn::CrossEntropyLoss ce;
  const float loss = ce(x, y).item();
  BOOST_TEST(std::isfinite(loss));
  BOOST_TEST(loss == 5000.203803f, boost::test_tools::tolerance(1e-6f));
  const auto g = ce.backward(x, y).to_vector();
  // row 0: (softmax - onehot) / 2 = ([0.09003057, 0.24472847, 0.66524096] - [0, 0, 1]) / 2
  BOOST_TEST(g[0] == 0.045015287f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(g[2] == -0.16737952f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(g[3] == 0.5f);
  BOOST_TEST(g[4] == -0.5f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_is_one_pass_per_direction_plus_the_mean, D, kiln::test::devices) {
  // The CPU counts the labels that are not ignore_index on the host (checking them); the GPU with one
  // reduction per direction.
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(70, -2.0, 2.0, 4), kiln::Extents<Rows>(10));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>(10, 3), kiln::Extents<Shape<dyn>>(10));
  const unsigned counting = std::is_same_v<D, kiln::Cpu> ? 0u : 1u;
  kiln::nn::CrossEntropyLoss ce;
  auto before = kiln::passes();
  (void)ce(x, y);
  BOOST_TEST(kiln::passes() - before == 2u + counting);  // rows + sum
  before = kiln::passes();
  (void)ce.backward(x, y);
  BOOST_TEST(kiln::passes() - before == 1u + counting);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_skips_rows_labelled_ignore_index, D, kiln::test::devices) {
  // As torch.nn.CrossEntropyLoss(ignore_index=-100): the mean runs over the other rows, and ignored rows
  // get a zero gradient. The same as the loss of the kept rows alone, fused and unfused.
  constexpr kiln::index_t n = 7, kept = 4;
  const auto v = kiln::test::random_values<float>(n * 7, -3.0, 3.0, 5);
  const std::vector<std::int64_t> labels{2, -100, 6, -100, 0, -100, 4};
  const std::vector<std::size_t> kept_rows{0, 2, 4, 6};
  std::vector<float> kv;
  std::vector<std::int64_t> kl;
  for (std::size_t r : kept_rows) {
    kv.insert(kv.end(), v.begin() + static_cast<std::ptrdiff_t>(r * 7), v.begin() + static_cast<std::ptrdiff_t>(r * 7 + 7));
    kl.push_back(labels[r]);
  }
  const auto x = kiln::test::make_tensor<D>(v, kiln::Extents<Rows>(n));
  const auto y = kiln::test::make_tensor<D>(labels, kiln::Extents<Shape<dyn>>(n));
  const auto xk = kiln::test::make_tensor<D>(kv, kiln::Extents<Rows>(kept));
  const auto yk = kiln::test::make_tensor<D>(kl, kiln::Extents<Shape<dyn>>(kept));
  const kiln::nn::CrossEntropyLoss ce;
  BOOST_TEST(ce(x, y).item() == ce(xk, yk).item(), boost::test_tools::tolerance(1e-6f));
  const auto want = ce.backward(xk, yk, 3.0).to_vector();
  for (const bool fused : {true, false}) {
    BOOST_TEST_CONTEXT((fused ? "fused" : "unfused")) {
      std::vector<float> g;
      if (fused) {
        g = ce.backward(x, y, 3.0).to_vector();
      } else {
        kiln::Unfused off;
        g = ce.backward(x, y, 3.0).to_vector();
      }
      for (std::size_t r = 0, k = 0; r < labels.size(); ++r)
        for (std::size_t j = 0; j < 7; ++j) {
          if (labels[r] == -100) {
            BOOST_TEST(g[r * 7 + j] == 0.0f);
          } else {
            BOOST_TEST(g[r * 7 + j] == want[k * 7 + j], boost::test_tools::tolerance(1e-6f));
          }
          if (j == 6 && labels[r] != -100) ++k;
        }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_with_ignored_rows_matches_numeric, D, kiln::test::devices) {
  const kiln::Extents<Rows> ext(6);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<double>(42, -4.0, 4.0, 6), ext);
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0, 3, 3, 5, 1, 3}, kiln::Extents<Shape<dyn>>(6));
  const kiln::nn::CrossEntropyLoss ce{.ignore_index = 3};  // an ignored class inside [0, C)
  auto f = [&](const kiln::Tensor<double, Rows, D>& in) { return ce(in, y).item(); };
  const auto g = ce.backward(x, y);
  BOOST_TEST(kiln::test::gradcheck(f, x, g));
  const auto gv = g.to_vector();
  for (std::size_t j = 0; j < 7; ++j) BOOST_TEST(gv[7 + j] == 0.0);  // row 1 is labelled 3
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_of_only_ignored_rows_is_nan_with_a_zero_gradient, D, kiln::test::devices) {
  // torch: the mean over no rows is 0 / 0; nothing reaches the logits.
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(14, -1.0, 1.0, 7), kiln::Extents<Rows>(2));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{-100, -100}, kiln::Extents<Shape<dyn>>(2));
  const kiln::nn::CrossEntropyLoss ce;
  BOOST_TEST(std::isnan(ce(x, y).item()));
  for (float g : ce.backward(x, y).to_vector()) BOOST_TEST(g == 0.0f);
  // An empty batch: torch's 0 / 0 as well.
  const auto none = kiln::test::make_tensor<D>(std::vector<float>{}, kiln::Extents<Rows>(0));
  const auto no_labels = kiln::test::make_tensor<D>(std::vector<std::int64_t>{}, kiln::Extents<Shape<dyn>>(0));
  BOOST_TEST(std::isnan(ce(none, no_labels).item()));
  BOOST_TEST(ce.backward(none, no_labels).numel() == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_ignored_row_of_infinite_logits_still_poisons_the_gradient, D, kiln::test::devices) {
  // As autograd's log_softmax backward: 0 - softmax * 0, which for a row with a +inf logit is NaN in
  // every element (torch 1.13: the whole row), so that a GradScaler skips the step; fused and unfused
  // alike. The loss ignores the row.
  std::vector<float> v = kiln::test::random_values<float>(14, -1.0, 1.0, 8);
  v[7 + 2] = INFINITY;  // row 1, ignored
  const auto x = kiln::test::make_tensor<D>(v, kiln::Extents<Rows>(2));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{4, -100}, kiln::Extents<Shape<dyn>>(2));
  const kiln::nn::CrossEntropyLoss ce;
  BOOST_TEST(std::isfinite(ce(x, y).item()));
  for (const bool fused : {true, false}) {
    BOOST_TEST_CONTEXT((fused ? "fused" : "unfused")) {
      std::vector<float> g;
      if (fused) {
        g = ce.backward(x, y).to_vector();
      } else {
        kiln::Unfused off;
        g = ce.backward(x, y).to_vector();
      }
      for (std::size_t j = 0; j < 7; ++j) BOOST_TEST(std::isfinite(g[j]));
      for (std::size_t j = 0; j < 7; ++j) BOOST_TEST(std::isnan(g[7 + j]));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_rejects_labels_outside_the_classes, D, kiln::test::devices) {
  // The CPU throws and names the label; the GPU (which does not read the labels back) gives a NaN loss
  // and NaN in that row's gradient, which a GradScaler then skips.
  const auto x = kiln::test::make_tensor<D>(std::vector<float>(6, 0.0f), kiln::Extents<Shape<dyn, 3>>(2));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0, 3}, kiln::Extents<Shape<dyn>>(2));
  const auto ones = kiln::test::make_tensor<D>(std::vector<float>(2, 1.0f), kiln::Extents<Shape<dyn>>(2));
  kiln::nn::CrossEntropyLoss ce;
  if constexpr (std::is_same_v<D, kiln::Cpu>) {
    for (const bool backward : {false, true}) {
      BOOST_CHECK_EXCEPTION(backward ? (void)ce.backward(x, y) : (void)ce(x, y), kiln::ValueError,
                            [](const kiln::ValueError& e) {
                              const std::string m = e.what();
                              return m.find("label 3 in row 1 of the batch") != std::string::npos &&
                                     m.find("[0, 3)") != std::string::npos &&
                                     m.find("ignore_index (-100)") != std::string::npos;
                            });
    }
    const auto minus_one = kiln::test::make_tensor<D>(std::vector<std::int64_t>{-1, 0}, kiln::Extents<Shape<dyn>>(2));
    BOOST_CHECK_THROW((void)ce(x, minus_one), kiln::ValueError);
    BOOST_CHECK_THROW((void)ce.unreduced(x, y), kiln::ValueError);  // unreduced: checked all the same
    BOOST_CHECK_THROW((void)ce.backward(x, y, ones), kiln::ValueError);
  } else {
    BOOST_TEST(std::isnan(ce(x, y).item()));
    const auto rows = ce.unreduced(x, y).to_vector();
    BOOST_TEST(std::isfinite(rows[0]));
    BOOST_TEST(std::isnan(rows[1]));
    for (const auto& g : {ce.backward(x, y).to_vector(), ce.backward(x, y, ones).to_vector()}) {
      for (std::size_t j = 0; j < 3; ++j) {
        BOOST_TEST(std::isfinite(g[j]));
        BOOST_TEST(std::isnan(g[3 + j]));
      }
    }
  }
  const auto short_labels = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0}, kiln::Extents<Shape<dyn>>(1));
  BOOST_CHECK_THROW((void)ce(x, short_labels), kiln::ShapeError);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(smoothed_and_summed_cross_entropy_match_numeric_fused_and_unfused, D, kiln::test::devices) {
  // torch's label_smoothing and reduction='sum', with ignored rows and a row of large logits: the
  // gradient is the finite difference of the loss, and the unfused passes give the same gradient.
  const kiln::Extents<Rows> ext(6);
  auto v = kiln::test::random_values<double>(42, -4.0, 4.0, 9);
  for (std::size_t j = 0; j < 7; ++j) v[14 + j] *= 50.0;  // row 2
  const auto x = kiln::test::make_tensor<D>(v, ext);
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0, -100, 3, 6, -100, 1}, kiln::Extents<Shape<dyn>>(6));
  using R = kiln::nn::Reduction;
  for (const auto reduction : {R::mean, R::sum}) {
    for (const double eps : {0.0, 0.25, 1.0}) {
      BOOST_TEST_CONTEXT((reduction == R::sum ? "sum" : "mean") << ", label_smoothing " << eps) {
        const kiln::nn::CrossEntropyLoss ce{.reduction = reduction, .label_smoothing = eps};
        auto f = [&](const kiln::Tensor<double, Rows, D>& in) { return ce(in, y).item(); };
        const auto g = ce.backward(x, y);
        BOOST_TEST(kiln::test::gradcheck(f, x, g));
        const auto gv = g.to_vector();
        for (std::size_t j = 0; j < 7; ++j) BOOST_TEST(gv[7 + j] == 0.0);  // row 1 is ignored
        kiln::Unfused off;
        BOOST_TEST(kiln::test::all_close(ce.backward(x, y).to_vector(), gv));
      }
    }
  }
  // The sum is the mean times the rows that count (4), smoothed or not.
  const kiln::nn::CrossEntropyLoss mean{.label_smoothing = 0.25}, sum{.reduction = R::sum, .label_smoothing = 0.25};
  BOOST_TEST(sum(x, y).item() == 4.0 * mean(x, y).item(), boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_summed_cross_entropy_counts_nothing_and_sums_no_rows_to_zero, D, kiln::test::devices) {
  // No count of the labels on the GPU (its denominator is 1); the sum over no rows, or over only ignored
  // ones, is 0 (torch's), not NaN.
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(70, -2.0, 2.0, 10), kiln::Extents<Rows>(10));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>(10, 3), kiln::Extents<Shape<dyn>>(10));
  const kiln::nn::CrossEntropyLoss ce{.reduction = kiln::nn::Reduction::sum};
  auto before = kiln::passes();
  (void)ce(x, y);
  BOOST_TEST(kiln::passes() - before == 2u);  // rows + sum
  before = kiln::passes();
  (void)ce.backward(x, y);
  BOOST_TEST(kiln::passes() - before == 1u);
  const auto ignored = kiln::test::make_tensor<D>(std::vector<std::int64_t>(10, -100), kiln::Extents<Shape<dyn>>(10));
  BOOST_TEST(ce(x, ignored).item() == 0.0f);
  for (float g : ce.backward(x, ignored).to_vector()) BOOST_TEST_REQUIRE(g == 0.0f);
  const auto none = kiln::test::make_tensor<D>(std::vector<float>{}, kiln::Extents<Rows>(0));
  const auto no_labels = kiln::test::make_tensor<D>(std::vector<std::int64_t>{}, kiln::Extents<Shape<dyn>>(0));
  BOOST_TEST(ce(none, no_labels).item() == 0.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unreduced_cross_entropy_matches_numeric_and_the_reductions, D, kiln::test::devices) {
  // torch's reduction='none': L = Σ_n w[n] loss[n] for fixed weights w, so backward(x, y, w) is its
  // gradient; with ignored rows (loss and gradient 0) and a row of large logits, smoothed or not, fused
  // and unfused. Summed, the rows are the sum reduction; backward with w = 1 / count is the mean's.
  const kiln::Extents<Rows> ext(6);
  auto v = kiln::test::random_values<double>(42, -4.0, 4.0, 11);
  for (std::size_t j = 0; j < 7; ++j) v[14 + j] *= 50.0;  // row 2
  const auto x = kiln::test::make_tensor<D>(v, ext);
  const kiln::Extents<Shape<dyn>> rows(6);
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0, -100, 3, 6, -100, 1}, rows);
  const auto w = kiln::test::make_tensor<D>(kiln::test::random_values<double>(6, -1.0, 1.0, 12), rows);
  for (const double eps : {0.0, 0.25}) {
    BOOST_TEST_CONTEXT("label_smoothing " << eps) {
      const kiln::nn::CrossEntropyLoss ce{.label_smoothing = eps};
      const auto loss = ce.unreduced(x, y);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(loss)>, kiln::Tensor<double, Shape<dyn>, D>>);
      const auto lv = loss.to_vector();
      BOOST_TEST(lv[1] == 0.0);
      BOOST_TEST(lv[4] == 0.0);
      auto f = [&](const kiln::Tensor<double, Rows, D>& in) { return kiln::sum(ce.unreduced(in, y) * w).item(); };
      const auto g = ce.backward(x, y, w);
      BOOST_TEST(kiln::test::gradcheck(f, x, g));
      const auto gv = g.to_vector();
      for (std::size_t j = 0; j < 7; ++j) BOOST_TEST(gv[7 + j] == 0.0);  // row 1 is ignored
      {
        kiln::Unfused off;
        BOOST_TEST(kiln::test::all_close(ce.backward(x, y, w).to_vector(), gv));
      }
      const kiln::nn::CrossEntropyLoss sum{.reduction = kiln::nn::Reduction::sum, .label_smoothing = eps};
      BOOST_TEST(kiln::sum(loss).item() == sum(x, y).item(), boost::test_tools::tolerance(1e-12));
      const auto quarter = kiln::test::make_tensor<D>(std::vector<double>(6, 0.25), rows);  // 4 rows count
      BOOST_TEST(kiln::test::all_close(ce.backward(x, y, quarter).to_vector(), ce.backward(x, y).to_vector()));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unreduced_cross_entropy_is_one_pass_per_direction_and_checks_dloss, D, kiln::test::devices) {
  // No count of the labels (nothing is divided); a dloss that is not one value per row is refused.
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(70, -2.0, 2.0, 13), kiln::Extents<Rows>(10));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>(10, 3), kiln::Extents<Shape<dyn>>(10));
  const auto w = kiln::test::make_tensor<D>(std::vector<float>(10, 1.0f), kiln::Extents<Shape<dyn>>(10));
  const kiln::nn::CrossEntropyLoss ce;
  auto before = kiln::passes();
  const auto loss = ce.unreduced(x, y);
  BOOST_TEST(kiln::passes() - before == 1u);
  BOOST_TEST(loss.size(0) == 10);
  before = kiln::passes();
  (void)ce.backward(x, y, w);
  BOOST_TEST(kiln::passes() - before == 1u);
  // An ignored row's gradient is 0 whatever its dloss (NaN here), as torch's nll_loss backward skips it.
  const auto some_ignored = kiln::test::make_tensor<D>(std::vector<std::int64_t>{3, -100, 3, 3, 3, 3, 3, 3, 3, -100},
                                                       kiln::Extents<Shape<dyn>>(10));
  std::vector<float> nan_w(10, 1.0f);
  nan_w[1] = nan_w[9] = NAN;
  const auto wn = kiln::test::make_tensor<D>(nan_w, kiln::Extents<Shape<dyn>>(10));
  for (const bool fused : {true, false}) {
    std::optional<kiln::Unfused> off;
    if (!fused) off.emplace();
    for (const auto& g : {ce.backward(x, some_ignored, wn).to_vector(), kiln::nn::NLLLoss{}.backward(x, some_ignored, wn).to_vector()})
      for (std::size_t j = 0; j < 70; ++j) BOOST_TEST_REQUIRE((j / 7 == 1 || j / 7 == 9 ? g[j] == 0.0f : std::isfinite(g[j])));
  }
  const auto short_w = kiln::test::make_tensor<D>(std::vector<float>(9, 1.0f), kiln::Extents<Shape<dyn>>(9));
  BOOST_CHECK_EXCEPTION((void)ce.backward(x, y, short_w), kiln::ShapeError, [](const kiln::ShapeError& e) {
    return std::string(e.what()).find("dloss [9] for 10 rows of logits [10, 7]") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nll_loss_after_log_softmax_is_cross_entropy, D, kiln::test::devices) {
  // LogSoftmax + NLLLoss = CrossEntropyLoss, value and input gradient (through the layer's backward),
  // mean and sum, with ignored rows; NLLLoss's own gradient is the finite difference of its value, summed
  // or unreduced. Passes: rows + sum forward, one backward (plus the count of a mean on the GPU).
  using Net = kiln::nn::Sequential<kiln::nn::LogSoftmax<>>;
  kiln::nn::Model<Net, Rows, kiln::Policy<Fp64Check, D>> model(0);
  const kiln::Extents<Rows> ext(6);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<double>(42, -4.0, 4.0, 14), ext);
  const kiln::Extents<Shape<dyn>> rows(6);
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{5, -100, 0, 6, 2, -100}, rows);
  using R = kiln::nn::Reduction;
  for (const auto reduction : {R::mean, R::sum}) {
    BOOST_TEST_CONTEXT((reduction == R::sum ? "sum" : "mean")) {
      const kiln::nn::NLLLoss nll{.reduction = reduction};
      const kiln::nn::CrossEntropyLoss ce{.reduction = reduction};
      const auto logp = model.forward(x);
      BOOST_TEST(nll(logp, y).item() == ce(x, y).item(), boost::test_tools::tolerance(1e-12));
      const auto dx = model.backward_input(nll.backward(logp, y));
      BOOST_TEST(kiln::test::all_close(dx.to_vector(), ce.backward(x, y).to_vector()));
      auto f = [&](const kiln::Tensor<double, Rows, D>& in) { return nll(in, y).item(); };
      BOOST_TEST(kiln::test::gradcheck(f, x, nll.backward(x, y)));
    }
  }
  const kiln::nn::NLLLoss nll;
  const auto w = kiln::test::make_tensor<D>(kiln::test::random_values<double>(6, -1.0, 1.0, 15), rows);
  auto f = [&](const kiln::Tensor<double, Rows, D>& in) { return kiln::sum(nll.unreduced(in, y) * w).item(); };
  BOOST_TEST(kiln::test::gradcheck(f, x, nll.backward(x, y, w)));
  const unsigned counting = std::is_same_v<D, kiln::Cpu> ? 0u : 1u;
  auto before = kiln::passes();
  (void)nll(x, y);
  BOOST_TEST(kiln::passes() - before == 2u + counting);
  before = kiln::passes();
  (void)nll.backward(x, y);
  BOOST_TEST(kiln::passes() - before == 1u + counting);
  before = kiln::passes();
  (void)nll.unreduced(x, y);
  (void)nll.backward(x, y, w);
  BOOST_TEST(kiln::passes() - before == 2u);
  // torch's mean over only ignored rows is 0 / 0, with a zero gradient; the sum 0; an empty batch the same.
  const auto ignored = kiln::test::make_tensor<D>(std::vector<std::int64_t>(6, -100), rows);
  BOOST_TEST(std::isnan(nll(x, ignored).item()));
  for (double g : nll.backward(x, ignored).to_vector()) BOOST_TEST_REQUIRE(g == 0.0);
  BOOST_TEST(kiln::nn::NLLLoss{.reduction = R::sum}(x, ignored).item() == 0.0);
  const auto none = kiln::test::make_tensor<D>(std::vector<double>{}, kiln::Extents<Rows>(0));
  const auto no_labels = kiln::test::make_tensor<D>(std::vector<std::int64_t>{}, kiln::Extents<Shape<dyn>>(0));
  BOOST_TEST(std::isnan(nll(none, no_labels).item()));
  BOOST_TEST(kiln::nn::NLLLoss{.reduction = R::sum}(none, no_labels).item() == 0.0);
  BOOST_TEST(nll.unreduced(none, no_labels).numel() == 0);
  // A log-probability of -inf: at the label the loss is inf and the gradient still -1 / count (torch's);
  // elsewhere, or on an ignored row, it changes nothing.
  auto v = kiln::test::random_values<double>(42, -4.0, 0.0, 17);
  v[0 * 7 + 5] = -INFINITY;  // row 0's label
  v[2 * 7 + 1] = -INFINITY;  // row 2, off its label
  v[1 * 7 + 3] = -INFINITY;  // row 1, ignored
  const auto xi = kiln::test::make_tensor<D>(v, ext);
  BOOST_TEST(std::isinf(nll(xi, y).item()));
  const auto gi = nll.backward(xi, y).to_vector();
  for (std::size_t j = 0; j < 42; ++j) {
    const std::size_t row = j / 7, col = j % 7;
    const std::int64_t label = std::vector<std::int64_t>{5, -100, 0, 6, 2, -100}[row];
    BOOST_TEST_REQUIRE(gi[j] == (static_cast<std::int64_t>(col) == label ? -0.25 : 0.0));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nll_loss_labels_outside_the_classes, D, kiln::test::devices) {
  // As CrossEntropyLoss: the CPU throws naming the label, its row and the range; the GPU gives NaN.
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(21, -3.0, 0.0, 16), kiln::Extents<Rows>(3));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{1, 7, 0}, kiln::Extents<Shape<dyn>>(3));
  const auto ones = kiln::test::make_tensor<D>(std::vector<float>(3, 1.0f), kiln::Extents<Shape<dyn>>(3));
  const kiln::nn::NLLLoss nll;
  if constexpr (std::is_same_v<D, kiln::Cpu>) {
    BOOST_CHECK_EXCEPTION((void)nll(x, y), kiln::ValueError, [](const kiln::ValueError& e) {
      return std::string(e.what()) ==
             "kiln::nn::NLLLoss: label 7 in row 1 of the batch is outside [0, 7) and is not ignore_index "
             "(-100): labels are class indices from 0, one per score column";
    });
    BOOST_CHECK_THROW((void)nll.backward(x, y), kiln::ValueError);
    BOOST_CHECK_THROW((void)nll.unreduced(x, y), kiln::ValueError);
    BOOST_CHECK_THROW((void)nll.backward(x, y, ones), kiln::ValueError);
  } else {
    BOOST_TEST(std::isnan(nll(x, y).item()));
    const auto rows = nll.unreduced(x, y).to_vector();
    BOOST_TEST(std::isfinite(rows[0]));
    BOOST_TEST(std::isnan(rows[1]));
    for (const auto& g : {nll.backward(x, y).to_vector(), nll.backward(x, y, ones).to_vector()}) {
      for (std::size_t j = 0; j < 7; ++j) BOOST_TEST(std::isfinite(g[j]));
      for (std::size_t j = 0; j < 7; ++j) BOOST_TEST(std::isnan(g[7 + j]));
    }
  }
  const auto short_labels = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0}, kiln::Extents<Shape<dyn>>(1));
  BOOST_CHECK_EXCEPTION((void)nll(x, short_labels), kiln::ShapeError, [](const kiln::ShapeError& e) {
    return std::string(e.what()) == "kiln::nn::NLLLoss: 3 rows of log-probabilities [3, 7] but 1 labels";
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(class_weighted_losses_match_numeric_fused_and_unfused, D, kiln::test::devices) {
  // torch's weight=: each row weighed by its label's weight (the smoothing term class by class), a mean
  // divided by the weights of the rows that count. Gradients are the finite differences of the losses,
  // the unfused passes agree, and a weighted mean is the weighted sum over those weights.
  const kiln::Extents<Rows> ext(6);
  auto v = kiln::test::random_values<double>(42, -4.0, 4.0, 21);
  for (std::size_t j = 0; j < 7; ++j) v[14 + j] *= 50.0;  // row 2: large logits
  const auto x = kiln::test::make_tensor<D>(v, ext);
  const std::vector<std::int64_t> labels{0, -100, 3, 6, -100, 3};
  const auto y = kiln::test::make_tensor<D>(labels, kiln::Extents<Shape<dyn>>(6));
  const std::vector<double> w{0.5, 1.0, 2.0, 3.0, 0.25, 1.5, 4.0};
  using R = kiln::nn::Reduction;
  for (const auto reduction : {R::mean, R::sum}) {
    for (const double eps : {0.0, 0.25}) {
      BOOST_TEST_CONTEXT((reduction == R::sum ? "sum" : "mean") << ", label_smoothing " << eps) {
        const kiln::nn::CrossEntropyLoss ce{.weight = w, .reduction = reduction, .label_smoothing = eps};
        auto f = [&](const kiln::Tensor<double, Rows, D>& in) { return ce(in, y).item(); };
        const auto g = ce.backward(x, y);
        BOOST_TEST(kiln::test::gradcheck(f, x, g));
        const auto gv = g.to_vector();
        for (std::size_t j = 0; j < 7; ++j) BOOST_TEST(gv[7 + j] == 0.0);  // row 1 is ignored
        {
          kiln::Unfused off;
          BOOST_TEST(kiln::test::all_close(ce.backward(x, y).to_vector(), gv));
        }
        // The unweighted rows times their weights (no smoothing: smoothing weighs every class).
        if (eps == 0.0) {
          const auto plain = kiln::nn::CrossEntropyLoss{}.unreduced(x, y).to_vector();
          double total = 0, weights = 0;
          for (std::size_t n = 0; n < labels.size(); ++n)
            if (labels[n] != -100) {
              total += w[static_cast<std::size_t>(labels[n])] * plain[n];
              weights += w[static_cast<std::size_t>(labels[n])];
            }
          BOOST_TEST(ce(x, y).item() == (reduction == R::sum ? total : total / weights), boost::test_tools::tolerance(1e-12));
        }
      }
    }
  }
  // reduction='none' with an upstream gradient: each row's gradient is dloss[n] times its own.
  const kiln::nn::CrossEntropyLoss rows{.weight = w, .label_smoothing = 0.25};
  const auto dloss = kiln::test::make_tensor<D>(kiln::test::random_values<double>(6, -1.0, 1.0, 22), kiln::Extents<Shape<dyn>>(6));
  auto f_rows = [&](const kiln::Tensor<double, Rows, D>& in) { return kiln::sum(rows.unreduced(in, y) * dloss).item(); };
  BOOST_TEST(kiln::test::gradcheck(f_rows, x, rows.backward(x, y, dloss)));
  // NLLLoss over log-probabilities: -w[y] logp[y], fused or not (it has one pass).
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::LogSoftmax<>>, Rows, kiln::Policy<Fp64Check, D>> log_softmax(0);
  for (const auto reduction : {R::mean, R::sum}) {
    const kiln::nn::NLLLoss nll{.weight = w, .reduction = reduction};
    auto f = [&](const kiln::Tensor<double, Rows, D>& in) { return nll(in, y).item(); };
    BOOST_TEST(kiln::test::gradcheck(f, x, nll.backward(x, y)));
    // NLLLoss of log_softmax(x) is cross entropy of x, weights and all, value and input gradient.
    const kiln::nn::CrossEntropyLoss ce{.weight = w, .reduction = reduction};
    const auto logp = log_softmax.forward(x);
    BOOST_TEST(nll(logp, y).item() == ce(x, y).item(), boost::test_tools::tolerance(1e-12));
    const auto dx = log_softmax.backward_input(nll.backward(logp, y));
    BOOST_TEST(kiln::test::all_close(dx.to_vector(), ce.backward(x, y).to_vector()));
  }
  // DataParallel's share of a batch: the weights of its rows that count.
  if constexpr (std::is_same_v<D, kiln::Cpu>) {
    BOOST_TEST(kiln::nn::CrossEntropyLoss{.weight = w}.counted(y) == 0.5 + 3.0 + 4.0 + 3.0);
    BOOST_TEST(kiln::nn::NLLLoss{.weight = w}.counted(y) == 0.5 + 3.0 + 4.0 + 3.0);
    BOOST_TEST(kiln::nn::CrossEntropyLoss{}.counted(y) == 4.0);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(class_weights_need_one_per_class, D, kiln::test::devices) {
  const auto x = kiln::test::make_tensor<D>(std::vector<float>(6, 0.0f), kiln::Extents<Shape<dyn, 3>>(2));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0, 2}, kiln::Extents<Shape<dyn>>(2));
  const auto says = [](const std::string& who) {
    return [who](const kiln::ValueError& e) {
      return std::string(e.what()) == who + ": weight has 2 values for 3 classes; expected one per class";
    };
  };
  const kiln::nn::CrossEntropyLoss ce{.weight = {1.0, 2.0}};
  BOOST_CHECK_EXCEPTION((void)ce(x, y), kiln::ValueError, says("kiln::nn::CrossEntropyLoss"));
  BOOST_CHECK_EXCEPTION((void)ce.backward(x, y), kiln::ValueError, says("kiln::nn::CrossEntropyLoss"));
  BOOST_CHECK_EXCEPTION((void)ce.unreduced(x, y), kiln::ValueError, says("kiln::nn::CrossEntropyLoss"));
  const kiln::nn::NLLLoss nll{.weight = {1.0, 2.0}};
  BOOST_CHECK_EXCEPTION((void)nll(x, y), kiln::ValueError, says("kiln::nn::NLLLoss"));
  BOOST_CHECK_EXCEPTION((void)nll.backward(x, y), kiln::ValueError, says("kiln::nn::NLLLoss"));
  // A batch whose rows are all ignored: the weights that count sum to 0, and the mean is NaN (torch's
  // 0 / 0); with every weight of the batch's classes 0 too.
  const auto ignored = kiln::test::make_tensor<D>(std::vector<std::int64_t>{-100, -100}, kiln::Extents<Shape<dyn>>(2));
  const kiln::nn::CrossEntropyLoss weighted{.weight = {1.0, 2.0, 3.0}}, zero{.weight = {0.0, 2.0, 0.0}},
      summed{.weight = {1.0, 2.0, 3.0}, .reduction = kiln::nn::Reduction::sum};
  BOOST_TEST(std::isnan(weighted(x, ignored).item()));
  BOOST_TEST(std::isnan(zero(x, y).item()));
  // ... and the gradient at the labels too (0 * (1 / 0)), fused, unfused and NLLLoss's, as torch's.
  for (const bool fused : {true, false}) {
    std::optional<kiln::Unfused> off;
    if (!fused) off.emplace();
    const auto g = zero.backward(x, y).to_vector();
    BOOST_TEST((std::isnan(g[0]) && std::isnan(g[5])), (fused ? "fused" : "unfused"));
  }
  const auto gn = kiln::nn::NLLLoss{.weight = {0.0, 2.0, 0.0}}.backward(x, y).to_vector();
  BOOST_TEST((std::isnan(gn[0]) && std::isnan(gn[5]) && gn[1] == 0.0f));
  BOOST_TEST(summed(x, ignored).item() == 0.0f);
  // With label smoothing the other classes' terms are not 0, yet torch's mean is still NaN (its NLL part
  // is 0 / 0), and so is every gradient of a row that counts: not inf.
  const auto first = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0, 0}, kiln::Extents<Shape<dyn>>(2));
  const kiln::nn::CrossEntropyLoss smoothed{.weight = {0.0, 1.0, 2.0}, .label_smoothing = 0.1};
  BOOST_TEST(std::isnan(smoothed(x, first).item()));
  for (const bool fused : {true, false}) {
    std::optional<kiln::Unfused> off;
    if (!fused) off.emplace();
    for (const float g : smoothed.backward(x, first).to_vector()) BOOST_TEST(std::isnan(g), (fused ? "fused" : "unfused"));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_of_logits_with_a_large_common_offset_loses_nothing, D, kiln::test::devices) {
  // torch computes log_softmax as (x - max) - log Σ exp(x - max): logits b + {0, 1, -1} give the same
  // loss and gradient for b = 1e4 as for b = 0 (x - max is exact). Rounding max + log Σ first moved the
  // loss by 4e-4 at 1e4 (1e-3 relative), the gradient too. Labels, probability targets, fused and not.
  const auto at = [](float b) {
    return kiln::test::make_tensor<D>(std::vector<float>{b, b + 1, b - 1, b - 1, b, b + 1}, kiln::Extents<Shape<dyn, 3>>(2));
  };
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{1, 2}, kiln::Extents<Shape<dyn>>(2));
  const auto t = kiln::test::make_tensor<D>(std::vector<float>{0.2f, 0.7f, 0.1f, 0.0f, 0.5f, 0.5f},
                                            kiln::Extents<Shape<dyn, 3>>(2));
  for (const double eps : {0.0, 0.1}) {
    const kiln::nn::CrossEntropyLoss ce{.label_smoothing = eps};
    for (const bool fused : {true, false}) {
      BOOST_TEST_CONTEXT("label_smoothing " << eps << (fused ? ", fused" : ", unfused")) {
        std::optional<kiln::Unfused> off;
        if (!fused) off.emplace();
        for (const float b : {1e4f, 1e5f, -3e4f}) {
          BOOST_TEST(ce(at(b), y).item() == ce(at(0), y).item());
          BOOST_TEST(ce.backward(at(b), y).to_vector() == ce.backward(at(0), y).to_vector(), boost::test_tools::per_element());
          BOOST_TEST(ce.unreduced(at(b), y).to_vector() == ce.unreduced(at(0), y).to_vector(), boost::test_tools::per_element());
          BOOST_TEST(ce(at(b), t).item() == ce(at(0), t).item());
          BOOST_TEST(ce.backward(at(b), t).to_vector() == ce.backward(at(0), t).to_vector(), boost::test_tools::per_element());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(label_smoothing_outside_0_1_is_refused, D, kiln::test::devices) {
  // torch 1.13 refuses eps > 1 with this message (and ignores a negative one); kiln refuses NaN and
  // negative ones as well.
  const auto x = kiln::test::make_tensor<D>(std::vector<float>(6, 0.0f), kiln::Extents<Shape<dyn, 3>>(2));
  const auto y = kiln::test::make_tensor<D>(std::vector<std::int64_t>{0, 2}, kiln::Extents<Shape<dyn>>(2));
  for (const double eps : {-0.1, 1.5, static_cast<double>(NAN)}) {
    const kiln::nn::CrossEntropyLoss ce{.label_smoothing = eps};
    for (const bool backward : {false, true}) {
      BOOST_CHECK_EXCEPTION(backward ? (void)ce.backward(x, y) : (void)ce(x, y), kiln::ValueError,
                            [](const kiln::ValueError& e) {
                              return std::string(e.what()).find("label_smoothing must be between 0.0 and 1.0. Got: ") !=
                                     std::string::npos;
                            });
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
