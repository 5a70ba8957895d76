// Models: compile-time shape inference, PyTorch's parameter count and state_dict names, the summary
// table, seeded initialisation within PyTorch's bounds, inference without gradients (no-grad
// forwards keep no activations; backward after one throws), and the inputs forward takes.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <kiln/nn/nn.hpp>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
namespace kt = kiln::test;
namespace knn = kiln::nn;

/// The Boston-housing MLP: 13 -> 16 -> 32 -> 1.
using Mlp = knn::Sequential<knn::Linear<13, 16>, knn::ReLU, knn::Linear<16, 32>, knn::ReLU, knn::Linear<32, 1>>;
template <class D>
using MlpModel = knn::Model<Mlp, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, D>>;

// ---- shape inference: compile-time facts ----
static_assert(std::is_same_v<knn::Model<Mlp, Shape<dyn, 13>>::output_shape, Shape<dyn, 1>>);
static_assert(std::is_same_v<Mlp::output<Shape<dyn, 13>>, Shape<dyn, 1>>);
static_assert(std::is_same_v<Mlp::output<Shape<128, 13>>, Shape<128, 1>>, "a static batch stays static");
static_assert(std::is_same_v<knn::Model<knn::Sequential<knn::Flatten>, Shape<dyn, 16, 5, 5>>::output_shape,
                             Shape<dyn, 400>>);
static_assert(std::is_same_v<knn::Sequential<knn::Flatten, knn::Linear<400, 120>, knn::ReLU, knn::Linear<120, 84>,
                                            knn::Tanh>::output<Shape<dyn, 16, 5, 5>>,
                             Shape<dyn, 84>>);
static_assert(std::is_same_v<knn::Sequential<knn::Sigmoid>::output<Shape<dyn, 3, 7>>, Shape<dyn, 3, 7>>,
              "activations keep any shape");
static_assert(knn::Model<Mlp, Shape<dyn, 13>>::parameter_count == 801, "PyTorch: 13*16+16 + 16*32+32 + 32*1+1");
static_assert(knn::Model<knn::Sequential<knn::Linear<13, 16, false>>, Shape<dyn, 13>>::parameter_count == 208);
static_assert(knn::Linear<13, 16>::accepts<Shape<dyn, 13>> && !knn::Linear<13, 16>::accepts<Shape<dyn, 12>> &&
              knn::Linear<13, 16>::accepts<Shape<dyn, 1, 13>> && !knn::Linear<13, 16>::accepts<Shape<dyn, 13, 1>> &&
              !knn::Linear<13, 16>::accepts<Shape<13>>,
              "features last, as torch's [N, *, in_features]; at least rank 2");
static_assert(knn::Flatten::accepts<Shape<dyn, 2, 3>> && !knn::Flatten::accepts<Shape<dyn>> &&
              !knn::Flatten::accepts<Shape<dyn, dyn>>);
static_assert(std::is_same_v<knn::Flatten, knn::FlattenDims<1, -1>>, "torch's nn.Flatten() defaults");
static_assert(
    std::is_same_v<knn::FlattenDims<2>::output<Shape<dyn, 3, 4, 5>>, Shape<dyn, 3, 20>> &&
        std::is_same_v<knn::FlattenDims<1, 2>::output<Shape<dyn, 3, 4, 5>>, Shape<dyn, 12, 5>> &&
        std::is_same_v<knn::FlattenDims<-2, -1>::output<Shape<dyn, dyn, 4, 5>>, Shape<dyn, dyn, 20>> &&
        std::is_same_v<knn::FlattenDims<2, 2>::output<Shape<dyn, dyn, 4, 5>>, Shape<dyn, dyn, 4, 5>>,
    "torch's Flatten(start_dim, end_dim): the dimensions around those flattened kept, and may be dyn");
static_assert(
    !knn::FlattenDims<0>::accepts<Shape<dyn, 3>> && !knn::FlattenDims<-3>::accepts<Shape<dyn, 3, 4>> &&
        !knn::FlattenDims<2, 1>::accepts<Shape<dyn, 3, 4>> &&
        !knn::FlattenDims<3>::accepts<Shape<dyn, 3, 4>> &&
        !knn::FlattenDims<1, 2>::accepts<Shape<dyn, dyn, 4>>,
    "not the batch (dimension 0); start not after end; dimensions of the shape; those flattened static");
static_assert(
    std::is_same_v<knn::FlattenDims<0>::expects<Shape<dyn, 3>>, knn::flatten_keeps_the_batch> &&
    std::is_same_v<knn::FlattenDims<3>::expects<Shape<dyn, 3>>, knn::any_shape_of_rank_at_least<4>> &&
    std::is_same_v<knn::FlattenDims<2, 1>::expects<Shape<dyn, 3, 4>>,
                   knn::shape_with_static_dims_in_order<2, 1>> &&
    std::is_same_v<knn::Flatten::expects<Shape<dyn>>, knn::static_shape_of_rank_at_least<2>>);
static_assert(knn::MaxPool2d<2>::accepts<Shape<dyn, 3, 8, 8>> && !knn::MaxPool2d<2>::accepts<Shape<dyn, dyn, 8, 8>> &&
                  !knn::AvgPool2d<2>::accepts<Shape<dyn, dyn, 8, 8>>,
              "a pool needs its channels in the type (a dyn count made [N, 0, H, W] outputs)");
static_assert(knn::Upsample<2>::accepts<Shape<dyn, 3, 4, 4>> &&
                  !knn::Upsample<2>::accepts<Shape<dyn, dyn, 4, 4>> &&
                  knn::ReplicationPad2d<1>::accepts<Shape<dyn, 3, 4, 4>> &&
                  !knn::ReplicationPad2d<1>::accepts<Shape<dyn, dyn, 4, 4>> &&
                  !knn::ZeroPad2d<1>::accepts<Shape<dyn, dyn, 4, 4>>,
              "upsampling and padding need the channels in the type too (a dyn count made [N, 0, H, W])");
static_assert(knn::BatchNorm2d<3, 0.0f>::accepts<Shape<dyn, 3, 2, 2>>, "eps 0, as torch allows");

template <class T>
std::vector<double> host_doubles(const T& t) {
  return kt::to_doubles(t.to_vector());
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(model)

BOOST_AUTO_TEST_CASE_TEMPLATE(named_parameters_follow_pytorch_state_dict, D, kiln::test::devices) {
  MlpModel<D> model(0);
  struct Want {
    const char* name;
    index_t offset, count;
    std::vector<index_t> shape;
  };
  const std::vector<Want> want{{"0.weight", 0, 208, {16, 13}},  {"0.bias", 208, 16, {16}},
                               {"2.weight", 224, 512, {32, 16}}, {"2.bias", 736, 32, {32}},
                               {"4.weight", 768, 32, {1, 32}},   {"4.bias", 800, 1, {1}}};
  const auto got = model.named_parameters();
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    BOOST_TEST_CONTEXT(want[i].name) {
      BOOST_TEST(got[i].name == want[i].name);
      BOOST_TEST(got[i].offset == want[i].offset);
      BOOST_TEST(got[i].count == want[i].count);
      BOOST_TEST(got[i].shape == want[i].shape, boost::test_tools::per_element());
    }
  }
  BOOST_TEST(model.parameters().numel() == 801);
  BOOST_TEST(model.gradients().numel() == 801);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(summary_names_layers_shapes_and_total, D, kiln::test::devices) {
  MlpModel<D> model(0);
  const std::string s = model.summary(128);
  BOOST_TEST_MESSAGE(s);
  for (const char* part : {"Linear(in_features=13, out_features=16, bias=True)", "ReLU()",
                           "Linear(in_features=16, out_features=32, bias=True)",
                           "Linear(in_features=32, out_features=1, bias=True)", "[128, 16]", "[128, 32]",
                           "[128, 1]", "total parameters: 801", "3204 bytes", "input [128, 13] -> output [128, 1]"}) {
    BOOST_TEST_CONTEXT(part) { BOOST_TEST(s.find(part) != std::string::npos); }
  }
  // The flatten row of a convolutional tail: [N, 16, 5, 5] -> [N, 400].
  knn::Model<knn::Sequential<knn::Flatten, knn::Linear<400, 10>>, Shape<dyn, 16, 5, 5>, kiln::Policy<kiln::Fp32, D>> cnn;
  const std::string c = cnn.summary(4);
  BOOST_TEST(c.find("Flatten(start_dim=1, end_dim=-1)") != std::string::npos);
  BOOST_TEST(c.find("[4, 400]") != std::string::npos);
  BOOST_TEST(c.find("total parameters: 4010") != std::string::npos);
  // torch's repr of Flatten(2): nn.Flatten(2) prints "Flatten(start_dim=2, end_dim=-1)".
  knn::Model<knn::Sequential<knn::FlattenDims<2>>, Shape<dyn, 16, 5, 5>, kiln::Policy<kiln::Fp32, D>>
      rows_of_pixels;
  const std::string p = rows_of_pixels.summary(4);
  BOOST_TEST(p.find("Flatten(start_dim=2, end_dim=-1)") != std::string::npos);
  BOOST_TEST(p.find("[4, 16, 25]") != std::string::npos);
  // A name longer than the column (MaxPool2d's repr, 74 characters) widens it: every row's output shape
  // starts in the same column.
  knn::Model<knn::Sequential<knn::MaxPool2d<2>, knn::Flatten, knn::Linear<100, 10>>, Shape<dyn, 4, 10, 10>,
             kiln::Policy<kiln::Fp32, D>>
      pooled;
  std::istringstream rows(pooled.summary(3));
  std::vector<std::size_t> columns;
  for (std::string line; std::getline(rows, line);)
    if (!line.empty() && line[0] >= '0' && line[0] <= '9') columns.push_back(line.find(" [3, "));
  BOOST_REQUIRE_EQUAL(columns.size(), 3u);
  BOOST_TEST(columns[0] == 79u);  // 4 + 1 + 74 characters: right after the longest name
  BOOST_TEST(columns[1] == columns[0]);
  BOOST_TEST(columns[2] == columns[0]);
  // Only the first extent is the batch: another dyn extent is shown as "?", not as the batch size.
  knn::Model<knn::Sequential<knn::ReLU, knn::Tanh>, Shape<dyn, dyn, 5>, kiln::Policy<kiln::Fp32, D>> rows3;
  const std::string r = rows3.summary(7);
  BOOST_TEST(r.find("input [7, ?, 5] -> output [7, ?, 5]") != std::string::npos, r);
}

// A Model over one layer (no Sequential) takes backward and backward_input, whichever backward the
// layer has (a pool's takes dy alone).
BOOST_AUTO_TEST_CASE_TEMPLATE(a_model_of_one_layer_runs_backward, D, kiln::test::devices) {
  using In = Shape<dyn, 1, 2, 2>;
  knn::Model<knn::MaxPool2d<2>, In, kiln::Policy<kiln::Fp32, D>> m(0);
  const auto x = kt::make_tensor<D>(std::vector<float>{1, 4, 3, 2}, kiln::Extents<In>(1));
  const auto dy = kt::make_tensor<D>(std::vector<float>{1}, kiln::Extents<Shape<dyn, 1, 1, 1>>(1));
  m.forward(x);
  m.backward(dy);
  m.forward(x);
  BOOST_TEST(m.backward_input(dy).to_vector() == (std::vector<float>{0, 1, 0, 0}),
             boost::test_tools::per_element());
  // Its summary is a table of one row (it did not compile: only Sequential had one).
  const std::string s = m.summary(3);
  BOOST_TEST(s.find("0    MaxPool2d(") != std::string::npos, s);
  BOOST_TEST(s.find("input [3, 1, 2, 2] -> output [3, 1, 1, 1]") != std::string::npos, s);
  knn::Model<knn::Linear<4, 2>, Shape<dyn, 4>, kiln::Policy<kiln::Fp32, D>> linear(0);
  const std::string l = linear.summary(5);
  BOOST_TEST(l.find("[5, 2]") != std::string::npos, l);
  BOOST_TEST(l.find("total parameters: 10 (40 bytes as float32)") != std::string::npos, l);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(same_seed_same_parameters_different_seed_different, D, kiln::test::devices) {
  MlpModel<D> a(42), b(42), c(43);
  const auto pa = a.parameters().to_vector();
  BOOST_TEST(kt::all_equal(b.parameters().to_vector(), pa));
  const auto pc = c.parameters().to_vector();
  std::size_t same = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) same += pa[i] == pc[i];
  BOOST_TEST(same == 0u, same << " of " << pa.size() << " parameters equal across seeds 42 and 43");
  BOOST_TEST(kt::all_equal(a.gradients().to_vector(), std::vector<float>(801, 0.0f)), "gradients start at zero");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(initial_parameters_lie_within_pytorch_bounds, D, kiln::test::devices) {
  MlpModel<D> model(7);
  const auto p = host_doubles(model.parameters());
  index_t fan_in = 0;
  for (const auto& info : model.named_parameters()) {
    if (info.shape.size() == 2) fan_in = info.shape[1];  // weight [Out, In]; its bias follows it
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    double largest = 0;
    for (index_t i = info.offset; i < info.offset + info.count; ++i)
      largest = std::max(largest, std::abs(p[static_cast<std::size_t>(i)]));
    BOOST_TEST_CONTEXT(info.name << ", bound 1/sqrt(" << fan_in << ") = " << bound) {
      BOOST_TEST(largest <= bound);
      if (info.count >= 16) BOOST_TEST(largest >= 0.5 * bound, "uniform over the whole interval");
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(no_grad_forward_keeps_no_activations, D, kiln::test::devices) {
  MlpModel<D> model(3);
  const index_t n = 256;
  const auto x = kt::make_tensor<D>(kt::random_values<float>(n * 13, -1, 1, 31), Extents<Shape<dyn, 13>>(n));
  const auto dy = kt::make_tensor<D>(std::vector<float>(n, 1.0f), Extents<Shape<dyn, 1>>(n));
  {  // warm up (library workspaces), then backward releases everything forward kept
    auto y = model.forward(x);
    model.backward(dy);
  }
  const auto allocated = [] { return kiln::memory_stats<D>().allocated_bytes; };
  const std::size_t base = allocated();
  std::size_t no_grad = 0, training = 0;
  {
    knn::NoGrad guard(model);
    BOOST_TEST(!model.grad_enabled());
    auto y = model.forward(x);  // [N, 1], kept
    no_grad = allocated() - base;
  }
  BOOST_TEST(model.grad_enabled(), "NoGrad restores the previous mode");
  BOOST_TEST(allocated() == base);
  {
    auto y = model.forward(x);  // [N, 1], kept, plus the activations backward needs
    training = allocated() - base;
    model.backward(dy);
  }
  BOOST_TEST_MESSAGE("allocated after forward: no-grad " << no_grad << " B, training " << training << " B");
  BOOST_TEST(no_grad < training);
  BOOST_TEST(no_grad < n * 16 * sizeof(float), "a no-grad forward holds only its output");
  BOOST_TEST(training - no_grad >= n * (16 + 32) * sizeof(float), "training keeps both hidden activations");
  BOOST_TEST(allocated() == base, "backward releases what forward kept");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_after_no_grad_forward_throws, D, kiln::test::devices) {
  MlpModel<D> model(3);
  const index_t n = 5;
  const auto x = kt::make_tensor<D>(kt::random_values<float>(n * 13, -1, 1, 32), Extents<Shape<dyn, 13>>(n));
  const auto dy = kt::make_tensor<D>(std::vector<float>(n, 1.0f), Extents<Shape<dyn, 1>>(n));
  {
    knn::NoGrad guard(model);
    auto y = model.forward(x);
    BOOST_CHECK_EXCEPTION(model.backward(dy), kiln::Error, kt::message_contains({"backward", "forward"}));
  }
  const auto before = model.gradients().to_vector();
  BOOST_TEST(kt::all_equal(before, std::vector<float>(801, 0.0f)), "the failed backward changed no gradient");
  auto y = model.forward(x);  // gradients on again: backward works
  BOOST_CHECK_NO_THROW(model.backward(dy));
  BOOST_CHECK_THROW(model.backward(dy), kiln::Error);  // the saved activations were used up
}

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_takes_the_last_forwards_batch_once, D, kiln::test::devices) {
  // A net ending in a convolution and a pool: their backward passes size dx by the saved input and
  // loop over dy's rows, so a dy of another batch read and wrote past the activations (torch: "Mismatch
  // in shape"). The model checks the batch before any layer runs.
  using Net = knn::Sequential<knn::Conv2d<1, 2, 3>, knn::ReLU, knn::MaxPool2d<2>>;
  knn::Model<Net, Shape<dyn, 1, 6, 6>, kiln::Policy<kiln::Fp32, D>> model(4);
  using Out = Shape<dyn, 2, 2, 2>;
  const auto x = kt::make_tensor<D>(kt::random_values<float>(2 * 36, -1, 1, 35), Extents<Shape<dyn, 1, 6, 6>>(2));
  const auto dy2 = kt::make_tensor<D>(std::vector<float>(2 * 8, 1.0f), Extents<Out>(2));
  const auto dy4 = kt::make_tensor<D>(std::vector<float>(4 * 8, 1.0f), Extents<Out>(4));
  const auto dy1 = kt::make_tensor<D>(std::vector<float>(1 * 8, 1.0f), Extents<Out>(1));
  BOOST_CHECK_EXCEPTION(model.backward(dy2), kiln::Error, kt::message_contains({"no activations", "forward"}));
  auto y = model.forward(x);
  BOOST_CHECK_EXCEPTION(model.backward(dy4), kiln::ShapeError, kt::message_contains({"[4, 2, 2, 2]", "forward of 2 rows"}));
  BOOST_CHECK_EXCEPTION(model.backward_input(dy1), kiln::ShapeError, kt::message_contains({"forward of 2 rows"}));
  BOOST_TEST(kt::all_equal(model.gradients().to_vector(), std::vector<float>(model.parameter_count, 0.0f)),
             "a refused backward changes no gradient");
  BOOST_CHECK_NO_THROW(model.backward(dy2));
  const auto once = model.gradients().to_vector();
  BOOST_CHECK_EXCEPTION(model.backward(dy2), kiln::Error, kt::message_contains({"a backward since"}));
  BOOST_TEST(model.gradients().to_vector() == once, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(forward_takes_a_static_batch_and_float_into_a_16_bit_model, D, kiln::test::devices) {
  // A static batch into the model's dyn one is a view of it; a float tensor into a bfloat16 or half
  // model is cast first, as autocast casts it: the outputs of the model's own input type, and backward
  // goes through them. A model with a static batch refuses another at run time, naming forward.
  const index_t n = 4;
  const auto values = kt::random_values<float>(n * 13, -1, 1, 37);
  const auto dynamic = kt::make_tensor<D>(values, Extents<Shape<dyn, 13>>(n));
  const auto fixed = kt::make_tensor<D>(values, Extents<Shape<4, 13>>());
  const auto dy = kt::make_tensor<D>(std::vector<float>(n, 1.0f), Extents<Shape<dyn, 1>>(n));
  MlpModel<D> model(5);
  static_assert(std::is_same_v<decltype(model.forward(fixed)), kiln::Tensor<float, Shape<dyn, 1>, D>>);
  const auto want = model.forward(dynamic).to_vector();
  BOOST_TEST(model(fixed).to_vector() == want, boost::test_tools::per_element());
  BOOST_TEST(model.forward(fixed).to_vector() == want, boost::test_tools::per_element());
  model.backward(dy);
  const auto through_view = model.gradients().to_vector();
  model.zero_grad();
  (void)model.forward(dynamic);
  model.backward(dy);
  BOOST_TEST(model.gradients().to_vector() == through_view, boost::test_tools::per_element());

  const auto low = [&]<class Prec, class L>() {
    BOOST_TEST_CONTEXT(Prec::name) {
      knn::Model<Mlp, Shape<dyn, 13>, kiln::Policy<Prec, D>> m(5);
      const auto own = host_doubles(m.forward(kiln::eval(kiln::cast<L>(dynamic))));
      BOOST_TEST(host_doubles(m.forward(dynamic)) == own, boost::test_tools::per_element());
      BOOST_TEST(host_doubles(m(fixed)) == own, boost::test_tools::per_element());
      const auto low_dy = kiln::eval(kiln::cast<L>(dy));
      BOOST_CHECK_NO_THROW(m.backward(low_dy));
    }
  };
  low.template operator()<kiln::MixedBf16, kiln::bfloat16>();
  low.template operator()<kiln::MixedFp16, kiln::half>();

  knn::Model<Mlp, Shape<4, 13>, kiln::Policy<kiln::Fp32, D>> four(5);
  const auto five = kt::make_tensor<D>(kt::random_values<float>(5 * 13, -1, 1, 38), Extents<Shape<dyn, 13>>(5));
  BOOST_CHECK_EXCEPTION((void)four.forward(five), kiln::ShapeError,
                        kt::message_contains({"kiln::nn::Model::forward", "[5, 13]", "Shape<4, 13>",
                                              "a batch of 5 rows into a model of a static batch; give the "
                                              "model a dyn batch (Shape<kiln::dyn, ...>), or the loader drop_last"}));
  BOOST_TEST(four.forward(dynamic).to_vector() == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_checks_a_dynamic_feature_count_at_run_time, D, kiln::test::devices) {
  // Shape<dyn, dyn> is accepted by Linear<5, 4> at compile time; a width other than 5 is a ShapeError on
  // every path (on the GPU before cuBLASLt, which would read 5 columns of each row).
  using Wide = Shape<dyn, dyn>;
  knn::Model<knn::Sequential<knn::Linear<5, 4>, knn::ReLU>, Wide, kiln::Policy<kiln::Fp32, D>> model(0);
  const auto bad = kt::make_tensor<D>(kt::random_values<float>(3 * 6, -1, 1, 33), Extents<Wide>(3, 6));
  BOOST_CHECK_EXCEPTION(model.forward(bad), kiln::ShapeError, kt::message_contains({"Linear<5, 4>", "expected 5"}));
  const auto good = kt::make_tensor<D>(kt::random_values<float>(3 * 5, -1, 1, 34), Extents<Wide>(3, 5));
  BOOST_TEST(model.forward(good).size(1) == 4);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_on_a_dynamic_width_trains_and_refuses_a_dy_of_other_rows, D, kiln::test::devices) {
  // Linear<5, 4> on Shape<dyn, dyn> trains as on Shape<dyn, 5> (the same gradients; dx has the input's
  // shape). A dy with other rows than the forward's is a ShapeError before anything is written (the
  // bias gradient's sum came first before): Model checks it, and so does the layer driven directly.
  using P = kiln::Policy<kiln::Fp32, D>;
  using Wide = Shape<dyn, dyn>;
  using Net = knn::Sequential<knn::Linear<5, 4>, knn::ReLU>;
  knn::Model<Net, Wide, P> wide(0);
  knn::Model<Net, Shape<dyn, 5>, P> fixed(0);
  const auto values = kt::random_values<float>(3 * 5, -1, 1, 35);
  const auto dy = kt::make_tensor<D>(kt::random_values<float>(3 * 4, -1, 1, 36), Extents<Shape<dyn, 4>>(3));
  (void)wide.forward(kt::make_tensor<D>(values, Extents<Wide>(3, 5)));
  wide.backward(dy);
  (void)fixed.forward(kt::make_tensor<D>(values, Extents<Shape<dyn, 5>>(3)));
  fixed.backward(dy);
  BOOST_TEST(wide.gradients().to_vector() == fixed.gradients().to_vector(), boost::test_tools::per_element());

  typename knn::Linear<5, 4>::template module<Wide, P> m;
  kiln::Tensor<float, Shape<dyn>, D> params(24), grads(24);
  params.copy_from(std::span<const float>(fixed.parameters().to_vector()));
  grads.fill(0.0f);
  m.bind(params.data(), grads.data(), params.data(), params.device_index());
  (void)m.forward(kt::make_tensor<D>(values, Extents<Wide>(3, 5)), {});
  const auto dx = m.backward(dy);
  BOOST_TEST(dx.size(0) == 3);
  BOOST_TEST(dx.size(1) == 5);
  (void)m.forward(kt::make_tensor<D>(values, Extents<Wide>(3, 5)), {});
  const auto before = grads.to_vector();
  const auto four = kt::make_tensor<D>(std::vector<float>(16, 1.0f), Extents<Shape<dyn, 4>>(4));
  BOOST_CHECK_EXCEPTION((void)m.backward(four), kiln::ShapeError,
                        kt::message_contains({"Linear::backward: dy has 4 rows; the forward pass had 3"}));
  BOOST_TEST(grads.to_vector() == before, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(training_forward_saves_its_input_without_a_copy_for_any_batch, D, kiln::test::devices) {
  // Linear keeps its input for backward by sharing it: a training forward costs the passes of a
  // no-grad one (GEMM + bias), and the batch may change from call to call.
  knn::Model<knn::Sequential<knn::Linear<13, 4>>, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, D>> model(1);
  for (index_t n : {3, 5, 2}) {
    BOOST_TEST_CONTEXT("batch " << n) {
      const auto x = kt::make_tensor<D>(kt::random_values<float>(static_cast<std::size_t>(n * 13), -1, 1, 33),
                                        Extents<Shape<dyn, 13>>(n));
      std::uint64_t no_grad = 0;
      {
        knn::NoGrad guard(model);
        const auto before = kiln::passes();
        auto y = model.forward(x);
        no_grad = kiln::passes() - before;
      }
      const auto before = kiln::passes();
      auto y = model.forward(x);
      BOOST_TEST(kiln::passes() - before == no_grad);
      BOOST_TEST(y.size(0) == n);
      const auto dy = kt::make_tensor<D>(std::vector<float>(static_cast<std::size_t>(n * 4), 1.0f),
                                         Extents<Shape<dyn, 4>>(n));
      BOOST_TEST(model.backward_input(dy).size(0) == n);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
