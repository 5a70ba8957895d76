// Upsample (nearest, bilinear and bicubic, with align_corners False and True) and Identity: forward
// against the definitions written out in double, backward against float64 finite differences, shapes and
// names as torch's.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <kiln/nn/nn.hpp>
#include <string>
#include <vector>

#include "support/model_gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace knn = kiln::nn;
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using knn::UpsampleMode;

/// Output o of an axis upsampled Scale times from n inputs, by the definitions: nearest reads input
/// o / Scale; bilinear reads the source (o + 0.5) / Scale - 0.5, clamped at 0 (align_corners=False), or
/// o (n - 1) / (n Scale - 1) (True), between its two neighbouring inputs (the last input alone past it);
/// bicubic reads the same source unclamped, the four inputs around it (clamped into [0, n)) weighted by
/// Keys' kernel (a = -0.75) at their distances.
double axis_weight(UpsampleMode mode, bool align, int o, int i, int n, int scale) {
  if (mode == UpsampleMode::nearest) return o / scale == i ? 1.0 : 0.0;
  if (mode == UpsampleMode::bicubic) {
    const double src =
        align ? (n * scale > 1 ? o * (n - 1.0) / (n * scale - 1.0) : 0.0) : (o + 0.5) / scale - 0.5;
    const int f = std::min(static_cast<int>(std::floor(src)), n - 1);
    const double t = std::clamp(src - f, 0.0, 1.0), a = -0.75;
    const auto keys = [a](double x) {
      x = std::abs(x);
      return x <= 1  ? (a + 2) * x * x * x - (a + 3) * x * x + 1
             : x < 2 ? a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a
                     : 0.0;
    };
    double w = 0;
    for (int k = 0; k < 4; ++k)
      if (std::clamp(f - 1 + k, 0, n - 1) == i) w += keys(t + 1 - k);
    return w;
  }
  const double src = align ? (n * scale > 1 ? o * (n - 1.0) / (n * scale - 1.0) : 0.0)
                           : std::max((o + 0.5) / scale - 0.5, 0.0);
  const int lo = static_cast<int>(src), hi = std::min(lo + 1, n - 1);
  const double l1 = src - lo;
  return (i == lo ? 1 - l1 : 0.0) + (i == hi ? l1 : 0.0);
}

/// Upsample<Scale, Mode, Align> on a batch of 2 [3, H, W] in double: y = Σ weights x.
template <int Scale, UpsampleMode Mode, int H, int W, class D, bool Align = false>
void check_forward() {
  using In = Shape<dyn, 3, H, W>;
  knn::Model<knn::Sequential<knn::Upsample<Scale, Mode, Align>>, In, kiln::Policy<kt::Fp64, D>> model(0);
  const auto xs = kt::random_values<double>(2 * 3 * H * W, -1.0, 1.0, 8);
  const auto got = model.forward(kt::make_tensor<D>(xs, Extents<In>(2))).to_vector();
  const int ho = H * Scale, wo = W * Scale;
  BOOST_REQUIRE_EQUAL(got.size(), static_cast<std::size_t>(6 * ho * wo));
  double worst = 0;
  for (int plane = 0; plane < 6; ++plane)
    for (int oh = 0; oh < ho; ++oh)
      for (int ow = 0; ow < wo; ++ow) {
        double want = 0;
        for (int ih = 0; ih < H; ++ih)
          for (int iw = 0; iw < W; ++iw)
            want += axis_weight(Mode, Align, oh, ih, H, Scale) * axis_weight(Mode, Align, ow, iw, W, Scale) *
                    xs[static_cast<std::size_t>((plane * H + ih) * W + iw)];
        worst = std::max(worst, std::abs(got[static_cast<std::size_t>((plane * ho + oh) * wo + ow)] - want));
      }
  BOOST_TEST(worst <= 1e-14, "Upsample<" << Scale << "> on " << H << "x" << W << ": worst " << worst);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(upsample)

BOOST_AUTO_TEST_CASE_TEMPLATE(upsample_follows_its_definitions, D, kt::devices) {
  check_forward<2, UpsampleMode::nearest, 4, 5, D>();
  check_forward<3, UpsampleMode::nearest, 3, 2, D>();
  check_forward<7, UpsampleMode::nearest, 2, 3, D>();
  check_forward<2, UpsampleMode::bilinear, 4, 5, D>();
  check_forward<3, UpsampleMode::bilinear, 3, 2, D>();
  check_forward<5, UpsampleMode::bilinear, 1, 3, D>();  // one row: every output row reads it alone
  check_forward<2, UpsampleMode::bilinear, 4, 5, D, true>();  // align_corners
  check_forward<3, UpsampleMode::bilinear, 2, 3, D, true>();  // 5 outputs an input row
  check_forward<4, UpsampleMode::bilinear, 1, 2, D, true>();
  check_forward<2, UpsampleMode::bicubic, 4, 5, D>();
  check_forward<3, UpsampleMode::bicubic, 3, 2, D>();  // every output's taps clamp at an edge
  check_forward<5, UpsampleMode::bicubic, 1, 3, D>();  // one row: every tap reads it
  check_forward<4, UpsampleMode::bicubic, 7, 6, D>();  // inputs beyond the edges' reach
  check_forward<2, UpsampleMode::bicubic, 4, 5, D, true>();
  check_forward<3, UpsampleMode::bicubic, 2, 3, D, true>();
  check_forward<4, UpsampleMode::bicubic, 1, 2, D, true>();
  check_forward<3, UpsampleMode::bicubic, 8, 7, D, true>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bicubic_at_scale_one_is_the_identity_both_ways, D, kt::devices) {
  // Every source lands on an input (t = 0): weights 0, 1, 0, 0 exactly, so y = x and dx = dy bit for bit.
  using In = Shape<dyn, 2, 3, 4>;
  using P = kiln::Policy<kiln::Fp32, D>;
  const auto xs = kt::random_values<float>(24, -2, 2, 70), dys = kt::random_values<float>(24, -2, 2, 71);
  const auto check = [&](auto model, const char* what) {
    BOOST_TEST_CONTEXT(what) {
      BOOST_TEST(model.forward(kt::make_tensor<D>(xs, Extents<In>(1))).to_vector() == xs,
                 boost::test_tools::per_element());
      BOOST_TEST(model.backward_input(kt::make_tensor<D>(dys, Extents<In>(1))).to_vector() == dys,
                 boost::test_tools::per_element());
    }
  };
  check(knn::Model<knn::Sequential<knn::Upsample<1, UpsampleMode::bicubic>>, In, P>(0),
        "align_corners=False");
  check(knn::Model<knn::Sequential<knn::Upsample<1, UpsampleMode::bicubic, true>>, In, P>(0),
        "align_corners=True");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bicubic_keeps_a_constant_and_overshoots_at_an_edge, D, kt::devices) {
  // Keys' weights sum to 1 (a constant stays), and they go negative: a step overshoots, as torch's
  // bicubic does (its output is not clamped).
  using In = Shape<dyn, 1, 4, 4>;
  knn::Model<knn::Sequential<knn::Upsample<4, UpsampleMode::bicubic>>, In, kiln::Policy<kiln::Fp32, D>> m(0);
  std::vector<float> flat(16, 0.25f), step(16, 0.0f);
  for (int i = 0; i < 16; ++i) step[static_cast<std::size_t>(i)] = i % 4 < 2 ? 0.0f : 1.0f;
  for (const float v : m.forward(kt::make_tensor<D>(flat, Extents<In>(1))).to_vector())
    BOOST_TEST(v == 0.25f);
  const auto y = m.forward(kt::make_tensor<D>(step, Extents<In>(1))).to_vector();
  BOOST_TEST(*std::max_element(y.begin(), y.end()) > 1.0f);
  BOOST_TEST(*std::min_element(y.begin(), y.end()) < 0.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(upsample_and_identity_backward_match_numeric, D, kt::devices) {
  using knn::Upsample;
  using kt::check_model_gradients;
  check_model_gradients<knn::Sequential<Upsample<2>>, Shape<dyn, 3, 4, 5>, D>(Extents<Shape<dyn, 3, 4, 5>>(2),
                                                                              -1, 1, 0, 51);
  check_model_gradients<knn::Sequential<knn::UpsamplingNearest2d<3>>, Shape<dyn, 2, 3, 2>, D>(
      Extents<Shape<dyn, 2, 3, 2>>(2), -1, 1, 0, 52);
  check_model_gradients<knn::Sequential<Upsample<2, UpsampleMode::bilinear>>, Shape<dyn, 3, 4, 5>, D>(
      Extents<Shape<dyn, 3, 4, 5>>(2), -1, 1, 0, 53);
  check_model_gradients<knn::Sequential<Upsample<3, UpsampleMode::bilinear>>, Shape<dyn, 2, 3, 1>, D>(
      Extents<Shape<dyn, 2, 3, 1>>(2), -1, 1, 0, 54);
  check_model_gradients<knn::Sequential<knn::UpsamplingBilinear2d<3>>, Shape<dyn, 2, 2, 5>, D>(
      Extents<Shape<dyn, 2, 2, 5>>(2), -1, 1, 0, 56);
  check_model_gradients<knn::Sequential<Upsample<2, UpsampleMode::bilinear, true>>, Shape<dyn, 2, 1, 4>, D>(
      Extents<Shape<dyn, 2, 1, 4>>(2), -1, 1, 0, 57);
  check_model_gradients<knn::Sequential<Upsample<2, UpsampleMode::bicubic>>, Shape<dyn, 2, 4, 5>, D>(
      Extents<Shape<dyn, 2, 4, 5>>(2), -1, 1, 0, 58);
  check_model_gradients<knn::Sequential<Upsample<3, UpsampleMode::bicubic>>, Shape<dyn, 2, 3, 1>, D>(
      Extents<Shape<dyn, 2, 3, 1>>(2), -1, 1, 0, 59);
  check_model_gradients<knn::Sequential<Upsample<3, UpsampleMode::bicubic>>, Shape<dyn, 1, 7, 6>, D>(
      Extents<Shape<dyn, 1, 7, 6>>(2), -1, 1, 0, 60);
  check_model_gradients<knn::Sequential<Upsample<2, UpsampleMode::bicubic, true>>, Shape<dyn, 2, 1, 4>, D>(
      Extents<Shape<dyn, 2, 1, 4>>(2), -1, 1, 0, 61);
  check_model_gradients<knn::Sequential<Upsample<3, UpsampleMode::bicubic, true>>, Shape<dyn, 1, 8, 5>, D>(
      Extents<Shape<dyn, 1, 8, 5>>(2), -1, 1, 0, 62);
  check_model_gradients<knn::Sequential<Upsample<2, UpsampleMode::bicubic>>, Shape<dyn, 1, 2, 3>, D>(
      Extents<Shape<dyn, 1, 2, 3>>(2), -1, 1, 0, 63);
  check_model_gradients<knn::Sequential<Upsample<2, UpsampleMode::bicubic, true>>, Shape<dyn, 1, 2, 3>, D>(
      Extents<Shape<dyn, 1, 2, 3>>(2), -1, 1, 0, 64);
  check_model_gradients<knn::Sequential<Upsample<5, UpsampleMode::bicubic>>, Shape<dyn, 1, 4, 3>, D>(
      Extents<Shape<dyn, 1, 4, 3>>(1), -1, 1, 0, 65);
  check_model_gradients<knn::Sequential<Upsample<4, UpsampleMode::bicubic, true>>, Shape<dyn, 1, 3, 4>, D>(
      Extents<Shape<dyn, 1, 3, 4>>(1), -1, 1, 0, 66);
  check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3>, knn::Identity, knn::ReLU>, Shape<dyn, 2, 5, 5>,
                        D>(Extents<Shape<dyn, 2, 5, 5>>(2), -1, 1, 0.05, 55, true);
}

BOOST_AUTO_TEST_CASE(upsample_and_identity_have_torchs_shapes_and_names) {
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  using In = Shape<dyn, 3, 4, 5>;
  static_assert(std::is_same_v<knn::Upsample<3>::output<In>, Shape<dyn, 3, 12, 15>>);
  static_assert(std::is_same_v<knn::Identity::output<Shape<dyn, 3, 4, 5>>, Shape<dyn, 3, 4, 5>>);
  static_assert(!knn::Upsample<2>::accepts<Shape<dyn, 3, 4>> &&
                !knn::Upsample<2>::accepts<Shape<dyn, 3, dyn, 4>>);
  BOOST_TEST((knn::Upsample<2>::module<In, P>().name()) == "Upsample(scale_factor=2.0, mode=nearest)");
  BOOST_TEST((knn::Upsample<2, UpsampleMode::bilinear>::module<In, P>().name()) ==
             "Upsample(scale_factor=2.0, mode=bilinear)");
  BOOST_TEST((knn::UpsamplingNearest2d<3>::module<In, P>().name()) ==
             "UpsamplingNearest2d(scale_factor=3.0, mode=nearest)");
  BOOST_TEST((knn::UpsamplingBilinear2d<2>::module<In, P>().name()) ==
             "UpsamplingBilinear2d(scale_factor=2.0, mode=bilinear)");
  BOOST_TEST((knn::Upsample<2, UpsampleMode::bilinear, true>::module<In, P>().name()) ==
             "Upsample(scale_factor=2.0, mode=bilinear)");  // torch's repr leaves align_corners out
  BOOST_TEST((knn::Upsample<3, UpsampleMode::bicubic, true>::module<In, P>().name()) ==
             "Upsample(scale_factor=3.0, mode=bicubic)");
  BOOST_TEST((knn::Identity::module<In, P>().name()) == "Identity()");
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
