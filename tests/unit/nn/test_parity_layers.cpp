// PyTorch parity of every layer, the losses (MSE, cross entropy and NLL: mean, sum and unreduced; cross
// entropy also with label smoothing, fused and unfused, class weights and probability targets)
// and a whole LeNet (tests/parity/fixtures/layers.json, layers_strided.json, layers_pool_modes.json,
// layers_conv_modes.json, layers_padding.json, layers_padding_same.json, layers_upsample.json,
// layers_conv_transpose.json, layers_activations.json, layers_softmax_dims.json, layers_instance_norm.json,
// layers_pixel_shuffle.json, layers_branches.json, layers_sequence.json, losses.json, lenet.json, written by
// tests/parity/make_fixtures.py with torch 1.13): the same weights and inputs give the same outputs, input
// gradients and parameter gradients, and LeNet the same parameters after three steps of SGD (momentum) and of
// Adam, within 1e-5 relative in fp32 (relative to each element, floored at 1% of its tensor's scale:
// parity::scale_floor). Each loss case's recorded torch settings are the kiln loss's
// (support/loss_options.hpp). Both devices.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include "support/loss_options.hpp"
#include "support/parity.hpp"
#include "support/policies.hpp"

namespace {
namespace parity = kiln::test::parity;
namespace knn = kiln::nn;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
using nlohmann::json;

constexpr double rtol = 1e-5;  // the bound: fp32, relative

const json& fixture(const std::string& file) {
  static std::map<std::string, json> cache;
  auto it = cache.find(file);
  if (it == cache.end()) it = cache.emplace(file, parity::load(file)).first;
  return it->second;
}
/// The case names layer_case has handed out, by file: a test clears its file's, checks its cases, then
/// names the fixture's cases it did not check (unchecked_cases).
std::map<std::string, std::set<std::string>>& handed_out() {
  static std::map<std::string, std::set<std::string>> names;
  return names;
}
const json& layer_case(const std::string& name, const std::string& file = "layers.json") {
  for (const auto& c : fixture(file).at("cases"))
    if (c.at("name") == name) {
      handed_out()[file].insert(name);
      return c;
    }
  throw std::runtime_error(file + ": no case " + name);
}
/// The names of `file`'s cases that layer_case has not handed out since handed_out().erase(file), in
/// the fixture's order, one string ("" when every case was checked).
std::string unchecked_cases(const std::string& file) {
  std::string names;
  for (const auto& c : fixture(file).at("cases"))
    if (!handed_out()[file].contains(c.at("name").get<std::string>()))
      names += (names.empty() ? "" : ", ") + c.at("name").get<std::string>();
  return names;
}

/// got against the fixture tensor want, within rtol relative to each element, floored at `floor` times
/// want's scale (1%, as for the MLP: parity::scale_floor).
void check(const std::vector<float>& got, const json& want, const std::string& what, double floor = 1.0) {
  const auto w = parity::values(want);
  const auto d = parity::compare(std::span<const float>(got), std::span<const float>(w),
                                 floor * parity::scale_floor(std::span<const float>(w)));
  BOOST_TEST(d.max_rel <= rtol, what << ": " << parity::describe(d));
}

/// Each named slice of a model's arena (gradients, or parameters) against the fixture's {name: tensor}.
template <class Model>
void check_named(const Model& m, const std::vector<float>& arena, const json& want, const std::string& what,
                 double floor = 1.0) {
  BOOST_TEST(m.named_parameters().size() == want.size());
  for (const auto& p : m.named_parameters()) {
    const auto first = arena.begin() + p.offset;
    check(std::vector<float>(first, first + p.count), want.at(p.name), what + " " + p.name, floor);
  }
}

template <class S, class D>
Tensor<float, S, D> tensor_of(const json& t, const Extents<S>& ext) {
  const auto v = parity::values(t);
  return Tensor<float, S, D>::from(std::span<const float>(v), ext);
}

/// A one-layer model's input gradient on the CPU against the fixture case's bit for bit: for a layer
/// that adds the same products in torch's order (Upsample's bicubic mode).
template <class Layer, class In>
void check_input_gradient_exactly(const std::string& name, const std::string& file) {
  BOOST_TEST_CONTEXT("layer " << name << ", input gradient bit for bit") {
    const json& c = layer_case(name, file);
    knn::Model<knn::Sequential<Layer>, In, kiln::Policy<kiln::Fp32, kiln::Cpu>> m(0);
    const auto y =
        m.forward(tensor_of<In, kiln::Cpu>(c.at("input"), Extents<In>(parity::shape(c.at("input"))[0])));
    using Y = std::remove_cvref_t<decltype(y)>;
    const auto dy = tensor_of<typename Y::shape_type, kiln::Cpu>(c.at("grad_output"), y.extents());
    BOOST_TEST(m.backward_input(dy).to_vector() == parity::values(c.at("grad_input")),
               boost::test_tools::per_element());
  }
}

/// A fixture's class labels (a JSON list of integers) as [N] int64.
template <class D>
Tensor<std::int64_t, Shape<dyn>, D> labels_of(const json& t) {
  const auto v = t.get<std::vector<std::int64_t>>();
  return Tensor<std::int64_t, Shape<dyn>, D>::from(std::span<const std::int64_t>(v),
                                                   Extents<Shape<dyn>>(static_cast<kiln::index_t>(v.size())));
}

/// A one-layer model's forward and backward against the fixture case `name` of `file` (In: the input's
/// shape); `floor`: as check's.
template <class Layer, class In, class D>
void check_layer(const std::string& name, const std::string& file = "layers.json", double floor = 1.0) {
  BOOST_TEST_CONTEXT("layer " << name) {
    const json& c = layer_case(name, file);
    knn::Model<knn::Sequential<Layer>, In, kiln::Policy<kiln::Fp32, D>> m(0);
    // torch's mode (eval: Dropout the identity, BatchNorm by its running statistics) and repr (none for
    // a block of branches: a module of the fixture's own).
    m.train(c.value("train", false));
    if (c.contains("torch"))
      BOOST_TEST(m.net().template layer<0>().name() == c.at("torch").get<std::string>());
    m.parameters().copy_from(std::span<const float>(parity::arena_from_state_dict(m, c.at("state_dict"))));
    const auto x = tensor_of<In, D>(c.at("input"), Extents<In>(parity::shape(c.at("input"))[0]));
    const auto y = m.forward(x);
    using Y = std::remove_cvref_t<decltype(y)>;
    std::vector<long long> y_shape;
    for (std::size_t i = 0; i < Y::rank; ++i) y_shape.push_back(y.size(i));
    BOOST_TEST(parity::shape(c.at("output")) == y_shape, boost::test_tools::per_element());
    check(y.to_vector(), c.at("output"), "output", floor);
    const auto dy = tensor_of<typename Y::shape_type, D>(c.at("grad_output"), y.extents());
    const auto dx = m.backward_input(dy);
    check(dx.to_vector(), c.at("grad_input"), "grad_input", floor);
    check_named(m, m.gradients().to_vector(), c.at("grad"), "grad", floor);
    if (c.contains("buffers")) {  // the running statistics after the forward (training mode: moved)
      const auto buffers = m.buffers().to_vector();
      BOOST_TEST(m.named_buffers().size() == c.at("buffers").size());
      for (const auto& b : m.named_buffers()) {
        const auto first = buffers.begin() + b.offset;
        check(std::vector<float>(first, first + b.count), c.at("buffers").at(b.name), "buffer " + b.name,
              floor);
      }
    }
  }
}

using LeNet = knn::Sequential<knn::Conv2d<3, 6, 5>, knn::ReLU, knn::MaxPool2d<2>, knn::Conv2d<6, 16, 5>, knn::ReLU,
                             knn::MaxPool2d<2>, knn::Flatten, knn::Linear<400, 120>, knn::ReLU, knn::Linear<120, 84>,
                             knn::ReLU, knn::Linear<84, 10>>;
using Image = Shape<dyn, 3, 32, 32>;
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(torch_parity)

BOOST_AUTO_TEST_CASE_TEMPLATE(every_layer_matches_pytorch_forward_and_backward, D, kiln::test::devices) {
  handed_out().erase("layers.json");
  check_layer<knn::Linear<5, 4>, Shape<dyn, 5>, D>("linear");
  check_layer<knn::Linear<5, 4, false>, Shape<dyn, 5>, D>("linear_no_bias");
  check_layer<knn::Conv2d<2, 3, 5>, Shape<dyn, 2, 9, 9>, D>("conv2d");
  check_layer<knn::Conv2d<3, 4, 3, 2, 1>, Shape<dyn, 3, 7, 7>, D>("conv2d_stride_padding");
  check_layer<knn::MaxPool2d<2>, Shape<dyn, 3, 6, 6>, D>("max_pool2d");
  check_layer<knn::AvgPool2d<2>, Shape<dyn, 3, 6, 6>, D>("avg_pool2d");
  check_layer<knn::ReLU, Shape<dyn, 6>, D>("relu");
  check_layer<knn::Sigmoid, Shape<dyn, 6>, D>("sigmoid");
  check_layer<knn::Tanh, Shape<dyn, 6>, D>("tanh");
  check_layer<knn::GELU, Shape<dyn, 6>, D>("gelu");
  check_layer<knn::Softmax<>, Shape<dyn, 6>, D>("softmax");
  check_layer<knn::LogSoftmax<>, Shape<dyn, 6>, D>("log_softmax");
  check_layer<knn::Flatten, Shape<dyn, 3, 2, 2>, D>("flatten");
  check_layer<knn::Dropout<0.5f>, Shape<dyn, 6>, D>("dropout_eval");
  check_layer<knn::SiLU, Shape<dyn, 6>, D>("silu");
  check_layer<knn::LeakyReLU<>, Shape<dyn, 6>, D>("leaky_relu");
  check_layer<knn::LeakyReLU<0.2f>, Shape<dyn, 6>, D>("leaky_relu_0.2");
  check_layer<knn::ELU<>, Shape<dyn, 6>, D>("elu");
  check_layer<knn::ELU<0.5f>, Shape<dyn, 6>, D>("elu_0.5");
  check_layer<knn::LayerNorm<6>, Shape<dyn, 6>, D>("layer_norm");
  check_layer<knn::LayerNorm<5>, Shape<dyn, 3, 5>, D>("layer_norm_last_of_three");
  check_layer<knn::LayerNormOver<Shape<3, 4, 4>, 1e-3f>, Shape<dyn, 3, 4, 4>, D>("layer_norm_chw");
  check_layer<knn::LayerNorm<6, 1e-5f, false>, Shape<dyn, 6>, D>("layer_norm_no_affine");
  check_layer<knn::GroupNorm<2, 6>, Shape<dyn, 6, 4, 4>, D>("group_norm");
  check_layer<knn::GroupNorm<2, 8>, Shape<dyn, 8>, D>("group_norm_features");
  check_layer<knn::GroupNorm<2, 4, 1e-3f>, Shape<dyn, 4, 5>, D>("group_norm_length");
  check_layer<knn::GroupNorm<1, 4>, Shape<dyn, 4, 3, 3>, D>("group_norm_one_group");
  check_layer<knn::GroupNorm<4, 4>, Shape<dyn, 4, 3, 3>, D>("group_norm_per_channel");
  check_layer<knn::GroupNorm<2, 4, 1e-5f, false>, Shape<dyn, 4, 3, 3>, D>("group_norm_no_affine");
  check_layer<knn::Conv2d<2, 3, 3, 2, 1, 1, 1, false>, Shape<dyn, 2, 7, 7>, D>("conv2d_no_bias");
  check_layer<knn::MaxPool2d<3, 2, 1>, Shape<dyn, 3, 7, 7>, D>("max_pool2d_padded");
  check_layer<knn::AvgPool2d<3, 2, 1>, Shape<dyn, 3, 7, 7>, D>("avg_pool2d_padded");
  check_layer<knn::AdaptiveAvgPool2d<1>, Shape<dyn, 3, 5, 6>, D>("adaptive_avg_pool2d_global");
  check_layer<knn::AdaptiveAvgPool2d<3, 2>, Shape<dyn, 2, 7, 5>, D>("adaptive_avg_pool2d_overlapping");
  check_layer<knn::AdaptiveAvgPool2d<4>, Shape<dyn, 2, 3, 3>, D>("adaptive_avg_pool2d_upsampling");
  BOOST_TEST(fixture("layers.json").at("cases").size() == 35u);  // every case of the file is checked
  const std::string unchecked = unchecked_cases("layers.json");
  BOOST_TEST(unchecked.empty(), "cases of layers.json not checked here: " << unchecked);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(strides_larger_than_the_kernel_match_pytorch, D, kiln::test::devices) {
  // layers_strided.json: windows that skip input rows and columns, on [2, C, 7, 8] inputs whose last
  // rows or columns fall in no window, without and with padding (AvgPool2d counts the padding, torch's
  // count_include_pad=True default; ceil_mode and count_include_pad=False: pool_modes_match_pytorch).
  const std::string f = "layers_strided.json";
  check_layer<knn::Conv2d<2, 3, 2, 3>, Shape<dyn, 2, 7, 8>, D>("conv2d_k2_s3", f);
  check_layer<knn::Conv2d<2, 3, 2, 3, 1>, Shape<dyn, 2, 7, 8>, D>("conv2d_k2_s3_p1", f);
  check_layer<knn::Conv2d<2, 3, 1, 2>, Shape<dyn, 2, 7, 8>, D>("conv2d_k1_s2", f);
  check_layer<knn::Conv2d<2, 3, 1, 2, 1>, Shape<dyn, 2, 7, 8>, D>("conv2d_k1_s2_p1", f);
  check_layer<knn::MaxPool2d<2, 3>, Shape<dyn, 3, 7, 8>, D>("max_pool2d_k2_s3", f);
  check_layer<knn::MaxPool2d<2, 3, 1>, Shape<dyn, 3, 7, 8>, D>("max_pool2d_k2_s3_p1", f);
  check_layer<knn::AvgPool2d<2, 3>, Shape<dyn, 3, 7, 8>, D>("avg_pool2d_k2_s3", f);
  check_layer<knn::AvgPool2d<2, 3, 1>, Shape<dyn, 3, 7, 8>, D>("avg_pool2d_k2_s3_p1", f);
  BOOST_TEST(fixture(f).at("cases").size() == 8u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dilated_and_grouped_convolutions_match_pytorch, D, kiln::test::devices) {
  // layers_conv_modes.json: dilation 2 and 3 (with stride 2), two groups, depthwise (with stride and with
  // two filters a channel, no bias), and all of them together.
  const std::string f = "layers_conv_modes.json";
  check_layer<knn::Conv2d<3, 4, 3, 1, 2, 2>, Shape<dyn, 3, 9, 7>, D>("conv2d_dilation2", f);
  check_layer<knn::Conv2d<2, 3, 3, 2, 0, 3>, Shape<dyn, 2, 11, 9>, D>("conv2d_dilation3_s2", f);
  check_layer<knn::Conv2d<4, 6, 3, 1, 1, 1, 2>, Shape<dyn, 4, 7, 6>, D>("conv2d_groups2", f);
  check_layer<knn::Conv2d<6, 6, 3, 2, 1, 1, 6>, Shape<dyn, 6, 8, 7>, D>("conv2d_depthwise", f);
  check_layer<knn::Conv2d<3, 6, 3, 1, 1, 1, 3, false>, Shape<dyn, 3, 6, 5>, D>("conv2d_depthwise_multiplier",
                                                                               f);
  check_layer<knn::Conv2d<4, 8, 2, 2, 1, 2, 2>, Shape<dyn, 4, 9, 8>, D>("conv2d_dilation2_groups2_s2", f);
  BOOST_TEST(fixture(f).at("cases").size() == 6u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(padding_layers_and_conv2d_padding_modes_match_pytorch, D, kiln::test::devices) {
  // layers_padding.json, on [2, 3, 5, 6]: each padding layer with four different sides (reflect and
  // circular at their largest, replicate past the input), and Conv2d in each padding mode (with stride
  // and dilation; with padding='same', groups and no bias).
  const std::string f = "layers_padding.json";
  using In = Shape<dyn, 3, 5, 6>;
  using knn::PaddingMode;
  check_layer<knn::ZeroPad2d<1, 2, 0, 3>, In, D>("zero_pad2d", f);
  check_layer<knn::ConstantPad2d<3.5, 2>, In, D>("constant_pad2d", f);
  check_layer<knn::ReflectionPad2d<1, 3, 4, 0>, In, D>("reflection_pad2d", f);
  check_layer<knn::ReplicationPad2d<2, 7, 1, 0>, In, D>("replication_pad2d", f);
  check_layer<knn::CircularPad2d<1, 6, 2, 5>, In, D>("circular_pad2d", f);
  check_layer<knn::Conv2d<3, 4, 3, 1, 1, 1, 1, true, PaddingMode::reflect>, In, D>("conv2d_reflect", f);
  check_layer<knn::Conv2d<3, 4, 3, 2, 2, 2, 1, true, PaddingMode::replicate>, In, D>("conv2d_replicate_s2_d2",
                                                                                     f);
  using CircularGroups = knn::Conv2d<3, 6, 3, 1, knn::padding_same, 1, 3, false, PaddingMode::circular>;
  check_layer<CircularGroups, In, D>("conv2d_circular_groups", f);
  BOOST_TEST(fixture(f).at("cases").size() == 8u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(instance_norms_match_pytorch, D, kiln::test::devices) {
  // layers_instance_norm.json: InstanceNorm2d on [2, 3, 4, 5] without affine parameters, and with drawn
  // ones and eps 1e-3; InstanceNorm1d on [3, 4, 6] with drawn ones.
  const std::string f = "layers_instance_norm.json";
  check_layer<knn::InstanceNorm2d<3>, Shape<dyn, 3, 4, 5>, D>("instance_norm2d", f);
  check_layer<knn::InstanceNorm2d<3, 1e-3f, 0.1f, true>, Shape<dyn, 3, 4, 5>, D>("instance_norm2d_affine", f);
  check_layer<knn::InstanceNorm1d<4, 1e-5f, 0.1f, true>, Shape<dyn, 4, 6>, D>("instance_norm1d_affine", f);
  BOOST_TEST(fixture(f).at("cases").size() == 3u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pixel_shuffles_and_unflatten_match_pytorch, D, kiln::test::devices) {
  // layers_pixel_shuffle.json: PixelShuffle 2 on [2, 8, 3, 4] and 3 on [2, 9, 2, 3], PixelUnshuffle 2
  // on [2, 3, 4, 6]; Unflatten(1, (2, 3, 2)) on [4, 12], Unflatten(-1, (2, -1)) on [2, 3, 8];
  // Flatten(2) and Flatten(-3, -2) on [2, 3, 4, 5]: permutations and views, so exact.
  const std::string f = "layers_pixel_shuffle.json";
  check_layer<knn::PixelShuffle<2>, Shape<dyn, 8, 3, 4>, D>("pixel_shuffle2", f);
  check_layer<knn::PixelShuffle<3>, Shape<dyn, 9, 2, 3>, D>("pixel_shuffle3", f);
  check_layer<knn::PixelUnshuffle<2>, Shape<dyn, 3, 4, 6>, D>("pixel_unshuffle2", f);
  check_layer<knn::Unflatten<1, 2, 3, 2>, Shape<dyn, 12>, D>("unflatten", f);
  check_layer<knn::Unflatten<-1, 2, -1>, Shape<dyn, 3, 8>, D>("unflatten_last_inferred", f);
  check_layer<knn::FlattenDims<2>, Shape<dyn, 3, 4, 5>, D>("flatten_start2", f);
  check_layer<knn::FlattenDims<-3, -2>, Shape<dyn, 3, 4, 5>, D>("flatten_middle", f);
  BOOST_TEST(fixture(f).at("cases").size() == 7u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(blocks_of_branches_match_pytorch, D, kiln::test::devices) {
  // layers_branches.json: torch ModuleLists whose forward adds or concatenates their branches. A ResNet
  // block halving the resolution (its shortcut a strided 1x1 convolution + BatchNorm, training mode),
  // x + f(x) over features, an Inception-like block and a DenseNet-like join of x and f(x).
  const std::string f = "layers_branches.json";
  using Main = knn::Sequential<knn::Conv2d<4, 8, 3, 2, 1, 1, 1, false>, knn::BatchNorm2d<8>, knn::ReLU,
                               knn::Conv2d<8, 8, 3, 1, 1, 1, 1, false>, knn::BatchNorm2d<8>>;
  using Shortcut = knn::Sequential<knn::Conv2d<4, 8, 1, 2, 0, 1, 1, false>, knn::BatchNorm2d<8>>;
  check_layer<knn::Add<Main, Shortcut>, Shape<dyn, 4, 6, 6>, D>("add_resnet_downsample", f);
  check_layer<knn::Add<knn::Identity, knn::Sequential<knn::Linear<5, 5>, knn::Tanh>>, Shape<dyn, 5>, D>(
      "add_identity_features", f);
  using Inception = knn::Concat<knn::Conv2d<4, 3, 1>,
                                knn::Sequential<knn::Conv2d<4, 2, 1>, knn::ReLU, knn::Conv2d<2, 3, 3, 1, 1>>,
                                knn::Sequential<knn::MaxPool2d<3, 1, 1>, knn::Conv2d<4, 2, 1>>>;
  check_layer<Inception, Shape<dyn, 4, 5, 5>, D>("concat_inception", f);
  check_layer<knn::Concat<knn::Identity, knn::Sequential<knn::Linear<6, 4>, knn::Sigmoid>>, Shape<dyn, 6>, D>(
      "concat_dense_features", f);
  BOOST_TEST(fixture(f).at("cases").size() == 4u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(more_activations_match_pytorch, D, kiln::test::devices) {
  // layers_activations.json, on [4, 8] inputs N(0, 16): ReLU6, Hardtanh (default, (-2, 1.5)),
  // Hardsigmoid, Hardswish, Softplus (default; beta 2, threshold 5), Mish, SELU, CELU (1, 0.5),
  // Softsign, LogSigmoid.
  const std::string f = "layers_activations.json";
  using In = Shape<dyn, 8>;
  check_layer<knn::ReLU6, In, D>("relu6", f);
  check_layer<knn::Hardtanh<>, In, D>("hardtanh", f);
  check_layer<knn::Hardtanh<-2.0f, 1.5f>, In, D>("hardtanh_-2_1.5", f);
  check_layer<knn::Hardsigmoid, In, D>("hardsigmoid", f);
  check_layer<knn::Hardswish, In, D>("hardswish", f);
  check_layer<knn::Softplus<>, In, D>("softplus", f);
  check_layer<knn::Softplus<2.0f, 5.0f>, In, D>("softplus_2_5", f);
  check_layer<knn::Mish, In, D>("mish", f);
  check_layer<knn::SELU, In, D>("selu", f);
  check_layer<knn::CELU<>, In, D>("celu", f);
  check_layer<knn::CELU<0.5f>, In, D>("celu_0.5", f);
  check_layer<knn::Softsign, In, D>("softsign", f);
  check_layer<knn::LogSigmoid, In, D>("log_sigmoid", f);
  BOOST_TEST(fixture(f).at("cases").size() == 13u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(softmax_along_other_dimensions_matches_pytorch, D, kiln::test::devices) {
  // layers_softmax_dims.json, inputs N(0, 9): the channels of [2, 3, 4, 5], the last and the middle of
  // three (negative dims, named as torch prints them), the batch. The floor is 10% of each tensor's
  // scale: Softmax's dx = y (dy - Σ dy y) cancels, so both sides carry an error of an ulp of dy (1e-7,
  // torch sums dy y in float, kiln in double) on entries near 0.
  const std::string f = "layers_softmax_dims.json";
  check_layer<knn::Softmax<1>, Shape<dyn, 3, 4, 5>, D>("softmax_channels", f, 10.0);
  check_layer<knn::LogSoftmax<1>, Shape<dyn, 3, 4, 5>, D>("log_softmax_channels", f, 10.0);
  check_layer<knn::Softmax<-1>, Shape<dyn, 3, 5>, D>("softmax_last_of_three", f, 10.0);
  check_layer<knn::LogSoftmax<-2>, Shape<dyn, 4, 3>, D>("log_softmax_middle_of_three", f, 10.0);
  check_layer<knn::Softmax<0>, Shape<dyn, 4>, D>("softmax_batch", f, 10.0);
  BOOST_TEST(fixture(f).at("cases").size() == 5u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_over_the_last_dimension_and_prelu_match_pytorch, D, kiln::test::devices) {
  // layers_sequence.json: torch's Linear on [N, *, in_features], a sequence [2, 5, 6] and a rank-4 input
  // without bias: output, input gradient, weight and bias gradients.
  const std::string f = "layers_sequence.json";
  check_layer<knn::Linear<6, 4>, Shape<dyn, 5, 6>, D>("linear_sequence", f);
  check_layer<knn::Linear<6, 3, false>, Shape<dyn, 2, 4, 6>, D>("linear_rank4_no_bias", f);
  // PReLU: one slope (torch's init 0.25), a slope per channel of [N, C, H, W] and per feature of [N, F]
  // (slopes of both signs and 0), output, input gradient and the slopes' gradients.
  check_layer<knn::PReLU<>, Shape<dyn, 5>, D>("prelu", f);
  check_layer<knn::PReLU<3>, Shape<dyn, 3, 4, 5>, D>("prelu_channels", f);
  check_layer<knn::PReLU<4>, Shape<dyn, 4>, D>("prelu_features", f);
  BOOST_TEST(fixture(f).at("cases").size() == 5u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(padding_same_with_an_even_span_matches_pytorch, D, kiln::test::devices) {
  // layers_padding_same.json, on [2, 3, 5, 6]: padding='same' with K 4, K 2 dilation 3 (span 4) and K 2
  // reflect in groups without a bias (span 2: nothing on the top and left, one at the bottom and right).
  const std::string f = "layers_padding_same.json";
  using In = Shape<dyn, 3, 5, 6>;
  using knn::padding_same;
  check_layer<knn::Conv2d<3, 4, 4, 1, padding_same>, In, D>("conv2d_same_k4", f);
  check_layer<knn::Conv2d<3, 4, 2, 1, padding_same, 3>, In, D>("conv2d_same_k2_d3", f);
  check_layer<knn::Conv2d<3, 6, 2, 1, padding_same, 1, 3, false, knn::PaddingMode::reflect>, In, D>(
      "conv2d_same_k2_reflect_groups", f);
  BOOST_TEST(fixture(f).at("cases").size() == 3u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(upsample_and_identity_match_pytorch, D, kiln::test::devices) {
  // layers_upsample.json: nearest (scale 2, and 3 as UpsamplingNearest2d), bilinear with
  // align_corners=False (scale 2, and 3 on a 5x3 input), Identity, bilinear with align_corners=True
  // (scale 2, and 3 on a 2x3 input as UpsamplingBilinear2d), bicubic (scale 2 and 3, align_corners False;
  // scale 2, and 3 on a 3x2 input whose taps all clamp, True). Bilinear's (and bicubic's) input gradient
  // sums up to
  // 36 products of opposite signs, and torch's build rounds the source positions otherwise (the last
  // bit of λ: fused multiply-adds), so it is floored at 10% of the tensor's scale (as the LeNet's).
  const std::string f = "layers_upsample.json";
  check_layer<knn::Upsample<2>, Shape<dyn, 3, 4, 5>, D>("upsample_nearest2", f);
  check_layer<knn::UpsamplingNearest2d<3>, Shape<dyn, 3, 3, 4>, D>("upsampling_nearest2d3", f);
  check_layer<knn::Upsample<2, knn::UpsampleMode::bilinear>, Shape<dyn, 3, 4, 5>, D>("upsample_bilinear2", f,
                                                                                     10);
  check_layer<knn::Upsample<3, knn::UpsampleMode::bilinear>, Shape<dyn, 2, 5, 3>, D>("upsample_bilinear3", f,
                                                                                     10);
  check_layer<knn::Identity, Shape<dyn, 3, 2, 2>, D>("identity", f);
  using AlignCorners = knn::Upsample<2, knn::UpsampleMode::bilinear, true>;
  check_layer<AlignCorners, Shape<dyn, 3, 4, 5>, D>("upsample_bilinear2_align_corners", f, 10);
  check_layer<knn::UpsamplingBilinear2d<3>, Shape<dyn, 2, 2, 3>, D>("upsampling_bilinear2d3", f, 10);
  using knn::UpsampleMode::bicubic;
  check_layer<knn::Upsample<2, bicubic>, Shape<dyn, 3, 4, 5>, D>("upsample_bicubic2", f, 10);
  check_layer<knn::Upsample<3, bicubic>, Shape<dyn, 2, 5, 3>, D>("upsample_bicubic3", f, 10);
  check_layer<knn::Upsample<2, bicubic, true>, Shape<dyn, 3, 4, 5>, D>("upsample_bicubic2_align_corners", f,
                                                                       10);
  check_layer<knn::Upsample<3, bicubic, true>, Shape<dyn, 2, 3, 2>, D>("upsample_bicubic3_align_corners", f,
                                                                       10);
  BOOST_TEST(fixture(f).at("cases").size() == 11u);  // every case of the file is checked
  // Bicubic's input gradient adds the same products in torch's CPU order: equal on the CPU (the forward
  // is not: torch's build contracts its sums into fused multiply-adds).
  check_input_gradient_exactly<knn::Upsample<2, bicubic>, Shape<dyn, 3, 4, 5>>("upsample_bicubic2", f);
  check_input_gradient_exactly<knn::Upsample<3, bicubic>, Shape<dyn, 2, 5, 3>>("upsample_bicubic3", f);
  check_input_gradient_exactly<knn::Upsample<2, bicubic, true>, Shape<dyn, 3, 4, 5>>(
      "upsample_bicubic2_align_corners", f);
  check_input_gradient_exactly<knn::Upsample<3, bicubic, true>, Shape<dyn, 2, 3, 2>>(
      "upsample_bicubic3_align_corners", f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv_transpose2d_matches_pytorch, D, kiln::test::devices) {
  // layers_conv_transpose.json: plain; stride 2 with padding and output_padding; the DCGAN block (K 4,
  // stride 2, padding 1, no bias); groups; dilation with padding; output_padding reaching the stride
  // (below the dilation: the im2col path on CUDA); a stride past the kernel.
  const std::string f = "layers_conv_transpose.json";
  using knn::ConvTranspose2d;
  check_layer<ConvTranspose2d<2, 3, 3>, Shape<dyn, 2, 4, 5>, D>("conv_transpose2d", f);
  check_layer<ConvTranspose2d<3, 4, 3, 2, 1, 1>, Shape<dyn, 3, 4, 3>, D>("conv_transpose2d_s2_p1_op1", f);
  check_layer<ConvTranspose2d<4, 3, 4, 2, 1, 0, 1, false>, Shape<dyn, 4, 3, 3>, D>("conv_transpose2d_dcgan",
                                                                                   f);
  check_layer<ConvTranspose2d<4, 6, 3, 2, 0, 1, 2>, Shape<dyn, 4, 3, 4>, D>("conv_transpose2d_groups", f);
  check_layer<ConvTranspose2d<2, 3, 3, 2, 2, 0, 1, true, 2>, Shape<dyn, 2, 4, 5>, D>(
      "conv_transpose2d_dilation", f);
  check_layer<ConvTranspose2d<2, 3, 2, 1, 0, 1, 1, true, 2>, Shape<dyn, 2, 3, 4>, D>(
      "conv_transpose2d_op_dilation", f);
  check_layer<ConvTranspose2d<3, 2, 2, 3, 1>, Shape<dyn, 3, 4, 3>, D>("conv_transpose2d_k2_s3", f);
  BOOST_TEST(fixture(f).at("cases").size() == 7u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pool_modes_match_pytorch, D, kiln::test::devices) {
  // layers_pool_modes.json: ceil_mode where it adds a last, partial window (K 2 on 5x7; W 6 for K 3
  // stride 3 padding 1; H 8 for K 3 stride 2 padding 1) and where torch drops a last window that would
  // start in the padding (H 5 for K 2 stride 2 padding 1 and K 3 stride 3 padding 1); AvgPool2d's
  // count_include_pad=False (padding 1, with and without ceil mode) and divisor_override; MaxPool2d's
  // dilation (2 with padding and overlapping windows; 3 in ceil mode; 2 with stride, padding, ceil mode);
  // AdaptiveMaxPool2d (global, overlapping bins, more bins than rows: each input in several bins).
  const std::string f = "layers_pool_modes.json";
  check_layer<knn::MaxPool2d<2, 2, 0, true>, Shape<dyn, 3, 5, 7>, D>("max_pool2d_ceil", f);
  check_layer<knn::AvgPool2d<2, 2, 0, true>, Shape<dyn, 3, 5, 7>, D>("avg_pool2d_ceil", f);
  check_layer<knn::MaxPool2d<2, 2, 1, true>, Shape<dyn, 3, 5, 6>, D>("max_pool2d_ceil_k2_s2_p1", f);
  check_layer<knn::AvgPool2d<2, 2, 1, true>, Shape<dyn, 3, 5, 6>, D>("avg_pool2d_ceil_k2_s2_p1", f);
  check_layer<knn::MaxPool2d<3, 3, 1, true>, Shape<dyn, 3, 5, 6>, D>("max_pool2d_ceil_k3_s3_p1", f);
  check_layer<knn::AvgPool2d<3, 3, 1, true>, Shape<dyn, 3, 5, 6>, D>("avg_pool2d_ceil_k3_s3_p1", f);
  check_layer<knn::MaxPool2d<3, 2, 1, true>, Shape<dyn, 3, 8, 7>, D>("max_pool2d_ceil_k3_s2_p1", f);
  check_layer<knn::AvgPool2d<3, 2, 1, true>, Shape<dyn, 3, 8, 7>, D>("avg_pool2d_ceil_k3_s2_p1", f);
  check_layer<knn::AvgPool2d<3, 2, 1, false, false>, Shape<dyn, 3, 7, 6>, D>("avg_pool2d_exclude_pad", f);
  check_layer<knn::AvgPool2d<3, 2, 1, true, false>, Shape<dyn, 3, 8, 7>, D>("avg_pool2d_ceil_exclude_pad", f);
  using ExcludePadK3S3 = knn::AvgPool2d<3, 3, 1, true, false>;
  check_layer<ExcludePadK3S3, Shape<dyn, 3, 5, 6>, D>("avg_pool2d_ceil_k3_s3_p1_exclude_pad", f);
  check_layer<knn::AvgPool2d<2, 2, 0, false, true, 3>, Shape<dyn, 3, 6, 6>, D>("avg_pool2d_divisor", f);
  using ExcludePadDivisor = knn::AvgPool2d<3, 2, 1, true, false, 2>;
  check_layer<ExcludePadDivisor, Shape<dyn, 3, 8, 7>, D>("avg_pool2d_ceil_exclude_pad_divisor", f);
  check_layer<knn::MaxPool2d<3, 1, 1, false, 2>, Shape<dyn, 3, 7, 6>, D>("max_pool2d_dilation2", f);
  check_layer<knn::MaxPool2d<2, 2, 0, true, 3>, Shape<dyn, 3, 8, 9>, D>("max_pool2d_dilation3_ceil", f);
  check_layer<knn::MaxPool2d<3, 2, 1, true, 2>, Shape<dyn, 3, 9, 8>, D>("max_pool2d_dilation2_s2_p1_ceil", f);
  check_layer<knn::AdaptiveMaxPool2d<1>, Shape<dyn, 3, 5, 6>, D>("adaptive_max_pool2d_global", f);
  check_layer<knn::AdaptiveMaxPool2d<3, 2>, Shape<dyn, 2, 7, 5>, D>("adaptive_max_pool2d_overlapping", f);
  check_layer<knn::AdaptiveMaxPool2d<4>, Shape<dyn, 2, 3, 3>, D>("adaptive_max_pool2d_upsampling", f);
  BOOST_TEST(fixture(f).at("cases").size() == 19u);  // every case of the file is checked
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mse_and_cross_entropy_match_pytorch, D, kiln::test::devices) {
  const json& f = fixture("losses.json");
  for (const auto& [key, mse] : {std::pair{"mse", knn::MSELoss{}},
                                 std::pair{"mse_sum", knn::MSELoss{.reduction = knn::Reduction::sum}}}) {
    const json& c = f.at(key);
    const Extents<Shape<dyn, 3>> ext(parity::shape(c.at("input"))[0]);
    const auto pred = tensor_of<Shape<dyn, 3>, D>(c.at("input"), ext);
    const auto target = tensor_of<Shape<dyn, 3>, D>(c.at("target"), ext);
    kiln::test::check_loss_options(c, mse, false, key);
    check({mse(pred, target).item()}, json{{"shape", {1}}, {"values", {c.at("loss")}}}, std::string(key) + " loss");
    check(mse.backward(pred, target).to_vector(), c.at("grad"), std::string(key) + " grad");
  }
  const std::pair<const char*, knn::CrossEntropyLoss> ces[] = {
      {"cross_entropy", {}},
      {"cross_entropy_ignore_index", {}},  // rows labelled -100
      {"cross_entropy_label_smoothing", {.label_smoothing = 0.1}},
      {"cross_entropy_sum", {.reduction = knn::Reduction::sum, .label_smoothing = 0.1}}};
  for (const auto& [key, ce] : ces) {
    const json& c = f.at(key);
    const Extents<Shape<dyn, 10>> ext(parity::shape(c.at("input"))[0]);
    const auto logits = tensor_of<Shape<dyn, 10>, D>(c.at("input"), ext);
    const auto labels = labels_of<D>(c.at("target"));
    kiln::test::check_loss_options(c, ce, false, key);
    check({ce(logits, labels).item()}, json{{"shape", {1}}, {"values", {c.at("loss")}}}, std::string(key) + " loss");
    for (const bool fused : {true, false}) {  // unfused: log_softmax, nll_loss's backward, log_softmax's
      std::optional<kiln::Unfused> off;
      if (!fused) off.emplace();
      check(ce.backward(logits, labels).to_vector(), c.at("grad"), std::string(key) + (fused ? " grad" : " grad, unfused"));
    }
  }
  // Class weights (torch's weight=), with ignored rows: mean, mean smoothed, sum smoothed.
  using R = knn::Reduction;
  for (const auto& [key, reduction, eps] : {std::tuple{"cross_entropy_weight", R::mean, 0.0},
                                            std::tuple{"cross_entropy_weight_smoothing", R::mean, 0.1},
                                            std::tuple{"cross_entropy_weight_sum", R::sum, 0.1}}) {
    const json& c = f.at(key);
    const knn::CrossEntropyLoss ce{.weight = c.at("weight").get<std::vector<double>>(), .reduction = reduction,
                                   .label_smoothing = eps};
    const Extents<Shape<dyn, 10>> ext(parity::shape(c.at("input"))[0]);
    const auto logits = tensor_of<Shape<dyn, 10>, D>(c.at("input"), ext);
    const auto labels = labels_of<D>(c.at("target"));
    kiln::test::check_loss_options(c, ce, false, key);
    check({ce(logits, labels).item()}, json{{"shape", {1}}, {"values", {c.at("loss")}}}, std::string(key) + " loss");
    for (const bool fused : {true, false}) {
      std::optional<kiln::Unfused> off;
      if (!fused) off.emplace();
      check(ce.backward(logits, labels).to_vector(), c.at("grad"), std::string(key) + (fused ? " grad" : " grad, unfused"));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unreduced_losses_match_pytorch, D, kiln::test::devices) {
  // torch's reduction='none': each term's loss, and the gradient of a random upstream dL/dloss through it.
  const json& f = fixture("losses.json");
  {
    const json& c = f.at("mse_none");
    const Extents<Shape<dyn, 3>> ext(parity::shape(c.at("input"))[0]);
    const auto pred = tensor_of<Shape<dyn, 3>, D>(c.at("input"), ext);
    const auto target = tensor_of<Shape<dyn, 3>, D>(c.at("target"), ext);
    const auto dloss = tensor_of<Shape<dyn, 3>, D>(c.at("grad_output"), ext);
    const knn::MSELoss mse;
    kiln::test::check_loss_options(c, mse, true, "mse_none");
    check(mse.unreduced(pred, target).to_vector(), c.at("loss"), "mse_none loss");
    check(mse.backward(pred, target, dloss).to_vector(), c.at("grad"), "mse_none grad");
  }
  const std::pair<const char*, knn::CrossEntropyLoss> ces[] = {
      {"cross_entropy_none", {}},  // a row of large logits
      {"cross_entropy_none_smoothing", {.label_smoothing = 0.1}}};  // rows labelled -100
  for (const auto& [key, ce] : ces) {
    const json& c = f.at(key);
    const Extents<Shape<dyn, 10>> ext(parity::shape(c.at("input"))[0]);
    const auto logits = tensor_of<Shape<dyn, 10>, D>(c.at("input"), ext);
    const auto labels = labels_of<D>(c.at("target"));
    const auto rows = labels.extents();
    const auto dloss = tensor_of<Shape<dyn>, D>(c.at("grad_output"), rows);
    kiln::test::check_loss_options(c, ce, true, key);
    check(ce.unreduced(logits, labels).to_vector(), c.at("loss"), std::string(key) + " loss");
    for (const bool fused : {true, false}) {
      std::optional<kiln::Unfused> off;
      if (!fused) off.emplace();
      check(ce.backward(logits, labels, dloss).to_vector(), c.at("grad"),
            std::string(key) + (fused ? " grad" : " grad, unfused"));
    }
  }
  {
    // torch's CrossEntropyLoss(weight=w, reduction='none', label_smoothing=0.2).
    const json& c = f.at("cross_entropy_weight_none");
    const knn::CrossEntropyLoss ce{.weight = c.at("weight").get<std::vector<double>>(), .label_smoothing = 0.2};
    const Extents<Shape<dyn, 10>> ext(parity::shape(c.at("input"))[0]);
    const auto logits = tensor_of<Shape<dyn, 10>, D>(c.at("input"), ext);
    const auto labels = labels_of<D>(c.at("target"));
    const auto dloss = tensor_of<Shape<dyn>, D>(c.at("grad_output"), labels.extents());
    kiln::test::check_loss_options(c, ce, true, "cross_entropy_weight_none");
    check(ce.unreduced(logits, labels).to_vector(), c.at("loss"), "cross_entropy_weight_none loss");
    for (const bool fused : {true, false}) {
      std::optional<kiln::Unfused> off;
      if (!fused) off.emplace();
      check(ce.backward(logits, labels, dloss).to_vector(), c.at("grad"),
            std::string("cross_entropy_weight_none") + (fused ? " grad" : " grad, unfused"));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_with_probability_targets_matches_pytorch, D, kiln::test::devices) {
  // torch's CrossEntropyLoss(weight, reduction, label_smoothing) with a float target [N, C]: softmax rows,
  // a one-hot row and a row that does not sum to 1; fused and unfused.
  const json& f = fixture("losses.json");
  using R = knn::Reduction;
  for (const auto& [key, reduction, eps] : {std::tuple{"cross_entropy_probs", R::mean, 0.0},
                                            std::tuple{"cross_entropy_probs_weight_smoothing", R::mean, 0.1},
                                            std::tuple{"cross_entropy_probs_sum", R::sum, 0.1},
                                            std::tuple{"cross_entropy_probs_none", R::mean, 0.2}}) {
    const json& c = f.at(key);
    const knn::CrossEntropyLoss ce{.weight = c.value("weight", std::vector<double>{}), .reduction = reduction,
                                   .label_smoothing = eps};
    const Extents<Shape<dyn, 10>> ext(parity::shape(c.at("input"))[0]);
    const auto logits = tensor_of<Shape<dyn, 10>, D>(c.at("input"), ext);
    const auto target = tensor_of<Shape<dyn, 10>, D>(c.at("target"), ext);
    const bool none = c.contains("grad_output");
    kiln::test::check_loss_options(c, ce, none, key);
    if (none)
      check(ce.unreduced(logits, target).to_vector(), c.at("loss"), std::string(key) + " loss");
    else
      check({ce(logits, target).item()}, json{{"shape", {1}}, {"values", {c.at("loss")}}}, std::string(key) + " loss");
    for (const bool fused : {true, false}) {
      std::optional<kiln::Unfused> off;
      if (!fused) off.emplace();
      const auto grad = none ? ce.backward(logits, target,
                                           tensor_of<Shape<dyn>, D>(c.at("grad_output"), Extents<Shape<dyn>>(ext[0])))
                             : ce.backward(logits, target);
      check(grad.to_vector(), c.at("grad"), std::string(key) + (fused ? " grad" : " grad, unfused"));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nll_loss_matches_pytorch, D, kiln::test::devices) {
  // torch.nn.NLLLoss over log_softmax outputs with two rows labelled -100: mean, sum and 'none', and
  // with class weights.
  const json& f = fixture("losses.json");
  using R = knn::Reduction;
  for (const auto& [key, reduction] : {std::pair{"nll", R::mean}, std::pair{"nll_sum", R::sum},
                                       std::pair{"nll_none", R::mean /* not used by unreduced */},
                                       std::pair{"nll_weight", R::mean}, std::pair{"nll_weight_none", R::mean}}) {
    const json& c = f.at(key);
    const Extents<Shape<dyn, 10>> ext(parity::shape(c.at("input"))[0]);
    const auto logp = tensor_of<Shape<dyn, 10>, D>(c.at("input"), ext);
    const auto labels = labels_of<D>(c.at("target"));
    const auto rows = labels.extents();
    const knn::NLLLoss nll{.weight = c.contains("weight") ? c.at("weight").get<std::vector<double>>() : std::vector<double>{},
                           .reduction = reduction};
    kiln::test::check_loss_options(c, nll, c.contains("grad_output"), key);
    if (c.contains("grad_output")) {
      const auto dloss = tensor_of<Shape<dyn>, D>(c.at("grad_output"), rows);
      check(nll.unreduced(logp, labels).to_vector(), c.at("loss"), std::string(key) + " loss");
      check(nll.backward(logp, labels, dloss).to_vector(), c.at("grad"), std::string(key) + " grad");
    } else {
      check({nll(logp, labels).item()}, json{{"shape", {1}}, {"values", {c.at("loss")}}}, std::string(key) + " loss");
      check(nll.backward(logp, labels).to_vector(), c.at("grad"), std::string(key) + " grad");
    }
  }
}

// A whole LeNet: each element is compared relative to itself but floored at 10% of its tensor's scale
// (1% for single layers): its sums run over 75 to 400 terms through five layers, so an element that
// cancels to far below its tensor's scale keeps the fp32 rounding of the large terms (measured: at most
// 7e-7 of the scale for any gradient, 3e-7 for the parameters after three steps).
constexpr double lenet_floor = 10.0;

BOOST_AUTO_TEST_CASE_TEMPLATE(lenet_matches_pytorch_forward_gradients_and_three_steps, D, kiln::test::devices) {
  const json& f = fixture("lenet.json");
  using Model = knn::Model<LeNet, Image, kiln::Policy<kiln::Fp32, D>>;
  const auto initial = [&](Model& m) {
    m.parameters().copy_from(std::span<const float>(parity::arena_from_state_dict(m, f.at("state_dict"))));
  };
  const Extents<Image> ext(parity::shape(f.at("input"))[0]);
  const auto x = tensor_of<Image, D>(f.at("input"), ext);
  const auto y = labels_of<D>(f.at("target"));
  knn::CrossEntropyLoss ce;
  {
    Model m(0);
    initial(m);
    const auto logits = m.forward(x);
    check(logits.to_vector(), f.at("output"), "logits", lenet_floor);
    check({ce(logits, y).item()}, json{{"shape", {1}}, {"values", {f.at("loss")}}}, "loss");
    m.backward(ce.backward(logits, y));
    check_named(m, m.gradients().to_vector(), f.at("grad"), "grad", lenet_floor);
  }
  for (const json& o : f.at("optimizers")) {
    BOOST_TEST_CONTEXT("optimizer " << o.at("name").get<std::string>()) {
      Model m(0);
      initial(m);
      const json& opt = o.at("options");
      const auto run = [&](auto& optimizer) {
        for (int s = 0; s < o.at("steps").get<int>(); ++s) {
          optimizer.zero_grad();
          const auto logits = m.forward(x);
          m.backward(ce.backward(logits, y));
          optimizer.step();
        }
      };
      if (o.at("type") == "SGD") {
        kiln::optim::SGD sgd(m, {.lr = opt.at("lr").get<float>(), .momentum = opt.at("momentum").get<float>(),
                                 .dampening = opt.at("dampening").get<float>(),
                                 .weight_decay = opt.at("weight_decay").get<float>(),
                                 .nesterov = opt.at("nesterov").get<bool>()});
        run(sgd);
      } else {
        kiln::optim::Adam adam(m, {.lr = opt.at("lr").get<float>(),
                                   .betas = {opt.at("betas")[0].get<float>(), opt.at("betas")[1].get<float>()},
                                   .eps = opt.at("eps").get<float>(), .weight_decay = opt.at("weight_decay").get<float>()});
        run(adam);
      }
      check_named(m, m.parameters().to_vector(), o.at("parameters"), "parameters", lenet_floor);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
