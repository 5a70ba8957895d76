// Add and Concat: blocks whose branches all read the block's input, their outputs added (a ResNet block
// with a projection shortcut) or joined along dimension 1 (Inception, DenseNet). Backward against float64
// finite differences, outputs against their definitions, parameters and buffers named as a torch module
// holding its branches in an nn.ModuleList, fusion inside a branch, a backward without the input
// gradient, and the shapes the types infer. torch parity: test_parity_layers.cpp (layers_branches.json);
// mixed precision: precision/test_mixed_layers.cpp; branches that do not fit do not compile
// (tests/compile_fail/add_branch_shape_mismatch.cpp, concat_branch_shape_mismatch.cpp,
// branch_input_mismatch.cpp).
#include <boost/test/unit_test.hpp>
#include <kiln/nn/nn.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "support/fused_activation.hpp"
#include "support/model_gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;

// A ResNet block halving the resolution: its shortcut a strided 1x1 convolution (+ BatchNorm).
using Main = knn::Sequential<knn::Conv2d<2, 4, 3, 2, 1, 1, 1, false>, knn::BatchNorm2d<4>, knn::Tanh,
                             knn::Conv2d<4, 4, 3, 1, 1, 1, 1, false>, knn::BatchNorm2d<4>>;
using Shortcut = knn::Sequential<knn::Conv2d<2, 4, 1, 2, 0, 1, 1, false>, knn::BatchNorm2d<4>>;
using DownBlock = knn::Add<Main, Shortcut>;
using Inception = knn::Concat<knn::Conv2d<3, 2, 1>,
                              knn::Sequential<knn::Conv2d<3, 2, 1>, knn::Tanh, knn::Conv2d<2, 3, 3, 1, 1>>,
                              knn::Sequential<knn::MaxPool2d<3, 1, 1>, knn::Conv2d<3, 2, 1>>>;

// The shapes the types infer.
static_assert(std::is_same_v<DownBlock::output<Shape<dyn, 2, 6, 6>>, Shape<dyn, 4, 3, 3>>);
static_assert(std::is_same_v<Inception::output<Shape<dyn, 3, 5, 5>>, Shape<dyn, 7, 5, 5>>);
static_assert(
    std::is_same_v<knn::Concat<knn::Identity, knn::Linear<6, 4>>::output<Shape<dyn, 6>>, Shape<dyn, 10>>);
static_assert(std::is_same_v<knn::Concat<knn::Identity>::output<Shape<2, 3>>, Shape<2, 3>>);
// SyncBatchNorm conversion reaches into the branches.
static_assert(
    std::is_same_v<knn::convert_sync_batchnorm_t<knn::Add<knn::BatchNorm2d<4>, Shortcut>>,
                   knn::Add<knn::SyncBatchNorm<4>, knn::Sequential<knn::Conv2d<2, 4, 1, 2, 0, 1, 1, false>,
                                                                   knn::SyncBatchNorm<4>>>>);
static_assert(knn::has_sync_batchnorm_v<knn::Sequential<knn::Concat<knn::Identity, knn::SyncBatchNorm<2>>>>);
static_assert(!knn::has_sync_batchnorm_v<knn::Sequential<knn::Concat<knn::Identity, knn::BatchNorm2d<2>>>>);

template <class Net, class In, class D>
using Fp32Model = knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>>;
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(branches)

BOOST_AUTO_TEST_CASE_TEMPLATE(add_backward_matches_numeric, D, kiln::test::devices) {
  using In = Shape<dyn, 2, 6, 6>;
  kt::check_model_gradients<knn::Sequential<DownBlock, knn::Tanh, knn::Flatten, knn::Linear<36, 3>>, In, D>(
      Extents<In>(3), -2, 2, 0, 71, /*drawn_parameters=*/true);
  // Three branches over features, one of them the input itself.
  using Features =
      knn::Add<knn::Identity, knn::Sequential<knn::Linear<5, 5>, knn::Sigmoid>, knn::Linear<5, 5>>;
  kt::check_model_gradients<knn::Sequential<knn::Linear<4, 5>, Features, knn::Tanh, knn::Linear<5, 2>>,
                            Shape<dyn, 4>, D>(Extents<Shape<dyn, 4>>(3), -2, 2, 0, 72);
  kt::check_model_gradients<knn::Sequential<Features>, Shape<dyn, 5>, D>(Extents<Shape<dyn, 5>>(2), -2, 2, 0,
                                                                         73);
  // The activation after the block runs in its sum: one whose derivative reads the sum (GELU).
  kt::check_model_gradients<knn::Sequential<knn::Linear<4, 5>, Features, knn::GELU, knn::Linear<5, 2>>,
                            Shape<dyn, 4>, D>(Extents<Shape<dyn, 4>>(3), -2, 2, 0, 74);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(add_runs_the_activation_after_it_in_its_sum, D, kiln::test::devices) {
  // ResNet's block and the ReLU after it: the ReLU in the pass that adds the branches, the same bits as
  // the two layers with fusion off (16-bit storage: the sum rounded, then the activation, as torch's add
  // and relu under autocast), the activation's forward in no pass of its own. (Fusion off also splits
  // a three-term sum and a branch's own pairs: the passes are counted against the block alone.)
  static_assert(knn::Sequential<DownBlock, knn::ReLU>::module<Shape<dyn, 2, 6, 6>, kiln::Policy<>>::fused_with_next<0>);
  using Img = Shape<dyn, 4, 6, 5>;
  using Basic = knn::Add<knn::Sequential<knn::Conv2d<4, 4, 3, 1, 1, 1, 1, false>, knn::BatchNorm2d<4>>, knn::Identity>;
  kt::check_fused_with_activation<knn::Sequential<Basic, knn::ReLU>, Img, kiln::Fp32, D>(Extents<Img>(3), 75, false,
                                                                                         false);
  kt::check_fused_with_activation<knn::Sequential<Basic, knn::ReLU>, Img, kiln::MixedBf16, D>(Extents<Img>(3), 76,
                                                                                              false, false);
  kt::check_activation_runs_in_the_sum<Basic, knn::ReLU, Img, D>(Extents<Img>(3));
  // Three branches and activations whose derivative reads the sum, in half and in fp32.
  using Three = knn::Add<knn::Identity, knn::Linear<5, 5>, knn::Linear<5, 5, false>>;
  using Rows = Shape<dyn, 5>;
  kt::check_fused_with_activation<knn::Sequential<Three, knn::GELU>, Rows, kiln::MixedFp16, D>(Extents<Rows>(7), 77,
                                                                                               false, false);
  kt::check_fused_with_activation<knn::Sequential<Three, knn::SiLU>, Rows, kiln::Fp32, D>(Extents<Rows>(7), 78, false,
                                                                                          false);
  kt::check_activation_runs_in_the_sum<Three, knn::GELU, Rows, D>(Extents<Rows>(7));
  knn::Model<knn::Sequential<DownBlock, knn::ReLU>, Shape<dyn, 2, 6, 6>> model;
  const std::string s = model.summary(2);
  BOOST_TEST(s.find("ReLU() [fused into 0]") != std::string::npos, s);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_first_block_skips_its_input_gradient_alone, D, kiln::test::devices) {
  // First in the model, a block's backward runs without the input gradient (model.backward, as torch for
  // an input that does not require grad): it returns none, and the parameter gradients are those of
  // backward_input.
  using Net = knn::Sequential<knn::Add<knn::Sequential<knn::Linear<4, 6>, knn::Tanh>, knn::Linear<4, 6>>,
                              knn::Concat<knn::Identity, knn::Linear<6, 3>>, knn::Linear<9, 2>>;
  Fp32Model<Net, Shape<dyn, 4>, D> model(7);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(12, -1, 1, 84), Extents<Shape<dyn, 4>>(3));
  const auto dy = kt::make_tensor<D>(kt::random_values<float>(6, -1, 1, 85), Extents<Shape<dyn, 2>>(3));
  model.zero_grad();
  (void)model.forward(x);
  model.backward(dy);
  const auto without = model.gradients().to_vector();
  model.zero_grad();
  (void)model.forward(x);
  BOOST_TEST(model.backward_input(dy).size(0) == 3);
  BOOST_TEST(without == model.gradients().to_vector(), boost::test_tools::per_element());
  // The blocks themselves: without the input gradient, an empty one.
  (void)model.forward(x);
  auto& net = model.net();
  const auto d1 = net.template layer<2>().backward(dy, true);
  const auto d0 = net.template layer<1>().backward(d1, false);
  BOOST_TEST(d0.empty());
  (void)model.forward(x);
  const auto e0 = net.template layer<1>().backward(d1, true);
  BOOST_TEST(!e0.empty());
  BOOST_TEST(net.template layer<0>().backward(e0, false).empty());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(concat_backward_matches_numeric, D, kiln::test::devices) {
  using In = Shape<dyn, 3, 5, 4>;
  kt::check_model_gradients<knn::Sequential<Inception, knn::Tanh, knn::Flatten, knn::Linear<140, 2>>, In, D>(
      Extents<In>(2), -2, 2, 0.05, 74);
  using Dense = knn::Concat<knn::Identity, knn::Sequential<knn::Linear<6, 4>, knn::Tanh>, knn::Linear<6, 3>>;
  kt::check_model_gradients<knn::Sequential<Dense, knn::Linear<13, 2>>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(3), -2, 2, 0, 75);
  kt::check_model_gradients<knn::Sequential<Dense>, Shape<dyn, 6>, D>(Extents<Shape<dyn, 6>>(2), -2, 2, 0,
                                                                      76);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(add_is_the_sum_of_its_branches, D, kiln::test::devices) {
  // x + x + (W x + b) against Linear alone from the same seed (Identity draws nothing, so the Linear's
  // parameters are the same).
  using In = Shape<dyn, 3>;
  Fp32Model<knn::Sequential<knn::Add<knn::Identity, knn::Identity, knn::Linear<3, 3>>>, In, D> model(5);
  Fp32Model<knn::Sequential<knn::Linear<3, 3>>, In, D> linear(5);
  const Extents<In> ext(4);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(12, -1, 1, 77), ext);
  const auto y = model.forward(x).to_vector();
  const auto f = linear.forward(x).to_vector();
  const auto xv = x.to_vector();
  std::vector<double> want(12);
  for (std::size_t i = 0; i < 12; ++i) want[i] = static_cast<double>(xv[i]) + xv[i] + f[i];
  BOOST_TEST(kt::all_close(y, want, 1e-6, 1e-7));
  // dx = 2 dy + Wᵀ dy.
  const auto dy = kt::make_tensor<D>(kt::random_values<float>(12, -1, 1, 78), ext);
  const auto dx = model.backward_input(dy).to_vector();
  const auto dlin = linear.backward_input(dy).to_vector();
  const auto dyv = dy.to_vector();
  for (std::size_t i = 0; i < 12; ++i) want[i] = 2.0 * dyv[i] + dlin[i];
  BOOST_TEST(kt::all_close(dx, want, 1e-6, 1e-7));
  BOOST_TEST(model.gradients().to_vector() == linear.gradients().to_vector(),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(concat_joins_its_branches_along_the_channels, D, kiln::test::devices) {
  // [x, conv(x)] on [N, 2, 3, 3]: sample n's channels 0-1 are x's, 2-4 the convolution's.
  using In = Shape<dyn, 2, 3, 3>;
  Fp32Model<knn::Sequential<knn::Concat<knn::Identity, knn::Conv2d<2, 3, 3, 1, 1>>>, In, D> model(6);
  Fp32Model<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>>, In, D> conv(6);
  const Extents<In> ext(2);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(36, -1, 1, 79), ext);
  const auto y = model.forward(x);
  BOOST_TEST(y.size(1) == 5);
  const auto yv = y.to_vector(), xv = x.to_vector(), cv = conv.forward(x).to_vector();
  std::vector<float> want;
  for (std::size_t n = 0; n < 2; ++n) {
    want.insert(want.end(), xv.begin() + n * 18, xv.begin() + (n + 1) * 18);
    want.insert(want.end(), cv.begin() + n * 27, cv.begin() + (n + 1) * 27);
  }
  BOOST_TEST(yv == want, boost::test_tools::per_element());
  // dy's first two channels go to x as they are, the other three through the convolution.
  const auto dy = kt::make_tensor<D>(kt::random_values<float>(90, -1, 1, 80), y.extents());
  const auto dyv = dy.to_vector();
  std::vector<float> dconv_v;
  for (std::size_t n = 0; n < 2; ++n)
    dconv_v.insert(dconv_v.end(), dyv.begin() + n * 45 + 18, dyv.begin() + (n + 1) * 45);
  const auto dconv = kt::make_tensor<D>(dconv_v, conv.forward(x).extents());
  const auto dx = model.backward_input(dy).to_vector();
  const auto dxc = conv.backward_input(dconv).to_vector();
  std::vector<double> want_dx(36);
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t i = 0; i < 18; ++i)
      want_dx[n * 18 + i] = static_cast<double>(dyv[n * 45 + i]) + dxc[n * 18 + i];
  BOOST_TEST(kt::all_close(dx, want_dx, 1e-6, 1e-7));
  BOOST_TEST(model.gradients().to_vector() == conv.gradients().to_vector(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(parameters_and_buffers_are_named_like_a_module_list) {
  using Net = knn::Sequential<
      knn::Conv2d<1, 2, 3>,
      knn::Add<knn::Sequential<knn::Conv2d<2, 2, 3, 1, 1>, knn::BatchNorm2d<2>>, knn::Conv2d<2, 2, 1>>,
      knn::Concat<knn::BatchNorm2d<2>, knn::Sequential<knn::Identity, knn::BatchNorm2d<2>>>>;
  knn::Model<Net, Shape<dyn, 1, 6, 6>> model(0);
  std::vector<std::string> names;
  for (const auto& p : model.named_parameters()) names.push_back(p.name);
  const std::vector<std::string> want{"0.weight",     "0.bias",     "1.0.0.weight", "1.0.0.bias",
                                      "1.0.1.weight", "1.0.1.bias", "1.1.weight",   "1.1.bias",
                                      "2.0.weight",   "2.0.bias",   "2.1.1.weight", "2.1.1.bias"};
  BOOST_TEST(names == want, boost::test_tools::per_element());
  BOOST_TEST(model.parameter_count == (2 * 9 + 2) + (2 * 2 * 9 + 2) + (2 + 2) + (2 * 2 + 2) + 2 * (2 + 2));
  std::vector<std::string> buffers;
  std::vector<kiln::index_t> offsets;
  for (const auto& b : model.named_buffers()) {
    buffers.push_back(b.name);
    offsets.push_back(b.offset);
  }
  const std::vector<std::string> want_buffers{
      "1.0.1.running_mean", "1.0.1.running_var", "1.0.1.num_batches_tracked",
      "2.0.running_mean",   "2.0.running_var",   "2.0.num_batches_tracked",
      "2.1.1.running_mean", "2.1.1.running_var", "2.1.1.num_batches_tracked"};
  BOOST_TEST(buffers == want_buffers, boost::test_tools::per_element());
  // One after another in the arena: 2 + 2 + 1 values per BatchNorm.
  const std::vector<kiln::index_t> want_offsets{0, 2, 4, 5, 7, 9, 10, 12, 14};
  BOOST_TEST(offsets == want_offsets, boost::test_tools::per_element());
  BOOST_TEST(model.buffers().numel() == 15);
  // A training forward moves each BatchNorm's own statistics: Concat's two read the same input (the
  // Add's output), so theirs agree, and differ from the Add's BatchNorm, which reads a convolution's.
  const auto x =
      kt::make_tensor<kiln::Cpu>(kt::random_values<float>(72, -2, 2, 86), Extents<Shape<dyn, 1, 6, 6>>(2));
  (void)model.forward(x);
  const auto stats = model.buffers().to_vector();
  for (int k = 0; k < 4; ++k) BOOST_TEST(stats[5 + k] == stats[10 + k]);
  BOOST_TEST(stats[0] != stats[5]);
  for (int k : {4, 9, 14}) BOOST_TEST(stats[k] == 1.0f);    // num_batches_tracked of each
  for (int k : {0, 1, 5, 6}) BOOST_TEST(stats[k] != 0.0f);  // every running mean moved
  const auto summary = model.summary(1);
  BOOST_TEST(
      summary.find("Add(Sequential, Conv2d(2, 2, kernel_size=(1, 1), stride=(1, 1)))") != std::string::npos,
      summary);
  BOOST_TEST(summary.find("[1, 2, 4, 4]") != std::string::npos, summary);
  BOOST_TEST(summary.find("[1, 4, 4, 4]") != std::string::npos, summary);
  using Joined = knn::Sequential<knn::Concat<knn::Identity, knn::Linear<3, 2>>>;
  knn::Model<Joined, Shape<dyn, 3>> joined(0);
  BOOST_TEST(joined.named_parameters().at(0).name == "0.1.weight");
  BOOST_TEST(
      joined.summary(4).find("Concat(Identity(), Linear(in_features=3, out_features=2, bias=True), dim=1)") !=
      std::string::npos);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_branch_fuses_its_activations, D, kiln::test::devices) {
  // Linear + ReLU inside a branch run as one epilogue; fused and unfused agree.
  using Net =
      knn::Sequential<knn::Add<knn::Sequential<knn::Linear<6, 6>, knn::ReLU, knn::Linear<6, 6>, knn::GELU>,
                               knn::Sequential<knn::Linear<6, 6>, knn::Tanh>>,
                      knn::Concat<knn::Sequential<knn::Linear<6, 3>, knn::SiLU>, knn::Identity>>;
  static_assert(Net::module<Shape<dyn, 6>, kiln::Policy<>>::output_shape::extents[1] == 9);
  using Branch0 = knn::Sequential<knn::Linear<6, 6>, knn::ReLU, knn::Linear<6, 6>,
                                  knn::GELU>::module<Shape<dyn, 6>, kiln::Policy<>>;
  static_assert(Branch0::fused_with_next<0> && Branch0::fused_with_next<2>);
  kt::check_fused_matches_unfused<Net, Shape<dyn, 6>, D>(Extents<Shape<dyn, 6>>(5), -2, 2, 81);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_empty_batch_and_a_dy_of_other_rows, D, kiln::test::devices) {
  using Net = knn::Sequential<knn::Concat<knn::Identity, knn::Linear<3, 2>>,
                              knn::Add<knn::Identity, knn::Linear<5, 5>>>;
  Fp32Model<Net, Shape<dyn, 3>, D> model(0);
  const Extents<Shape<dyn, 3>> none(0);
  const auto x = kt::make_tensor<D>(std::vector<float>{}, none);
  const auto y = model.forward(x);
  BOOST_TEST(y.size(0) == 0);
  BOOST_TEST(y.size(1) == 5);
  model.zero_grad();
  const auto dx = model.backward_input(y);
  BOOST_TEST(dx.size(0) == 0);
  for (float g : model.gradients().to_vector()) BOOST_TEST(g == 0.0f);
  // A dy of more rows than Concat's forward pass had is refused by the layer itself, before anything is
  // read past them.
  Fp32Model<knn::Sequential<knn::Concat<knn::Identity, knn::Identity>>, Shape<dyn, 3>, D> pair(0);
  (void)pair.forward(kt::make_tensor<D>(kt::random_values<float>(6, -1, 1, 82), Extents<Shape<dyn, 3>>(2)));
  const auto big = kt::make_tensor<D>(kt::random_values<float>(18, -1, 1, 83), Extents<Shape<dyn, 6>>(3));
  BOOST_CHECK_THROW((void)pair.net().template layer<0>().backward(big), kiln::ShapeError);
  // The same for an Add running the ReLU after it, and an empty batch through it.
  Fp32Model<knn::Sequential<knn::Add<knn::Identity, knn::Linear<3, 3>>, knn::ReLU>, Shape<dyn, 3>, D> block(0);
  BOOST_TEST(block.forward(x).size(0) == 0);
  BOOST_TEST(block.backward_input(kt::make_tensor<D>(std::vector<float>{}, none)).size(0) == 0);
  (void)block.forward(kt::make_tensor<D>(kt::random_values<float>(6, -1, 1, 84), Extents<Shape<dyn, 3>>(2)));
  const auto three = kt::make_tensor<D>(kt::random_values<float>(9, -1, 1, 85), Extents<Shape<dyn, 3>>(3));
  BOOST_CHECK_THROW((void)block.backward_input(three), kiln::ShapeError);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
