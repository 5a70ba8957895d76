// Residual: y = x + f(x) with f a Sequential; backward matches float64 finite differences, parameters
// are named as a nested nn.Sequential's in PyTorch, and a branch that changes the shape does not compile
// (tests/compile_fail/residual_shape_mismatch.cpp).
#include <boost/test/unit_test.hpp>
#include <kiln/nn/nn.hpp>
#include <string>
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
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(residual)

BOOST_AUTO_TEST_CASE_TEMPLATE(residual_backward_matches_numeric, D, kiln::test::devices) {
  using Block = knn::Residual<knn::Linear<5, 5>, knn::Tanh, knn::Linear<5, 5>>;
  kt::check_model_gradients<knn::Sequential<knn::Linear<4, 5>, Block, knn::Sigmoid, knn::Linear<5, 2>>, Shape<dyn, 4>,
                            D>(Extents<Shape<dyn, 4>>(3), -2, 2, 0, 61);
  using In = Shape<dyn, 2, 5, 4>;
  using ConvBlock =
      knn::Residual<knn::Conv2d<2, 2, 3, 1, 1>, knn::Tanh, knn::Conv2d<2, 2, 3, 1, 1, 1, 1, false>>;
  kt::check_model_gradients<knn::Sequential<ConvBlock, ConvBlock>, In, D>(Extents<In>(2), -2, 2, 0, 62);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(residual_runs_the_activation_after_it_in_its_sum, D, kiln::test::devices) {
  // y = E(x + f(x)) in one pass: the bits of the two layers with fusion off, one pass fewer a step (the
  // activation's forward); one whose derivative reads the sum (SiLU) passes the finite differences too.
  using Block = knn::Residual<knn::Linear<5, 5>, knn::Linear<5, 5, false>>;
  using Rows = Shape<dyn, 5>;
  kt::check_fused_with_activation<knn::Sequential<Block, knn::ReLU>, Rows, kiln::Fp32, D>(Extents<Rows>(6), 64, false);
  kt::check_fused_with_activation<knn::Sequential<Block, knn::ReLU>, Rows, kiln::MixedFp16, D>(Extents<Rows>(6), 65,
                                                                                               false);
  kt::check_fused_with_activation<knn::Sequential<Block, knn::GELU>, Rows, kiln::MixedBf16, D>(Extents<Rows>(6), 66,
                                                                                               false);
  kt::check_activation_runs_in_the_sum<Block, knn::ReLU, Rows, D>(Extents<Rows>(6));
  kt::check_model_gradients<knn::Sequential<Block, knn::SiLU, knn::Linear<5, 2>>, Rows, D>(Extents<Rows>(3), -2, 2, 0,
                                                                                           67);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(residual_forward_is_x_plus_the_branch, D, kiln::test::devices) {
  using Net = knn::Sequential<knn::Residual<knn::Linear<3, 3>>>;
  knn::Model<Net, Shape<dyn, 3>, kiln::Policy<kiln::Fp32, D>> model(2);
  knn::Model<knn::Sequential<knn::Linear<3, 3>>, Shape<dyn, 3>, kiln::Policy<kiln::Fp32, D>> branch(2);
  const Extents<Shape<dyn, 3>> ext(4);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(12, -1, 1, 63), ext);
  const auto y = model.forward(x).to_vector();
  const auto f = branch.forward(x).to_vector();  // the same seed: the same parameters
  const auto xv = x.to_vector();
  std::vector<double> want(12);
  for (std::size_t i = 0; i < 12; ++i) want[i] = static_cast<double>(xv[i]) + f[i];
  BOOST_TEST(kt::all_close(y, want, 1e-6, 1e-7));
}

BOOST_AUTO_TEST_CASE(residual_parameters_are_named_like_a_nested_sequential) {
  using Net = knn::Sequential<knn::Linear<4, 6>, knn::ReLU, knn::Residual<knn::Linear<6, 6>, knn::ReLU, knn::Linear<6, 6>>>;
  knn::Model<Net, Shape<dyn, 4>> model(0);
  std::vector<std::string> names;
  for (const auto& p : model.named_parameters()) names.push_back(p.name);
  const std::vector<std::string> want{"0.weight", "0.bias", "2.0.weight", "2.0.bias", "2.2.weight", "2.2.bias"};
  BOOST_TEST(names == want, boost::test_tools::per_element());
  BOOST_TEST(model.parameter_count == 4 * 6 + 6 + 2 * (36 + 6));
  BOOST_TEST(model.summary(1).find("Residual(3 layers)") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
