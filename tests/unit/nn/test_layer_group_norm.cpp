// LayerNorm, LayerNormOver and GroupNorm: finite-difference gradients in float64 (with drawn weights
// and biases, alone, between other layers and inside a Residual), statistics that survive a large
// offset, torch's edge cases (an empty batch, one normalised element, no_grad), names and parameter shapes
// as torch's state_dict, shape errors at run time, GroupNorm's relations to LayerNorm (one group) and to
// itself over the batch (samples apart), and fp16 and bf16 activations against fp32. PyTorch parity is
// in test_parity_layers.cpp (layers.json: layer_norm*, group_norm*).
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/backend/cpu/threads.hpp>
#include <kiln/nn/nn.hpp>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/fused_activation.hpp"
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

/// Each row of [R, L] normalised in long double: the reference for the forward.
std::vector<double> reference_layer_norm(const std::vector<double>& x, std::size_t length,
                                         const std::vector<double>& w, const std::vector<double>& b,
                                         double eps) {
  std::vector<double> y(x.size());
  for (std::size_t o = 0; o < x.size(); o += length) {
    long double s = 0, q = 0;
    for (std::size_t l = 0; l < length; ++l) s += x[o + l];
    const long double mean = s / static_cast<long double>(length);
    for (std::size_t l = 0; l < length; ++l) q += (x[o + l] - mean) * (x[o + l] - mean);
    const long double rstd = 1 / std::sqrt(q / static_cast<long double>(length) + eps);
    for (std::size_t l = 0; l < length; ++l)
      y[o + l] = static_cast<double>((x[o + l] - mean) * rstd * w[l] + b[l]);
  }
  return y;
}

/// got within float rounding of want: |got - want| <= 1e-6 (1 + |want|).
void check_close(const std::vector<float>& got, const std::vector<double>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / (1 + std::abs(want[i])));
  BOOST_TEST(worst <= 1e-6);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(layer_and_group_norm)

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_matches_finite_differences, D, kiln::test::devices) {
  // Every output of a row depends on every input of that row, through its mean and variance.
  kt::check_model_gradients<knn::Sequential<knn::LayerNorm<5>>, Shape<dyn, 5>, D>(Extents<Shape<dyn, 5>>(3),
                                                                                  -2, 2, 0, 90, true);
  kt::check_model_gradients<knn::Sequential<knn::LayerNorm<4, 1e-3f>>, Shape<dyn, 3, 4>, D>(
      Extents<Shape<dyn, 3, 4>>(2), -2, 2, 0, 91, true);
  kt::check_model_gradients<knn::Sequential<knn::LayerNormOver<Shape<2, 3, 3>>>, Shape<dyn, 2, 3, 3>, D>(
      Extents<Shape<dyn, 2, 3, 3>>(2), -2, 2, 0, 92, true);
  kt::check_model_gradients<knn::Sequential<knn::LayerNorm<6, 1e-5f, false>>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(4), -2, 2, 0, 93);
  // Between other layers (dx feeds the weights before it), and inside a Residual.
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::LayerNormOver<Shape<3, 3, 3>>,
                                            knn::Tanh, knn::Flatten, knn::Linear<27, 4>, knn::LayerNorm<4>>,
                            Shape<dyn, 2, 3, 3>, D>(Extents<Shape<dyn, 2, 3, 3>>(3), -2, 2, 0, 94, true);
  kt::check_model_gradients<knn::Sequential<knn::Residual<knn::LayerNorm<4>, knn::Tanh>, knn::LayerNorm<4>>,
                            Shape<dyn, 4>, D>(Extents<Shape<dyn, 4>>(3), -2, 2, 0, 95, true);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(group_norm_backward_matches_finite_differences, D, kiln::test::devices) {
  // Groups of channels × positions; a group of one channel (G = C), one group (G = 1); no positions.
  kt::check_model_gradients<knn::Sequential<knn::GroupNorm<2, 4>>, Shape<dyn, 4, 3, 3>, D>(
      Extents<Shape<dyn, 4, 3, 3>>(2), -2, 2, 0, 100, true);
  kt::check_model_gradients<knn::Sequential<knn::GroupNorm<3, 6, 1e-3f>>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(3), -2, 2, 0, 101, true);
  kt::check_model_gradients<knn::Sequential<knn::GroupNorm<1, 3>>, Shape<dyn, 3, 2, 3>, D>(
      Extents<Shape<dyn, 3, 2, 3>>(2), -2, 2, 0, 102, true);
  kt::check_model_gradients<knn::Sequential<knn::GroupNorm<4, 4>>, Shape<dyn, 4, 5>, D>(
      Extents<Shape<dyn, 4, 5>>(2), -2, 2, 0, 103, true);
  kt::check_model_gradients<knn::Sequential<knn::GroupNorm<2, 4, 1e-5f, false>>, Shape<dyn, 4, 2, 2>, D>(
      Extents<Shape<dyn, 4, 2, 2>>(3), -2, 2, 0, 104);
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 4, 3, 1, 1>, knn::GroupNorm<2, 4>, knn::Tanh,
                                            knn::Residual<knn::Conv2d<4, 4, 3, 1, 1>, knn::GroupNorm<4, 4>>,
                                            knn::Flatten, knn::Linear<36, 3>>,
                            Shape<dyn, 2, 3, 3>, D>(Extents<Shape<dyn, 2, 3, 3>>(2), -2, 2, 0, 105, true);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rows_far_from_zero_keep_their_precision, D, kiln::test::devices) {
  // Rows of 1e4 + N(0, 1): E[x^2] - E[x]^2 in float would lose every digit of the variance; the two
  // passes in double keep it. Against long double on the same float inputs, within float rounding.
  using In = Shape<dyn, 64>;
  knn::Model<knn::Sequential<knn::LayerNorm<64>>, In, kiln::Policy<kiln::Fp32, D>> m(0);
  const std::vector<double> w = kt::random_values<double>(64, 0.5, 1.5, 3),
                            b = kt::random_values<double>(64, -1, 1, 4);
  std::vector<float> params;
  for (const double v : w) params.push_back(static_cast<float>(v));
  for (const double v : b) params.push_back(static_cast<float>(v));
  m.parameters().copy_from(std::span<const float>(params));
  std::vector<float> x = kt::random_values<float>(8 * 64, -2, 2, 5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += 1e4f + static_cast<float>(i / 64);
  const auto y = m.forward(kt::make_tensor<D>(x, Extents<In>(8))).to_vector();
  const std::vector<double> xd(x.begin(), x.end());
  std::vector<double> wd, bd;
  for (std::size_t l = 0; l < 64; ++l) wd.push_back(params[l]), bd.push_back(params[64 + l]);
  check_close(y, reference_layer_norm(xd, 64, wd, bd, 1e-5));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(eps_zero_is_allowed_and_a_constant_row_is_nan_as_in_torch, D, kiln::test::devices) {
  using In = Shape<dyn, 4>;
  knn::Model<knn::Sequential<knn::LayerNorm<4, 0.0f>>, In, kiln::Policy<kt::Fp64, D>> m(0);
  const std::vector<double> x{1, 2, 4, 7, 3, 3, 3, 3};  // a varied row, a constant one
  const auto y = m.forward(kt::make_tensor<D>(x, Extents<In>(2))).to_vector();
  const auto want = reference_layer_norm(std::vector<double>(x.begin(), x.begin() + 4), 4, std::vector<double>(4, 1.0),
                                         std::vector<double>(4, 0.0), 0.0);
  for (std::size_t l = 0; l < 4; ++l) BOOST_TEST(y[l] == want[l], boost::test_tools::tolerance(1e-12));
  for (std::size_t l = 4; l < 8; ++l) BOOST_TEST(std::isnan(y[l]), "element " << l << ": " << y[l]);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(training_and_evaluation_agree_and_keep_no_statistics, D, kiln::test::devices) {
  using In = Shape<dyn, 3, 4>;
  knn::Model<knn::Sequential<knn::LayerNorm<4>>, In, kiln::Policy<kiln::Fp32, D>> m(0);
  static_assert(decltype(m)::parameter_count == 8 && decltype(m)::buffer_count == 0);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(24, -3, 3, 6), Extents<In>(2));
  const auto train = m.forward(x).to_vector();
  const auto again = m.forward(x).to_vector();  // no running state: the same output
  m.eval();
  const auto eval = m.forward(x).to_vector();
  BOOST_TEST(train == again, boost::test_tools::per_element());
  BOOST_TEST(train == eval, boost::test_tools::per_element());
  // Weight 1, bias 0: each row by its own statistics, as the long double reference.
  const auto xs = x.to_vector();
  check_close(train, reference_layer_norm(std::vector<double>(xs.begin(), xs.end()), 4,
                                          std::vector<double>(4, 1.0), std::vector<double>(4, 0.0), 1e-5));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(torchs_edge_cases_hold, D, kiln::test::devices) {
  using Policy = kiln::Policy<kiln::Fp32, D>;
  // An empty batch: an empty output, dx empty, the parameters' gradients untouched (torch: zeros).
  knn::Model<knn::Sequential<knn::LayerNorm<6>>, Shape<dyn, 6>, Policy> m(0);
  m.zero_grad();
  const Tensor<float, Shape<dyn, 6>, D> none(0);
  const auto y = m.forward(none);
  BOOST_TEST(y.size(0) == 0);
  BOOST_TEST(m.backward_input(y).numel() == 0);
  const auto g = m.gradients().to_vector();
  BOOST_TEST(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; }));

  knn::Model<knn::Sequential<knn::GroupNorm<2, 4>>, Shape<dyn, 4, 3>, Policy> gm(0);
  gm.zero_grad();
  const auto gy = gm.forward(Tensor<float, Shape<dyn, 4, 3>, D>(0));
  BOOST_TEST(gy.numel() == 0);
  BOOST_TEST(gm.backward_input(gy).numel() == 0);
  const auto gg = gm.gradients().to_vector();
  BOOST_TEST(std::all_of(gg.begin(), gg.end(), [](float v) { return v == 0.0f; }));

  // No positions (H = 0) in a batch of 2: an empty output and the gradients unchanged (torch 1.13: NaN
  // weight gradients).
  knn::Model<knn::Sequential<knn::GroupNorm<2, 4>>, Shape<dyn, 4, dyn>, Policy> flat(0);
  flat.zero_grad();
  const auto fy = flat.forward(Tensor<float, Shape<dyn, 4, dyn>, D>(Extents<Shape<dyn, 4, dyn>>(2, 0)));
  BOOST_TEST(fy.numel() == 0);
  BOOST_TEST(flat.backward_input(fy).numel() == 0);
  const auto fg = flat.gradients().to_vector();
  BOOST_TEST(std::all_of(fg.begin(), fg.end(), [](float v) { return v == 0.0f; }));

  // One normalised element: x - mean is 0, so y is the bias and dx is 0 (kiln exactly; torch's CPU
  // kernel is off by its float rounding of the mean times 1 / sqrt(eps): 0.1 near 10^4).
  knn::Model<knn::Sequential<knn::LayerNorm<1>>, Shape<dyn, 1>, Policy> one(0);
  one.parameters().copy_from(std::span<const float>(std::vector<float>{2.0f, -0.75f}));
  const auto y1 = one.forward(kt::make_tensor<D>(std::vector<float>{3, -1, 7}, Extents<Shape<dyn, 1>>(3)));
  BOOST_TEST(y1.to_vector() == (std::vector<float>{-0.75f, -0.75f, -0.75f}),
             boost::test_tools::per_element());
  const auto dx1 =
      one.backward_input(kt::make_tensor<D>(std::vector<float>{1, 2, 3}, Extents<Shape<dyn, 1>>(3)));
  BOOST_TEST(dx1.to_vector() == (std::vector<float>{0, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(one.gradients().to_vector() == (std::vector<float>{0, 6}), boost::test_tools::per_element());

  // no_grad keeps nothing: a backward after it is refused (by the model, before the layer would).
  {
    const knn::NoGrad no_grad(m);
    (void)m.forward(kt::make_tensor<D>(kt::random_values<float>(12, -1, 1, 7), Extents<Shape<dyn, 6>>(2)));
  }
  BOOST_CHECK_EXCEPTION(
      (void)m.backward_input(Tensor<float, Shape<dyn, 6>, D>(2)), kiln::Error, [](const kiln::Error& e) {
        return std::string(e.what()).find("no activations to go back through") != std::string::npos;
      });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(names_and_parameters_follow_torchs_state_dict, D, kiln::test::devices) {
  using Policy = kiln::Policy<kiln::Fp32, D>;
  using Net = knn::Sequential<knn::Conv2d<1, 3, 3>, knn::LayerNormOver<Shape<3, 4, 4>, 1e-3f>, knn::ReLU,
                              knn::Flatten, knn::Linear<48, 8>, knn::LayerNorm<8, 1e-5f, false>>;
  knn::Model<Net, Shape<dyn, 1, 6, 6>, Policy> m(0);
  static_assert(decltype(m)::parameter_count == 3 * 9 + 3 + 2 * 48 + 48 * 8 + 8);
  BOOST_TEST(m.net().template layer<1>().name() ==
             "LayerNorm((3, 4, 4), eps=0.001, elementwise_affine=True)");
  BOOST_TEST(m.net().template layer<5>().name() == "LayerNorm((8,), eps=1e-05, elementwise_affine=False)");
  const auto named = m.named_parameters();
  BOOST_REQUIRE_EQUAL(named.size(), 6u);
  BOOST_TEST(named[2].name == "1.weight");
  BOOST_TEST(named[2].shape == (std::vector<kiln::index_t>{3, 4, 4}), boost::test_tools::per_element());
  BOOST_TEST(named[3].name == "1.bias");
  BOOST_TEST(named[3].count == 48);
  BOOST_TEST(named[5].name == "4.bias");  // the last LayerNorm has no parameters
  // torch's reset_parameters: weight 1, bias 0; the views read them in the normalised shape.
  const auto& ln = m.net().template layer<1>();
  const auto w = ln.weight().to_vector(), b = ln.bias().to_vector();
  BOOST_TEST(std::all_of(w.begin(), w.end(), [](float v) { return v == 1.0f; }));
  BOOST_TEST(std::all_of(b.begin(), b.end(), [](float v) { return v == 0.0f; }));
  static_assert(std::is_same_v<decltype(ln.weight()), Tensor<float, Shape<3, 4, 4>, D>>);

  using Grouped =
      knn::Sequential<knn::Conv2d<1, 6, 3>, knn::GroupNorm<3, 6, 1e-3f>, knn::GroupNorm<2, 6, 1e-5f, false>>;
  knn::Model<Grouped, Shape<dyn, 1, 6, 6>, Policy> g(0);
  static_assert(decltype(g)::parameter_count == 6 * 9 + 6 + 2 * 6);
  BOOST_TEST(g.net().template layer<1>().name() == "GroupNorm(3, 6, eps=0.001, affine=True)");
  BOOST_TEST(g.net().template layer<2>().name() == "GroupNorm(2, 6, eps=1e-05, affine=False)");
  const auto gnamed = g.named_parameters();
  BOOST_REQUIRE_EQUAL(gnamed.size(), 4u);
  BOOST_TEST(gnamed[2].name == "1.weight");
  BOOST_TEST(gnamed[3].shape == (std::vector<kiln::index_t>{6}), boost::test_tools::per_element());
  static_assert(std::is_same_v<decltype(g.net().template layer<1>().bias()), Tensor<float, Shape<6>, D>>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(group_norm_relates_to_layer_norm_and_ignores_the_batch, D,
                              kiln::test::devices) {
  using Policy = kiln::Policy<kiln::Fp32, D>;
  using In = Shape<dyn, 3, 2, 2>;
  // One group: each sample normalised as a whole, as LayerNormOver<[3, 2, 2]> whose weight and bias
  // repeat each channel's over its 4 positions.
  knn::Model<knn::Sequential<knn::GroupNorm<1, 3>>, In, Policy> group(0);
  knn::Model<knn::Sequential<knn::LayerNormOver<Shape<3, 2, 2>>>, In, Policy> layer(0);
  const std::vector<float> w{0.5f, 1.5f, -2.0f}, b{0.25f, -1.0f, 3.0f};
  std::vector<float> gp(w), lp;
  gp.insert(gp.end(), b.begin(), b.end());
  for (const auto* v : {&w, &b})
    for (const float c : *v) lp.insert(lp.end(), 4, c);
  group.parameters().copy_from(std::span<const float>(gp));
  layer.parameters().copy_from(std::span<const float>(lp));
  const auto x = kt::make_tensor<D>(kt::random_values<float>(36, -3, 3, 110), Extents<In>(3));
  const auto yg = group.forward(x).to_vector(), yl = layer.forward(x).to_vector();
  for (std::size_t i = 0; i < yg.size(); ++i)
    BOOST_TEST(std::abs(yg[i] - yl[i]) <= 1e-6f * (1 + std::abs(yl[i])));
  const auto dy = kt::make_tensor<D>(kt::random_values<float>(36, -1, 1, 111), Extents<In>(3));
  const auto dxg = group.backward_input(dy).to_vector(), dxl = layer.backward_input(dy).to_vector();
  for (std::size_t i = 0; i < dxg.size(); ++i)
    BOOST_TEST(std::abs(dxg[i] - dxl[i]) <= 1e-6f * (1 + std::abs(dxl[i])));
  // The per-channel gradients are the per-element ones summed over each channel's positions.
  const auto gg = group.gradients().to_vector(), gl = layer.gradients().to_vector();
  for (std::size_t c = 0; c < 6; ++c) {
    const float summed = gl[4 * c] + gl[4 * c + 1] + gl[4 * c + 2] + gl[4 * c + 3];
    BOOST_TEST(std::abs(gg[c] - summed) <= 1e-5f * (1 + std::abs(summed)), "parameter " << c);
  }

  // Samples apart: a sample's output does not depend on the rest of its batch (unlike BatchNorm).
  knn::Model<knn::Sequential<knn::GroupNorm<3, 6>>, Shape<dyn, 6, 4>, Policy> m(0);
  const auto all = kt::random_values<float>(3 * 24, -2, 2, 112);
  const auto batch = m.forward(kt::make_tensor<D>(all, Extents<Shape<dyn, 6, 4>>(3))).to_vector();
  const std::vector<float> second(all.begin() + 24, all.begin() + 48);
  const auto alone = m.forward(kt::make_tensor<D>(second, Extents<Shape<dyn, 6, 4>>(1))).to_vector();
  BOOST_TEST(alone == std::vector<float>(batch.begin() + 24, batch.begin() + 48),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_wrong_run_time_extent_is_a_shape_error, D, kiln::test::devices) {
  // The trailing extent is dyn in the input's type: checked when the forward runs, before any work.
  knn::Model<knn::Sequential<knn::LayerNorm<6>>, Shape<dyn, dyn>, kiln::Policy<kiln::Fp32, D>> m(0);
  BOOST_CHECK_EXCEPTION(
      (void)m.forward(Tensor<float, Shape<dyn, dyn>, D>(Extents<Shape<dyn, dyn>>(2, 5))), kiln::ShapeError,
      [](const kiln::ShapeError& e) {
        return std::string(e.what()).find("input [2, 5] does not end in the normalised shape [6]") !=
               std::string::npos;
      });
  BOOST_TEST(m.forward(Tensor<float, Shape<dyn, dyn>, D>(Extents<Shape<dyn, dyn>>(2, 6))).numel() == 12);
  // GroupNorm's channels: dimension 1.
  knn::Model<knn::Sequential<knn::GroupNorm<2, 4>>, Shape<dyn, dyn, 3>, kiln::Policy<kiln::Fp32, D>> g(0);
  BOOST_CHECK_EXCEPTION(
      (void)g.forward(Tensor<float, Shape<dyn, dyn, 3>, D>(Extents<Shape<dyn, dyn, 3>>(2, 6))),
      kiln::ShapeError, [](const kiln::ShapeError& e) {
        return std::string(e.what()).find(
                   "GroupNorm(2, 4, eps=1e-05, affine=True): input [2, 6, 3] has 6 channels, "
                   "expected 4") != std::string::npos;
      });
}

/// Layer alone on the CPU with drawn parameters (U(-1.5, 1.5), when it has any), and drawn x and dy.
template <class Layer, class In>
struct DrawnNorm {
  knn::Model<knn::Sequential<Layer>, In> m{0};
  Tensor<float, In, kiln::Cpu> x, dy;
  DrawnNorm(const Extents<In>& ext, std::uint32_t stream)
      : x(kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -2, 3, stream + 1), ext)),
        dy(kt::make_tensor<kiln::Cpu>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, stream + 2), ext)) {
    constexpr auto count = decltype(m)::parameter_count;
    if constexpr (count > 0)
      m.parameters().copy_from(std::span<const float>(kt::random_values<float>(count, -1.5, 1.5, stream)));
  }
};

/// The GPU's passes (per element after per-row statistics and means, the parameter sums per (chunk,
/// parameter) in chunks of `block` samples) run by the CPU executor against the CPU's (per row, per
/// chunk of 16 samples): y and dx bit for bit, the parameter gradients within double rounding.
template <class Layer, class In>
void check_gpu_layout_on_the_cpu(const Extents<In>& ext, kiln::index_t block, std::uint32_t stream) {
  namespace kd = kiln::nn::detail;
  using Ex = kiln::detail::executor<kiln::Cpu>;
  DrawnNorm<Layer, In> drawn(ext, stream);
  auto& m = drawn.m;
  const auto &x = drawn.x, &dy = drawn.dy;
  using Model = std::remove_reference_t<decltype(m)>;
  m.zero_grad();
  const auto y_cpu = m.forward(x).to_vector();
  const auto dx_cpu = m.backward_input(dy).to_vector();
  const auto g_cpu = m.gradients().to_vector();

  const kd::NormRows rows = Layer::Spec::rows_of(x);
  const kiln::index_t count = x.numel() / rows.length, A = Layer::Spec::affine_count, n = x.numel();
  const float* w = Model::parameter_count > 0 ? m.parameters().data() : nullptr;
  std::vector<double> stats(static_cast<std::size_t>(2 * count)), coef(stats.size());
  std::vector<float> y(static_cast<std::size_t>(n)), dx(y.size());
  Ex::for_each(count,
               kd::NormRowStats<float>{x.data(), stats.data(), rows.length, static_cast<double>(1e-5f)});
  Ex::for_each(n, kd::NormRowApply<float, float>{x.data(), y.data(), nullptr, stats.data(), w, w ? w + A : nullptr,
                                                 rows, false, static_cast<double>(1e-5f)});  // the layer's eps, a float
  {  // an activation after it (SiLU, the normalised values kept apart): per element as per row
    std::vector<float> ya(y.size()), za(y.size()), ya_rows(y.size()), za_rows(y.size());
    std::vector<double> stats_rows(stats.size());
    using Apply = kd::NormRowApply<float, float, knn::epilogue::Silu>;
    Ex::for_each(n, Apply{x.data(), ya.data(), za.data(), stats.data(), w, w ? w + A : nullptr, rows, false,
                      static_cast<double>(1e-5f)});
    Ex::for_each(count, Apply{x.data(), ya_rows.data(), za_rows.data(), stats_rows.data(), w, w ? w + A : nullptr,
                              rows, true, static_cast<double>(1e-5f)});
    BOOST_TEST(za == y, boost::test_tools::per_element());
    BOOST_TEST(za_rows == y, boost::test_tools::per_element());
    BOOST_TEST(ya == ya_rows, boost::test_tools::per_element());
  }
  Ex::for_each(count,
               kd::NormRowGradMeans<float, float>{dy.data(), x.data(), stats.data(), w, coef.data(), rows});
  Ex::for_each(n, kd::NormRowGradInput<float, float>{dy.data(), x.data(), dx.data(), stats.data(),
                                                     coef.data(), w, rows, false});
  const kiln::index_t samples = count / rows.groups, chunks = (samples + block - 1) / block;
  std::vector<double> part(static_cast<std::size_t>(2 * chunks * A));
  std::vector<float> g(static_cast<std::size_t>(Model::parameter_count), 0.0f);
  if constexpr (Model::parameter_count > 0) {
    Ex::for_each(chunks * A, kd::NormRowGradParamChunks<float>{dy.data(), x.data(), stats.data(), part.data(), rows,
                                                               samples, block, A, false});
    Ex::for_each(A, kd::NormRowGradParamMerge<float>{part.data(), g.data(), g.data() + A, chunks, A});
  }
  BOOST_TEST(y == y_cpu, boost::test_tools::per_element());
  BOOST_TEST(dx == dx_cpu, boost::test_tools::per_element());
  for (std::size_t i = 0; i < g.size(); ++i)
    BOOST_TEST(g[i] == g_cpu[i], boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(per_element_and_per_row_passes_agree) {
  // LayerNorm (a parameter per element) and GroupNorm (per run of positions), several samples per chunk
  // and a last chunk part full, on both sides.
  check_gpu_layout_on_the_cpu<knn::LayerNorm<24>>(Extents<Shape<dyn, 24>>(37), 8, 120);
  check_gpu_layout_on_the_cpu<knn::LayerNormOver<Shape<3, 5>>>(Extents<Shape<dyn, 2, 3, 5>>(9), 3, 121);
  check_gpu_layout_on_the_cpu<knn::GroupNorm<3, 6>>(Extents<Shape<dyn, 6, 4, 5>>(19), 5, 122);
  check_gpu_layout_on_the_cpu<knn::GroupNorm<2, 4>>(Extents<Shape<dyn, 4>>(21), 8, 123);
  check_gpu_layout_on_the_cpu<knn::LayerNorm<24, 1e-5f, false>>(Extents<Shape<dyn, 24>>(9), 4, 124);  // no weights
  check_gpu_layout_on_the_cpu<knn::GroupNorm<3, 6, 1e-5f, false>>(Extents<Shape<dyn, 6, 7>>(5), 2, 125);
}

/// The CPU's parameter sums split over parameter slices (a small batch spread over the threads): the
/// module's gradients equal, bit for bit, the sums of one call per chunk, and every slice count gives the
/// same partial sums.
template <class Layer, class In>
void check_parameter_slices(const Extents<In>& ext, std::uint32_t stream) {
  namespace kd = kiln::nn::detail;
  using Ex = kiln::detail::executor<kiln::Cpu>;
  DrawnNorm<Layer, In> drawn(ext, stream);
  auto& m = drawn.m;
  const auto &x = drawn.x, &dy = drawn.dy;
  m.zero_grad();
  (void)m.forward(x);
  (void)m.backward_input(dy);
  const auto g_module = m.gradients().to_vector();

  const kd::NormRows rows = Layer::Spec::rows_of(x);
  const kiln::index_t count = x.numel() / rows.length, A = Layer::Spec::affine_count,
                      samples = count / rows.groups;
  const kiln::index_t block = kd::norm_row_param_block<kiln::Cpu>(samples, A, rows.spatial, -1),
                      chunks = (samples + block - 1) / block;
  // The case is large enough, and has few enough chunks, that the module slices its sums.
  if (KILN_HAS_OPENMP) BOOST_TEST(kd::norm_row_param_slices(chunks, block * rows.groups * rows.length, A) > 1);
  std::vector<double> stats(static_cast<std::size_t>(2 * count));
  Ex::for_each(count,
               kd::NormRowStats<float>{x.data(), stats.data(), rows.length, static_cast<double>(1e-5f)});
  std::vector<double> whole;
  for (const kiln::index_t slices : {kiln::index_t{1}, kiln::index_t{2}, kiln::index_t{3}, A}) {
    std::vector<double> part(static_cast<std::size_t>(2 * chunks * A), -1.0);
    Ex::for_each(chunks * slices, kd::NormRowGradParamChunks<float>{dy.data(), x.data(), stats.data(),
                                                                    part.data(), rows, samples, block, A, true,
                                                                    slices});
    if (slices == 1) {
      whole = part;
      std::vector<float> g(static_cast<std::size_t>(2 * A), 0.0f);
      Ex::for_each(A, kd::NormRowGradParamMerge<float>{part.data(), g.data(), g.data() + A, chunks, A});
      BOOST_TEST(g == g_module, boost::test_tools::per_element());
    } else {
      BOOST_TEST(part == whole, boost::test_tools::per_element());  // every partial written, the same
    }
  }
}

BOOST_AUTO_TEST_CASE(parameter_sums_do_not_depend_on_slices) {
  // Slices are made where there are fewer chunks than threads: 4 threads here, whatever the machine has.
  const kiln::backend::cpu::ScopedThreads four(4);
  // One chunk (3 samples) of 3 x 40 x 40 LayerNorm rows; two chunks (16 + 4 samples) of GroupNorm with
  // two channels a group (3 slices cut groups in half).
  check_parameter_slices<knn::LayerNormOver<Shape<3, 40, 40>>>(Extents<Shape<dyn, 3, 40, 40>>(3), 130);
  check_parameter_slices<knn::GroupNorm<4, 8>>(Extents<Shape<dyn, 8, 16, 16>>(20), 131);
}

/// Prec's 16-bit activations against fp32 on the same (rounded) inputs, with drawn weights: y, dx and the
/// parameters' gradients (fp32 master) each within `tolerance` of their largest magnitude (dx's means
/// cancel, so small elements carry others' rounding).
template <class Layer, class D, class Prec>
void check_mixed_against_fp32(float tolerance) {
  using H = typename Prec::storage;
  using Net = knn::Sequential<Layer>;
  using In = Shape<dyn, 3, 8>;
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> full(0);
  knn::Model<Net, In, kiln::Policy<Prec, D>> mixed(0);
  const auto params = kt::random_values<float>(decltype(full)::parameter_count, 0.5, 1.5, 84);
  full.parameters().copy_from(std::span<const float>(params));
  mixed.parameters().copy_from(std::span<const float>(params));
  const auto [x, xh] = kt::rounded_to<H>(kt::random_values<float>(96, -3, 5, 85));
  const auto y = full.forward(kt::make_tensor<D>(x, Extents<In>(4))).to_vector();
  const auto yh = mixed.forward(kt::make_tensor<D>(xh, Extents<In>(4))).to_vector();
  const auto [dy, dyh] = kt::rounded_to<H>(kt::random_values<float>(96, -1, 1, 86));
  full.zero_grad();
  mixed.zero_grad();
  const auto dx = full.backward_input(kt::make_tensor<D>(dy, Extents<In>(4))).to_vector();
  const auto dxh = mixed.backward_input(kt::make_tensor<D>(dyh, Extents<In>(4))).to_vector();
  const auto [y_worst, y_largest] = kt::worst_and_largest(yh, y);
  BOOST_TEST(y_worst <= tolerance * y_largest, Prec::name << ": y differs by " << y_worst);
  const auto [dx_worst, dx_largest] = kt::worst_and_largest(dxh, dx);
  BOOST_TEST(dx_worst <= tolerance * dx_largest, Prec::name << ": dx differs by " << dx_worst);
  const auto [g_worst, g_largest] = kt::worst_and_largest(mixed.gradients().to_vector(), full.gradients().to_vector());
  BOOST_TEST(g_worst <= tolerance * g_largest, Prec::name << ": parameter gradients differ by " << g_worst);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mixed_precision_normalises_in_fp32, D, kiln::test::devices) {
  check_mixed_against_fp32<knn::LayerNormOver<Shape<3, 8>>, D, kiln::MixedFp16>(
      4e-3f);  // 8 steps of half's 2^-11
  check_mixed_against_fp32<knn::LayerNormOver<Shape<3, 8>>, D, kiln::MixedBf16>(
      3.2e-2f);  // 8 steps of bf16's 2^-8
  check_mixed_against_fp32<knn::GroupNorm<1, 3>, D, kiln::MixedFp16>(4e-3f);
  check_mixed_against_fp32<knn::GroupNorm<1, 3>, D, kiln::MixedBf16>(3.2e-2f);
  check_mixed_against_fp32<knn::GroupNorm<3, 3>, D, kiln::MixedFp16>(4e-3f);   // a group per channel
  check_mixed_against_fp32<knn::LayerNorm<8>, D, kiln::MixedFp16>(4e-3f);      // a weight per element
  check_mixed_against_fp32<knn::LayerNorm<8>, D, kiln::MixedBf16>(3.2e-2f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_activation_after_them_runs_in_their_normalising_pass, D, kiln::test::devices) {
  using Img = Shape<dyn, 4, 5, 6>;
  using Rows = Shape<dyn, 3, 10>;
  using knn::Sequential, knn::GroupNorm, knn::LayerNorm, kiln::Fp32;
  constexpr bool in_passes = false;  // the derivative once into dz, as the activation's own backward
  // ReLU's derivative reads the output, SiLU's and GELU's the normalised input (kept apart)
  kt::check_fused_with_activation<Sequential<GroupNorm<2, 4>, knn::ReLU>, Img, Fp32, D>(Extents<Img>(3), 80,
                                                                                       in_passes);
  kt::check_fused_with_activation<Sequential<GroupNorm<2, 4>, knn::SiLU>, Img, Fp32, D>(Extents<Img>(3), 81,
                                                                                       in_passes);
  kt::check_fused_with_activation<Sequential<LayerNorm<10>, knn::GELU>, Rows, Fp32, D>(Extents<Rows>(2), 82,
                                                                                      in_passes);
  kt::check_fused_with_activation<Sequential<knn::LayerNormOver<Shape<4, 5, 6>>, knn::Tanh>, Img, Fp32, D>(
      Extents<Img>(2), 83, in_passes);
  // without affine parameters; InstanceNorm (GroupNorm's rows, one channel each)
  kt::check_fused_with_activation<Sequential<LayerNorm<10, 1e-5f, false>, knn::Sigmoid>, Rows, Fp32, D>(
      Extents<Rows>(2), 84, in_passes);
  kt::check_fused_with_activation<Sequential<knn::InstanceNorm2d<4>, knn::ReLU>, Img, Fp32, D>(Extents<Img>(3), 85,
                                                                                             in_passes);
  // bf16 and half activations: rounded to the storage type between the normalisation and the activation
  kt::check_fused_with_activation<Sequential<GroupNorm<2, 4>, knn::GELU>, Img, kiln::MixedBf16, D>(
      Extents<Img>(3), 86, in_passes);
  kt::check_fused_with_activation<Sequential<LayerNorm<10>, knn::Sigmoid>, Rows, kiln::MixedFp16, D>(
      Extents<Rows>(2), 87, in_passes);
  // the summary marks the activation, and they run it in a double-precision gradient check too
  knn::Model<Sequential<knn::Conv2d<4, 4, 3, 1, 1>, GroupNorm<2, 4>, knn::SiLU>, Img> model;
  const std::string s = model.summary(2);
  BOOST_TEST(s.find("SiLU() [fused into 1]") != std::string::npos, s);
  kt::check_model_gradients<Sequential<GroupNorm<2, 4>, knn::GELU>, Img, D>(Extents<Img>(2), -2, 2, 0, 88, true);
  kt::check_model_gradients<Sequential<LayerNorm<10>, knn::ReLU>, Rows, D>(Extents<Rows>(2), -2, 2, 0, 89, true);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
