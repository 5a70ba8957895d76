// The padding layers (ZeroPad2d, ConstantPad2d, ReflectionPad2d, ReplicationPad2d, CircularPad2d) and
// Conv2d's padding modes: forward against the modes' definitions written out index by index, backward
// against float64 finite differences, each Conv2d mode the same as the padding layer before a Conv2d
// without padding (unfused and with a fused ReLU), and the shapes, refusals and names as torch's.
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
using knn::PaddingMode;

/// The input that padded position p of an axis of n inputs (`before` of padding ahead) reads, by each
/// mode's definition: reflect folds the index back at -1 and at n (the edge not repeated) until it lies
/// inside; replicate clamps; circular wraps modulo n; zeros: -1 outside.
int source(PaddingMode mode, int p, int n, int before) {
  int i = p - before;
  switch (mode) {
    case PaddingMode::zeros:
      return i < 0 || i >= n ? -1 : i;
    case PaddingMode::reflect:
      while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
      return i;
    case PaddingMode::replicate:
      return std::min(std::max(i, 0), n - 1);
    case PaddingMode::circular:
      return ((i % n) + n) % n;
  }
  return -1;
}

/// Layer (padding left, right, top, bottom) on a batch of 2 [3, H, W] in double, against `source`.
template <class Layer, int H, int W, class D>
void check_padding(PaddingMode mode, int left, int right, int top, int bottom, double value = 0.0) {
  using In = Shape<dyn, 3, H, W>;
  knn::Model<knn::Sequential<Layer>, In, kiln::Policy<kt::Fp64, D>> model(0);
  const auto xs = kt::random_values<double>(2 * 3 * H * W, -1.0, 1.0, 5);
  const auto y = model.forward(kt::make_tensor<D>(xs, Extents<In>(2)));
  const int ho = top + H + bottom, wo = left + W + right;
  BOOST_REQUIRE(y.size(2) == ho && y.size(3) == wo);
  const auto got = y.to_vector();
  int wrong = 0;
  for (int plane = 0; plane < 2 * 3; ++plane)
    for (int ph = 0; ph < ho; ++ph)
      for (int pw = 0; pw < wo; ++pw) {
        const int ih = source(mode, ph, H, top), iw = source(mode, pw, W, left);
        const double want =
            ih < 0 || iw < 0 ? value : xs[static_cast<std::size_t>((plane * H + ih) * W + iw)];
        wrong += got[static_cast<std::size_t>((plane * ho + ph) * wo + pw)] != want;
      }
  BOOST_TEST(wrong == 0, model.net().template layer<0>().name() << ": " << wrong << " values differ");
}

/// Sequential<Layers...> on [2, C, H, W] against finite differences, input and parameters, in double.
template <class In, class D, class... Layers>
void check_gradients(std::uint32_t stream) {
  kt::check_model_gradients<knn::Sequential<Layers...>, In, D>(Extents<In>(2), -1.0, 1.0, 0.05, stream, true);
}

/// Net A and Net B on the same parameters and input In (2 images): the same outputs, input gradients and
/// parameter gradients, in double.
template <class A, class B, class In, class D>
void check_same_as() {
  using P = kiln::Policy<kt::Fp64, D>;
  knn::Model<A, In, P> a(4);
  knn::Model<B, In, P> b(9);
  b.parameters() = a.parameters();
  static_assert(std::is_same_v<typename decltype(a)::output_shape, typename decltype(b)::output_shape>);
  const auto x = kt::make_tensor<D>(
      kt::random_values<double>(static_cast<std::size_t>(Extents<In>(2).numel()), -1.0, 1.0, 6),
      Extents<In>(2));
  const auto ya = a.forward(x), yb = b.forward(x);
  const auto r = kt::make_tensor<D>(kt::random_values<double>(static_cast<std::size_t>(ya.numel()), -1, 1, 7),
                                    ya.extents());
  a.zero_grad(), b.zero_grad();
  const auto dxa = a.backward_input(r), dxb = b.backward_input(r);
  const auto tol = boost::test_tools::tolerance(1e-12);
  BOOST_TEST(ya.to_vector() == yb.to_vector(), tol << boost::test_tools::per_element());
  BOOST_TEST(dxa.to_vector() == dxb.to_vector(), tol << boost::test_tools::per_element());
  BOOST_TEST(a.gradients().to_vector() == b.gradients().to_vector(), tol << boost::test_tools::per_element());
}

/// Conv2d in Mode (the fused path when Act is a ReLU) against Pad then the same Conv2d without padding,
/// on the same parameters.
template <PaddingMode Mode, class Pad, class D, class... Act>
void check_conv_mode() {
  check_same_as<knn::Sequential<knn::Conv2d<3, 4, 3, 2, 2, 1, 1, true, Mode>, Act...>,
                knn::Sequential<Pad, knn::Conv2d<3, 4, 3, 2, 0>, Act...>, Shape<dyn, 3, 6, 7>, D>();
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(padding)

BOOST_AUTO_TEST_CASE_TEMPLATE(padding_layers_follow_their_definitions, D, kt::devices) {
  check_padding<knn::ZeroPad2d<1, 2, 0, 3>, 4, 5, D>(PaddingMode::zeros, 1, 2, 0, 3);
  check_padding<knn::ConstantPad2d<-2.5, 2>, 3, 4, D>(PaddingMode::zeros, 2, 2, 2, 2, -2.5);
  check_padding<knn::ReflectionPad2d<1, 3, 2, 0>, 4, 5, D>(PaddingMode::reflect, 1, 3, 2, 0);
  check_padding<knn::ReflectionPad2d<3>, 4, 4, D>(PaddingMode::reflect, 3, 3, 3, 3);  // the largest
  check_padding<knn::ReplicationPad2d<2, 0, 1, 4>, 3, 5, D>(PaddingMode::replicate, 2, 0, 1, 4);
  check_padding<knn::ReplicationPad2d<5>, 1, 2, D>(PaddingMode::replicate, 5, 5, 5, 5);  // more than H, W
  check_padding<knn::CircularPad2d<1, 2, 3, 0>, 4, 5, D>(PaddingMode::circular, 1, 2, 3, 0);
  check_padding<knn::CircularPad2d<3, 3, 4, 4>, 4, 3, D>(PaddingMode::circular, 3, 3, 4, 4);  // the largest
}

BOOST_AUTO_TEST_CASE_TEMPLATE(padding_layers_backward_matches_numeric, D, kt::devices) {
  // Each input's gradient sums over every padded position that reads it: reflect's mirrored rows,
  // replicate's repeated edge (several times over, padding beyond H), circular's wrapped rows.
  check_gradients<Shape<dyn, 3, 4, 5>, D, knn::ZeroPad2d<1, 2, 0, 3>>(31);
  check_gradients<Shape<dyn, 3, 4, 5>, D, knn::ConstantPad2d<1.5, 1>>(32);
  check_gradients<Shape<dyn, 3, 4, 5>, D, knn::ReflectionPad2d<1, 3, 2, 0>>(33);
  check_gradients<Shape<dyn, 3, 4, 4>, D, knn::ReflectionPad2d<3>>(34);
  check_gradients<Shape<dyn, 3, 3, 5>, D, knn::ReplicationPad2d<2, 0, 1, 4>>(35);
  check_gradients<Shape<dyn, 3, 1, 2>, D, knn::ReplicationPad2d<5>>(36);
  check_gradients<Shape<dyn, 3, 4, 5>, D, knn::CircularPad2d<1, 2, 3, 0>>(37);
  check_gradients<Shape<dyn, 3, 4, 3>, D, knn::CircularPad2d<3, 3, 4, 4>>(38);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv2d_padding_modes_are_the_padding_layer_then_the_convolution, D,
                              kt::devices) {
  check_conv_mode<PaddingMode::reflect, knn::ReflectionPad2d<2>, D>();
  check_conv_mode<PaddingMode::reflect, knn::ReflectionPad2d<2>, D, knn::ReLU>();  // fused epilogue
  check_conv_mode<PaddingMode::replicate, knn::ReplicationPad2d<2>, D>();
  check_conv_mode<PaddingMode::replicate, knn::ReplicationPad2d<2>, D, knn::ReLU>();
  check_conv_mode<PaddingMode::circular, knn::CircularPad2d<2>, D>();
  check_conv_mode<PaddingMode::circular, knn::CircularPad2d<2>, D, knn::ReLU>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(padding_same_with_an_even_span_pads_one_more_at_the_bottom_and_right, D,
                              kt::devices) {
  // torch's padding='same': Dilation (K - 1) in all, half of it (rounded down) on the top and left.
  using knn::Conv2d;
  using knn::padding_same;
  using In = Shape<dyn, 3, 5, 6>;
  check_same_as<knn::Sequential<Conv2d<3, 4, 4, 1, padding_same>>,
                knn::Sequential<knn::ZeroPad2d<1, 2, 1, 2>, Conv2d<3, 4, 4>>, In, D>();
  check_same_as<knn::Sequential<Conv2d<3, 4, 2, 1, padding_same, 3>, knn::ReLU>,  // span 4, fused
                knn::Sequential<knn::ZeroPad2d<1, 2, 1, 2>, Conv2d<3, 4, 2, 1, 0, 3>, knn::ReLU>, In, D>();
  check_same_as<knn::Sequential<Conv2d<3, 6, 2, 1, padding_same, 1, 3, false, PaddingMode::reflect>>,
                knn::Sequential<knn::ReflectionPad2d<0, 1, 0, 1>, Conv2d<3, 6, 2, 1, 0, 1, 3, false>>, In,
                D>();
  check_same_as<knn::Sequential<Conv2d<3, 4, 4, 1, padding_same, 1, 1, true, PaddingMode::circular>>,
                knn::Sequential<knn::CircularPad2d<1, 2, 1, 2>, Conv2d<3, 4, 4>>, In, D>();
  check_gradients<In, D, Conv2d<3, 4, 4, 1, padding_same>, knn::Tanh>(44);
  check_gradients<In, D, Conv2d<3, 3, 2, 1, padding_same, 2, 3, true, PaddingMode::replicate>>(45);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv2d_padding_modes_backward_match_numeric, D, kt::devices) {
  using knn::Conv2d;
  constexpr auto reflect = PaddingMode::reflect, replicate = PaddingMode::replicate;
  constexpr auto circular = PaddingMode::circular;
  check_gradients<Shape<dyn, 2, 5, 4>, D, Conv2d<2, 3, 3, 1, 1, 1, 1, true, reflect>>(41);
  check_gradients<Shape<dyn, 4, 5, 6>, D, Conv2d<4, 4, 3, 2, 2, 2, 2, false, replicate>>(42);
  check_gradients<Shape<dyn, 2, 4, 5>, D, Conv2d<2, 2, 3, 1, knn::padding_same, 2, 2, true, circular>,
                  knn::ReLU>(43);
}

BOOST_AUTO_TEST_CASE(padding_layers_have_torchs_shapes_refusals_and_names) {
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  using In = Shape<dyn, 3, 4, 5>;
  static_assert(std::is_same_v<knn::ZeroPad2d<1, 2, 3, 4>::output<In>, Shape<dyn, 3, 11, 8>>);
  static_assert(std::is_same_v<knn::ReflectionPad2d<2>::output<In>, Shape<dyn, 3, 8, 9>>);
  // reflect: each padding less than its dimension; circular: at most; zeros and replicate: any.
  static_assert(knn::ReflectionPad2d<3>::accepts<In> && !knn::ReflectionPad2d<4>::accepts<In>);
  static_assert(!knn::ReflectionPad2d<0, 0, 4, 0>::accepts<In> &&
                knn::ReflectionPad2d<4, 0, 0, 0>::accepts<In>);
  static_assert(knn::CircularPad2d<4>::accepts<In> && !knn::CircularPad2d<0, 0, 0, 5>::accepts<In>);
  static_assert(knn::ReplicationPad2d<9>::accepts<In> && knn::ZeroPad2d<9>::accepts<In>);
  static_assert(!knn::ZeroPad2d<1>::accepts<Shape<dyn, 4, 5>> &&
                !knn::ZeroPad2d<1>::accepts<Shape<dyn, 3, dyn, 5>>);
  using kiln::nn::Conv2d;
  static_assert(Conv2d<3, 4, 3, 1, 3, 1, 1, true, PaddingMode::reflect>::accepts<In> &&
                !Conv2d<3, 4, 3, 1, 4, 1, 1, true, PaddingMode::reflect>::accepts<In>);
  static_assert(Conv2d<3, 4, 3, 1, 4, 1, 1, true, PaddingMode::circular>::accepts<In> &&
                !Conv2d<3, 4, 3, 1, 5, 1, 1, true, PaddingMode::circular>::accepts<In>);
  static_assert(std::is_same_v<Conv2d<3, 4, 3, 2, 2, 1, 1, true, PaddingMode::reflect>::output<In>,
                               Conv2d<3, 4, 3, 2, 2>::output<In>>);

  // padding_same: the rest of Dilation (K - 1) at the bottom and right; the input's size out
  static_assert(Conv2d<3, 4, 4, 1, knn::padding_same>::pad == 1 &&
                Conv2d<3, 4, 4, 1, knn::padding_same>::pad_end == 2);
  static_assert(Conv2d<3, 4, 2, 1, knn::padding_same>::pad == 0 &&
                Conv2d<3, 4, 2, 1, knn::padding_same>::pad_end == 1);
  static_assert(std::is_same_v<Conv2d<3, 4, 4, 1, knn::padding_same, 3>::output<In>, Shape<dyn, 4, 4, 5>>);
  static_assert(
      Conv2d<3, 4, 4, 1, knn::padding_same, 1, 1, true, PaddingMode::reflect>::accepts<In> &&
      !Conv2d<3, 4, 4, 1, knn::padding_same, 3, 1, true, PaddingMode::reflect>::accepts<In>);  // 5 at the end
  BOOST_TEST((knn::ZeroPad2d<1>::module<In, P>().name()) == "ZeroPad2d((1, 1, 1, 1))");
  BOOST_TEST((knn::ZeroPad2d<1, 2, 3, 4>::module<In, P>().name()) == "ZeroPad2d((1, 2, 3, 4))");
  BOOST_TEST((knn::ConstantPad2d<3.5, 2>::module<In, P>().name()) ==
             "ConstantPad2d(padding=(2, 2, 2, 2), value=3.5)");
  BOOST_TEST((knn::ConstantPad2d<0.0, 1>::module<In, P>().name()) ==
             "ConstantPad2d(padding=(1, 1, 1, 1), value=0.0)");
  BOOST_TEST((knn::ReflectionPad2d<1, 0, 2, 0>::module<In, P>().name()) == "ReflectionPad2d((1, 0, 2, 0))");
  BOOST_TEST((knn::ReplicationPad2d<2>::module<In, P>().name()) == "ReplicationPad2d((2, 2, 2, 2))");
  BOOST_TEST((knn::CircularPad2d<1, 2, 0, 1>::module<In, P>().name()) == "CircularPad2d((1, 2, 0, 1))");
  BOOST_TEST((Conv2d<3, 6, 3, 1, 1, 1, 1, true, PaddingMode::reflect>::module<In, P>().name()) ==
             "Conv2d(3, 6, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), padding_mode=reflect)");
  BOOST_TEST(
      (Conv2d<3, 6, 3, 1, knn::padding_same, 1, 3, false, PaddingMode::circular>::module<In, P>().name()) ==
      "Conv2d(3, 6, kernel_size=(3, 3), stride=(1, 1), padding=same, groups=3, bias=False, "
      "padding_mode=circular)");
  // The parameters are the convolution's, named as torch's.
  using Reflect = Conv2d<3, 6, 3, 1, 1, 1, 1, true, PaddingMode::reflect>::module<In, P>;
  static_assert(Reflect::parameter_count == 6 * 3 * 3 * 3 + 6);
  BOOST_TEST(Reflect().parameters().size() == 2u);
}

BOOST_AUTO_TEST_CASE(padding_layers_refuse_a_dy_with_other_rows_than_the_forward_pass) {
  using In = Shape<dyn, 2, 3, 3>;
  knn::ReflectionPad2d<1>::module<In, kiln::Policy<kiln::Fp32, kiln::Cpu>> pad;
  const auto y = pad.forward(kiln::Tensor<float, In>(Extents<In>(2)), {});
  const kiln::Tensor<float, Shape<dyn, 2, 5, 5>> dy(Extents<Shape<dyn, 2, 5, 5>>(3));
  BOOST_CHECK_EXCEPTION(pad.backward(dy), kiln::ShapeError, [](const kiln::ShapeError& e) {
    return std::string(e.what()).find("ReflectionPad2d::backward: dy has 3 rows; the forward pass had 2") !=
           std::string::npos;
  });
  BOOST_TEST(y.size(0) == 2);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
