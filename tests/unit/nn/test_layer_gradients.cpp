// Layer gradients: every backward (Linear with and without bias, on rows and over leading dimensions, PReLU, ReLU, Sigmoid, Tanh, SiLU, LeakyReLU,
// ELU, Flatten, a whole Sequential, MSELoss mean, sum and unreduced) matches central finite differences
// in float64, w.r.t. the input and every parameter of the model's arena (perturbed through a host copy).
// torch's values at 0 and NaN for ReLU, LeakyReLU and ELU; the names in a summary.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/core/fusion.hpp>
#include <optional>
#include <kiln/nn/nn.hpp>
#include <type_traits>
#include <vector>

#include "support/gradcheck.hpp"
#include "support/model_gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/throws.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;

using kt::check_model_gradients;
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(layer_gradients)

BOOST_AUTO_TEST_CASE(fp64_is_a_precision_policy) {
  static_assert(kiln::precision_policy<kt::Fp64>);
  static_assert(kt::Fp64::name == "fp64" && !kt::Fp64::loss_scaling);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_backward_matches_numeric, D, kiln::test::devices) {
  check_model_gradients<knn::Sequential<knn::Linear<7, 5>>, Shape<dyn, 7>, D>(Extents<Shape<dyn, 7>>(3), -2, 2, 0, 11);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_without_bias_backward_matches_numeric, D, kiln::test::devices) {
  using Net = knn::Sequential<knn::Linear<7, 5, false>>;
  static_assert(knn::Model<Net, Shape<dyn, 7>, kiln::Policy<kt::Fp64, D>>::parameter_count == 35);
  check_model_gradients<Net, Shape<dyn, 7>, D>(Extents<Shape<dyn, 7>>(3), -2, 2, 0, 12);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(relu_backward_matches_numeric_away_from_zero, D, kiln::test::devices) {
  check_model_gradients<knn::Sequential<knn::ReLU>, Shape<dyn, 3, 5>, D>(Extents<Shape<dyn, 3, 5>>(3), -2, 2, 0.05, 13);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(relu_passes_the_gradient_at_nan_and_stops_it_at_zero, D, kiln::test::devices) {
  // torch's threshold_backward: 0 where the output is <= 0, dy elsewhere, NaN included (relu(nan) is
  // nan, and torch 1.13 gives relu(x).backward(ones) = [1, 0, 1] at x = [nan, 0, 1]).
  using P = kiln::Policy<kiln::Fp32, D>;
  knn::Model<knn::Sequential<knn::ReLU>, Shape<dyn, 3>, P> relu(0);
  auto x = kt::make_tensor<D>(std::vector<float>{NAN, 0.0f, 1.0f, -1.0f, 2.0f, -0.0f}, Extents<Shape<dyn, 3>>(2));
  (void)relu.forward(x);
  const auto ones = kt::make_tensor<D>(std::vector<float>(6, 1.0f), Extents<Shape<dyn, 3>>(2));
  BOOST_TEST(relu.backward_input(ones).to_vector() == (std::vector<float>{1, 0, 1, 0, 1, 0}), boost::test_tools::per_element());
  // Linear + ReLU: one fused epilogue, or (kiln::Unfused) the layers apart; a NaN input makes the
  // ReLU's input NaN, and dL/dx = w dy passes through it. (The backward is kiln's functor on every
  // device; without a bias the GPU forward is not cuBLASLt's epilogue either.)
  for (const bool fused : {true, false}) {
    knn::Model<knn::Sequential<knn::Linear<1, 1, false>, knn::ReLU>, Shape<dyn, 1>, P> m(1);
    std::optional<kiln::Unfused> off;
    if (!fused) off.emplace();
    (void)m.forward(kt::make_tensor<D>(std::vector<float>{NAN}, Extents<Shape<dyn, 1>>(1)));
    const auto dx = m.backward_input(kt::make_tensor<D>(std::vector<float>{1.0f}, Extents<Shape<dyn, 1>>(1)));
    BOOST_TEST(dx.to_vector()[0] == m.parameters().to_vector()[0], (fused ? "fused" : "unfused"));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sigmoid_backward_matches_numeric, D, kiln::test::devices) {
  check_model_gradients<knn::Sequential<knn::Sigmoid>, Shape<dyn, 3, 5>, D>(Extents<Shape<dyn, 3, 5>>(3), -4, 4, 0, 14);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(tanh_backward_matches_numeric, D, kiln::test::devices) {
  check_model_gradients<knn::Sequential<knn::Tanh>, Shape<dyn, 3, 5>, D>(Extents<Shape<dyn, 3, 5>>(3), -3, 3, 0, 15);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(silu_leaky_relu_and_elu_backward_match_numeric, D, kiln::test::devices) {
  using In = Shape<dyn, 3, 5>;
  check_model_gradients<knn::Sequential<knn::SiLU>, In, D>(Extents<In>(3), -4, 4, 0, 51);
  check_model_gradients<knn::Sequential<knn::LeakyReLU<>>, In, D>(Extents<In>(3), -2, 2, 0.05, 52);
  check_model_gradients<knn::Sequential<knn::LeakyReLU<-0.5f>>, In, D>(Extents<In>(3), -2, 2, 0.05, 53);
  check_model_gradients<knn::Sequential<knn::ELU<>>, In, D>(Extents<In>(3), -3, 3, 0.05, 54);
  check_model_gradients<knn::Sequential<knn::ELU<0.5f>>, In, D>(Extents<In>(3), -3, 3, 0.05, 55);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(leaky_relu_and_elu_at_zero_and_nan_as_torch, D, kiln::test::devices) {
  // At x = [nan, 0, -0, 1, -2, 3] with dy = 1: LeakyReLU(0.2)'s gradient is 0.2 at 0 and at NaN (x > 0
  // is false), as torch's; ELU's is alpha e^0 = alpha at 0 and 1 at NaN (x <= 0 is false), as torch's
  // CUDA kernel and its CPU scalar path (its CPU vector path gives NaN), and ELU(-0) is -0 (expm1; torch
  // 1.13's CPU e^x - 1 gives +0).
  using P = kiln::Policy<kiln::Fp32, D>;
  using S = Shape<dyn, 3>;
  const auto x = kt::make_tensor<D>(std::vector<float>{NAN, 0.0f, -0.0f, 1.0f, -2.0f, 3.0f}, Extents<S>(2));
  const auto ones = kt::make_tensor<D>(std::vector<float>(6, 1.0f), Extents<S>(2));
  knn::Model<knn::Sequential<knn::LeakyReLU<0.2f>>, S, P> leaky(0);
  const auto y = leaky.forward(x).to_vector();
  BOOST_TEST(std::isnan(y[0]));
  BOOST_TEST((y[1] == 0.0f && y[3] == 1.0f && y[4] == -2.0f * 0.2f && y[5] == 3.0f));
  const auto g = leaky.backward_input(ones).to_vector();
  BOOST_TEST(g == (std::vector<float>{0.2f, 0.2f, 0.2f, 1.0f, 0.2f, 1.0f}), boost::test_tools::per_element());
  knn::Model<knn::Sequential<knn::ELU<0.5f>>, S, P> elu(0);
  const auto e = elu.forward(x).to_vector();
  BOOST_TEST(std::isnan(e[0]));
  BOOST_TEST((e[1] == 0.0f && e[3] == 1.0f && e[5] == 3.0f));
  BOOST_TEST((e[2] == 0.0f && std::signbit(e[2])));
  BOOST_TEST(e[4] == 0.5f * std::expm1(-2.0f), boost::test_tools::tolerance(1e-6f));
  const auto ge = elu.backward_input(ones).to_vector();
  BOOST_TEST((ge[0] == 1.0f && ge[1] == 0.5f && ge[2] == 0.5f && ge[3] == 1.0f && ge[5] == 1.0f));
  BOOST_TEST(ge[4] == 0.5f * std::exp(-2.0f), boost::test_tools::tolerance(1e-6f));
  // A very negative input: the gradient alpha e^x from the input keeps its digits (from the output,
  // y + alpha would be 0 in float).
  knn::Model<knn::Sequential<knn::ELU<>>, Shape<dyn, 1>, P> far(0);
  (void)far.forward(kt::make_tensor<D>(std::vector<float>{-30.0f}, Extents<Shape<dyn, 1>>(1)));
  const auto gf = far.backward_input(kt::make_tensor<D>(std::vector<float>{1.0f}, Extents<Shape<dyn, 1>>(1)));
  BOOST_TEST(gf.to_vector()[0] == std::exp(-30.0f), boost::test_tools::tolerance(1e-6f));
  // SiLU at the ends, as torch: -inf / (1 + e^inf) is NaN, +inf stays, -100 / (1 + e^100) is -0 in
  // float; the gradient at +inf is NaN (inf (1 - 1) in torch's formula), 0 at -100.
  knn::Model<knn::Sequential<knn::SiLU>, S, P> silu(0);
  const float inf = INFINITY;
  const auto sx = kt::make_tensor<D>(std::vector<float>{-inf, inf, -100.0f, 100.0f, 0.0f, -1.0f}, Extents<S>(2));
  const auto sy = silu.forward(sx).to_vector();
  BOOST_TEST(std::isnan(sy[0]));
  BOOST_TEST((sy[1] == inf && sy[2] == 0.0f && std::signbit(sy[2]) && sy[3] == 100.0f && sy[4] == 0.0f));
  const auto sg = silu.backward_input(ones).to_vector();
  BOOST_TEST(std::isnan(sg[1]));
  BOOST_TEST((sg[2] == 0.0f && sg[3] == 1.0f && sg[4] == 0.5f));
  // Their names, as torch prints the modules.
  knn::Model<knn::Sequential<knn::SiLU, knn::LeakyReLU<>, knn::LeakyReLU<0.2f>, knn::ELU<>, knn::ELU<0.5f>>, S, P> all(0);
  const std::string s = all.summary(2);
  for (const char* name : {"SiLU()", "LeakyReLU(negative_slope=0.01)", "LeakyReLU(negative_slope=0.2)", "ELU(alpha=1.0)",
                           "ELU(alpha=0.5)"})
    BOOST_TEST(s.find(name) != std::string::npos, name << " in\n" << s);
}

BOOST_AUTO_TEST_CASE(module_arguments_print_as_python_prints_floats) {
  // repr() of each in Python 3: the shortest digits, positional from 1e-4 to below 1e16.
  using knn::detail::python_float;
  BOOST_TEST(python_float(0.01) == "0.01");
  BOOST_TEST(python_float(1.0) == "1.0");
  BOOST_TEST(python_float(0.5f) == "0.5");
  BOOST_TEST(python_float(0.1f) == "0.1");
  BOOST_TEST(python_float(0.1234567) == "0.1234567");
  BOOST_TEST(python_float(0.0001) == "0.0001");
  BOOST_TEST(python_float(1e-05) == "1e-05");
  BOOST_TEST(python_float(2.5e-07) == "2.5e-07");
  BOOST_TEST(python_float(1e6) == "1000000.0");
  BOOST_TEST(python_float(123.25) == "123.25");
  BOOST_TEST(python_float(1e16) == "1e+16");
  BOOST_TEST(python_float(1.5e300) == "1.5e+300");
  BOOST_TEST(python_float(-0.0) == "-0.0");
  BOOST_TEST(python_float(-2.0) == "-2.0");
  BOOST_TEST(python_float(static_cast<double>(INFINITY)) == "inf");
  BOOST_TEST(python_float(static_cast<double>(NAN)) == "nan");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(flatten_backward_matches_numeric_for_rank_4_input, D, kiln::test::devices) {
  using In = Shape<dyn, 3, 5, 7>;  // [N, C, H, W] -> [N, 105]
  static_assert(std::is_same_v<knn::Model<knn::Sequential<knn::Flatten>, In>::output_shape, Shape<dyn, 105>>);
  check_model_gradients<knn::Sequential<knn::Flatten>, In, D>(Extents<In>(3), -1, 1, 0, 16);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(flatten_dims_backward_matches_numeric_with_dims_kept_around_them, D,
                              kiln::test::devices) {
  // torch's Flatten(2) before a Linear over the last dimension: [N, 3, 5, 7] -> [N, 3, 35] -> [N, 3, 4];
  // Flatten(-3, -2) with a dyn dimension before those flattened: [N, L, 5, 7, 2] -> [N, L, 35, 2].
  using In = Shape<dyn, 3, 5, 7>;
  using Net = knn::Sequential<knn::FlattenDims<2>, knn::Linear<35, 4>>;
  static_assert(std::is_same_v<knn::Model<Net, In>::output_shape, Shape<dyn, 3, 4>>);
  check_model_gradients<Net, In, D>(Extents<In>(2), -1, 1, 0, 18);
  using Seq = Shape<dyn, dyn, 5, 7, 2>;
  using Middle = knn::Sequential<knn::FlattenDims<-3, -2>, knn::Tanh>;
  static_assert(std::is_same_v<knn::Model<Middle, Seq>::output_shape, Shape<dyn, dyn, 35, 2>>);
  check_model_gradients<Middle, Seq, D>(Extents<Seq>(2, 3), -1, 1, 0, 19);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sequential_backward_matches_numeric_for_input_and_every_parameter, D,
                              kiln::test::devices) {
  using Net = knn::Sequential<knn::Linear<5, 7>, knn::Tanh, knn::Linear<7, 3>, knn::Sigmoid, knn::Linear<3, 2>>;
  static_assert(knn::Model<Net, Shape<dyn, 5>, kiln::Policy<kt::Fp64, D>>::parameter_count ==
                (5 * 7 + 7) + (7 * 3 + 3) + (3 * 2 + 2));
  check_model_gradients<Net, Shape<dyn, 5>, D>(Extents<Shape<dyn, 5>>(3), -1.5, 1.5, 0, 17);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_accumulates_parameter_gradients_until_zero_grad, D, kiln::test::devices) {
  knn::Model<knn::Sequential<knn::Linear<5, 3>>, Shape<dyn, 5>, kiln::Policy<kt::Fp64, D>> model(1);
  const Extents<Shape<dyn, 5>> ext(3);
  const auto x = kt::make_tensor<D>(kt::random_values<double>(15, -1, 1, 18), ext);
  const auto dy = kt::make_tensor<D>(kt::random_values<double>(9, -1, 1, 19), Extents<Shape<dyn, 3>>(3));
  model.zero_grad();
  model.forward(x);
  model.backward(dy);
  const auto once = model.gradients().to_vector();
  model.forward(x);
  model.backward(dy);
  std::vector<double> twice(once.size());
  for (std::size_t i = 0; i < once.size(); ++i) twice[i] = 2 * once[i];
  BOOST_TEST(kt::all_close(model.gradients().to_vector(), twice));
  model.zero_grad();
  BOOST_TEST(kt::all_equal(model.gradients().to_vector(), std::vector<double>(once.size(), 0.0)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mse_loss_value_and_gradient_match_reference_and_numeric, D, kiln::test::devices) {
  using S = Shape<dyn, 3>;
  const Extents<S> ext(5);
  const auto pv = kt::random_values<double>(15, -2, 2, 20);
  const auto tv = kt::random_values<double>(15, -2, 2, 21);
  const auto pred = kt::make_tensor<D>(pv, ext);
  const auto target = kt::make_tensor<D>(tv, ext);
  const knn::MSELoss mse;
  double want = 0;
  for (std::size_t i = 0; i < pv.size(); ++i) want += (pv[i] - tv[i]) * (pv[i] - tv[i]) / 15.0;
  BOOST_TEST(kt::close(mse(pred, target).item(), want, 1e-14, 0));
  const auto f = [&](const Tensor<double, S, D>& p) { return mse(p, target).item(); };
  BOOST_TEST(kt::gradcheck(f, pred, mse.backward(pred, target), kt::tight));
  // The loss's own gradient scales it (as when the loss is multiplied by a constant).
  std::vector<double> scaled = mse.backward(pred, target).to_vector();
  for (auto& g : scaled) g *= 0.25;
  BOOST_TEST(kt::all_close(mse.backward(pred, target, 0.25).to_vector(), scaled));
  // reduction = sum: 15 times the mean, and its gradient.
  const knn::MSELoss summed{.reduction = knn::Reduction::sum};
  BOOST_TEST(kt::close(summed(pred, target).item(), 15.0 * want, 1e-14, 0));
  const auto fs = [&](const Tensor<double, S, D>& p) { return summed(p, target).item(); };
  BOOST_TEST(kt::gradcheck(fs, pred, summed.backward(pred, target), kt::tight));
  const auto empty = kt::make_tensor<D>(std::vector<double>{}, Extents<S>(0));
  BOOST_TEST(summed(empty, empty).item() == 0.0);  // torch: a sum over nothing is 0, a mean NaN
  BOOST_TEST(std::isnan(mse(empty, empty).item()));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unreduced_mse_loss_and_its_gradient_match_reference_and_numeric, D, kiln::test::devices) {
  // torch's reduction='none': each squared error; L = Σ w ⊙ unreduced for fixed w, so backward(p, t, w)
  // is its gradient, and w = 1 / numel gives the mean's. One pass each way.
  using S = Shape<dyn, 3>;
  const Extents<S> ext(5);
  const auto pv = kt::random_values<double>(15, -2, 2, 22);
  const auto tv = kt::random_values<double>(15, -2, 2, 23);
  const auto pred = kt::make_tensor<D>(pv, ext);
  const auto target = kt::make_tensor<D>(tv, ext);
  const auto w = kt::make_tensor<D>(kt::random_values<double>(15, -1, 1, 24), ext);
  const knn::MSELoss mse;
  auto before = kiln::passes();
  const auto terms = mse.unreduced(pred, target);
  BOOST_TEST(kiln::passes() - before == 1u);
  const auto got = terms.to_vector();
  for (std::size_t i = 0; i < pv.size(); ++i) BOOST_TEST(got[i] == (pv[i] - tv[i]) * (pv[i] - tv[i]));
  const auto f = [&](const Tensor<double, S, D>& p) { return kiln::sum(mse.unreduced(p, target) * w).item(); };
  before = kiln::passes();
  const auto g = mse.backward(pred, target, w);
  BOOST_TEST(kiln::passes() - before == 1u);
  BOOST_TEST(kt::gradcheck(f, pred, g, kt::tight));
  BOOST_TEST(kt::all_close(mse.backward(pred, target, {}).to_vector(), mse.backward(pred, target).to_vector()));  // {}: scale 1
  const auto mean_w = kt::make_tensor<D>(std::vector<double>(15, 1.0 / 15.0), ext);
  BOOST_TEST(kt::all_close(mse.backward(pred, target, mean_w).to_vector(), mse.backward(pred, target).to_vector()));
  const auto short_w = kt::make_tensor<D>(std::vector<double>(12, 1.0), Extents<S>(4));
  BOOST_CHECK_EXCEPTION((void)mse.backward(pred, target, short_w), kiln::ShapeError, [](const kiln::ShapeError& e) {
    return std::string(e.what()).find("dloss [4, 3] must have the shape of pred [5, 3]") != std::string::npos;
  });
}

template <class T, class D>
void check_unreduced_16_bit() {
  // The difference 2049 (fp16) or 257 (bf16) is not a value of the type: the terms are exact only in fp32.
  using S = Shape<dyn, 3>;
  const float big = std::is_same_v<T, kiln::half> ? 2048.0f : 256.0f;
  const auto pred = kt::make_tensor<D>(std::vector<T>{T(big), T(1.0f), T(-1.0f)}, Extents<S>(1));
  const auto target = kt::make_tensor<D>(std::vector<T>{T(-1.0f), T(0.5f), T(0.5f)}, Extents<S>(1));
  const auto terms = knn::MSELoss{}.unreduced(pred, target);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(terms)>, Tensor<float, S, D>>);
  const float d = big + 1.0f;
  BOOST_TEST(terms.to_vector() == (std::vector<float>{d * d, 0.25f, 2.25f}), boost::test_tools::per_element());
  // 2 (pred - target) dloss in fp32, rounded once to T: 2 * 2049 * 0.75 = 3073.5 -> 3074 in fp16 (385.5
  // -> 386 in bf16), where rounding the difference first would give 3072 (384).
  const auto dloss = kt::make_tensor<D>(std::vector<float>{0.75f, 1.0f, 2.25f}, Extents<S>(1));
  const auto grad = knn::MSELoss{}.backward(pred, target, dloss);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(grad)>, Tensor<T, S, D>>);
  const auto g = grad.to_vector();
  const float once = static_cast<float>(T(2.0f * d * 0.75f));
  BOOST_TEST(once != 2.0f * big * 0.75f);
  BOOST_TEST(static_cast<float>(g[0]) == once);
  BOOST_TEST(static_cast<float>(g[1]) == 2.0f * 0.5f * 1.0f);
  BOOST_TEST(static_cast<float>(g[2]) == 2.0f * -1.5f * 2.25f);
  // Cross entropy's rows: log(e^x0 + e^1 + e^-1) - x_label in fp32 from the 16-bit logits.
  const auto labels = kt::make_tensor<D>(std::vector<std::int64_t>{1}, Extents<Shape<dyn>>(1));
  const auto rows = knn::CrossEntropyLoss{}.unreduced(pred, labels);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(rows)>, Tensor<float, Shape<dyn>, D>>);
  BOOST_TEST(rows.item() == big - 1.0f, boost::test_tools::tolerance(1e-6f));  // e^1 is lost next to e^big
  const auto dx = knn::CrossEntropyLoss{}.backward(pred, labels, kt::make_tensor<D>(std::vector<float>{2.0f}, Extents<Shape<dyn>>(1)));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(dx)>, Tensor<T, S, D>>);
  BOOST_TEST(static_cast<float>(dx.to_vector()[1]) == -2.0f);  // 2 (softmax - 1), softmax of 1 next to big: 0
  // NLLLoss: -x[label] in fp32, the gradient -dloss rounded to T.
  const auto nll_rows = knn::NLLLoss{}.unreduced(pred, labels);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(nll_rows)>, Tensor<float, Shape<dyn>, D>>);
  BOOST_TEST(nll_rows.item() == -1.0f);
  const auto dn = knn::NLLLoss{}.backward(pred, labels, kt::make_tensor<D>(std::vector<float>{2.0f}, Extents<Shape<dyn>>(1)));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(dn)>, Tensor<T, S, D>>);
  BOOST_TEST((std::vector<float>{static_cast<float>(dn.to_vector()[0]), static_cast<float>(dn.to_vector()[1])}) ==
                 (std::vector<float>{0.0f, -2.0f}),
             boost::test_tools::per_element());
  BOOST_TEST(knn::NLLLoss{}(pred, labels).item() == -1.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unreduced_losses_of_16_bit_operands_are_fp32, D, kiln::test::devices) {
  // As autocast runs mse_loss and cross_entropy in fp32: the terms are float, the gradients the operands' type.
  check_unreduced_16_bit<kiln::half, D>();
  check_unreduced_16_bit<kiln::bfloat16, D>();
}

// Linear over the last dimension of [N, L, F] and [N, A, B, F] (torch's [N, *, in_features]), fused with the
// activation after it as on rows: float64 finite differences, and the same values as the rows' model on
// the input reshaped to [N L, F] (the same parameters, the leading dimensions are rows).
BOOST_AUTO_TEST_CASE_TEMPLATE(linear_over_leading_dimensions_is_the_rows_linear, D, kt::devices) {
  using Seq = knn::Sequential<knn::Linear<6, 5>, knn::ReLU, knn::Linear<5, 4, false>, knn::Tanh, knn::Linear<4, 3>>;
  static_assert(std::is_same_v<Seq::output<Shape<dyn, 7, 6>>, Shape<dyn, 7, 3>>);
  static_assert(std::is_same_v<knn::Linear<6, 5>::output<Shape<2, dyn, 3, 6>>, Shape<2, dyn, 3, 5>>);
  check_model_gradients<Seq, Shape<dyn, 4, 6>, D>(Extents<Shape<dyn, 4, 6>>(3), -2, 2, 0.05, 91);
  check_model_gradients<Seq, Shape<dyn, 2, 3, 6>, D>(Extents<Shape<dyn, 2, 3, 6>>(2), -2, 2, 0.05, 92);

  knn::Model<Seq, Shape<dyn, 4, 6>, kiln::Policy<kiln::Fp32, D>> seq(5);
  knn::Model<Seq, Shape<dyn, 6>, kiln::Policy<kiln::Fp32, D>> rows(5);
  BOOST_TEST(seq.parameters().to_vector() == rows.parameters().to_vector(), boost::test_tools::per_element());
  const auto xv = kt::random_values<float>(3 * 4 * 6, -1, 1, 93);
  const auto y = seq.forward(kt::make_tensor<D>(xv, Extents<Shape<dyn, 4, 6>>(3)));
  const auto yr = rows.forward(kt::make_tensor<D>(xv, Extents<Shape<dyn, 6>>(12)));
  BOOST_TEST(y.size(0) == 3);
  BOOST_TEST(y.size(1) == 4);
  BOOST_TEST(y.to_vector() == yr.to_vector(), boost::test_tools::per_element());
  const auto dyv = kt::random_values<float>(3 * 4 * 3, -1, 1, 94);
  const auto dx = seq.backward_input(kt::make_tensor<D>(dyv, Extents<Shape<dyn, 4, 3>>(3)));
  const auto dxr = rows.backward_input(kt::make_tensor<D>(dyv, Extents<Shape<dyn, 3>>(12)));
  static_assert(std::is_same_v<typename decltype(dx)::shape_type, Shape<dyn, 4, 6>>);
  BOOST_TEST(dx.to_vector() == dxr.to_vector(), boost::test_tools::per_element());
  BOOST_TEST(seq.gradients().to_vector() == rows.gradients().to_vector(), boost::test_tools::per_element());
  // A dynamic feature count that is not In: a ShapeError naming the input's shape.
  knn::Model<knn::Sequential<knn::Linear<6, 2>>, Shape<dyn, 4, dyn>, kiln::Policy<kiln::Fp32, D>> loose(1);
  Tensor<float, Shape<dyn, 4, dyn>, D> wrong(Extents<Shape<dyn, 4, dyn>>(2, 5));
  wrong.fill(0.0f);
  BOOST_TEST(kt::throws_with<kiln::ShapeError>([&] { (void)loose.forward(wrong); },
                                                "kiln::nn::Linear<6, 2>: input [2, 4, 5] has 5 features last, expected 6"));
}

// PReLU: one slope and a slope per channel of [N, C, H, W] and per feature, drawn in [-1.5, 1.5): float64
// finite differences for the input and the slopes (inputs away from the kink at 0).
BOOST_AUTO_TEST_CASE_TEMPLATE(prelu_backward_matches_numeric, D, kt::devices) {
  check_model_gradients<knn::Sequential<knn::Linear<4, 5>, knn::PReLU<>, knn::Linear<5, 3>>, Shape<dyn, 4>, D>(
      Extents<Shape<dyn, 4>>(3), -2, 2, 0.05, 95, /*drawn_parameters=*/true);
  check_model_gradients<knn::Sequential<knn::PReLU<3>>, Shape<dyn, 3, 2, 2>, D>(Extents<Shape<dyn, 3, 2, 2>>(2), -2, 2,
                                                                                 0.05, 96, /*drawn_parameters=*/true);
  check_model_gradients<knn::Sequential<knn::Linear<3, 4>, knn::PReLU<4>>, Shape<dyn, 3>, D>(
      Extents<Shape<dyn, 3>>(5), -2, 2, 0.05, 97, /*drawn_parameters=*/true);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
