// AdaptiveAvgPool2d and AdaptiveMaxPool2d: finite-difference gradients in float64 (global, overlapping
// bins, more bins than rows, in a small residual network), torch's bins against a float64 reference, the
// same output shape for any image size, the max's ties and NaN, and the backward's checks. PyTorch parity
// is in test_parity_layers.cpp (layers.json: adaptive_avg_pool2d_*; layers_pool_modes.json:
// adaptive_max_pool2d_*).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <kiln/nn/nn.hpp>

#include "support/model_gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace knn = kiln::nn;
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

/// torch's adaptive average pool of [P, H, W] planes to [P, OH, OW], in double.
std::vector<double> reference_adaptive_pool(const std::vector<double>& x, std::size_t planes, std::size_t h, std::size_t w,
                                            std::size_t oh, std::size_t ow) {
  std::vector<double> y;
  for (std::size_t p = 0; p < planes; ++p)
    for (std::size_t i = 0; i < oh; ++i)
      for (std::size_t j = 0; j < ow; ++j) {
        const std::size_t h0 = i * h / oh, h1 = ((i + 1) * h + oh - 1) / oh;
        const std::size_t w0 = j * w / ow, w1 = ((j + 1) * w + ow - 1) / ow;
        double s = 0;
        for (std::size_t a = h0; a < h1; ++a)
          for (std::size_t b = w0; b < w1; ++b) s += x[(p * h + a) * w + b];
        y.push_back(s / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  return y;
}

/// torch's adaptive max pool of [P, H, W] planes to [P, OH, OW] (no NaN), and where each maximum is.
std::vector<double> reference_adaptive_max(const std::vector<double>& x, std::size_t planes, std::size_t h,
                                           std::size_t w, std::size_t oh, std::size_t ow,
                                           std::vector<std::size_t>& at) {
  std::vector<double> y;
  for (std::size_t p = 0; p < planes; ++p)
    for (std::size_t i = 0; i < oh; ++i)
      for (std::size_t j = 0; j < ow; ++j) {
        const std::size_t h0 = i * h / oh, h1 = ((i + 1) * h + oh - 1) / oh;
        const std::size_t w0 = j * w / ow, w1 = ((j + 1) * w + ow - 1) / ow;
        std::size_t best = (p * h + h0) * w + w0;
        for (std::size_t a = h0; a < h1; ++a)
          for (std::size_t b = w0; b < w1; ++b)
            if (x[(p * h + a) * w + b] > x[best]) best = (p * h + a) * w + b;
        y.push_back(x[best]);
        at.push_back(best);
      }
  return y;
}

/// AdaptiveAvgPool2d<3, 4> over 2 x 3 planes of H x W against the reference.
template <class D, kiln::index_t H, kiln::index_t W>
void check_bins(std::uint32_t stream) {
  using In = Shape<dyn, 3, H, W>;
  knn::Model<knn::Sequential<knn::AdaptiveAvgPool2d<3, 4>>, In, kiln::Policy<kt::Fp64, D>> m(0);
  const auto x = kt::random_values<double>(static_cast<std::size_t>(2 * 3 * H * W), -3, 3, stream);
  const auto y = m.forward(kt::make_tensor<D>(x, Extents<In>(2))).to_vector();
  const auto want = reference_adaptive_pool(x, 6, H, W, 3, 4);
  BOOST_REQUIRE_EQUAL(y.size(), want.size());
  for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y[i] == want[i], boost::test_tools::tolerance(1e-12));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(adaptive_avg_pool)

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_matches_finite_differences, D, kiln::test::devices) {
  kt::check_model_gradients<knn::Sequential<knn::AdaptiveAvgPool2d<1>>, Shape<dyn, 2, 3, 4>, D>(
      Extents<Shape<dyn, 2, 3, 4>>(2), -2, 2, 0, 130);
  kt::check_model_gradients<knn::Sequential<knn::AdaptiveAvgPool2d<3, 2>>, Shape<dyn, 2, 7, 5>, D>(
      Extents<Shape<dyn, 2, 7, 5>>(2), -2, 2, 0, 131);  // bins overlap by a row or column
  kt::check_model_gradients<knn::Sequential<knn::AdaptiveAvgPool2d<4, 5>>, Shape<dyn, 1, 3, 2>, D>(
      Extents<Shape<dyn, 1, 3, 2>>(2), -2, 2, 0, 132);  // more bins than rows: rows repeat
  // A ResNet's head: convolution, a residual block, the global pool, a classifier.
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 4, 3, 1, 1>, knn::Tanh,
                                            knn::Residual<knn::Conv2d<4, 4, 3, 1, 1>, knn::Tanh>,
                                            knn::AdaptiveAvgPool2d<1>, knn::Flatten, knn::Linear<4, 3>>,
                            Shape<dyn, 2, 5, 5>, D>(Extents<Shape<dyn, 2, 5, 5>>(2), -2, 2, 0, 133);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bins_follow_torchs_rule_for_any_image_size, D, kiln::test::devices) {
  // The same layer after planes of 9 x 9 and 4 x 11: one output shape, each the float64 reference.
  check_bins<D, 9, 9>(134);
  check_bins<D, 4, 11>(135);
  static_assert(std::is_same_v<knn::AdaptiveAvgPool2d<3, 4>::output<Shape<dyn, 3, 4, 11>>, Shape<dyn, 3, 3, 4>>);

  // Global average pooling is the plane's mean; the name is torch's.
  knn::Model<knn::Sequential<knn::AdaptiveAvgPool2d<1>, knn::Flatten>, Shape<dyn, 2, 2, 2>, kiln::Policy<kiln::Fp32, D>> g(0);
  const auto y = g.forward(kt::make_tensor<D>(std::vector<float>{1, 2, 3, 4, -1, -1, 5, 5}, Extents<Shape<dyn, 2, 2, 2>>(1)));
  BOOST_TEST(y.to_vector() == (std::vector<float>{2.5f, 2.0f}), boost::test_tools::per_element());
  BOOST_TEST(g.net().template layer<0>().name() == "AdaptiveAvgPool2d(output_size=1)");
  knn::Model<knn::Sequential<knn::AdaptiveAvgPool2d<2, 3>>, Shape<dyn, 1, 4, 4>, kiln::Policy<kiln::Fp32, D>> r(0);
  BOOST_TEST(r.net().template layer<0>().name() == "AdaptiveAvgPool2d(output_size=(2, 3))");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_backward_needs_a_forward_with_gradients, D, kiln::test::devices) {
  using In = Shape<dyn, 1, 3, 3>;
  typename knn::AdaptiveAvgPool2d<2>::template module<In, kiln::Policy<kiln::Fp32, D>> m;
  const auto x = kt::make_tensor<D>(kt::random_values<float>(18, -1, 1, 136), Extents<In>(2));
  (void)m.forward(x, {.training = true, .grad = false});
  const Tensor<float, Shape<dyn, 1, 2, 2>, D> dy(2);
  BOOST_CHECK_EXCEPTION((void)m.backward(dy), kiln::Error, [](const kiln::Error& e) {
    return std::string(e.what()).find("run forward with gradients enabled first") != std::string::npos;
  });
  (void)m.forward(x, {});
  const Tensor<float, Shape<dyn, 1, 2, 2>, D> three(3);
  BOOST_CHECK_EXCEPTION((void)m.backward(three), kiln::ShapeError, [](const kiln::ShapeError& e) {
    return std::string(e.what()).find("dy has 3 rows; the forward pass had 2") != std::string::npos;
  });
  // An empty batch: empty output and input gradient.
  const auto y = m.forward(Tensor<float, In, D>(0), {});
  BOOST_TEST(y.numel() == 0);
  BOOST_TEST(m.backward(y).numel() == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(adaptive_max_pool)

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_matches_finite_differences, D, kiln::test::devices) {
  kt::check_model_gradients<knn::Sequential<knn::AdaptiveMaxPool2d<1>>, Shape<dyn, 2, 3, 4>, D>(
      Extents<Shape<dyn, 2, 3, 4>>(2), -2, 2, 0, 140);
  kt::check_model_gradients<knn::Sequential<knn::AdaptiveMaxPool2d<3, 2>>, Shape<dyn, 2, 7, 5>, D>(
      Extents<Shape<dyn, 2, 7, 5>>(2), -2, 2, 0, 141);  // bins overlap by a row or column
  kt::check_model_gradients<knn::Sequential<knn::AdaptiveMaxPool2d<4, 5>>, Shape<dyn, 1, 3, 2>, D>(
      Extents<Shape<dyn, 1, 3, 2>>(2), -2, 2, 0, 142);  // more bins than rows: an input wins several bins
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 4, 3, 1, 1>, knn::Tanh,
                                            knn::Residual<knn::Conv2d<4, 4, 3, 1, 1>, knn::Tanh>,
                                            knn::AdaptiveMaxPool2d<2>, knn::Flatten, knn::Linear<16, 3>>,
                            Shape<dyn, 2, 5, 5>, D>(Extents<Shape<dyn, 2, 5, 5>>(2), -2, 2, 0, 143);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(each_bins_max_gets_the_gradient, D, kiln::test::devices) {
  // AdaptiveMaxPool2d<3, 4> over 2 x 3 planes of 7 x 5 (bins overlap; more columns of bins than of
  // inputs would not show here): the max of each bin, and dx the sum of the dy of the bins it won.
  using In = Shape<dyn, 3, 7, 5>;
  knn::Model<knn::Sequential<knn::AdaptiveMaxPool2d<3, 4>>, In, kiln::Policy<kt::Fp64, D>> m(0);
  const auto x = kt::random_values<double>(2 * 3 * 7 * 5, -3, 3, 144);
  const auto y = m.forward(kt::make_tensor<D>(x, Extents<In>(2)));
  std::vector<std::size_t> at;
  const auto want = reference_adaptive_max(x, 6, 7, 5, 3, 4, at);
  BOOST_TEST(y.to_vector() == want, boost::test_tools::per_element());
  const auto dy = kt::random_values<double>(want.size(), -1, 1, 145);
  const auto dx = m.backward_input(kt::make_tensor<D>(dy, y.extents())).to_vector();
  std::vector<double> want_dx(x.size(), 0.0);
  for (std::size_t o = 0; o < at.size(); ++o) want_dx[at[o]] += dy[o];
  BOOST_TEST(dx == want_dx, boost::test_tools::per_element());
  static_assert(
      std::is_same_v<knn::AdaptiveMaxPool2d<3, 4>::output<Shape<dyn, 3, 4, 11>>, Shape<dyn, 3, 3, 4>>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(ties_keep_the_first_and_nan_propagates, D, kiln::test::devices) {
  // As torch: of equal maxima the first wins; a NaN wins wherever it stands (first, in the middle, the
  // last of several); a plane of -inf gives -inf and its first element the gradient.
  using In = Shape<dyn, 1, 2, 2>;
  knn::Model<knn::Sequential<knn::AdaptiveMaxPool2d<1>, knn::Flatten>, In, kiln::Policy<kiln::Fp32, D>> m(0);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto x = kt::make_tensor<D>(
      std::vector<float>{1, 5, 5, 2, 1, nan, 3, nan, -inf, -inf, -inf, -inf, 1, nan, 3, 2, nan, 5, 3, 1},
      Extents<In>(5));
  const auto y = m.forward(x).to_vector();
  BOOST_REQUIRE_EQUAL(y.size(), 5u);
  BOOST_TEST(y[0] == 5.0f);
  BOOST_TEST(std::isnan(y[1]));
  BOOST_TEST(y[2] == -inf);
  BOOST_TEST(std::isnan(y[3]));
  BOOST_TEST(std::isnan(y[4]));
  const auto dx =
      m.backward_input(kt::make_tensor<D>(std::vector<float>{1, 2, 3, 4, 5}, Extents<Shape<dyn, 1>>(5)))
          .to_vector();
  BOOST_TEST(dx == (std::vector<float>{0, 1, 0, 0, 0, 0, 0, 2, 3, 0, 0, 0, 0, 4, 0, 0, 5, 0, 0, 0}),
             boost::test_tools::per_element());
  BOOST_TEST(m.net().template layer<0>().name() == "AdaptiveMaxPool2d(output_size=1)");
  knn::Model<knn::Sequential<knn::AdaptiveMaxPool2d<2, 3>>, Shape<dyn, 1, 4, 4>, kiln::Policy<kiln::Fp32, D>>
      r(0);
  BOOST_TEST(r.net().template layer<0>().name() == "AdaptiveMaxPool2d(output_size=(2, 3))");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_backward_needs_a_forward_with_gradients, D, kiln::test::devices) {
  using In = Shape<dyn, 1, 3, 3>;
  typename knn::AdaptiveMaxPool2d<2>::template module<In, kiln::Policy<kiln::Fp32, D>> m;
  const auto x = kt::make_tensor<D>(kt::random_values<float>(18, -1, 1, 146), Extents<In>(2));
  (void)m.forward(x, {.training = true, .grad = false});
  const Tensor<float, Shape<dyn, 1, 2, 2>, D> dy(2);
  BOOST_CHECK_EXCEPTION((void)m.backward(dy), kiln::Error, [](const kiln::Error& e) {
    return std::string(e.what()).find(
               "AdaptiveMaxPool2d::backward: run forward with gradients enabled first") != std::string::npos;
  });
  (void)m.forward(x, {});
  const Tensor<float, Shape<dyn, 1, 2, 2>, D> three(3);
  BOOST_CHECK_EXCEPTION((void)m.backward(three), kiln::ShapeError, [](const kiln::ShapeError& e) {
    return std::string(e.what()).find("dy has 3 rows; the forward pass had 2") != std::string::npos;
  });
  const auto y = m.forward(Tensor<float, In, D>(0), {});
  BOOST_TEST(y.numel() == 0);
  BOOST_TEST(m.backward(y).numel() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
