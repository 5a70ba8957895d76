// L1Loss, SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss and KLDivLoss: PyTorch parity (mean, sum,
// KLDivLoss's batchmean and 'none' with an upstream gradient; tests/parity/fixtures/elementwise_losses.json,
// written by tests/parity/make_fixtures.py with torch 1.13), float64 finite-difference gradients, torch's
// values at the kinks, at BCELoss's ends and at KLDivLoss's zero targets, a device loss scale, 16-bit
// operands computed in fp32, and the errors; each fixture case's recorded torch settings are the kiln
// loss's (support/loss_options.hpp). Both devices.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <kiln/core/half.hpp>
#include <kiln/nn/elementwise_loss.hpp>
#include <kiln/nn/nn.hpp>

#include "support/gradcheck.hpp"
#include "support/loss_options.hpp"
#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace parity = kiln::test::parity;
namespace knn = kiln::nn;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
using nlohmann::json;
using Pairs = Shape<dyn, 3>;

const json& cases() {
  static const json f = parity::load("elementwise_losses.json");
  return f;
}
template <class D>
Tensor<float, Pairs, D> tensor_of(const json& t) {
  const auto v = parity::values(t);
  return Tensor<float, Pairs, D>::from(std::span<const float>(v), Extents<Pairs>(parity::shape(t)[0]));
}
/// got against the fixture tensor want within 1e-5 relative (floored at 1% of want's scale).
void check(const std::vector<float>& got, const json& want, const std::string& what) {
  const auto w = parity::values(want);
  const auto d = parity::compare(std::span<const float>(got), std::span<const float>(w),
                                 parity::scale_floor(std::span<const float>(w)));
  BOOST_TEST(d.max_rel <= 1e-5, what << ": " << parity::describe(d));
}
void check_scalar(float got, const json& want, const std::string& what) {
  check({got}, json{{"shape", {1}}, {"values", {want}}}, what);
}

/// The fixture's cases of one loss: key (mean), key_sum, key_none, each where the fixture has it.
template <class D, class Loss>
void check_cases(const std::string& key, Loss loss) {
  for (const std::string suffix : {"", "_sum", "_none"}) {
    const std::string name = key + suffix;
    if (!cases().contains(name)) continue;
    const json& c = cases().at(name);
    const auto x = tensor_of<D>(c.at("input"));
    const auto y = tensor_of<D>(c.at("target"));
    loss.reduction = suffix == "_sum" ? knn::Reduction::sum : knn::Reduction::mean;
    kiln::test::check_loss_options(c, loss, suffix == "_none", name);
    if (suffix == "_none") {
      const auto dloss = tensor_of<D>(c.at("grad_output"));
      check(loss.unreduced(x, y).to_vector(), c.at("loss"), name + " loss");
      check(loss.backward(x, y, dloss).to_vector(), c.at("grad"), name + " grad");
    } else {
      check_scalar(static_cast<float>(loss(x, y).item()), c.at("loss"), name + " loss");
      check(loss.backward(x, y).to_vector(), c.at("grad"), name + " grad");
    }
  }
}

/// L = loss(x, target) over float64 values spread across both sides of the kinks (|d| near 0.5, 1, 2
/// avoided: a finite difference across a kink is not the derivative).
template <class D, class Loss>
void check_numeric(const Loss& loss, double kink) {
  const Extents<Pairs> ext(5);
  auto xv = kiln::test::random_values<double>(15, -3.0, 3.0, 41);
  const auto yv = kiln::test::random_values<double>(15, -1.0, 1.0, 42);
  for (std::size_t i = 0; i < xv.size(); ++i)
    if (std::abs(std::abs(xv[i] - yv[i]) - kink) < 1e-3) xv[i] += 0.01;
  const auto x = kiln::test::make_tensor<D>(xv, ext);
  const auto y = kiln::test::make_tensor<D>(yv, ext);
  auto f = [&](const Tensor<double, Pairs, D>& in) { return static_cast<double>(loss(in, y).item()); };
  BOOST_TEST(kiln::test::gradcheck(f, x, loss.backward(x, y)));
  // reduction='none': the gradient of Σ dloss ⊙ terms.
  const auto dloss = kiln::test::make_tensor<D>(kiln::test::random_values<double>(15, -1.0, 1.0, 43), ext);
  auto g = [&](const Tensor<double, Pairs, D>& in) { return kiln::sum(loss.unreduced(in, y) * dloss).item(); };
  BOOST_TEST(kiln::test::gradcheck(g, x, loss.backward(x, y, dloss)));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(elementwise_losses)

BOOST_AUTO_TEST_CASE_TEMPLATE(match_pytorch, D, kiln::test::devices) {
  check_cases<D>("l1", knn::L1Loss{});
  check_cases<D>("smooth_l1", knn::SmoothL1Loss{});
  check_cases<D>("smooth_l1_beta_half", knn::SmoothL1Loss{.beta = 0.5});
  check_cases<D>("huber", knn::HuberLoss{});
  check_cases<D>("huber_delta_two", knn::HuberLoss{.delta = 2.0});
  check_cases<D>("bce", knn::BCELoss{});
  check_cases<D>("bce_logits", knn::BCEWithLogitsLoss{});
  check_cases<D>("bce_logits_pos_weight",
                 knn::BCEWithLogitsLoss{.pos_weight = cases().at("bce_logits_pos_weight").at("pos_weight").get<std::vector<double>>()});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kl_div_matches_pytorch, D, kiln::test::devices) {
  using R = knn::KLDivReduction;
  for (const auto& [name, loss] : {std::pair{"kl_div", knn::KLDivLoss{}},
                                   std::pair{"kl_div_sum", knn::KLDivLoss{.reduction = R::sum}},
                                   std::pair{"kl_div_batchmean", knn::KLDivLoss{.reduction = R::batchmean}},
                                   std::pair{"kl_div_none", knn::KLDivLoss{}},
                                   std::pair{"kl_div_log_target_batchmean",
                                             knn::KLDivLoss{.reduction = R::batchmean, .log_target = true}},
                                   std::pair{"kl_div_log_target_none", knn::KLDivLoss{.log_target = true}}}) {
    const std::string key = name;
    const json& c = cases().at(key);
    const auto x = tensor_of<D>(c.at("input"));
    const auto y = tensor_of<D>(c.at("target"));
    kiln::test::check_loss_options(c, loss, c.contains("grad_output"), key);
    if (c.contains("grad_output")) {
      const auto dloss = tensor_of<D>(c.at("grad_output"));
      check(loss.unreduced(x, y).to_vector(), c.at("loss"), key + " loss");
      check(loss.backward(x, y, dloss).to_vector(), c.at("grad"), key + " grad");
    } else {
      check_scalar(static_cast<float>(loss(x, y).item()), c.at("loss"), key + " loss");
      check(loss.backward(x, y).to_vector(), c.at("grad"), key + " grad");
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kl_div_gradients_match_finite_differences, D, kiln::test::devices) {
  // Log-probabilities in [-4, 0], targets in (0, 1] (log_target: their logs), every reduction; then
  // reduction='none' through an upstream gradient.
  const Extents<Pairs> ext(5);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<double>(15, -4.0, 0.0, 71), ext);
  const auto p = kiln::test::random_values<double>(15, 0.05, 1.0, 72);
  std::vector<double> log_p(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) log_p[i] = std::log(p[i]);
  const auto dloss = kiln::test::make_tensor<D>(kiln::test::random_values<double>(15, -1.0, 1.0, 73), ext);
  using R = knn::KLDivReduction;
  for (const bool log_target : {false, true}) {
    const auto y = kiln::test::make_tensor<D>(log_target ? log_p : p, ext);
    for (const auto reduction : {R::mean, R::batchmean, R::sum}) {
      BOOST_TEST_CONTEXT("log_target " << log_target << ", reduction " << static_cast<int>(reduction)) {
        const knn::KLDivLoss kl{.reduction = reduction, .log_target = log_target};
        auto f = [&](const Tensor<double, Pairs, D>& in) { return kl(in, y).item(); };
        BOOST_TEST(kiln::test::gradcheck(f, x, kl.backward(x, y)));
      }
    }
    const knn::KLDivLoss kl{.log_target = log_target};
    auto g = [&](const Tensor<double, Pairs, D>& in) { return kiln::sum(kl.unreduced(in, y) * dloss).item(); };
    BOOST_TEST(kiln::test::gradcheck(g, x, kl.backward(x, y, dloss)));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kl_div_zero_targets_reductions_and_16_bit_operands, D, kiln::test::devices) {
  // torch 1.13: a zero target's term is 0 (0 log 0 = 0) with the gradient -0; against x = -inf it is 0 *
  // -inf = NaN; a negative target's term is NaN (its log), its gradient -t; log_target's e^t (t - x).
  const float inf = INFINITY;
  const Extents<Pairs> ext(2);
  const auto x = kiln::test::make_tensor<D>(std::vector<float>{-1.0f, -inf, -0.5f, -2.0f, -0.1f, -0.7f}, ext);
  const auto t = kiln::test::make_tensor<D>(std::vector<float>{0.0f, 0.0f, 0.5f, -0.5f, 1.0f, 0.25f}, ext);
  const knn::KLDivLoss kl{.reduction = knn::KLDivReduction::sum};
  const auto terms = kl.unreduced(x, t).to_vector();
  BOOST_TEST(terms[0] == 0.0f);
  BOOST_TEST(std::isnan(terms[1]));
  BOOST_TEST(terms[2] == 0.5f * (std::log(0.5f) + 0.5f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(std::isnan(terms[3]));
  BOOST_TEST(terms[4] == 0.1f);
  const auto g = kl.backward(x, t).to_vector();
  const std::vector<float> g_want{-0.0f, -0.0f, -0.5f, 0.5f, -1.0f, -0.25f};
  BOOST_TEST(g == g_want, boost::test_tools::per_element());
  BOOST_TEST(std::signbit(g[0]));
  const knn::KLDivLoss log_kl{.reduction = knn::KLDivReduction::sum, .log_target = true};
  const auto log_terms = log_kl.unreduced(x, t).to_vector();
  BOOST_TEST(log_terms[0] == 1.0f);  // e^0 (0 - (-1))
  BOOST_TEST(log_terms[5] == std::exp(0.25f) * (0.25f + 0.7f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(log_kl.backward(x, t).to_vector()[3] == -std::exp(-0.5f), boost::test_tools::tolerance(1e-6f));

  // The reductions of the same terms: mean over the elements, batchmean over the rows, sum; and their
  // gradients' factors. A rank-0 input's batchmean is its sum (torch divides only where there is a size(0)).
  const auto xv = kiln::test::random_values<float>(12, -3.0f, 0.0f, 74);
  const auto tv = kiln::test::random_values<float>(12, 0.0f, 1.0f, 75);
  const auto x4 = kiln::test::make_tensor<D>(xv, Extents<Pairs>(4));
  const auto t4 = kiln::test::make_tensor<D>(tv, Extents<Pairs>(4));
  using R = knn::KLDivReduction;
  const float total = knn::KLDivLoss{.reduction = R::sum}(x4, t4).item();
  BOOST_TEST(knn::KLDivLoss{.reduction = R::batchmean}(x4, t4).item() == total / 4, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(knn::KLDivLoss{}(x4, t4).item() == total / 12, boost::test_tools::tolerance(1e-6f));
  const auto g_sum = knn::KLDivLoss{.reduction = R::sum}.backward(x4, t4).to_vector();
  const auto g_batch = knn::KLDivLoss{.reduction = R::batchmean}.backward(x4, t4, 2.0).to_vector();
  for (std::size_t i = 0; i < g_sum.size(); ++i) BOOST_TEST(g_batch[i] == g_sum[i] * 2 / 4, boost::test_tools::tolerance(1e-6f));
  const auto x0 = kiln::test::make_tensor<D>(std::vector<float>{-0.5f}, Extents<Shape<>>{});
  const auto t0 = kiln::test::make_tensor<D>(std::vector<float>{0.25f}, Extents<Shape<>>{});
  BOOST_TEST(knn::KLDivLoss{.reduction = R::batchmean}(x0, t0).item() == knn::KLDivLoss{.reduction = R::sum}(x0, t0).item());
  BOOST_TEST(knn::KLDivLoss{.reduction = R::batchmean}.backward(x0, t0).to_vector()[0] == -0.25f);
  // An empty batch: batchmean is 0 / 0, NaN, as torch's.
  const Tensor<float, Pairs, D> empty(Extents<Pairs>(0));
  BOOST_TEST(std::isnan(knn::KLDivLoss{.reduction = R::batchmean}(empty, empty).item()));

  // Half operands: the terms in fp32 from the halves' values, the gradient rounded to half once.
  using H = kiln::half;
  const auto x16 = kiln::test::make_tensor<D>(std::vector<H>{H(-0.25f), H(-3.0f), H(-1.5f)}, Extents<Pairs>(1));
  const auto t16 = kiln::test::make_tensor<D>(std::vector<H>{H(0.125f), H(0.375f), H(0.5f)}, Extents<Pairs>(1));
  const auto x32 = kiln::test::make_tensor<D>(std::vector<float>{-0.25f, -3.0f, -1.5f}, Extents<Pairs>(1));
  const auto t32 = kiln::test::make_tensor<D>(std::vector<float>{0.125f, 0.375f, 0.5f}, Extents<Pairs>(1));
  const auto terms16 = knn::KLDivLoss{}.unreduced(x16, t16);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(terms16)>, Tensor<float, Pairs, D>>);
  BOOST_TEST(terms16.to_vector() == knn::KLDivLoss{}.unreduced(x32, t32).to_vector(), boost::test_tools::per_element());
  BOOST_TEST(knn::KLDivLoss{.reduction = R::batchmean}(x16, t16).item() ==
             knn::KLDivLoss{.reduction = R::batchmean}(x32, t32).item());
  const auto g16 = knn::KLDivLoss{.log_target = true}.backward(x16, t16).to_vector();
  const auto g32 = knn::KLDivLoss{.log_target = true}.backward(x32, t32).to_vector();
  for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(static_cast<float>(g16[i]) == static_cast<float>(H(g32[i])));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gradients_match_finite_differences, D, kiln::test::devices) {
  using R = knn::Reduction;
  for (const auto reduction : {R::mean, R::sum}) {
    BOOST_TEST_CONTEXT((reduction == R::sum ? "sum" : "mean")) {
      check_numeric<D>(knn::L1Loss{.reduction = reduction}, 0.0);
      check_numeric<D>(knn::SmoothL1Loss{.reduction = reduction, .beta = 0.5}, 0.5);
      check_numeric<D>(knn::HuberLoss{.reduction = reduction, .delta = 2.0}, 2.0);
      check_numeric<D>(knn::BCEWithLogitsLoss{.reduction = reduction}, -1.0);
      check_numeric<D>(knn::BCEWithLogitsLoss{.reduction = reduction, .pos_weight = {0.5, 2.0, 4.0}}, -1.0);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bce_loss_gradients_match_finite_differences, D, kiln::test::devices) {
  // Probabilities inside (0, 1) (away from the ends, where the logs are clamped), targets in [0, 1].
  const Extents<Pairs> ext(5);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<double>(15, 0.05, 0.95, 44), ext);
  const auto y = kiln::test::make_tensor<D>(kiln::test::random_values<double>(15, 0.0, 1.0, 45), ext);
  for (const auto reduction : {knn::Reduction::mean, knn::Reduction::sum}) {
    const knn::BCELoss bce{.reduction = reduction};
    auto f = [&](const Tensor<double, Pairs, D>& in) { return bce(in, y).item(); };
    BOOST_TEST(kiln::test::gradcheck(f, x, bce.backward(x, y)));
  }
  const auto dloss = kiln::test::make_tensor<D>(kiln::test::random_values<double>(15, -1.0, 1.0, 46), ext);
  const knn::BCELoss bce;
  auto g = [&](const Tensor<double, Pairs, D>& in) { return kiln::sum(bce.unreduced(in, y) * dloss).item(); };
  BOOST_TEST(kiln::test::gradcheck(g, x, bce.backward(x, y, dloss)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bce_loss_clamps_its_logs_at_the_ends_as_torch, D, kiln::test::devices) {
  // torch 1.13's binary_cross_entropy of p = {1e-8, 0.3, 1, 0, 0, 1} against t = {0, 0, 0, 1, 0, 1}: each
  // log clamped at -100 (log(1 - 1e-8) is 0 in fp32), the gradient's denominator at 1e-12.
  const Extents<Pairs> ext(2);
  const auto p = kiln::test::make_tensor<D>(std::vector<float>{1e-8f, 0.3f, 1.0f, 0.0f, 0.0f, 1.0f}, ext);
  const auto t = kiln::test::make_tensor<D>(std::vector<float>{0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 1.0f}, ext);
  const knn::BCELoss bce{.reduction = knn::Reduction::sum};
  // (-log(0.7) within 1e-6: CUDA's logf may differ from glibc's in the last bit; the rest is exact.)
  const std::vector<float> terms_want{0.0f, 0.3566749691963196f, 100.0f, 100.0f, 0.0f, 0.0f};
  BOOST_TEST(bce.unreduced(p, t).to_vector() == terms_want,
             boost::test_tools::tolerance(1e-6f) << boost::test_tools::per_element());
  const std::vector<float> grad_want{1.0f, 1.4285714626312256f, 999999995904.0f, -999999995904.0f, 0.0f, 0.0f};
  BOOST_TEST(bce.backward(p, t).to_vector() == grad_want, boost::test_tools::per_element());
  // In double the clamp is torch's float EPSILON widened, 9.99999996e-13, not 1e-12: torch 1.13 gives
  // -/+1000000003995.8029 for p = 0, 1 against t = 1, 0.
  const auto p64 = kiln::test::make_tensor<D>(std::vector<double>{0.0, 1.0}, Extents<Shape<dyn>>(2));
  const auto t64 = kiln::test::make_tensor<D>(std::vector<double>{1.0, 0.0}, Extents<Shape<dyn>>(2));
  const std::vector<double> grad64_want{-1.0 / static_cast<double>(1e-12f), 1.0 / static_cast<double>(1e-12f)};
  BOOST_TEST(bce.backward(p64, t64).to_vector() == grad64_want, boost::test_tools::per_element());
  BOOST_TEST(grad64_want[1] == 1000000003995.8029, boost::test_tools::tolerance(1e-15));
  // A probability outside [0, 1]: torch refuses it; so does the CPU, naming the element; the GPU, which
  // reads nothing back, gives NaN for its term and its gradient.
  const auto bad = kiln::test::make_tensor<D>(std::vector<float>{0.5f, 1.5f, 0.5f, 0.5f, NAN, 0.5f}, ext);
  if constexpr (std::is_same_v<D, kiln::Cpu>) {
    BOOST_CHECK_EXCEPTION((void)bce(bad, t), kiln::ValueError, [](const kiln::ValueError& e) {
      return std::string(e.what()) == "kiln::nn::BCELoss: all elements of input should be between 0 and 1 "
                                      "(element 1 of input [2, 3] is 1.5)";
    });
    BOOST_CHECK_THROW((void)bce.backward(bad, t), kiln::ValueError);
    BOOST_CHECK_THROW((void)bce.unreduced(bad, t), kiln::ValueError);
    // A scan large enough to run on every thread still names the first bad element.
    std::vector<float> many(60000, 0.5f);
    many[50000] = -1.0f;
    many[40001] = 2.0f;
    const auto large = kiln::test::make_tensor<D>(many, Extents<Pairs>(20000));
    BOOST_CHECK_EXCEPTION((void)bce(large, large), kiln::ValueError, [](const kiln::ValueError& e) {
      return std::string(e.what()).find("(element 40001 of input [20000, 3] is 2)") != std::string::npos;
    });
  } else {
    const auto terms = bce.unreduced(bad, t).to_vector();
    const auto grad = bce.backward(bad, t).to_vector();
    BOOST_TEST((std::isnan(terms[1]) && std::isnan(terms[4]) && std::isnan(grad[1]) && std::isnan(grad[4])));
    BOOST_TEST((std::isfinite(terms[0]) && std::isfinite(grad[0])));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kinks_saturation_and_nan_as_torch, D, kiln::test::devices) {
  // Differences 0, ±beta (the kink, where both pieces' slopes are ±1), ±3 beta, NaN. torch 1.13: L1's
  // gradient is sign(d), 0 at 0 and at NaN; SmoothL1 and Huber give NaN.
  const Extents<Shape<dyn, 3>> ext(2);
  const float nan = NAN;
  const auto x = kiln::test::make_tensor<D>(std::vector<float>{0.0f, 0.5f, -0.5f, 1.5f, -1.5f, nan}, ext);
  const auto y = kiln::test::make_tensor<D>(std::vector<float>(6, 0.0f), ext);
  const knn::Reduction sum = knn::Reduction::sum;
  const auto l1 = knn::L1Loss{.reduction = sum}.backward(x, y).to_vector();
  const std::vector<float> l1_want{0.0f, 1.0f, -1.0f, 1.0f, -1.0f, 0.0f};
  BOOST_TEST(l1 == l1_want, boost::test_tools::per_element());
  const auto smooth = knn::SmoothL1Loss{.reduction = sum, .beta = 0.5}.backward(x, y).to_vector();
  for (std::size_t i = 0; i < 5; ++i) BOOST_TEST(smooth[i] == l1_want[i]);
  BOOST_TEST(std::isnan(smooth[5]));
  const auto huber = knn::HuberLoss{.reduction = sum, .delta = 0.5}.backward(x, y).to_vector();
  const std::vector<float> huber_want{0.0f, 0.5f, -0.5f, 0.5f, -0.5f};
  for (std::size_t i = 0; i < 5; ++i) BOOST_TEST(huber[i] == huber_want[i]);
  BOOST_TEST(std::isnan(huber[5]));
  // Values at the kink: both pieces meet (0.5 beta there).
  const auto smooth_terms = knn::SmoothL1Loss{.beta = 0.5}.unreduced(x, y).to_vector();
  BOOST_TEST(smooth_terms[1] == 0.25f);
  BOOST_TEST(smooth_terms[3] == 1.25f);
  // beta 0: L1's sign(d), 0 at d = 0 (torch 1.13: -1 on the CPU, 0 / 0 on the GPU), NaN at NaN (as
  // torch's SmoothL1, unlike its L1).
  const auto beta0 = knn::SmoothL1Loss{.reduction = sum, .beta = 0.0}.backward(x, y).to_vector();
  for (std::size_t i = 0; i < 5; ++i) BOOST_TEST(beta0[i] == l1_want[i]);
  BOOST_TEST(std::isnan(beta0[5]));
  // Logits of ±100 saturate without overflow: loss log(1 + e^-100) ~ 0 or 100, gradient 0 or ±1.
  const auto logits = kiln::test::make_tensor<D>(std::vector<float>{100.0f, -100.0f, 100.0f}, Extents<Shape<dyn, 3>>(1));
  const auto targets = kiln::test::make_tensor<D>(std::vector<float>{1.0f, 0.0f, 0.0f}, Extents<Shape<dyn, 3>>(1));
  const knn::BCEWithLogitsLoss bce{.reduction = sum};
  const auto terms = bce.unreduced(logits, targets).to_vector();
  BOOST_TEST((terms[0] >= 0.0f && terms[0] < 1e-30f));  // log1p(e^-100): a denormal, or 0 where flushed
  BOOST_TEST(terms[1] == 0.0f);
  BOOST_TEST(terms[2] == 100.0f);
  const auto g = bce.backward(logits, targets).to_vector();
  BOOST_TEST(g[0] == 0.0f);
  BOOST_TEST(g[1] == 0.0f);
  BOOST_TEST(g[2] == 1.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pos_weight_weighs_every_class, D, kiln::test::devices) {
  // torch broadcasts pos_weight=torch.tensor([3.0]) over the last dimension: as {3, 3, 3}.
  const Extents<Pairs> ext(4);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(12, -3.0f, 3.0f, 61), ext);
  const auto y = kiln::test::make_tensor<D>(kiln::test::random_values<float>(12, 0.0f, 1.0f, 62), ext);
  const knn::BCEWithLogitsLoss one{.pos_weight = {3.0}}, three{.pos_weight = {3.0, 3.0, 3.0}}, none;
  BOOST_TEST(one(x, y).item() == three(x, y).item());
  BOOST_TEST(one.backward(x, y).to_vector() == three.backward(x, y).to_vector(), boost::test_tools::per_element());
  BOOST_TEST(one(x, y).item() > none(x, y).item());  // the positive terms weigh 3
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_device_loss_scale_and_16_bit_operands, D, kiln::test::devices) {
  // The gradient times a loss scale: the same from the host number and from a double on the device (a
  // capturable GradScaler's); half operands computed in fp32 (as autocast), one rounding at the end.
  const Extents<Pairs> ext(4);
  const auto xv = kiln::test::random_values<float>(12, -3.0f, 3.0f, 51);
  const auto yv = kiln::test::random_values<float>(12, -1.0f, 1.0f, 52);
  const auto x = kiln::test::make_tensor<D>(xv, ext);
  const auto y = kiln::test::make_tensor<D>(yv, ext);
  const auto scale = kiln::test::make_tensor<D>(std::vector<double>{1024.0}, Extents<Shape<dyn>>(1));
  const knn::HuberLoss huber;
  const auto host = huber.backward(x, y, 1024.0).to_vector();
  const auto device = huber.backward(x, y, knn::LossScale::on_device(scale.data())).to_vector();
  BOOST_TEST(host == device, boost::test_tools::per_element());
  const knn::BCEWithLogitsLoss bce{.pos_weight = {2.0, 1.0, 0.5}};
  BOOST_TEST(bce.backward(x, y, 1024.0).to_vector() == bce.backward(x, y, knn::LossScale::on_device(scale.data())).to_vector(),
             boost::test_tools::per_element());
  // |2048 - (-1)| = 2049 is not an fp16 value: the terms are computed in fp32 from the half operands.
  using H = kiln::half;
  const auto x16 = kiln::test::make_tensor<D>(std::vector<H>{H(2048.0f), H(1.0f), H(-1.0f)}, Extents<Pairs>(1));
  const auto y16 = kiln::test::make_tensor<D>(std::vector<H>{H(-1.0f), H(0.5f), H(0.5f)}, Extents<Pairs>(1));
  const auto terms = knn::L1Loss{}.unreduced(x16, y16);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(terms)>, Tensor<float, Pairs, D>>);
  BOOST_TEST(terms.to_vector() == (std::vector<float>{2049.0f, 0.5f, 1.5f}), boost::test_tools::per_element());
  BOOST_TEST(knn::L1Loss{.reduction = knn::Reduction::sum}(x16, y16).item() == 2051.0f);
  const auto bce16 = knn::BCEWithLogitsLoss{}.unreduced(x16, y16);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(bce16)>, Tensor<float, Pairs, D>>);
  // (BCELoss of half probabilities is a compile error, as torch's autocast refuses it:
  // tests/compile_fail/bce_loss_of_half_probabilities.cpp.)
  const auto g16 = knn::HuberLoss{.reduction = knn::Reduction::sum}.backward(x16, y16);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(g16)>, Tensor<H, Pairs, D>>);
  BOOST_TEST(static_cast<float>(g16.to_vector()[0]) == 1.0f);
  BOOST_TEST(static_cast<float>(g16.to_vector()[1]) == 0.5f);
}

/// A loss of 16-bit predictions (L, as kiln::half or kiln::bfloat16) against float targets is the loss of
/// the same predictions held in float (autocast: the loss in fp32 on the data's own targets): the value
/// and the terms bit for bit, the gradients (host scale, device scale, an upstream dloss) rounded once.
template <class D, class L, class Loss>
void check_float_targets(const Loss& loss, const std::vector<float>& pv, const std::vector<float>& tv) {
  const Extents<Pairs> ext(static_cast<kiln::index_t>(pv.size() / 3));
  std::vector<L> p16v;
  std::vector<float> p32v;
  for (const float v : pv) {
    p16v.push_back(L(v));
    p32v.push_back(static_cast<float>(L(v)));  // the 16-bit value, held in float
  }
  const auto p16 = kiln::test::make_tensor<D>(p16v, ext);
  const auto p32 = kiln::test::make_tensor<D>(p32v, ext);
  const auto t = kiln::test::make_tensor<D>(tv, ext);
  BOOST_TEST(loss(p16, t).item() == loss(p32, t).item());
  const auto terms = loss.unreduced(p16, t);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(terms)>, Tensor<float, Pairs, D>>);
  BOOST_TEST(terms.to_vector() == loss.unreduced(p32, t).to_vector(), boost::test_tools::per_element());
  const auto scale = kiln::test::make_tensor<D>(std::vector<double>{4.0}, Extents<Shape<dyn>>(1));
  const auto dloss = kiln::test::make_tensor<D>(kiln::test::random_values<float>(pv.size(), 0.5f, 2.0f, 81), ext);
  const std::vector<std::pair<std::vector<L>, std::vector<float>>> grads = {
      {loss.backward(p16, t).to_vector(), loss.backward(p32, t).to_vector()},
      {loss.backward(p16, t, knn::LossScale::on_device(scale.data())).to_vector(), loss.backward(p32, t, 4.0).to_vector()},
      {loss.backward(p16, t, dloss).to_vector(), loss.backward(p32, t, dloss).to_vector()}};
  for (const auto& [g16, g32] : grads)
    for (std::size_t i = 0; i < g32.size(); ++i)
      BOOST_TEST(static_cast<float>(g16[i]) == static_cast<float>(L(g32[i])), "element " << i);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(float_targets_for_16_bit_predictions_as_autocast, D, kiln::test::devices) {
  // Probabilities and targets in (0, 1) that 16 bits do not hold (0.1, 0.3, ...), for every pair loss.
  const auto p = kiln::test::random_values<float>(12, 0.05f, 0.95f, 82);
  const auto t = kiln::test::random_values<float>(12, 0.05f, 0.95f, 83);
  const auto each = [&]<class L>(L) {
    check_float_targets<D, L>(knn::MSELoss{}, p, t);
    check_float_targets<D, L>(knn::MSELoss{.reduction = knn::Reduction::sum}, p, t);
    check_float_targets<D, L>(knn::L1Loss{}, p, t);
    check_float_targets<D, L>(knn::SmoothL1Loss{.beta = 0.25}, p, t);
    check_float_targets<D, L>(knn::HuberLoss{.delta = 0.25}, p, t);
    check_float_targets<D, L>(knn::BCEWithLogitsLoss{.pos_weight = {2.0}}, p, t);
    check_float_targets<D, L>(knn::KLDivLoss{.reduction = knn::KLDivReduction::batchmean}, p, t);
  };
  each(kiln::half{});
  each(kiln::bfloat16{});
  // A regression target of 21.6 is 21.625 in bfloat16: a float target keeps the error the data has.
  const Extents<Pairs> one(1);
  using B = kiln::bfloat16;
  const auto pred = kiln::test::make_tensor<D>(std::vector<B>{B(20.0f), B(21.0f), B(22.0f)}, one);
  const auto y32 = kiln::test::make_tensor<D>(std::vector<float>{21.6f, 21.6f, 21.6f}, one);
  const auto y16 = kiln::test::make_tensor<D>(std::vector<B>(3, B(21.6f)), one);
  const knn::MSELoss mse{.reduction = knn::Reduction::sum};
  BOOST_TEST(mse(pred, y32).item() == (1.6f * 1.6f + 0.6f * 0.6f + 0.4f * 0.4f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(mse(pred, y16).item() == (1.625f * 1.625f + 0.625f * 0.625f + 0.375f * 0.375f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_options_and_shapes_are_refused, D, kiln::test::devices) {
  const auto x = kiln::test::make_tensor<D>(std::vector<float>(6, 0.0f), Extents<Pairs>(2));
  const auto y = kiln::test::make_tensor<D>(std::vector<float>(6, 0.0f), Extents<Pairs>(2));
  const auto z = kiln::test::make_tensor<D>(std::vector<float>(3, 0.0f), Extents<Pairs>(1));
  const auto says = [](const std::string& text) {
    return [text](const kiln::Error& e) { return std::string(e.what()) == text; };
  };
  BOOST_CHECK_EXCEPTION((void)knn::SmoothL1Loss{.beta = -1.0}(x, y), kiln::ValueError,
                        says("kiln::nn::SmoothL1Loss: beta must be >= 0 (got -1.000000)"));
  BOOST_CHECK_EXCEPTION((void)knn::HuberLoss{.delta = 0.0}.backward(x, y), kiln::ValueError,
                        says("kiln::nn::HuberLoss: delta must be > 0 (got 0.000000)"));
  const knn::BCEWithLogitsLoss two_weights{.pos_weight = {1.0, 2.0}};
  BOOST_CHECK_EXCEPTION((void)two_weights(x, y), kiln::ValueError,
                        says("kiln::nn::BCEWithLogitsLoss: pos_weight has 2 values for a last dimension of 3 "
                             "(logits [2, 3]); expected one per class, or one"));
  BOOST_CHECK_EXCEPTION((void)knn::L1Loss{}(x, z), kiln::ShapeError,
                        says("kiln::nn::L1Loss: pred [2, 3] and target [1, 3] must have the same shape"));
  BOOST_CHECK_EXCEPTION((void)knn::BCEWithLogitsLoss{}.backward(x, z), kiln::ShapeError,
                        says("kiln::nn::BCEWithLogitsLoss: logits [2, 3] and target [1, 3] must have the same shape"));
  const auto dloss = kiln::test::make_tensor<D>(std::vector<float>(3, 1.0f), Extents<Pairs>(1));
  BOOST_CHECK_EXCEPTION((void)knn::HuberLoss{}.backward(x, y, dloss), kiln::ShapeError,
                        says("kiln::nn::HuberLoss: dloss [1, 3] must have the shape of pred [2, 3]"));
  BOOST_CHECK_EXCEPTION((void)knn::KLDivLoss{.reduction = knn::KLDivReduction::batchmean}(x, z), kiln::ShapeError,
                        says("kiln::nn::KLDivLoss: input [2, 3] and target [1, 3] must have the same shape"));
  BOOST_CHECK_EXCEPTION((void)knn::KLDivLoss{}.backward(x, y, dloss), kiln::ShapeError,
                        says("kiln::nn::KLDivLoss: dloss [1, 3] must have the shape of input [2, 3]"));
  // MSELoss alike, also where the loss scale lives on the device (a pass that reads target[i] for every
  // element of pred: a shorter target would be read past its end).
  const auto scale = kiln::test::make_tensor<D>(std::vector<double>{2.0}, Extents<Shape<dyn>>(1));
  const auto device_scale = knn::LossScale::on_device(scale.data());
  const char* mse_says = "kiln::nn::MSELoss::backward: pred [2, 3] and target [1, 3] must have the same shape";
  BOOST_CHECK_EXCEPTION((void)knn::MSELoss{}.backward(x, z), kiln::ShapeError, says(mse_says));
  BOOST_CHECK_EXCEPTION((void)knn::MSELoss{}.backward(x, z, device_scale), kiln::ShapeError, says(mse_says));
  const auto full_dloss = kiln::test::make_tensor<D>(std::vector<float>(6, 1.0f), Extents<Pairs>(2));
  BOOST_CHECK_EXCEPTION((void)knn::MSELoss{}.backward(x, z, full_dloss, device_scale), kiln::ShapeError,
                        says(mse_says));
  BOOST_CHECK_EXCEPTION((void)knn::MSELoss{}(x, z), kiln::ShapeError,
                        says("kiln::nn::MSELoss: pred [2, 3] and target [1, 3] must have the same shape"));
  BOOST_CHECK_EXCEPTION((void)knn::MSELoss{}.unreduced(x, z), kiln::ShapeError,
                        says("kiln::nn::MSELoss::unreduced: pred [2, 3] and target [1, 3] must have the same shape"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
