// Layers of one's own (docs/models.md, "Layers of your own"): the page's Tanhshrink (parameter-free,
// one expression pass each way) and Scale<F> (weight and bias per feature), written only against the
// public layer protocol (nn/layer.hpp). Their backward against float64 finite differences, alone and
// between Linears, w.r.t. the input and every parameter; forward values and gradients by hand; the
// parameter names in named_parameters() and a checkpoint; the summary; gradients accumulating over two
// backwards; NoGrad and eval(); a training step as the page shows it; a bfloat16 model.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/io/safetensors.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "support/model_gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/temp_dir.hpp"

// ---- the page's layers, at namespace scope as a reader writes them ----
#include "models.tanhshrink.inc"
#include "models.scale.inc"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;

template <class D>
using P64 = kiln::Policy<kt::Fp64, D>;

// ---- the protocol, at compile time ----
static_assert(Tanhshrink::accepts<Shape<dyn, 3, 5>> && Tanhshrink::accepts<Shape<7>>);
static_assert(Scale<4>::accepts<Shape<dyn, 4>> && Scale<4>::accepts<Shape<2, 4>>);
static_assert(!Scale<4>::accepts<Shape<dyn, 5>> && !Scale<4>::accepts<Shape<dyn>> &&
              !Scale<4>::accepts<Shape<dyn, 2, 4>> && !Scale<4>::accepts<Shape<dyn, dyn>>);
static_assert(std::is_same_v<Scale<4>::expects<Shape<dyn, 5>>, Shape<dyn, 4>>);
static_assert(std::is_same_v<knn::Sequential<knn::Linear<6, 4>, Scale<4>, Tanhshrink>::output<Shape<dyn, 6>>,
                             Shape<dyn, 4>>);
static_assert(knn::Model<knn::Sequential<knn::Linear<6, 4>, Scale<4>, Tanhshrink, knn::Linear<4, 3>>,
                         Shape<dyn, 6>>::parameter_count == 6 * 4 + 4 + 2 * 4 + 4 * 3 + 3);
static_assert(knn::is_layer<Tanhshrink, Shape<dyn, 3>>() && knn::is_layer<Scale<3>, Shape<dyn, 3>>());
static_assert(std::is_void_v<knn::epilogue_of<Tanhshrink>::type>, "not fused into a Linear before it");

template <class D>
Tensor<double, Shape<dyn, 3>, D> rows3(const std::vector<double>& v) {
  return kt::make_tensor<D>(v, Extents<Shape<dyn, 3>>(static_cast<index_t>(v.size() / 3)));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(custom_layer)

BOOST_AUTO_TEST_CASE_TEMPLATE(tanhshrink_backward_matches_numeric, D, kiln::test::devices) {
  // Alone on a rank-3 input (any shape), and between Linears with drawn weights.
  kt::check_model_gradients<knn::Sequential<Tanhshrink>, Shape<dyn, 3, 5>, D>(Extents<Shape<dyn, 3, 5>>(3), -3, 3, 0,
                                                                              31);
  kt::check_model_gradients<knn::Sequential<knn::Linear<7, 5>, Tanhshrink, knn::Linear<5, 2>>, Shape<dyn, 7>, D>(
      Extents<Shape<dyn, 7>>(4), -2, 2, 0, 32, true);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(scale_backward_matches_numeric_for_the_input_and_its_parameters, D,
                              kiln::test::devices) {
  // Alone (the model's first layer) and inside a network; drawn parameters, so a backward that forgot
  // weight != 1 or bias != 0 shows. (Model::backward, which calls a first layer's backward(dy, false),
  // is checked by hand below.)
  kt::check_model_gradients<knn::Sequential<Scale<5>>, Shape<dyn, 5>, D>(Extents<Shape<dyn, 5>>(3), -2, 2, 0, 33,
                                                                         true);
  using Net = knn::Sequential<knn::Linear<6, 4>, Scale<4>, Tanhshrink, knn::Linear<4, 3>>;
  kt::check_model_gradients<Net, Shape<dyn, 6>, D>(Extents<Shape<dyn, 6>>(5), -2, 2, 0, 34, true);
  kt::check_model_gradients<Net, Shape<dyn, 6>, D>(Extents<Shape<dyn, 6>>(5), -2, 2, 0, 35, false);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(they_go_where_kiln_layers_go_residual_and_add_branches, D, kiln::test::devices) {
  // Inside a Residual and a branch of an Add: the same protocol, names nested as torch's.
  using Res = knn::Sequential<knn::Linear<6, 4>, knn::Residual<Scale<4>, Tanhshrink>, knn::Linear<4, 2>>;
  kt::check_model_gradients<Res, Shape<dyn, 6>, D>(Extents<Shape<dyn, 6>>(3), -2, 2, 0, 36, true);
  using Branches = knn::Sequential<knn::Add<knn::Identity, knn::Sequential<Scale<5>, Tanhshrink>>, Scale<5>>;
  kt::check_model_gradients<Branches, Shape<dyn, 5>, D>(Extents<Shape<dyn, 5>>(3), -2, 2, 0, 37, true);
  const auto names = knn::Model<Res, Shape<dyn, 6>, P64<D>>(0).named_parameters();
  BOOST_REQUIRE_EQUAL(names.size(), 6u);
  BOOST_TEST(names[2].name == "1.0.weight");
  BOOST_TEST(names[3].name == "1.0.bias");
  const auto added = knn::Model<Branches, Shape<dyn, 5>, P64<D>>(0).named_parameters();
  BOOST_REQUIRE_EQUAL(added.size(), 4u);
  BOOST_TEST(added[0].name == "0.1.0.weight");
  BOOST_TEST(added[3].name == "1.bias");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(tanhshrink_values_and_gradients_by_hand, D, kiln::test::devices) {
  knn::Model<knn::Sequential<Tanhshrink>, Shape<dyn, 2>, P64<D>> m(0);
  const auto x = kt::make_tensor<D>(std::vector<double>{0, 1, -2, 0.5}, Extents<Shape<dyn, 2>>(2));
  const auto y = m.forward(x).to_vector();
  // python: x - math.tanh(x), math.tanh(x) ** 2
  const std::vector<double> want_y{0.0, 0.23840584404423515, -1.035972419924183, 0.03788284273999026};
  const std::vector<double> want_dx{0.0, 0.5800256583859739, 0.9293491751468356, 0.21355226703407257};
  const auto t = boost::test_tools::tolerance(1e-14);
  BOOST_TEST(y == want_y, t << boost::test_tools::per_element());
  const auto dx = m.backward_input(kt::make_tensor<D>(std::vector<double>(4, 1.0), Extents<Shape<dyn, 2>>(2)));
  BOOST_TEST(dx.to_vector() == want_dx, t << boost::test_tools::per_element());
  // float: the same within its rounding
  knn::Model<knn::Sequential<Tanhshrink>, Shape<dyn, 2>, kiln::Policy<kiln::Fp32, D>> f(0);
  const auto yf = f.forward(kt::make_tensor<D>(std::vector<float>{0, 1, -2, 0.5f}, Extents<Shape<dyn, 2>>(2)));
  for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(std::abs(yf.to_vector()[i] - want_y[i]) <= 1e-6);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(scale_starts_as_the_identity_and_computes_by_hand, D, kiln::test::devices) {
  knn::Model<knn::Sequential<Scale<3>>, Shape<dyn, 3>, P64<D>> m(0);
  BOOST_TEST(m.parameters().to_vector() == (std::vector<double>{1, 1, 1, 0, 0, 0}), boost::test_tools::per_element());
  const auto x = rows3<D>({1, 2, 3, 4, 5, 6});
  BOOST_TEST(m.forward(x).to_vector() == x.to_vector(), boost::test_tools::per_element());
  (void)m.backward_input(rows3<D>({0, 0, 0, 0, 0, 0}));  // (uses up the forward)

  m.parameters().copy_from(std::span<const double>(std::vector<double>{2, -1, 0.5, 1, 0, -3}));
  BOOST_TEST(m.forward(x).to_vector() == (std::vector<double>{3, -2, -1.5, 9, -5, 0}),
             boost::test_tools::per_element());
  m.zero_grad();
  const auto dx = m.backward_input(rows3<D>({1, 1, 1, 1, 2, 3}));
  BOOST_TEST(dx.to_vector() == (std::vector<double>{2, -1, 0.5, 2, -2, 1.5}), boost::test_tools::per_element());
  // weight: Σ_n dy x = [1 + 4, 2 + 10, 3 + 18]; bias: Σ_n dy = [2, 3, 4]
  BOOST_TEST(m.gradients().to_vector() == (std::vector<double>{5, 12, 21, 2, 3, 4}), boost::test_tools::per_element());
  // Model::backward: the first layer is asked for no dL/dx, and its parameters' gradients are the same.
  (void)m.forward(x);
  m.zero_grad();
  m.backward(rows3<D>({1, 1, 1, 1, 2, 3}));
  BOOST_TEST(m.gradients().to_vector() == (std::vector<double>{5, 12, 21, 2, 3, 4}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gradients_accumulate_over_two_backwards, D, kiln::test::devices) {
  using Net = knn::Sequential<knn::Linear<6, 4>, Scale<4>, Tanhshrink, knn::Linear<4, 3>>;
  knn::Model<Net, Shape<dyn, 6>, P64<D>> m(7);
  const auto x = kt::make_tensor<D>(kt::random_values<double>(18, -2, 2, 41), Extents<Shape<dyn, 6>>(3));
  const auto r = kt::make_tensor<D>(kt::random_values<double>(9, -1, 1, 42), Extents<Shape<dyn, 3>>(3));
  m.zero_grad();
  (void)m.forward(x);
  m.backward(r);
  const auto once = m.gradients().to_vector();
  (void)m.forward(x);
  m.backward(r);  // no zero_grad between: added, as torch's .grad
  const auto twice = m.gradients().to_vector();
  BOOST_REQUIRE_EQUAL(once.size(), twice.size());
  // Scale's slice (after the Linear's 28) is its own `+=`: g + g, exact. The Linears' may fold the
  // accumulation into the GEMM (cuBLAS's beta = 1) and round once differently: close.
  bool scale_moved = false;
  for (std::size_t i = 28; i < 36; ++i) {
    BOOST_TEST(twice[i] == 2 * once[i], "gradient " << i);
    scale_moved = scale_moved || once[i] != 0;
  }
  BOOST_TEST(scale_moved);
  std::vector<double> doubled(once.size());
  for (std::size_t i = 0; i < once.size(); ++i) doubled[i] = 2 * once[i];
  BOOST_TEST(kt::all_close(twice, doubled, 1e-12, 1e-12));
  m.zero_grad();
  BOOST_TEST(kiln::sum(kiln::abs(m.gradients())).item() == 0.0);
}

BOOST_AUTO_TEST_CASE(parameters_are_named_as_torchs_state_dict_and_checkpointed) {
  using Net = knn::Sequential<knn::Linear<6, 4>, Scale<4>, Tanhshrink, knn::Linear<4, 3>>;
  knn::Model<Net, Shape<dyn, 6>> m(3);
  const auto names = m.named_parameters();
  BOOST_REQUIRE_EQUAL(names.size(), 6u);
  const std::vector<std::string> want{"0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"};
  const std::vector<index_t> offsets{0, 24, 28, 32, 36, 48}, counts{24, 4, 4, 4, 12, 3};
  for (std::size_t i = 0; i < 6; ++i) {
    BOOST_TEST(names[i].name == want[i]);
    BOOST_TEST(names[i].offset == offsets[i]);
    BOOST_TEST(names[i].count == counts[i]);
  }
  BOOST_TEST(names[2].shape == (std::vector<index_t>{4}), boost::test_tools::per_element());
  BOOST_TEST(names[3].shape == (std::vector<index_t>{4}), boost::test_tools::per_element());

  // A checkpoint holds them under those names; another model loads them back.
  std::vector<float> p(static_cast<std::size_t>(m.parameter_count));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.01f * static_cast<float>(i) - 0.2f;
  m.parameters().copy_from(std::span<const float>(p));
  kt::TempDir dir;
  const auto file = dir.file("custom.safetensors");
  kiln::save_checkpoint(file, m);
  const auto entries = kiln::read_safetensors(file);
  BOOST_REQUIRE(entries.count("1.weight") == 1 && entries.count("1.bias") == 1);
  BOOST_TEST(entries.at("1.weight").dtype == "F32");
  BOOST_TEST(entries.at("1.weight").shape == (std::vector<index_t>{4}), boost::test_tools::per_element());
  BOOST_TEST(entries.count("2.weight") == 0u);  // Tanhshrink: none
  knn::Model<Net, Shape<dyn, 6>> back(99);
  (void)kiln::load_checkpoint(file, back);
  BOOST_TEST(back.parameters().to_vector() == p, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(summary_names_the_layers_their_shapes_and_parameters) {
  using Net = knn::Sequential<knn::Linear<6, 4>, Scale<4>, Tanhshrink, knn::Linear<4, 3>>;
  knn::Model<Net, Shape<dyn, 6>> m(0);
  const std::string s = m.summary(32);
  BOOST_TEST_MESSAGE(s);
  std::istringstream in(s);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  BOOST_REQUIRE(lines.size() >= 8u);
  // "#    layer ... output shape ... parameters", a rule, then one row per layer
  const auto row = [&](std::size_t i) { return lines[2 + i]; };
  const auto squeeze = [](const std::string& l) {  // the row's fields, single-spaced
    std::istringstream w(l);
    std::string out, f;
    while (w >> f) out += (out.empty() ? "" : " ") + f;
    return out;
  };
  BOOST_TEST(squeeze(row(1)) == "1 Scale(4) [32, 4] 8");
  BOOST_TEST(squeeze(row(2)) == "2 Tanhshrink() [32, 4] 0");  // no "[fused into 1]": a layer of its own
  BOOST_TEST(squeeze(row(0)) == "0 Linear(in_features=6, out_features=4, bias=True) [32, 4] 28");
  BOOST_TEST(s.find("total parameters: 51 (204 bytes as float32)") != std::string::npos);
  BOOST_TEST(s.find("input [32, 6] -> output [32, 3]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(no_grad_and_eval_forwards_give_the_same_output, D,
                              kiln::test::devices) {
  using Net = knn::Sequential<knn::Linear<6, 4>, Scale<4>, Tanhshrink, knn::Linear<4, 3>>;
  knn::Model<Net, Shape<dyn, 6>, P64<D>> m(5);
  const auto x = kt::make_tensor<D>(kt::random_values<double>(12, -2, 2, 51), Extents<Shape<dyn, 6>>(2));
  const auto trained = m.forward(x).to_vector();
  const auto dy = kt::make_tensor<D>(std::vector<double>(6, 1.0), Extents<Shape<dyn, 3>>(2));
  m.backward(dy);
  {
    knn::NoGrad guard(m);
    BOOST_TEST(!m.grad_enabled());
    BOOST_TEST(m.forward(x).to_vector() == trained, boost::test_tools::per_element());
    BOOST_CHECK_THROW(m.backward(dy), kiln::Error);  // nothing kept to go back through
    m.eval();
    BOOST_TEST(m.forward(x).to_vector() == trained, boost::test_tools::per_element());
  }
  BOOST_TEST(m.grad_enabled());
  // The layers' own modules, driven directly with ctx.grad false (what NoGrad passes them).
  Tensor<double, Shape<dyn, 4>, D> h(2);
  h = 1.0;
  knn::Sequential<Scale<4>, Tanhshrink>::module<Shape<dyn, 4>, P64<D>> net;
  Tensor<double, Shape<dyn>, D> params(16), grads(16);
  net.bind(params.data(), grads.data(), params.data(), 0);
  kiln::nn::Generator g(0);
  net.reset_parameters(g);
  const auto out = net.forward(h, kiln::nn::Context{.training = false, .grad = false});
  BOOST_TEST(out.to_vector() == std::vector<double>(8, 1.0 - std::tanh(1.0)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_training_step_as_the_page_shows_it) {
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(32 * 13, -1, 1, 61), Extents<Shape<dyn, 13>>(32));
  const auto y = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(32, -1, 1, 62), Extents<Shape<dyn, 1>>(32));
  {
#include "models.custom_layers.inc"
    BOOST_TEST(std::isfinite(loss));
    BOOST_REQUIRE_EQUAL(names.size(), 6u);
    BOOST_TEST(names[2].name == "1.weight");
    BOOST_TEST(names[3].name == "1.bias");
    BOOST_TEST(names[2].shape == (std::vector<index_t>{8}), boost::test_tools::per_element());
    BOOST_TEST(table.find("Scale(8)") != std::string::npos);
    BOOST_TEST(table.find("Tanhshrink()") != std::string::npos);
    // Scale's parameters moved from 1 and 0 by -lr times their gradients
    const auto p = model.parameters().to_vector(), g = model.gradients().to_vector();
    for (std::size_t i = 112; i < 128; ++i) {
      const double start = i < 120 ? 1.0 : 0.0;
      BOOST_TEST(std::abs(p[i] - (start - 0.1 * g[i])) <= 1e-6, "parameter " << i);
    }
    bool moved = false;
    for (std::size_t i = 112; i < 128; ++i) moved = moved || g[i] != 0.0f;
    BOOST_TEST(moved);
    // A few more steps lower the loss.
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      auto pr = model.forward(x);
      model.backward(mse.backward(pr, y));
      opt.step();
    }
    BOOST_TEST(mse(model.forward(x), y).item() < loss);
  }
}

BOOST_AUTO_TEST_CASE(a_bfloat16_model_runs_them_and_stays_near_float) {
  // Mixed precision: bfloat16 activations, float parameters and gradients (the layers read the float
  // masters, so the working copy is not needed).
  using Net = knn::Sequential<knn::Linear<6, 4>, Scale<4>, Tanhshrink, knn::Linear<4, 3>>;
  knn::Model<Net, Shape<dyn, 6>> f(9);
  knn::Model<Net, Shape<dyn, 6>, kiln::Policy<kiln::MixedBf16, kiln::Cpu>> b(9);
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(24, -2, 2, 71), Extents<Shape<dyn, 6>>(4));
  const auto yf = f.forward(x).to_vector();
  const auto yb = b.forward(x);
  const auto dy = kt::make_tensor<kiln::Cpu>(std::vector<float>(12, 1.0f), Extents<Shape<dyn, 3>>(4));
  f.backward(dy);
  b.backward(kiln::eval(kiln::cast<kiln::bfloat16>(dy)));
  const auto ybv = kiln::eval(kiln::cast<float>(yb)).to_vector();
  for (std::size_t i = 0; i < yf.size(); ++i) BOOST_TEST(std::abs(ybv[i] - yf[i]) <= 0.05 * (1 + std::abs(yf[i])));
  const auto gf = f.gradients().to_vector(), gb = b.gradients().to_vector();
  for (std::size_t i = 28; i < 36; ++i) BOOST_TEST(std::abs(gb[i] - gf[i]) <= 0.05 * (1 + std::abs(gf[i])), "Scale " << i);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
