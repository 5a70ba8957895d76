// Conv2d, MaxPool2d, AvgPool2d: forward against direct float64 loops, backward against float64 finite
// differences, for odd sizes, stride and padding (Conv2d also dilated and grouped, depthwise among them;
// the pools also in ceil mode, AvgPool2d without the padding counted and with a divisor override); the
// output shapes and names as torch's; and the LeNet of the seeds end to end.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <kiln/backend/cpu/blas_kernels.hpp>
#include <kiln/backend/cpu/threads.hpp>
#include <kiln/nn/nn.hpp>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "support/gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
struct Fp64Conv {
  using storage = double;
  using compute = double;
  using master = double;
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "fp64";
};
using kiln::dyn;
using kiln::Shape;

/// L = Σ w ⊙ net(x): checks dL/dx and dL/dparameters of a one-layer model against finite differences.
template <class Layer, class In, class D>
void check_gradients(kiln::index_t batch) {
  using Net = kiln::nn::Sequential<Layer>;
  using Model = kiln::nn::Model<Net, In, kiln::Policy<Fp64Conv, D>>;
  using Out = typename Model::output_shape;
  Model model(7);
  const kiln::Extents<In> in(batch);
  kiln::Extents<Out> out;
  out[0] = batch;
  const auto x = kiln::test::make_tensor<D>(
      kiln::test::random_values<double>(static_cast<std::size_t>(in.numel()), -2.0, 2.0, 11), in);
  const auto w = kiln::test::make_tensor<D>(
      kiln::test::random_values<double>(static_cast<std::size_t>(out.numel()), -1.0, 1.0, 12), out);
  auto loss = [&](const kiln::Tensor<double, In, D>& xin) { return kiln::sum(model.forward(xin) * w).item(); };
  model.zero_grad();
  model.forward(x);
  const auto dx = model.backward_input(w);
  BOOST_TEST(kiln::test::gradcheck(loss, x, dx));
  if constexpr (Model::parameter_count > 0) {
    // Parameters: perturb the arena through a copy, evaluating the same loss.
    const auto p0 = model.parameters().clone();
    const auto grad = model.gradients().clone();
    auto by_params = [&](const kiln::Tensor<double, Shape<dyn>, D>& p) {
      model.parameters() = p;
      const double v = loss(x);
      model.parameters() = p0;
      return v;
    };
    BOOST_TEST(kiln::test::gradcheck(by_params, p0, grad));
  }
}

/// The output shape of Sequential<Layer> on In.
template <class Layer, class In>
using output_of = typename kiln::nn::Sequential<Layer>::template output<In>;

/// y[n, f, oh, ow] = b[f] (0 without a bias: wb holds only the weights) + Σ w[f, c, ki, kj]
/// x[n, g C/G + c, oh s - p + ki d, ow s - p + kj d] over the
/// C/G channels c of f's group g = f / (F/G), in double (dilation d, groups G).
std::vector<double> direct_conv(const std::vector<double>& x, const std::vector<double>& wb, int n, int c,
                                int h, int w, int f, int k, int s, int p, int d = 1, int groups = 1) {
  const int span = d * (k - 1) + 1, cg = c / groups, fg = f / groups;
  const int ho = (h + 2 * p - span) / s + 1, wo = (w + 2 * p - span) / s + 1;
  std::vector<double> y(static_cast<std::size_t>(n * f * ho * wo));
  for (int a = 0; a < n; ++a)
    for (int o = 0; o < f; ++o)
      for (int i = 0; i < ho; ++i)
        for (int j = 0; j < wo; ++j) {
          const std::size_t weights = static_cast<std::size_t>(f * cg * k * k);  // then the bias, if any
          double acc = wb.size() > weights ? wb[weights + static_cast<std::size_t>(o)] : 0.0;
          for (int ch = 0; ch < cg; ++ch)
            for (int ki = 0; ki < k; ++ki)
              for (int kj = 0; kj < k; ++kj) {
                const int ih = i * s - p + ki * d, iw = j * s - p + kj * d;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                acc += wb[static_cast<std::size_t>(((o * cg + ch) * k + ki) * k + kj)] *
                       x[static_cast<std::size_t>(((a * c + o / fg * cg + ch) * h + ih) * w + iw)];
              }
          y[static_cast<std::size_t>(((a * f + o) * ho + i) * wo + j)] = acc;
        }
  return y;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(conv_and_pool)

/// Layer in fp32 against the same layer in double from the same parameters and inputs: the output, dL/dx
/// and the parameter gradients (sums of 144 products and of 2048).
template <class Layer, class In, class D>
void check_float_against_double(kiln::index_t batch, std::uint32_t seed) {
  using Net = kiln::nn::Sequential<Layer>;
  kiln::nn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> f(seed);
  kiln::nn::Model<Net, In, kiln::Policy<Fp64Conv, D>> d(seed);
  const auto widen = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const auto p = widen(f.parameters().to_vector());
  d.parameters().copy_from(std::span<const double>(p));
  const kiln::Extents<In> in(batch);
  const auto xs = kiln::test::random_values<float>(static_cast<std::size_t>(in.numel()), -1.0, 1.0, seed);
  const auto yf = f.forward(kiln::test::make_tensor<D>(xs, in));
  const auto yd = d.forward(kiln::test::make_tensor<D>(widen(xs), in));
  const auto dys = kiln::test::random_values<float>(static_cast<std::size_t>(yf.numel()), -1.0, 1.0, seed + 1);
  f.zero_grad(), d.zero_grad();
  const auto dxf = f.backward_input(kiln::test::make_tensor<D>(dys, yf.extents()));
  const auto dxd = d.backward_input(kiln::test::make_tensor<D>(widen(dys), yd.extents()));
  BOOST_TEST(kiln::test::all_close(yf.to_vector(), yd.to_vector(), 1e-4, 1e-4));
  BOOST_TEST(kiln::test::all_close(dxf.to_vector(), dxd.to_vector(), 1e-4, 1e-4));
  BOOST_TEST(kiln::test::all_close(f.gradients().to_vector(), d.gradients().to_vector(), 1e-4, 1e-3));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(float_convolutions_of_resnet_size_match_double, D, kiln::test::devices) {
  // A ResNet-20 convolution: on the CPU its per-image GEMMs ([16, 144] x [144, 1024] forward, [144, 16] x
  // [16, 1024] for dx) run in blocks of columns where OpenBLAS has its small-matrix kernels
  // (backend::cpu::small_gemm_columns); a transposed convolution's the other way round.
  BOOST_TEST_MESSAGE("columns per GEMM call: " << kiln::backend::cpu::small_gemm_columns(16, 1024, 144));
  using In = Shape<dyn, 16, 32, 32>;
  check_float_against_double<kiln::nn::Conv2d<16, 16, 3, 1, 1, 1, 1, false>, In, D>(2, 91);
  check_float_against_double<kiln::nn::Conv2d<16, 32, 3, 2, 1>, In, D>(2, 92);
  check_float_against_double<kiln::nn::ConvTranspose2d<16, 16, 3, 1, 1>, In, D>(2, 93);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv2d_forward_matches_direct_convolution, D, kiln::test::devices) {
  using In = Shape<dyn, 3, 9, 7>;
  using Layer = kiln::nn::Conv2d<3, 4, 3, 2, 1>;  // stride 2, padding 1
  kiln::nn::Model<kiln::nn::Sequential<Layer>, In, kiln::Policy<Fp64Conv, D>> model(3);
  const auto xs = kiln::test::random_values<double>(2 * 3 * 9 * 7, -1.0, 1.0, 21);
  const auto y = model.forward(kiln::test::make_tensor<D>(xs, kiln::Extents<In>(2))).to_vector();
  const auto ref = direct_conv(xs, model.parameters().to_vector(), 2, 3, 9, 7, 4, 3, 2, 1);
  BOOST_REQUIRE_EQUAL(y.size(), ref.size());
  for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y[i] == ref[i], boost::test_tools::tolerance(1e-12));
}

/// Conv2d<C, F, K, S, P, Dl, G> on a batch of 2 [C, H, W] against direct_conv, in double.
template <class Layer, kiln::index_t C, kiln::index_t H, kiln::index_t W, class D>
void check_forward(int f, int k, int s, int p, int d, int groups) {
  using In = Shape<dyn, C, H, W>;
  kiln::nn::Model<kiln::nn::Sequential<Layer>, In, kiln::Policy<Fp64Conv, D>> model(3);
  const auto xs = kiln::test::random_values<double>(static_cast<std::size_t>(2 * C * H * W), -1.0, 1.0, 21);
  const auto y = model.forward(kiln::test::make_tensor<D>(xs, kiln::Extents<In>(2))).to_vector();
  const auto ref = direct_conv(xs, model.parameters().to_vector(), 2, C, H, W, f, k, s, p, d, groups);
  BOOST_REQUIRE_EQUAL(y.size(), ref.size());
  for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y[i] == ref[i], boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dilated_and_grouped_conv2d_forward_matches_direct_convolution, D,
                              kiln::test::devices) {
  using kiln::nn::Conv2d;
  check_forward<Conv2d<3, 4, 3, 1, 2, 2>, 3, 9, 7, D>(4, 3, 1, 2, 2, 1);            // dilation 2
  check_forward<Conv2d<3, 4, 3, 2, 0, 3>, 3, 11, 9, D>(4, 3, 2, 0, 3, 1);           // dilation 3, stride 2
  check_forward<Conv2d<4, 6, 3, 1, 1, 1, 2>, 4, 7, 6, D>(6, 3, 1, 1, 1, 2);         // two groups
  check_forward<Conv2d<6, 6, 3, 2, 1, 1, 6>, 6, 8, 7, D>(6, 3, 2, 1, 1, 6);         // depthwise
  check_forward<Conv2d<4, 8, 2, 2, 1, 2, 4, false>, 4, 9, 8, D>(8, 2, 2, 1, 2, 4);  // all, no bias
  check_forward<Conv2d<3, 4, 3, 1, kiln::nn::padding_same, 2>, 3, 9, 7, D>(4, 3, 1, 2, 2, 1);  // pads 2
  check_forward<Conv2d<2, 4, 5, 1, kiln::nn::padding_same, 1, 2>, 2, 6, 7, D>(4, 5, 1, 2, 1, 2);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dilated_and_grouped_conv2d_backward_matches_numeric, D, kiln::test::devices) {
  using kiln::nn::Conv2d;
  check_gradients<Conv2d<2, 3, 3, 1, 2, 2>, Shape<dyn, 2, 6, 5>, D>(2);
  check_gradients<Conv2d<2, 3, 2, 2, 1, 3>, Shape<dyn, 2, 7, 8>, D>(2);
  check_gradients<Conv2d<4, 6, 3, 1, 1, 1, 2>, Shape<dyn, 4, 5, 6>, D>(2);
  check_gradients<Conv2d<3, 3, 3, 2, 1, 1, 3>, Shape<dyn, 3, 6, 5>, D>(2);         // depthwise
  check_gradients<Conv2d<3, 6, 3, 1, 1, 1, 3, false>, Shape<dyn, 3, 5, 5>, D>(1);  // two filters a channel
  check_gradients<Conv2d<4, 4, 2, 2, 2, 2, 2>, Shape<dyn, 4, 7, 6>, D>(2);
  check_gradients<Conv2d<2, 3, 3, 1, kiln::nn::padding_same, 3>, Shape<dyn, 2, 6, 5>, D>(2);
}

// torch's output size: floor((H + 2 P - D (K - 1) - 1) / S) + 1; the weight [Out, In / G, K, K]; the
// names as torch 1.13 prints the modules.
BOOST_AUTO_TEST_CASE(dilated_and_grouped_conv2d_have_torchs_shapes_and_names) {
  using namespace kiln::nn;
  static_assert(
      std::is_same_v<output_of<Conv2d<3, 4, 3, 1, 0, 2>, Shape<dyn, 3, 9, 7>>, Shape<dyn, 4, 5, 3>>);
  static_assert(
      std::is_same_v<output_of<Conv2d<3, 4, 3, 2, 1, 3>, Shape<dyn, 3, 9, 8>>, Shape<dyn, 4, 3, 2>>);
  static_assert(!Conv2d<3, 4, 3, 1, 0, 3>::accepts<Shape<dyn, 3, 6, 9>>);  // a 7 x 7 span on 6 rows
  static_assert(Conv2d<3, 4, 3, 1, 0, 3>::accepts<Shape<dyn, 3, 7, 9>>);
  using In = Shape<dyn, 4, 8, 8>;
  using P = kiln::Policy<>;
  using Grouped = Conv2d<4, 6, 3, 1, 1, 1, 2>::module<In, P>;
  static_assert(Grouped::parameter_count == 6 * 2 * 3 * 3 + 6);
  BOOST_TEST(Grouped().parameters()[0].shape == std::vector<kiln::index_t>({6, 2, 3, 3}));
  BOOST_TEST(Grouped().name() == "Conv2d(4, 6, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), groups=2)");
  // padding_same (torch's padding='same'): (Dilation (K - 1)) / 2 on each side, the input's size out
  static_assert(Conv2d<3, 4, 3, 1, padding_same>::pad == 1 && Conv2d<3, 4, 3, 1, padding_same, 2>::pad == 2 &&
                Conv2d<3, 4, 5, 1, padding_same, 3>::pad == 6);
  static_assert(std::is_same_v<output_of<Conv2d<4, 6, 5, 1, padding_same, 2>, In>, Shape<dyn, 6, 8, 8>>);
  BOOST_TEST((Conv2d<4, 4, 3, 1, padding_same>::module<In, P>().name()) ==
             "Conv2d(4, 4, kernel_size=(3, 3), stride=(1, 1), padding=same)");
  BOOST_TEST((Conv2d<4, 4, 3, 2, 0, 2, 4, false>::module<In, P>().name()) ==
             "Conv2d(4, 4, kernel_size=(3, 3), stride=(2, 2), dilation=(2, 2), groups=4, bias=False)");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv2d_backward_matches_numeric, D, kiln::test::devices) {
  check_gradients<kiln::nn::Conv2d<2, 3, 3>, Shape<dyn, 2, 6, 5>, D>(2);
  check_gradients<kiln::nn::Conv2d<2, 3, 3, 2, 1>, Shape<dyn, 2, 7, 6>, D>(2);
  check_gradients<kiln::nn::Conv2d<1, 2, 5, 1, 2, 1, 1, false>, Shape<dyn, 1, 5, 5>, D>(1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pools_backward_match_numeric, D, kiln::test::devices) {
  check_gradients<kiln::nn::MaxPool2d<2>, Shape<dyn, 3, 6, 4>, D>(2);
  check_gradients<kiln::nn::MaxPool2d<3, 2, 1>, Shape<dyn, 2, 7, 5>, D>(2);  // overlapping windows
  check_gradients<kiln::nn::AvgPool2d<2>, Shape<dyn, 3, 6, 4>, D>(2);
  check_gradients<kiln::nn::AvgPool2d<3, 2, 1>, Shape<dyn, 2, 7, 5>, D>(2);
  // A 16 x 16 window has 256 taps: its winner's index no longer fits the one-byte kind (int32 then).
  static_assert(std::is_same_v<kiln::nn::detail::window_index_t<15>, std::uint8_t> &&
                std::is_same_v<kiln::nn::detail::window_index_t<16>, std::int32_t>);
  check_gradients<kiln::nn::MaxPool2d<16, 4, 2>, Shape<dyn, 1, 20, 18>, D>(1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pool_modes_backward_match_numeric, D, kiln::test::devices) {
  using kiln::nn::AvgPool2d;
  using kiln::nn::MaxPool2d;
  // ceil mode: a last, partial window over row 4 and column 6 (no padding: its taps past the input are
  // left out, and AvgPool2d divides by the taps inside)
  check_gradients<MaxPool2d<2, 2, 0, true>, Shape<dyn, 3, 5, 7>, D>(2);
  check_gradients<AvgPool2d<2, 2, 0, true>, Shape<dyn, 3, 5, 7>, D>(2);
  // K 3 stride 2 padding 1 on 8 x 7: a fifth row of windows starting at row 7, cut at the end of the
  // padding (count_include_pad) or of the input (not)
  check_gradients<MaxPool2d<3, 2, 1, true>, Shape<dyn, 2, 8, 7>, D>(2);
  check_gradients<AvgPool2d<3, 2, 1, true>, Shape<dyn, 2, 8, 7>, D>(2);
  check_gradients<AvgPool2d<3, 2, 1, true, false>, Shape<dyn, 2, 8, 7>, D>(2);
  // K 3 stride 3 padding 1 on 5 x 6: the last row of windows dropped, a last column added
  check_gradients<AvgPool2d<3, 3, 1, true>, Shape<dyn, 2, 5, 6>, D>(2);
  check_gradients<AvgPool2d<3, 2, 1, false, false>, Shape<dyn, 2, 7, 5>, D>(2);    // padding not counted
  check_gradients<AvgPool2d<3, 2, 1, true, false, 2>, Shape<dyn, 2, 8, 7>, D>(2);  // the override wins
  check_gradients<AvgPool2d<2, 2, 0, false, true, 3>, Shape<dyn, 3, 6, 4>, D>(2);
  // dilation: taps 2 apart with padding (windows overlap), 3 apart in ceil mode
  check_gradients<MaxPool2d<3, 1, 1, false, 2>, Shape<dyn, 2, 7, 6>, D>(2);
  check_gradients<MaxPool2d<2, 2, 0, true, 3>, Shape<dyn, 2, 8, 9>, D>(2);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dilated_max_pool_takes_the_maximum_of_its_taps, D, kiln::test::devices) {
  // MaxPool2d<3, 2, 1, true, 2> on 9 x 8, in double, against the maximum over x[oh 2 - 1 + 2 ki, ow 2 -
  // 1 + 2 kj] for the taps inside the input.
  using In = Shape<dyn, 2, 9, 8>;
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::MaxPool2d<3, 2, 1, true, 2>>, In, kiln::Policy<Fp64Conv, D>>
      m(0);
  const auto xs = kiln::test::random_values<double>(2 * 2 * 9 * 8, -1.0, 1.0, 23);
  const auto y = m.forward(kiln::test::make_tensor<D>(xs, kiln::Extents<In>(2)));
  const int ho = static_cast<int>(y.size(2)), wo = static_cast<int>(y.size(3));
  BOOST_TEST((ho == 4 && wo == 4));  // (9 + 2 - 5 + 1) / 2 + 1 = 4; (8 + 2 - 5 + 1) / 2 + 1 = 4
  const auto got = y.to_vector();
  int wrong = 0;
  for (int plane = 0; plane < 4; ++plane)
    for (int i = 0; i < ho; ++i)
      for (int j = 0; j < wo; ++j) {
        double best = -INFINITY;
        for (int ki = 0; ki < 3; ++ki)
          for (int kj = 0; kj < 3; ++kj) {
            const int ih = i * 2 - 1 + 2 * ki, iw = j * 2 - 1 + 2 * kj;
            if (ih >= 0 && ih < 9 && iw >= 0 && iw < 8)
              best = std::max(best, xs[static_cast<std::size_t>((plane * 9 + ih) * 8 + iw)]);
          }
        wrong += got[static_cast<std::size_t>((plane * ho + i) * wo + j)] != best;
      }
  BOOST_TEST(wrong == 0);
}

// torch's pooling_output_shape: floor((H + 2 P - K) / S) + 1, ceil in ceil mode less a last window that
// would start at or past H + P; names as torch 1.13 prints the modules (AvgPool2d's leaves its modes out).
BOOST_AUTO_TEST_CASE(pool_modes_have_torchs_shapes_and_names) {
  using namespace kiln::nn;
  static_assert(std::is_same_v<output_of<MaxPool2d<2>, Shape<dyn, 3, 5, 7>>, Shape<dyn, 3, 2, 3>>);
  static_assert(
      std::is_same_v<output_of<MaxPool2d<2, 2, 0, true>, Shape<dyn, 3, 5, 7>>, Shape<dyn, 3, 3, 4>>);
  // K 2 stride 2 padding 1, H 5: ceil(5 / 2) + 1 = 4, but the fourth window would start at row 6 = H + P
  static_assert(
      std::is_same_v<output_of<AvgPool2d<2, 2, 1, true>, Shape<dyn, 3, 5, 6>>, Shape<dyn, 3, 3, 4>>);
  static_assert(
      std::is_same_v<output_of<MaxPool2d<3, 3, 1, true>, Shape<dyn, 3, 5, 6>>, Shape<dyn, 3, 2, 3>>);
  static_assert(std::is_same_v<output_of<MaxPool2d<3, 3, 1>, Shape<dyn, 3, 5, 6>>, Shape<dyn, 3, 2, 2>>);
  static_assert(std::is_same_v<output_of<AvgPool2d<3, 2, 1, true, false, 2>, Shape<dyn, 2, 8, 7>>,
                               Shape<dyn, 2, 5, 4>>);
  // dilation: the window spans Dilation (K - 1) + 1 = 5 inputs (7 -> 3, 6 -> 2); and must fit them
  static_assert(
      std::is_same_v<output_of<MaxPool2d<3, 1, 0, false, 2>, Shape<dyn, 3, 7, 6>>, Shape<dyn, 3, 3, 2>>);
  static_assert(
      std::is_same_v<output_of<MaxPool2d<2, 2, 0, true, 3>, Shape<dyn, 2, 8, 9>>, Shape<dyn, 2, 3, 4>>);
  static_assert(MaxPool2d<3, 1, 0, false, 2>::accepts<Shape<dyn, 1, 5, 5>> &&
                !MaxPool2d<3, 1, 0, false, 2>::accepts<Shape<dyn, 1, 4, 5>>);
  // A stack, as torch: rows 31 -> 16 (floor: 15) -> 9 (8) -> 4, columns 30 -> 15 -> 8 -> 4 (floor: 3)
  using Net = Sequential<MaxPool2d<2, 2, 0, true>, AvgPool2d<3, 2, 1, true, false>, MaxPool2d<3, 2, 0, true>>;
  static_assert(std::is_same_v<Net::output<Shape<dyn, 4, 31, 30>>, Shape<dyn, 4, 4, 4>>);
  using In = Shape<dyn, 3, 8, 7>;
  using P = kiln::Policy<>;
  using CeilMax = MaxPool2d<3, 2, 1, true>::module<In, P>;
  using FloorMax = MaxPool2d<3, 2, 1>::module<In, P>;
  using Avg = AvgPool2d<3, 2, 1, true, false, 2>::module<In, P>;
  BOOST_TEST(CeilMax().name() == "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)");
  BOOST_TEST(FloorMax().name() ==
             "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)");
  BOOST_TEST(Avg().name() == "AvgPool2d(kernel_size=3, stride=2, padding=1)");
  BOOST_TEST((MaxPool2d<3, 2, 1, true, 2>::module<In, P>().name()) ==
             "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)");
}

/// forward on 2 rows, then backward with dy of `rows` rows: a ShapeError naming both, before any pass.
template <class Module, class D>
void check_backward_rows(Module& m, kiln::index_t rows) {
  using In = typename Module::input_shape;
  using Out = typename Module::output_shape;
  const kiln::Extents<In> in(2);
  m.forward(kiln::test::make_tensor<D>(std::vector<float>(static_cast<std::size_t>(in.numel()), 1.0f), in),
            kiln::nn::Context{});
  kiln::Extents<Out> out;
  out[0] = rows;
  kiln::Tensor<float, Out, D> dy(out);
  dy.fill(1.0f);
  const auto before = kiln::passes();
  BOOST_CHECK_EXCEPTION(m.backward(dy), kiln::ShapeError,
                        kiln::test::message_contains({"dy has " + std::to_string(rows), "had 2"}));
  BOOST_TEST(kiln::passes() == before);
}

// Called as layers (not through Model, which checks too), conv, pools, BatchNorm, Linear, Softmax and
// LogSoftmax compare dy's
// rows with the forward pass's before writing anything: more rows would read past the saved input.
BOOST_AUTO_TEST_CASE_TEMPLATE(layers_refuse_a_dy_with_other_rows_than_the_forward_pass, D, kiln::test::devices) {
  using In = Shape<dyn, 2, 6, 6>;
  using P = kiln::Policy<kiln::Fp32, D>;
  typename kiln::nn::Conv2d<2, 3, 3>::template module<In, P> conv;
  kiln::Tensor<float, Shape<dyn>, D> params(conv.parameter_count), grads(conv.parameter_count);
  params.fill(0.5f);
  grads.fill(0.0f);
  conv.bind(params.data(), grads.data(), params.data(), params.device_index());
  check_backward_rows<decltype(conv), D>(conv, 64);
  typename kiln::nn::MaxPool2d<2>::template module<In, P> max_pool;
  check_backward_rows<decltype(max_pool), D>(max_pool, 64);
  typename kiln::nn::AvgPool2d<2>::template module<In, P> avg_pool;
  check_backward_rows<decltype(avg_pool), D>(avg_pool, 1);
  typename kiln::nn::BatchNorm2d<2>::template module<In, P> bn;
  kiln::Tensor<float, Shape<dyn>, D> bn_params(bn.parameter_count), bn_grads(bn.parameter_count), bn_buffers(bn.buffer_count);
  bn_params.fill(1.0f);
  bn_grads.fill(0.0f);
  bn_buffers.fill(0.0f);
  bn.bind(bn_params.data(), bn_grads.data(), bn_params.data(), bn_params.device_index());
  bn.bind_buffers(bn_buffers.data(), bn_buffers.device_index());
  check_backward_rows<decltype(bn), D>(bn, 64);
  using Rows = Shape<dyn, 8>;
  typename kiln::nn::Linear<8, 3>::template module<Rows, P> linear;
  kiln::Tensor<float, Shape<dyn>, D> l_params(linear.parameter_count), l_grads(linear.parameter_count);
  l_params.fill(0.5f);
  l_grads.fill(0.0f);
  linear.bind(l_params.data(), l_grads.data(), l_params.data(), l_params.device_index());
  check_backward_rows<decltype(linear), D>(linear, 64);
  typename kiln::nn::Softmax<>::template module<Rows, P> softmax;
  check_backward_rows<decltype(softmax), D>(softmax, 3);
  typename kiln::nn::LogSoftmax<>::template module<Rows, P> log_softmax;
  check_backward_rows<decltype(log_softmax), D>(log_softmax, 1);
  BOOST_TEST(l_grads.to_vector() == std::vector<float>(static_cast<std::size_t>(linear.parameter_count), 0.0f),
             boost::test_tools::per_element());  // the bias gradient's sum used to come first
}

// The CPU convolution runs a team of at most one thread per image (each with its own columns), and sums
// the weight gradient in partials per group of images (at most 32) added in group order: output, input
// gradient and parameter gradients are the same bits on 1, 2, 3 and 5 threads, for 40 images and for 2.
BOOST_AUTO_TEST_CASE(conv2d_results_do_not_depend_on_the_thread_count) {
  // (16 x 32 x 3 x 3 weights in 32 groups: 147456 partial values, past the threshold of the parallel sum)
  using In = Shape<dyn, 16, 9, 9>;
  using Model = kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Conv2d<16, 32, 3, 2, 1>, kiln::nn::ReLU>, In>;
  for (const kiln::index_t n : {40, 2}) {
    const auto x = kiln::test::make_tensor<kiln::Cpu>(
        kiln::test::random_values<float>(static_cast<std::size_t>(n * 16 * 81), -1, 1, 21), kiln::Extents<In>(n));
    kiln::Extents<Model::output_shape> out;
    out[0] = n;
    const auto dy = kiln::test::make_tensor<kiln::Cpu>(
        kiln::test::random_values<float>(static_cast<std::size_t>(out.numel()), -1, 1, 22), out);
    std::vector<std::vector<float>> first;
    for (const int threads : {1, 2, 3, 5}) {
      BOOST_TEST_CONTEXT(n << " images, " << threads << " threads") {
        const kiln::backend::cpu::ScopedThreads scope(threads);
        Model model(7);
        const auto y = model.forward(x).to_vector();
        const auto dx = model.backward_input(dy).to_vector();
        const std::vector<std::vector<float>> got{y, dx, model.gradients().to_vector()};
        if (first.empty()) first = got;
        for (std::size_t k = 0; k < got.size(); ++k) BOOST_TEST(got[k] == first[k], boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(max_pool_takes_the_window_maximum_and_propagates_nan, D, kiln::test::devices) {
  using In = Shape<dyn, 1, 2, 4>;
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::MaxPool2d<2>>, In, kiln::Policy<kiln::Fp32, D>> model(0);
  const std::vector<float> v{1, 5, 2, NAN, 3, 4, 0, 1};
  const auto y = model.forward(kiln::test::make_tensor<D>(v, kiln::Extents<In>(1))).to_vector();
  BOOST_REQUIRE_EQUAL(y.size(), 2u);
  BOOST_TEST(y[0] == 5.0f);
  BOOST_TEST(std::isnan(y[1]));
  // Two NaNs in a window: the gradient goes to the last, as torch's max_pool2d routes it (CPU and CUDA:
  // `val > maxval || isnan(val)`); a tie goes to the first.
  const std::vector<float> nans{NAN, 1, 7, 7, NAN, 2, 0, 3};
  model.forward(kiln::test::make_tensor<D>(nans, kiln::Extents<In>(1)));
  const auto dx = model.backward_input(kiln::test::make_tensor<D>(std::vector<float>{1, 1}, kiln::Extents<
                                                                   Shape<dyn, 1, 1, 2>>(1))).to_vector();
  BOOST_TEST(dx == (std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0}), boost::test_tools::per_element());
}

// In ceil mode one window may reach past an input smaller than it (torch counts stride - 1 more before
// it divides); without ceil mode that input is refused, as torch's "Output size is too small".
BOOST_AUTO_TEST_CASE_TEMPLATE(a_ceil_mode_window_may_be_larger_than_the_input_as_torch, D,
                              kiln::test::devices) {
  using namespace kiln::nn;
  using Small = Shape<dyn, 1, 2, 2>;
  static_assert(MaxPool2d<3, 2, 0, true>::accepts<Small> && !MaxPool2d<3, 2>::accepts<Small>);
  static_assert(AvgPool2d<3, 2, 0, true>::accepts<Small> && !AvgPool2d<3, 2>::accepts<Small>);
  static_assert(!MaxPool2d<4, 2, 0, true>::accepts<Small>);  // 2 + 1 < 4: not even in ceil mode
  static_assert(std::is_same_v<output_of<MaxPool2d<3, 2, 0, true>, Small>, Shape<dyn, 1, 1, 1>>);
  const std::vector<float> x4{0, 1, 2, 3};
  const auto one = [](kiln::index_t n) { return std::vector<float>(static_cast<std::size_t>(n), 1.0f); };
  {  // torch: y [[3.]], dx [0, 0, 0, 1]
    Model<Sequential<MaxPool2d<3, 2, 0, true>>, Small, kiln::Policy<kiln::Fp32, D>> m(0);
    BOOST_TEST(m.forward(kiln::test::make_tensor<D>(x4, kiln::Extents<Small>(1))).to_vector() ==
                   std::vector<float>{3},
               boost::test_tools::per_element());
    const auto dx =
        m.backward_input(kiln::test::make_tensor<D>(one(1), kiln::Extents<Shape<dyn, 1, 1, 1>>(1)));
    BOOST_TEST(dx.to_vector() == (std::vector<float>{0, 0, 0, 1}), boost::test_tools::per_element());
  }
  {  // torch: y [[1.5]] (the window's 4 taps inside the input), dx 0.25 each
    Model<Sequential<AvgPool2d<3, 2, 0, true>>, Small, kiln::Policy<kiln::Fp32, D>> m(0);
    BOOST_TEST(m.forward(kiln::test::make_tensor<D>(x4, kiln::Extents<Small>(1))).to_vector() ==
                   std::vector<float>{1.5f},
               boost::test_tools::per_element());
    const auto dx =
        m.backward_input(kiln::test::make_tensor<D>(one(1), kiln::Extents<Shape<dyn, 1, 1, 1>>(1)));
    BOOST_TEST(dx.to_vector() == (std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}),
               boost::test_tools::per_element());
  }
  {  // dilation 3, padding 1 on 4 x 4: the window's taps at rows and columns -1, 2, 5; torch: y [[10.]]
    using In = Shape<dyn, 1, 4, 4>;
    static_assert(MaxPool2d<3, 3, 1, true, 3>::accepts<In> && !MaxPool2d<3, 3, 1, false, 3>::accepts<In>);
    std::vector<float> x16(16);
    for (std::size_t i = 0; i < x16.size(); ++i) x16[i] = static_cast<float>(i);
    Model<Sequential<MaxPool2d<3, 3, 1, true, 3>>, In, kiln::Policy<kiln::Fp32, D>> m(0);
    BOOST_TEST(m.forward(kiln::test::make_tensor<D>(x16, kiln::Extents<In>(1))).to_vector() ==
                   std::vector<float>{10},
               boost::test_tools::per_element());
    const auto dx =
        m.backward_input(kiln::test::make_tensor<D>(one(1), kiln::Extents<Shape<dyn, 1, 1, 1>>(1)));
    std::vector<float> want(16, 0.0f);
    want[10] = 1;
    BOOST_TEST(dx.to_vector() == want, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(lenet_has_pytorchs_shapes_and_parameter_count_and_learns, D, kiln::test::devices) {
  using namespace kiln::nn;
  using LeNet = Sequential<Conv2d<3, 6, 5>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, ReLU, MaxPool2d<2>, Flatten,
                           Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
  using Model = kiln::nn::Model<LeNet, Shape<dyn, 3, 32, 32>, kiln::Policy<kiln::Fp32, D>>;
  static_assert(std::is_same_v<typename Model::output_shape, Shape<dyn, 10>>);
  static_assert(Model::parameter_count == 62006);  // sum(p.numel() for p in LeNet().parameters())
  Model model(1);
  const kiln::Extents<Shape<dyn, 3, 32, 32>> in(16);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(16 * 3 * 32 * 32, -1.0, 1.0, 31), in);
  std::vector<std::int64_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const auto y = kiln::test::make_tensor<D>(labels, kiln::Extents<Shape<dyn>>(16));
  CrossEntropyLoss ce;
  kiln::optim::SGD opt(model, {.lr = 0.05, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    model.zero_grad();
    const auto logits = model.forward(x);
    const double loss = ce(logits, y).item();
    model.backward(ce.backward(logits, y));
    opt.step();
    if (step == 0) first = loss;
    last = loss;
  }
  BOOST_TEST(first > 2.0);        // about ln 10 at the start
  BOOST_TEST(last < 0.5 * first);  // memorises 16 random images
}

// The CPU's im2col and col2im with every size a constant (Conv2d's fixed_geometry: stride 1, no padding,
// no dilation, one group, as LeNet's layers) give the general path's columns and sums bit for bit, in half
// the time of LeNet's second convolution (kiln-bench).
namespace fixed_im2col {
/// im2col and col2im with every size a constant give the general path's bits for F.
template <class F>
void check_against_the_general_path() {
  namespace knn = kiln::nn;
  namespace kt = kiln::test;
  BOOST_TEST_CONTEXT("K " << F::k << ", stride " << F::stride << ", padding " << F::pad) {
    const knn::detail::ConvGeometry g{1, F::c, F::h, F::w, F::k, F::stride, F::pad, F::ho, F::wo};
    const auto x = kt::random_values<float>(static_cast<std::size_t>(g.image()), -1, 1, 21);
    std::vector<float> general(static_cast<std::size_t>(g.patch() * g.pixels()));
    std::vector<float> fixed(general.size(), -7.0f);
    knn::detail::im2col_image<F::stride>(x.data(), general.data(), g);
    knn::detail::im2col_fixed<F>(x.data(), fixed.data());
    BOOST_TEST(fixed == general, boost::test_tools::per_element());
    const auto d = kt::random_values<float>(general.size(), -1, 1, 22);
    std::vector<float> dx_general(x.size()), dx_fixed(x.size(), -7.0f);
    knn::detail::col2im_image<F::stride>(d.data(), dx_general.data(), g);
    knn::detail::col2im_fixed<F>(d.data(), dx_fixed.data());
    BOOST_TEST(dx_fixed == dx_general, boost::test_tools::per_element());
  }
}
}  // namespace fixed_im2col

// Conv2d without dilation or groups runs the CPU's im2col and col2im with every size a constant: the same
// columns and the same sums in the same order as the general path, with and without padding and stride
// (taps that read only padding on some rows; a padding wider than a tap's reach; a stride that skips the
// last column).
BOOST_AUTO_TEST_CASE(fixed_size_im2col_and_col2im_are_the_general_paths_bits) {
  namespace knn = kiln::nn;
  using knn::detail::FixedGeometry;
  using In = kiln::Shape<kiln::dyn, 3, 9, 7>;
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  // [3, 9, 7] with a 3x3 kernel: [7, 5] outputs; padding 1: [9, 7]; stride 2 and padding 1: [5, 4]
  static_assert(std::is_same_v<knn::Conv2d<3, 4, 3>::module<In, P>::fixed_geometry,
                               FixedGeometry<3, 9, 7, 3, 7, 5>>);
  static_assert(std::is_same_v<knn::Conv2d<3, 4, 3, 1, 1>::module<In, P>::fixed_geometry,
                               FixedGeometry<3, 9, 7, 3, 9, 7, 1, 1>>);
  static_assert(std::is_same_v<knn::Conv2d<3, 4, 3, 2, 1>::module<In, P>::fixed_geometry,
                               FixedGeometry<3, 9, 7, 3, 5, 4, 2, 1>>);
  static_assert(std::is_void_v<knn::Conv2d<3, 4, 3, 1, 1, 2>::module<In, P>::fixed_geometry>);     // dilated
  static_assert(std::is_void_v<knn::Conv2d<3, 3, 3, 1, 1, 1, 3>::module<In, P>::fixed_geometry>);  // groups
  fixed_im2col::check_against_the_general_path<FixedGeometry<3, 9, 7, 3, 7, 5>>();
  fixed_im2col::check_against_the_general_path<FixedGeometry<3, 9, 7, 3, 9, 7, 1, 1>>();
  fixed_im2col::check_against_the_general_path<FixedGeometry<3, 9, 7, 3, 5, 4, 2, 1>>();
  fixed_im2col::check_against_the_general_path<FixedGeometry<2, 8, 8, 3, 2, 2, 3, 0>>();   // 6, 7 unread
  fixed_im2col::check_against_the_general_path<FixedGeometry<1, 6, 5, 5, 6, 5, 1, 2>>();   // fashion's conv1
  fixed_im2col::check_against_the_general_path<FixedGeometry<2, 4, 5, 2, 5, 5, 2, 3>>();   // padding rows
}

namespace vector_pool {
/// The max pool's vector paths on the CPU (rows of windows in `omp simd` loops; the gradient gathered)
/// against its one-window-at-a-time paths (window_max with bounds, the scatter), bit for bit: maxima,
/// winners and gradients, over planes with ties, NaNs (two in some windows), signed zeros and infinities,
/// rows of 2 to 75 windows (pieces of 64), and a last row and column that no window covers.
template <class T, kiln::index_t K>
void check(kiln::index_t planes, kiln::index_t h, kiln::index_t w) {
  namespace knn = kiln::nn::detail;
  using I = knn::window_index_t<K>;
  const kiln::index_t ho = h / K, wo = w / K;
  const knn::PoolGeometry g{planes, h, w, K, K, 0, ho, wo};
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, 1.0f, -2.5f};
  std::vector<T> x(static_cast<std::size_t>(planes * h * w)), dy(static_cast<std::size_t>(planes * ho * wo));
  std::uint32_t r = 12345;
  const auto next = [&r] { return r = r * 1664525u + 1013904223u; };
  for (auto& v : x) {
    const std::uint32_t u = next();
    const float step = static_cast<float>(static_cast<int>((u >> 8) % 17) - 8) * 0.25f;  // ties
    v = kiln::from_compute<T>(u % 4 == 0 ? specials[(u >> 8) % 8] : step);
  }
  for (auto& v : dy) {
    const std::uint32_t u = next();
    v = kiln::from_compute<T>(u % 8 == 0 ? specials[(u >> 8) % 8] : static_cast<float>(u >> 20) / 512.0f - 1.0f);
  }
  std::vector<T> y_vec(dy.size()), y_one(dy.size());
  std::vector<I> i_vec(dy.size()), i_one(dy.size());
  knn::MaxPoolForwardPlanes<T, K, K, 0, 1, false> vec{x.data(), y_vec.data(), i_vec.data(), g};
  knn::MaxPoolForwardPlanes<T, K, K, 0, 1, true> one{x.data(), y_one.data(), i_one.data(), g};
  std::vector<T> y_inference(dy.size());
  knn::MaxPoolForwardPlanes<T, K, K, 0, 1, false> inference{x.data(), y_inference.data(), nullptr, g};
  for (kiln::index_t p = 0; p < planes; ++p) vec(p), one(p), inference(p);
  BOOST_TEST(std::memcmp(y_vec.data(), y_one.data(), y_vec.size() * sizeof(T)) == 0);
  BOOST_TEST(std::memcmp(y_inference.data(), y_one.data(), y_vec.size() * sizeof(T)) == 0);
  BOOST_TEST(i_vec == i_one, boost::test_tools::per_element());
  std::vector<T> dx_gather(x.size(), kiln::from_compute<T>(7.0f)), dx_scatter(x.size(), kiln::from_compute<T>(7.0f));
  knn::MaxPoolBackwardPlanes<T, K, K, 0, 1, true> gather{dy.data(), i_one.data(), dx_gather.data(), g};
  knn::MaxPoolBackwardPlanes<T, K, K, 0, 1, false> scatter{dy.data(), i_one.data(), dx_scatter.data(), g};
  for (kiln::index_t p = 0; p < planes; ++p) gather(p), scatter(p);
  BOOST_TEST(std::memcmp(dx_gather.data(), dx_scatter.data(), dx_gather.size() * sizeof(T)) == 0);
  std::size_t nan_windows = 0;  // (the data has what the test is about)
  for (const T v : y_one) nan_windows += std::isnan(static_cast<double>(kiln::to_compute(v))) ? 1 : 0;
  BOOST_TEST(nan_windows > 0u);
  BOOST_TEST(nan_windows < y_one.size());
}
}  // namespace vector_pool

using pool_elements = std::tuple<float, double, kiln::half, kiln::bfloat16>;
BOOST_AUTO_TEST_CASE_TEMPLATE(max_pool_rows_of_windows_are_one_window_at_a_time_bits, T, pool_elements) {
  vector_pool::check<T, 2>(3, 11, 151);  // rows of 75 windows (two pieces); row 10 and column 150 uncovered
  vector_pool::check<T, 2>(5, 28, 28);   // LeNet's first pool: rows of 14
  vector_pool::check<T, 2>(4, 10, 10);   // its second: rows of 5, scattered
  vector_pool::check<T, 3>(2, 14, 31);   // 3 x 3 windows, rows of 10, one row and column uncovered
  vector_pool::check<T, 2>(2, 4, 16);    // rows of 8
}

// A backward pass's partial weight gradients (each convolution group's block transposed) added in tiles:
// per weight the adds of one weight at a time, gw + partial 0 + partial 1 + ..., the same bits.
BOOST_AUTO_TEST_CASE(partial_weight_gradients_add_in_group_order) {
  using kiln::index_t;
  struct Case {
    index_t rows, conv_groups, patch, groups;
  };
  const auto u = [](index_t i) { return static_cast<std::size_t>(i); };
  // one filter per group; LeNet's conv1 (6 x 75); two convolution groups; a group block of several tiles
  // with a short last one; filters wider than a tile (fg 600)
  for (const Case c : {Case{1, 1, 9, 3}, Case{6, 1, 75, 32}, Case{8, 2, 27, 5}, Case{16, 1, 144, 32},
                       Case{1200, 2, 3, 4}}) {
    const index_t count = c.rows * c.patch, fg = c.rows / c.conv_groups;
    // magnitudes from 1 to 10^4: the order of the adds shows in the bits
    std::vector<float> partial = kiln::test::random_values<float>(u(count * c.groups), -1, 1, 41);
    for (std::size_t i = 0; i < partial.size(); ++i) partial[i] *= std::pow(10.0f, static_cast<float>(i % 5));
    const std::vector<float> gw = kiln::test::random_values<float>(u(count), -1, 1, 42);
    std::vector<float> expected = gw;
    for (index_t r = 0; r < c.rows; ++r)
      for (index_t k = 0; k < c.patch; ++k) {
        const index_t at = (r / fg) * fg * c.patch + k * fg + r % fg;
        float acc = expected[u(r * c.patch + k)];
        for (index_t grp = 0; grp < c.groups; ++grp) acc += partial[u(grp * count + at)];
        expected[u(r * c.patch + k)] = acc;
      }
    for (const int threads : {1, 2}) {
      const kiln::backend::cpu::ScopedThreads scoped(threads);
      std::vector<float> got = gw;
      kiln::nn::detail::add_partials(got.data(), partial.data(), c.rows, fg, c.patch,
                                     static_cast<float*>(nullptr), nullptr, 0, c.groups);
      BOOST_TEST_CONTEXT("rows " << c.rows << ", groups of " << fg << ", patch " << c.patch << ", " << threads
                                 << " threads") {
        BOOST_TEST(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
