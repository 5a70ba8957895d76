// ConvTranspose2d: forward against the definition written out in double (stride, padding, output padding,
// groups, dilation, no bias), equal to Conv2d's input gradient on the same weights, backward against
// float64 finite differences (unfused and with a fused activation), and the shapes, refusals and names
// as torch's.
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
using kiln::index_t;
using kiln::Shape;

/// ConvTranspose2d<In, Out, K, S, P, Op, G, Bias, Dl> on a batch of 2 [In, H, W] in double against
/// y[n, o, ih S - P + ki Dl, iw S - P + kj Dl] += x[n, i, ih, iw] w[i, o - g Out / G, ki, kj] for the
/// input channels i of o's group g, plus b[o].
template <index_t In, index_t Out, index_t K, index_t S, index_t P, index_t Op, index_t G, bool Bias,
          index_t Dl, index_t H, index_t W, class D>
void check_forward() {
  using Layer = knn::ConvTranspose2d<In, Out, K, S, P, Op, G, Bias, Dl>;
  using Shp = Shape<dyn, In, H, W>;
  knn::Model<knn::Sequential<Layer>, Shp, kiln::Policy<kt::Fp64, D>> model(3);
  constexpr index_t count = decltype(model)::parameter_count;
  const auto theta = kt::random_values<double>(count, -1.0, 1.0, 11);
  model.parameters().copy_from(std::span<const double>(theta));
  const auto xs = kt::random_values<double>(2 * In * H * W, -1.0, 1.0, 12);
  const auto y = model.forward(kt::make_tensor<D>(xs, Extents<Shp>(2)));
  const index_t ho = (H - 1) * S - 2 * P + Dl * (K - 1) + Op + 1,
                wo = (W - 1) * S - 2 * P + Dl * (K - 1) + Op + 1;
  BOOST_REQUIRE(y.size(1) == Out && y.size(2) == ho && y.size(3) == wo);
  std::vector<double> want(static_cast<std::size_t>(2 * Out * ho * wo), 0.0);
  constexpr index_t ig = In / G, og = Out / G;
  for (index_t n = 0; n < 2; ++n)
    for (index_t o = 0; o < Out; ++o)
      for (index_t q = 0; q < ho * wo; ++q)
        want[static_cast<std::size_t>((n * Out + o) * ho * wo + q)] =
            Bias ? theta[static_cast<std::size_t>(In * og * K * K + o)] : 0.0;
  for (index_t n = 0; n < 2; ++n)
    for (index_t i = 0; i < In; ++i)
      for (index_t ol = 0; ol < og; ++ol)
        for (index_t ki = 0; ki < K; ++ki)
          for (index_t kj = 0; kj < K; ++kj)
            for (index_t ih = 0; ih < H; ++ih)
              for (index_t iw = 0; iw < W; ++iw) {
                const index_t oh = ih * S - P + ki * Dl, ow = iw * S - P + kj * Dl, o = i / ig * og + ol;
                if (oh < 0 || oh >= ho || ow < 0 || ow >= wo) continue;
                want[static_cast<std::size_t>(((n * Out + o) * ho + oh) * wo + ow)] +=
                    xs[static_cast<std::size_t>(((n * In + i) * H + ih) * W + iw)] *
                    theta[static_cast<std::size_t>(((i * og + ol) * K + ki) * K + kj)];
              }
  const auto got = y.to_vector();
  double worst = 0;
  for (std::size_t k = 0; k < want.size(); ++k) worst = std::max(worst, std::abs(got[k] - want[k]));
  BOOST_TEST(worst <= 1e-13, Layer::repr() << ": worst " << worst);
}

/// Sequential<Layers...> on [2, C, H, W] against finite differences, input and drawn parameters, in double.
template <class In, class D, class... Layers>
void check_gradients(std::uint32_t stream) {
  kt::check_model_gradients<knn::Sequential<Layers...>, In, D>(Extents<In>(2), -1.0, 1.0, 0.05, stream, true);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(conv_transpose)

BOOST_AUTO_TEST_CASE_TEMPLATE(conv_transpose2d_follows_its_definition, D, kt::devices) {
  check_forward<2, 3, 3, 1, 0, 0, 1, true, 1, 4, 5, D>();
  check_forward<3, 2, 3, 2, 1, 1, 1, true, 1, 4, 3, D>();   // doubles 4 x 3 to 8 x 6
  check_forward<2, 4, 4, 2, 1, 0, 1, false, 1, 3, 3, D>();  // the DCGAN block: 3 x 3 to 6 x 6
  check_forward<4, 6, 3, 2, 0, 1, 2, true, 1, 3, 4, D>();   // groups
  check_forward<3, 3, 3, 1, 1, 0, 3, true, 1, 4, 4, D>();   // depthwise
  check_forward<2, 3, 3, 2, 2, 0, 1, true, 2, 4, 5, D>();   // dilation, padding cropping the borders
  check_forward<2, 2, 2, 3, 0, 2, 1, true, 1, 3, 2, D>();   // stride past the kernel: rows with no taps
  check_forward<2, 3, 2, 1, 0, 1, 1, true, 2, 3, 4, D>();   // output padding reaching the stride (< dilation)
  check_forward<1, 2, 5, 1, 4, 0, 1, true, 1, 5, 6, D>();   // padding cropping to fewer rows than kernel taps
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv_transpose2d_is_conv2ds_input_gradient, D, kt::devices) {
  // Conv2d<Out, In, K, S, P, Dl, G> maps [Out, 8, 8] to [In, 4, 4] (stride 2, padding 1) with a weight
  // [In, Out / G, K, K]: its input gradient for dy = x is ConvTranspose2d<In, Out, K, S, P, 1>(x) on the
  // same weights (output padding 1 gives back 8 x 8: (4 - 1) 2 - 2 + 3 + 1).
  using P = kiln::Policy<kt::Fp64, D>;
  using Up = knn::Sequential<knn::ConvTranspose2d<4, 6, 3, 2, 1, 1, 2, false>>;
  using Down = knn::Sequential<knn::Conv2d<6, 4, 3, 2, 1, 1, 2, false>>;
  using Small = Shape<dyn, 4, 4, 4>;
  using Large = Shape<dyn, 6, 8, 8>;
  knn::Model<Up, Small, P> up(1);
  knn::Model<Down, Large, P> down(2);
  static_assert(std::is_same_v<typename decltype(up)::output_shape, Large>);
  static_assert(std::is_same_v<typename decltype(down)::output_shape, Small>);
  down.parameters() = up.parameters();
  const auto x = kt::make_tensor<D>(kt::random_values<double>(2 * 4 * 4 * 4, -1, 1, 21), Extents<Small>(2));
  const auto y = up.forward(x);
  (void)down.forward(
      kt::make_tensor<D>(kt::random_values<double>(2 * 6 * 8 * 8, -1, 1, 22), Extents<Large>(2)));
  const auto dx = down.backward_input(x);
  BOOST_TEST(y.to_vector() == dx.to_vector(), boost::test_tools::tolerance(1e-13)
                                                  << boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv_transpose2d_backward_matches_numeric, D, kt::devices) {
  using knn::ConvTranspose2d;
  check_gradients<Shape<dyn, 2, 3, 4>, D, ConvTranspose2d<2, 3, 3>>(61);
  check_gradients<Shape<dyn, 3, 3, 3>, D, ConvTranspose2d<3, 2, 3, 2, 1, 1>>(62);
  check_gradients<Shape<dyn, 4, 3, 2>, D, ConvTranspose2d<4, 6, 3, 2, 0, 1, 2, false>>(63);
  check_gradients<Shape<dyn, 2, 3, 3>, D, ConvTranspose2d<2, 2, 3, 1, 2, 0, 1, true, 2>>(64);
  check_gradients<Shape<dyn, 2, 2, 3>, D, ConvTranspose2d<2, 3, 2, 3, 1, 2>>(65);
  check_gradients<Shape<dyn, 2, 3, 3>, D, ConvTranspose2d<2, 2, 2, 1, 0, 1, 1, true, 2>>(66);
  // fused epilogues
  check_gradients<Shape<dyn, 2, 3, 3>, D, ConvTranspose2d<2, 3, 4, 2, 1>, knn::ReLU>(67);
  check_gradients<Shape<dyn, 4, 2, 3>, D, ConvTranspose2d<4, 2, 3, 2, 1, 1, 2>, knn::Tanh>(68);
  check_gradients<Shape<dyn, 2, 3, 3>, D, ConvTranspose2d<2, 3, 3, 1, 1>, knn::GELU,
                  ConvTranspose2d<3, 2, 2, 2>, knn::Sigmoid>(69);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv_transpose2d_fused_and_unfused_agree, D, kt::devices) {
  // With fusion off (kiln::Unfused) the activations run as layers of their own: the same numbers.
  using Net = knn::Sequential<knn::ConvTranspose2d<3, 4, 3, 2, 1, 1>, knn::ReLU,
                              knn::ConvTranspose2d<4, 2, 2, 1>, knn::SiLU>;
  using In = Shape<dyn, 3, 4, 5>;
  using Mod = typename Net::template module<In, kiln::Policy<kt::Fp64, D>>;
  static_assert(Mod::template fused_with_next<0> && Mod::template fused_with_next<2>);
  kt::check_fused_matches_unfused<Net, In, D>(Extents<In>(2), -1, 1, 31, 1e-12);
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_has_torchs_shapes_refusals_and_names) {
  using knn::ConvTranspose2d;
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  using In = Shape<dyn, 4, 5, 6>;
  static_assert(std::is_same_v<ConvTranspose2d<4, 2, 3>::output<In>, Shape<dyn, 2, 7, 8>>);
  static_assert(std::is_same_v<ConvTranspose2d<4, 2, 3, 2, 1, 1>::output<In>, Shape<dyn, 2, 10, 12>>);
  static_assert(std::is_same_v<ConvTranspose2d<4, 2, 4, 2, 1>::output<In>, Shape<dyn, 2, 10, 12>>);
  static_assert(
      std::is_same_v<ConvTranspose2d<4, 2, 3, 1, 0, 1, 1, true, 2>::output<In>, Shape<dyn, 2, 10, 11>>);
  // padding that crops everything: (5 - 1) + 1 - 2 P <= 0 for P = 3 (K 1)
  static_assert(ConvTranspose2d<4, 2, 1, 1, 2>::accepts<In> && !ConvTranspose2d<4, 2, 1, 1, 3>::accepts<In>);
  static_assert(!ConvTranspose2d<3, 2, 3>::accepts<In> &&
                !ConvTranspose2d<4, 2, 3>::accepts<Shape<dyn, 4, dyn, 6>>);

  BOOST_TEST((ConvTranspose2d<4, 2, 3>::module<In, P>().name()) ==
             "ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(1, 1))");
  BOOST_TEST((ConvTranspose2d<4, 6, 3, 2, 1, 1, 2, false, 2>::module<In, P>().name()) ==
             "ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2), "
             "output_padding=(1, 1), groups=2, bias=False)");
  // The weight in torch's layout [In, Out / Groups, K, K], then the bias.
  using Grouped = ConvTranspose2d<4, 6, 3, 2, 1, 1, 2>::module<In, P>;
  static_assert(Grouped::parameter_count == 4 * 3 * 3 * 3 + 6);
  const auto params = Grouped().parameters();
  BOOST_REQUIRE(params.size() == 2u);
  BOOST_TEST(params[0].shape == (std::vector<index_t>{4, 3, 3, 3}), boost::test_tools::per_element());
  BOOST_TEST(params[1].offset == 4 * 3 * 3 * 3);
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_initialises_as_torch) {
  // U(-b, b) with b = 1 / sqrt((Out / Groups) K K) for the weight and the bias: 1/sqrt(3 * 9) here.
  using In = Shape<dyn, 4, 3, 3>;
  knn::Model<knn::Sequential<knn::ConvTranspose2d<4, 6, 3, 1, 0, 0, 2>>, In,
             kiln::Policy<kiln::Fp32, kiln::Cpu>>
      m(7);
  const auto v = m.parameters().to_vector();
  const double bound = 1.0 / std::sqrt(27.0);
  double most = 0;
  for (float p : v) most = std::max(most, std::abs(static_cast<double>(p)));
  BOOST_TEST(most <= bound);
  BOOST_TEST(most > 0.9 * bound);  // 114 draws reach near the bound
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_refuses_a_dy_with_other_rows_than_the_forward_pass) {
  using In = Shape<dyn, 2, 3, 3>;
  knn::ConvTranspose2d<2, 2, 3>::module<In, kiln::Policy<kiln::Fp32, kiln::Cpu>> up;
  std::vector<float> w(static_cast<std::size_t>(decltype(up)::parameter_count), 0.5f), g(w.size(), 0.0f);
  up.bind(w.data(), g.data(), w.data(), 0);
  const auto y = up.forward(kiln::Tensor<float, In>(Extents<In>(2)), {});
  const kiln::Tensor<float, Shape<dyn, 2, 5, 5>> dy(Extents<Shape<dyn, 2, 5, 5>>(3));
  BOOST_CHECK_EXCEPTION(up.backward(dy), kiln::ShapeError, [](const kiln::ShapeError& e) {
    return std::string(e.what()).find("ConvTranspose2d::backward: dy has 3 rows; the forward pass had 2") !=
           std::string::npos;
  });
  BOOST_TEST(y.size(0) == 2);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
