// Mixed precision layers: every layer under MixedFp16 and MixedBf16 against the same layer in fp32, from
// the same master parameters and the same (rounded) inputs. Activations are in the low type, GEMMs and
// convolutions read the low-precision working copy and accumulate in fp32, gradients land in the fp32
// arena. Agreement is norm-wise, within a small multiple of the low type's unit roundoff
// (fp16 2^-11, bf16 2^-8).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <span>
#include <string>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;

template <class T>
std::vector<double> as_doubles(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(kiln::to_compute(v[i]));
  return out;
}
/// x rounded to element type U (a new tensor).
template <class U, class T, class S, class D>
Tensor<U, S, D> to(const Tensor<T, S, D>& x) {
  Tensor<U, S, D> out(x.extents(), x.device_index());
  kiln::assign(out, kiln::cast<U>(x));
  return out;
}
/// ||a - b|| / ||b|| (0 when both are 0).
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// `ulps` unit roundoffs of the low type, norm-wise: fp16's unit roundoff is 2^-11 and bf16's 2^-8.
template <class P>
constexpr double tolerance(double ulps) {
  return std::is_same_v<typename P::storage, kiln::half> ? ulps / 2048.0 : ulps / 256.0;
}

/// How a check starts the backward pass and how close it must come.
struct Check {
  double scale = 1;            ///< loss scale of the low-precision backward (fp16 deep in a network)
  double ulps = 16;            ///< tolerance in unit roundoffs of the low type
  bool cross_entropy = false;  ///< dL/dy of a cross-entropy loss (logits [N, C]) instead of a random one
};

/// Runs Net in fp32 and in precision P from one seed (the same master parameters) on the same inputs
/// (drawn in float, rounded to the low type, fed to both) and compares the output, dL/dx and every
/// parameter gradient. Dropout masks depend on the seed and the element index only, so both draw alike.
/// The low-precision backward starts from dL/dy times `scale` (loss scaling: deep in a network, fp16
/// gradients fall below its normal range, 6.1e-5, without it), and its gradients are divided by it.
template <class Net, class In, class P, class D>
void check_against_fp32(const Extents<In>& ext, std::uint32_t seed, Check c = {}) {
  using T = typename P::storage;
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> ref(seed);
  knn::Model<Net, In, kiln::Policy<P, D>> low(seed);
  BOOST_TEST(ref.parameters().to_vector() == low.parameters().to_vector());  // same masters

  const auto x32 =
      kt::make_tensor<D>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -2, 2, seed), ext);
  const auto x = to<T>(x32);
  const auto y = low.forward(x);
  const auto y_ref = ref.forward(to<float>(x));
  static_assert(std::is_same_v<typename decltype(y)::element_type, T>, "activations are in the low type");

  auto r32 = kt::make_tensor<D>(
      kt::random_values<float>(static_cast<std::size_t>(y.numel()), -1, 1, seed + 1), y.extents());
  if constexpr (decltype(y)::rank == 2) {
    if (c.cross_entropy) {
      std::vector<std::int64_t> labels(static_cast<std::size_t>(y.size(0)));
      for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7 + seed) % y.size(1));
      r32 = knn::CrossEntropyLoss{}.backward(y_ref, kt::make_tensor<D>(labels, Extents<Shape<dyn>>(y.size(0))));
    }
  }
  const auto r = to<T>(r32);
  Tensor<T, typename decltype(r)::shape_type, D> r_scaled(r.extents(), r.device_index());
  kiln::assign(r_scaled, r * static_cast<float>(c.scale));
  const auto dx = low.backward_input(r_scaled);
  const auto dx_ref = ref.backward_input(to<float>(r));
  const auto unscaled = [&](std::vector<double> v) {
    for (auto& e : v) e /= c.scale;
    return v;
  };

  const double tol = tolerance<P>(c.ulps);
  const double ey = relative_error(as_doubles(y.to_vector()), as_doubles(y_ref.to_vector()));
  const double edx = relative_error(unscaled(as_doubles(dx.to_vector())), as_doubles(dx_ref.to_vector()));
  BOOST_TEST_MESSAGE(P::name << " " << low.net().name() << ": output " << ey << ", input gradient " << edx);
  BOOST_TEST(ey <= tol);
  BOOST_TEST(edx <= tol);
  for (const auto& p : low.named_parameters()) {
    const auto g = unscaled(as_doubles(low.gradients().to_vector())), g_ref = as_doubles(ref.gradients().to_vector());
    const std::vector<double> a(g.begin() + p.offset, g.begin() + p.offset + p.count);
    const std::vector<double> b(g_ref.begin() + p.offset, g_ref.begin() + p.offset + p.count);
    const double e = relative_error(a, b);
    BOOST_TEST_MESSAGE("  " << p.name << " gradient " << e);
    BOOST_TEST_CONTEXT(p.name) { BOOST_TEST(e <= tol); }
  }
}

template <class Net, class In, class D>
void check_both(const Extents<In>& ext, std::uint32_t seed, Check c = {}) {
  BOOST_TEST_CONTEXT("fp16") { check_against_fp32<Net, In, kiln::MixedFp16, D>(ext, seed, c); }
  c.scale = 1;  // bf16 has fp32's range
  BOOST_TEST_CONTEXT("bf16") { check_against_fp32<Net, In, kiln::MixedBf16, D>(ext, seed, c); }
}

template <kiln::index_t... E>
Extents<Shape<dyn, E...>> batch(kiln::index_t n) {
  Extents<Shape<dyn, E...>> e = {};
  e[0] = n;
  return e;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(precision)
BOOST_AUTO_TEST_SUITE(mixed_layers)

using D = std::tuple_element_t<0, kt::devices>;

BOOST_AUTO_TEST_CASE(linear_with_and_without_bias) {
  check_both<knn::Sequential<knn::Linear<24, 16>>, Shape<dyn, 24>, D>(batch<24>(9), 1);
  check_both<knn::Sequential<knn::Linear<24, 16, false>>, Shape<dyn, 24>, D>(batch<24>(9), 2);
}

BOOST_AUTO_TEST_CASE(linear_rounds_its_sum_bias_and_activation_once) {
  // fp16, y = x Wᵀ + b with the fp32 sum, the bias and the activation rounded once, as torch's addmm:
  // 1 + (2^-11 + 2^-14) - 2^-14 is exactly 1 (rounding the sum first gives 1 + 2^-10, then 1 + 2^-10
  // again), and 65504 (1 + 2^-10) - 100 is 65468 -> 65472 (the sum alone, 65568, is past fp16's 65504:
  // rounded first, inf).
  using In = Shape<dyn, 2>;
  const auto run = [](auto model, std::vector<float> params, std::vector<float> x) {
    model.parameters().copy_from(std::span<const float>(params));
    std::vector<kiln::half> xh;
    for (float v : x) xh.push_back(kiln::from_compute<kiln::half>(v));
    return kiln::to_compute(
        model.forward(Tensor<kiln::half, In, D>::from(std::span<const kiln::half>(xh), Extents<In>(1)))
            .to_vector()[0]);
  };
  using P = kiln::Policy<kiln::MixedFp16, D>;
  using Plain = knn::Model<knn::Sequential<knn::Linear<2, 1>>, In, P>;
  using WithReLU = knn::Model<knn::Sequential<knn::Linear<2, 1>, knn::ReLU>, In, P>;
  using WithGELU = knn::Model<knn::Sequential<knn::Linear<2, 1>, knn::GELU>, In, P>;
  const std::vector<float> tie = {1.0f, 0x1p-11f + 0x1p-14f, -0x1p-14f},
                           past = {1.0f + 0x1p-10f, 0.0f, -100.0f};
  BOOST_TEST(run(Plain(0), tie, {1.0f, 1.0f}) == 1.0f);
  BOOST_TEST(run(WithReLU(0), tie, {1.0f, 1.0f}) == 1.0f);
  BOOST_TEST(run(Plain(0), past, {65504.0f, 1.0f}) == 65472.0f);
  BOOST_TEST(run(WithReLU(0), past, {65504.0f, 1.0f}) == 65472.0f);
  BOOST_TEST(run(WithGELU(0), past, {65504.0f, 1.0f}) == 65472.0f);
}

BOOST_AUTO_TEST_CASE(linear_with_each_fused_activation) {
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::ReLU>, Shape<dyn, 24>, D>(batch<24>(9), 3);
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::GELU>, Shape<dyn, 24>, D>(batch<24>(9), 4);
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::Sigmoid>, Shape<dyn, 24>, D>(batch<24>(9), 5);
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::Tanh>, Shape<dyn, 24>, D>(batch<24>(9), 6);
}

BOOST_AUTO_TEST_CASE(linear_with_the_later_activations) {
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::Hardswish>, Shape<dyn, 24>, D>(batch<24>(9), 61);
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::Mish>, Shape<dyn, 24>, D>(batch<24>(9), 62);
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::Softplus<>>, Shape<dyn, 24>, D>(batch<24>(9), 63);
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::SELU, knn::LogSigmoid>, Shape<dyn, 24>, D>(
      batch<24>(9), 64);
}

BOOST_AUTO_TEST_CASE(linear_over_a_sequence_and_prelu) {
  // Linear over [N, L, F] (the rows' GEMM on views) and PReLU, one slope and one per channel.
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::PReLU<>, knn::Linear<16, 8>>, Shape<dyn, 5, 24>, D>(
      batch<5, 24>(3), 65);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3>, knn::PReLU<3>>, Shape<dyn, 2, 9, 9>, D>(batch<2, 9, 9>(3), 66);
}

BOOST_AUTO_TEST_CASE(conv2d_with_stride_padding_and_activation) {
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3>>, Shape<dyn, 2, 9, 9>, D>(batch<2, 9, 9>(3), 7);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 2, 1>, knn::ReLU>, Shape<dyn, 2, 9, 9>, D>(batch<2, 9, 9>(3), 8);
  check_both<knn::Sequential<knn::Conv2d<2, 4, 5, 1, 2, 1, 1, false>, knn::Tanh>, Shape<dyn, 2, 8, 8>, D>(
      batch<2, 8, 8>(2), 9);
}

BOOST_AUTO_TEST_CASE(conv2d_dilated_grouped_and_depthwise) {
  check_both<knn::Sequential<knn::Conv2d<4, 6, 3, 1, 2, 2, 2>, knn::ReLU>, Shape<dyn, 4, 9, 9>, D>(
      batch<4, 9, 9>(3), 41);
  check_both<knn::Sequential<knn::Conv2d<4, 4, 3, 2, 1, 1, 4, false>, knn::Tanh>, Shape<dyn, 4, 8, 8>, D>(
      batch<4, 8, 8>(2), 42);
}

BOOST_AUTO_TEST_CASE(padding_layers_and_conv2d_padding_modes) {
  using knn::PaddingMode;
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1, 1, 1, true, PaddingMode::reflect>, knn::ReLU>,
             Shape<dyn, 2, 8, 8>, D>(batch<2, 8, 8>(3), 43);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 2, 2, 1, 1, false, PaddingMode::circular>>,
             Shape<dyn, 2, 7, 8>, D>(batch<2, 7, 8>(2), 44);
  check_both<
      knn::Sequential<knn::ReplicationPad2d<1, 2, 0, 3>, knn::Conv2d<2, 3, 3>, knn::ConstantPad2d<0.5, 1>>,
      Shape<dyn, 2, 6, 5>, D>(batch<2, 6, 5>(2), 45);
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_with_stride_groups_and_activation) {
  using knn::ConvTranspose2d;
  check_both<knn::Sequential<ConvTranspose2d<3, 2, 3>>, Shape<dyn, 3, 5, 5>, D>(batch<3, 5, 5>(3), 46);
  check_both<knn::Sequential<ConvTranspose2d<4, 6, 3, 2, 1, 1, 2>, knn::ReLU>, Shape<dyn, 4, 4, 4>, D>(
      batch<4, 4, 4>(2), 47);
  check_both<knn::Sequential<ConvTranspose2d<2, 3, 4, 2, 1, 0, 1, false>, knn::Tanh>, Shape<dyn, 2, 4, 3>, D>(
      batch<2, 4, 3>(3), 48);
  // output padding reaching the stride: the im2col path on CUDA
  check_both<knn::Sequential<ConvTranspose2d<2, 3, 2, 1, 0, 1, 1, true, 2>>, Shape<dyn, 2, 4, 4>, D>(
      batch<2, 4, 4>(2), 49);
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_rounds_its_sum_bias_and_activation_once) {
  // fp16 on the CPU, a 1 x 1 kernel over 2 channels: as linear_rounds_its_sum_bias_and_activation_once,
  // the fp32 sum 1 + 2^-11 + 2^-14, the bias -2^-14 and the ReLU round once, to exactly 1. (cuDNN rounds
  // its sum before the bias, as torch's cuDNN convolutions do: docs/precision.md.)
  using In = Shape<dyn, 2, 1, 1>;
  using P = kiln::Policy<kiln::MixedFp16, kiln::Cpu>;
  const auto run = [](auto model) {
    const std::vector<float> params = {1.0f, 0x1p-11f + 0x1p-14f, -0x1p-14f};
    model.parameters().copy_from(std::span<const float>(params));
    const std::vector<kiln::half> x = {kiln::from_compute<kiln::half>(1.0f),
                                       kiln::from_compute<kiln::half>(1.0f)};
    return kiln::to_compute(
        model.forward(Tensor<kiln::half, In, kiln::Cpu>::from(std::span<const kiln::half>(x), Extents<In>(1)))
            .to_vector()[0]);
  };
  BOOST_TEST(run(knn::Model<knn::Sequential<knn::ConvTranspose2d<2, 1, 1>>, In, P>(0)) == 1.0f);
  BOOST_TEST(run(knn::Model<knn::Sequential<knn::ConvTranspose2d<2, 1, 1>, knn::ReLU>, In, P>(0)) == 1.0f);
}

BOOST_AUTO_TEST_CASE(pooling_flatten_and_elementwise_activations) {
  using In = Shape<dyn, 2, 8, 8>;
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::MaxPool2d<2>>, In, D>(batch<2, 8, 8>(3), 10);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::AvgPool2d<2>, knn::Flatten>, In, D>(
      batch<2, 8, 8>(3), 11);
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::Dropout<>, knn::ReLU, knn::Sigmoid, knn::Tanh, knn::GELU>,
             Shape<dyn, 24>, D>(batch<24>(9), 12);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::AdaptiveAvgPool2d<3, 2>, knn::Flatten>, In, D>(
      batch<2, 8, 8>(3), 21);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::AdaptiveAvgPool2d<1>, knn::Flatten>, In, D>(
      batch<2, 8, 8>(3), 22);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::AdaptiveMaxPool2d<3, 2>, knn::Flatten>, In, D>(
      batch<2, 8, 8>(3), 65);
}

BOOST_AUTO_TEST_CASE(upsampling_between_convolutions) {
  // fp16 / bf16 storage, the taps' weights and sums in fp32 (torch's opmath), one rounding per output.
  using In = Shape<dyn, 2, 5, 4>;
  using knn::UpsampleMode;
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::Upsample<2, UpsampleMode::bilinear>>, In, D>(
      batch<2, 5, 4>(3), 66);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::Upsample<3, UpsampleMode::bicubic>>, In, D>(
      batch<2, 5, 4>(3), 67);
  check_both<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::Upsample<2, UpsampleMode::bicubic, true>>, In,
             D>(batch<2, 5, 4>(3), 68);
}

BOOST_AUTO_TEST_CASE(layer_and_group_norm_between_layers) {
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::LayerNorm<16>, knn::ReLU>, Shape<dyn, 24>, D>(batch<24>(9), 23);
  check_both<knn::Sequential<knn::Conv2d<2, 4, 3, 1, 1>, knn::GroupNorm<2, 4>, knn::Tanh>, Shape<dyn, 2, 8, 8>, D>(
      batch<2, 8, 8>(3), 24);
}

BOOST_AUTO_TEST_CASE(softmax_and_log_softmax_compute_in_fp32) {
  check_both<knn::Sequential<knn::Linear<24, 10>, knn::Softmax<>>, Shape<dyn, 24>, D>(batch<24>(9), 13);
  check_both<knn::Sequential<knn::Linear<24, 10>, knn::LogSoftmax<>>, Shape<dyn, 24>, D>(batch<24>(9), 14);
}

BOOST_AUTO_TEST_CASE(residual_block) {
  check_both<knn::Sequential<knn::Linear<24, 16>, knn::Residual<knn::Linear<16, 16>, knn::ReLU>>, Shape<dyn, 24>, D>(
      batch<24>(9), 15);
}

BOOST_AUTO_TEST_CASE(blocks_of_branches) {
  using Shortcut =
      knn::Add<knn::Sequential<knn::Conv2d<2, 4, 3, 2, 1>, knn::ReLU, knn::Conv2d<4, 4, 3, 1, 1>>,
               knn::Conv2d<2, 4, 1, 2>>;
  check_both<knn::Sequential<Shortcut, knn::ReLU>, Shape<dyn, 2, 8, 8>, D>(batch<2, 8, 8>(3), 25);
  using Join = knn::Concat<knn::Identity, knn::Sequential<knn::Linear<24, 8>, knn::Tanh>, knn::Linear<24, 4>>;
  check_both<knn::Sequential<Join, knn::Linear<36, 10>>, Shape<dyn, 24>, D>(batch<24>(9), 26);
}

// A whole network compounds the per-layer rounding: every activation differs from fp32's by about one
// unit roundoff, and a weight gradient sums N·P such products of mixed sign, so its relative error grows
// with the cancellation (measured: LeNet's first convolution 17 ulps in fp16, 29 in bf16, with a cross-
// entropy gradient; its last layers within 2). The per-layer checks above hold each layer to 16.
BOOST_AUTO_TEST_CASE(the_seeds_mlp_and_lenet) {
  using Mlp = knn::Sequential<knn::Linear<13, 16>, knn::ReLU, knn::Linear<16, 32>, knn::ReLU, knn::Linear<32, 1>>;
  check_both<Mlp, Shape<dyn, 13>, D>(batch<13>(32), 16);
  using LeNet = knn::Sequential<knn::Conv2d<1, 6, 5, 1, 2>, knn::ReLU, knn::MaxPool2d<2>, knn::Conv2d<6, 16, 5>,
                                knn::ReLU, knn::MaxPool2d<2>, knn::Flatten, knn::Linear<16 * 5 * 5, 120>, knn::ReLU,
                                knn::Linear<120, 84>, knn::ReLU, knn::Linear<84, 10>>;
  check_both<LeNet, Shape<dyn, 1, 28, 28>, D>(batch<1, 28, 28>(4), 17, {.scale = 1024, .ulps = 48, .cross_entropy = true});
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
