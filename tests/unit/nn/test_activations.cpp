// The activations beyond ReLU, Sigmoid, Tanh, GELU, SiLU, LeakyReLU and ELU: ReLU6, Hardtanh, Hardsigmoid,
// Hardswish, Softplus, Mish, SELU, CELU, Softsign and LogSigmoid. Backward against float64 finite
// differences, alone and fused after a Linear or a Conv2d (the same numbers as unfused); torch's values
// and gradients at their bends, at the ends and at NaN; their names as torch prints them.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <kiln/nn/nn.hpp>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
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

/// Activation A alone on [3, 7] in [-7, 7] (the bends at -3, 3 and 6 inside), and after a Linear and a
/// Conv2d, whose epilogue it then is: backward against finite differences.
template <class A, class D>
void check_activation(std::uint32_t stream) {
  using In = Shape<dyn, 7>;
  kt::check_model_gradients<knn::Sequential<A>, In, D>(Extents<In>(3), -7, 7, 0.05, stream);
  kt::check_model_gradients<knn::Sequential<knn::Linear<7, 5>, A>, In, D>(Extents<In>(3), -3, 3, 0,
                                                                          stream + 1, true);
  using Img = Shape<dyn, 2, 4, 4>;
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, A>, Img, D>(Extents<Img>(2), -3, 3, 0,
                                                                                    stream + 2, true);
}

/// Activation A's outputs and input gradients (dy = 1) in float at xs.
template <class A, class D>
std::pair<std::vector<float>, std::vector<float>> run(const std::vector<float>& xs) {
  using S = Shape<dyn, 1>;
  const Extents<S> e(static_cast<kiln::index_t>(xs.size()));
  knn::Model<knn::Sequential<A>, S, kiln::Policy<kiln::Fp32, D>> m(0);
  auto y = m.forward(kt::make_tensor<D>(xs, e)).to_vector();
  auto g = m.backward_input(kt::make_tensor<D>(std::vector<float>(xs.size(), 1.0f), e)).to_vector();
  return {y, g};
}

/// got == want element by element, NaN matching NaN.
void same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    BOOST_TEST((got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))),
               what << "[" << i << "]: " << got[i] << ", expected " << want[i]);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(activations)

BOOST_AUTO_TEST_CASE_TEMPLATE(activations_backward_match_numeric_alone_and_fused, D, kt::devices) {
  check_activation<knn::ReLU6, D>(71);
  check_activation<knn::Hardtanh<>, D>(74);
  check_activation<knn::Hardtanh<-2.0f, 1.5f>, D>(77);
  check_activation<knn::Hardsigmoid, D>(80);
  check_activation<knn::Hardswish, D>(83);
  check_activation<knn::Softplus<>, D>(86);
  check_activation<knn::Softplus<2.0f, 5.0f>, D>(89);
  check_activation<knn::Mish, D>(92);
  check_activation<knn::SELU, D>(95);
  check_activation<knn::CELU<>, D>(98);
  check_activation<knn::CELU<0.5f>, D>(101);
  check_activation<knn::Softsign, D>(104);
  check_activation<knn::LogSigmoid, D>(107);
  check_activation<knn::GELUTanh, D>(110);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gelu_tanh_is_torchs, D, kt::devices) {
  // torch 1.13, nn.GELU(approximate='tanh') at these x, dy = 1 (its printed floats).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto [y, g] = run<knn::GELUTanh, D>({-6, -3, -1, -0.5f, 0, 0.25f, 1, 2.5f, 6, nan});
  const std::vector<float> torch_y = {-0.0f, -0.0036374330520629883f, -0.15880799293518066f, -0.1542859971523285f,
                                      0.0f, 0.14967535436153412f, 0.8411920070648193f, 2.4849157333374023f, 6.0f};
  const std::vector<float> torch_g = {0.0f, -0.011584296822547913f, -0.08296409249305725f, 0.1326301097869873f, 0.5f,
                                      0.6953541040420532f, 1.0829640626907349f, 1.0379517078399658f, 1.0f};
  for (std::size_t i = 0; i < torch_y.size(); ++i) {
    BOOST_TEST(y[i] == torch_y[i], boost::test_tools::tolerance(2e-6f));
    // (at -3 the gradient is a difference of nearly equal terms: torch's float and kiln's lie 1.1e-5 and
    // 6.6e-6 from the float64 value, -0.011584166630969648)
    BOOST_TEST(g[i] == torch_g[i], boost::test_tools::tolerance(2e-5f));
  }
  BOOST_TEST((std::isnan(y[9]) && std::isnan(g[9])));
  // It differs from the exact GELU (by up to about 5e-4 near x = ±2): the two are not confused.
  const auto [exact, unused] = run<knn::GELU, D>({-2.0f});
  BOOST_TEST(std::abs(exact[0] - run<knn::GELUTanh, D>({-2.0f}).first[0]) > 1e-5f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(hard_activations_at_their_bends_and_nan_as_torch, D, kt::devices) {
  // torch 1.13 at x = [-3, 3, -1, 1, 0, 6, nan] with dy = 1. Hardtanh and ReLU6: the gradient 0 at the
  // bounds and dy inside and at NaN; Hardsigmoid: dy / 6 strictly inside (-3, 3), 0 at NaN; Hardswish:
  // x / 3 + 1/2 from -3 to 3 both included (-0.5 at -3, 1.5 at 3), dy at NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-3, 3, -1, 1, 0, 6, nan};
  const auto [ht, ght] = run<knn::Hardtanh<>, D>(x);
  same(ht, {-1, 1, -1, 1, 0, 1, nan}, "Hardtanh");
  same(ght, {0, 0, 0, 0, 1, 0, 1}, "Hardtanh'");
  const auto [r6, gr6] = run<knn::ReLU6, D>(x);
  same(r6, {0, 3, 0, 1, 0, 6, nan}, "ReLU6");
  same(gr6, {0, 1, 0, 1, 0, 0, 1}, "ReLU6'");
  const auto [hs, ghs] = run<knn::Hardsigmoid, D>(x);
  same(hs, {0, 1, 2.0f / 6, 4.0f / 6, 0.5f, 1, nan}, "Hardsigmoid");
  same(ghs, {0, 0, 1.0f / 6, 1.0f / 6, 1.0f / 6, 0, 0}, "Hardsigmoid'");
  const auto [hw, ghw] = run<knn::Hardswish, D>(x);
  same(hw, {0, 3, -1 * 2.0f / 6, 4.0f / 6, 0, 6, nan}, "Hardswish");
  BOOST_TEST(std::signbit(hw[0]));  // -3 * 0 / 6
  same(ghw, {-0.5f, 1.5f, -1.0f / 3 + 0.5f, 1.0f / 3 + 0.5f, 0.5f, 1, 1}, "Hardswish'");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(hardtanh_stops_the_gradient_past_bounds_that_fp16_cannot_hold, D, kt::devices) {
  // Hardtanh(-0.1, 0.1) in fp16, alone and fused after a Linear (weight 1): 0.1 is 0.0999756 in fp16, so
  // the clamped outputs lie inside the float bounds; the gradient still stops at 0.5 and -0.5 (torch's
  // hardtanh_backward reads the input) and passes at 0.05.
  using In = Shape<dyn, 1>;
  using P = kiln::Policy<kiln::MixedFp16, D>;
  const std::vector<float> xs = {0.5f, -0.5f, 0.05f};
  std::vector<kiln::half> xh, ones;
  for (float v : xs)
    xh.push_back(kiln::from_compute<kiln::half>(v)), ones.push_back(kiln::from_compute<kiln::half>(1.0f));
  const auto x = kiln::Tensor<kiln::half, In, D>::from(std::span<const kiln::half>(xh), Extents<In>(3));
  const auto dy = kiln::Tensor<kiln::half, In, D>::from(std::span<const kiln::half>(ones), Extents<In>(3));
  const auto grads = [](const auto& t) {
    std::vector<float> v;
    for (auto h : t.to_vector()) v.push_back(kiln::to_compute(h));
    return v;
  };
  knn::Model<knn::Sequential<knn::Hardtanh<-0.1f, 0.1f>>, In, P> alone(0);
  (void)alone.forward(x);
  same(grads(alone.backward_input(dy)), {0, 0, 1}, "Hardtanh' in fp16");
  for (const bool fused : {true, false}) {
    knn::Model<knn::Sequential<knn::Linear<1, 1, false>, knn::Hardtanh<-0.1f, 0.1f>>, In, P> m(0);
    const std::vector<float> w = {1.0f};
    m.parameters().copy_from(std::span<const float>(w));
    std::optional<kiln::Unfused> off;
    if (!fused) off.emplace();
    (void)m.forward(x);
    same(grads(m.backward_input(dy)), {0, 0, 1}, fused ? "fused" : "unfused");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(smooth_activations_at_the_ends_and_nan_as_torch, D, kt::devices) {
  // At x = [nan, 0, -2, 100, -100]: no overflow at ±100 (Softplus and LogSigmoid's log(1 + e^x) at
  // 100 is 100 itself, at -100 e^-100; Mish and Softsign saturate), SELU and CELU's gradient at 0 is
  // the negative branch's (x <= 0), dy Scale at NaN; the others NaN at NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {nan, 0, -2, 100, -100};
  const auto [sp, gsp] = run<knn::Softplus<>, D>(x);
  BOOST_TEST((std::isnan(sp[0]) && std::isnan(gsp[0])));
  BOOST_TEST((sp[1] == std::log(2.0f) && gsp[1] == 0.5f && sp[3] == 100.0f && gsp[3] == 1.0f));
  BOOST_TEST(sp[4] == std::exp(-100.0f), boost::test_tools::tolerance(1e-6f));  // denormal: within a few ulps
  const auto [sp2, gsp2] = run<knn::Softplus<2.0f, 5.0f>, D>({2.5f, 2.6f});     // 2 x > 5 is false at 2.5
  BOOST_TEST(sp2[0] == std::log1p(std::exp(5.0f)) / 2.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST((sp2[1] == 2.6f && gsp2[1] == 1.0f));
  const auto [ls, gls] = run<knn::LogSigmoid, D>(x);
  BOOST_TEST((std::isnan(ls[0]) && std::isnan(gls[0])));
  BOOST_TEST((ls[1] == -std::log(2.0f) && gls[1] == 0.5f && ls[4] == -100.0f && gls[4] == 1.0f));
  BOOST_TEST((ls[3] <= 0.0f && ls[3] > -1e-40f && gls[3] < 1e-40f));
  const auto [mi, gmi] = run<knn::Mish, D>(x);
  BOOST_TEST((std::isnan(mi[0]) && std::isnan(gmi[0]) && mi[1] == 0.0f && mi[3] == 100.0f && gmi[3] == 1.0f));
  BOOST_TEST(gmi[1] == 0.6f, boost::test_tools::tolerance(1e-6f));  // tanh(log 2) = 3/5
  BOOST_TEST((mi[4] <= 0.0f && mi[4] > -1e-35f));
  const auto [ss, gss] = run<knn::Softsign, D>(x);
  BOOST_TEST((std::isnan(ss[0]) && std::isnan(gss[0]) && ss[1] == 0.0f && gss[1] == 1.0f));
  BOOST_TEST(ss[2] == -2.0f / 3.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(gss[2] == 1.0f / 9.0f, boost::test_tools::tolerance(1e-6f));
  // At ±inf the output is NaN (inf / inf) and so is the gradient, as torch's autograd through
  // x.div(x.abs() + 1) gives (the limit would be 0); at 100 the gradient is torch's float bits.
  const float inf = std::numeric_limits<float>::infinity();
  const auto [ssi, gssi] = run<knn::Softsign, D>({inf, -inf, 100.0f});
  BOOST_TEST((std::isnan(ssi[0]) && std::isnan(ssi[1]) && std::isnan(gssi[0]) && std::isnan(gssi[1])));
  const float d = 101.0f;
  BOOST_TEST(gssi[2] == 1.0f / d + (-1.0f * ((100.0f / d) / d)) * 1.0f);
  const auto [se, gse] = run<knn::SELU, D>(x);
  const float alpha = 1.6732632423543772f, scale = 1.0507009873554805f;
  BOOST_TEST((std::isnan(se[0]) && gse[0] == scale && se[1] == 0.0f && gse[3] == scale));
  BOOST_TEST(gse[1] == alpha * scale, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(se[4] == -alpha * scale, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(se[2] == alpha * scale * std::expm1(-2.0f), boost::test_tools::tolerance(1e-6f));
  const auto [ce, gce] = run<knn::CELU<0.5f>, D>(x);
  BOOST_TEST((std::isnan(ce[0]) && gce[0] == 1.0f && gce[1] == 1.0f && ce[3] == 100.0f && ce[4] == -0.5f));
  BOOST_TEST(ce[2] == 0.5f * std::expm1(-4.0f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(gce[2] == std::exp(-4.0f), boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(activations_fused_and_unfused_agree, D, kt::devices) {
  using Net =
      knn::Sequential<knn::Linear<6, 6>, knn::Hardswish, knn::Linear<6, 6>, knn::Mish, knn::Linear<6, 6>,
                      knn::Softplus<2.0f, 5.0f>, knn::Linear<6, 6>, knn::SELU, knn::Linear<6, 4>, knn::ReLU6>;
  using In = Shape<dyn, 6>;
  using Mod = typename Net::template module<In, kiln::Policy<kt::Fp64, D>>;
  static_assert(Mod::template fused_with_next<0> && Mod::template fused_with_next<2> &&
                Mod::template fused_with_next<4> && Mod::template fused_with_next<6> &&
                Mod::template fused_with_next<8>);
  kt::check_fused_matches_unfused<Net, In, D>(Extents<In>(5), -3, 3, 41);
}

/// A spec derived from an activation to change its module: not fused (its own module runs).
struct MyReLU : knn::ReLU {};

BOOST_AUTO_TEST_CASE(only_the_activations_themselves_are_fused) {
  static_assert(std::is_same_v<knn::epilogue_of<knn::ReLU>::type, knn::epilogue::Relu>);
  static_assert(std::is_same_v<knn::epilogue_of<knn::Hardswish>::type, knn::epilogue::Hardswish>);
  static_assert(std::is_same_v<knn::epilogue_of<knn::GELU>::type, knn::epilogue::Gelu>);
  static_assert(std::is_void_v<knn::epilogue_of<MyReLU>::type>);
  static_assert(std::is_void_v<knn::epilogue_of<knn::Linear<2, 2>>::type>);
  static_assert(std::is_void_v<knn::epilogue_of<knn::Dropout<>>::type>);
  using Net = knn::Sequential<knn::Linear<3, 3>, MyReLU>;
  static_assert(!Net::module<Shape<dyn, 3>, kiln::Policy<>>::fused_with_next<0>);
  // Unfused, MyReLU's own (inherited) module runs: the output is the Linear's, clamped at 0.
  knn::Model<Net, Shape<dyn, 3>> model(2);
  const auto y = model.forward(
      kt::make_tensor<kiln::Cpu>(kt::random_values<float>(12, -2, 2, 9), Extents<Shape<dyn, 3>>(4)));
  int negative = 0, zero = 0;
  for (float v : y.to_vector()) negative += v < 0.0f, zero += v == 0.0f;
  BOOST_TEST(negative == 0);
  BOOST_TEST(zero > 0);  // some of the 12 pre-activations were negative
}

BOOST_AUTO_TEST_CASE(activations_are_named_as_torch_prints_them) {
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  using Net =
      knn::Sequential<knn::ReLU6, knn::Hardtanh<>, knn::Hardtanh<-2.0f, 1.5f>, knn::Hardsigmoid,
                      knn::Hardswish, knn::Softplus<>, knn::Softplus<2.0f, 5.0f>, knn::Softplus<0.5f, 10.0f>,
                      knn::Mish, knn::SELU, knn::CELU<>, knn::CELU<0.5f>, knn::Softsign, knn::LogSigmoid, knn::GELUTanh>;
  knn::Model<Net, Shape<dyn, 3>, P> all(0);
  const std::string s = all.summary(2);
  for (const char* name :
       {"ReLU6()", "Hardtanh(min_val=-1.0, max_val=1.0)", "Hardtanh(min_val=-2.0, max_val=1.5)",
        "Hardsigmoid()", "Hardswish()", "Softplus(beta=1, threshold=20)", "Softplus(beta=2, threshold=5)",
        "Softplus(beta=0.5, threshold=10)", "Mish()", "SELU()", "CELU(alpha=1.0)", "CELU(alpha=0.5)",
        "Softsign()", "LogSigmoid()", "GELU(approximate='tanh')"})
    BOOST_TEST(s.find(name) != std::string::npos, name << " in\n" << s);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
