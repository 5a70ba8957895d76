// Real-valued layer arguments (kiln::Real) take any number: `Dropout<0.2>` (a double literal, which a
// float template parameter refuses), `Dropout<0.2f>` and `ELU<1>` name one type per value; the layers
// print and run as with float arguments; convert_sync_batchnorm_t carries them over (compiled by nvcc
// too, where a class-type template argument forwarded as is would not compile).
#include <boost/test/unit_test.hpp>
#include <kiln/nn/nn.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace real_arguments_test {
using namespace kiln::nn;
static_assert(std::is_same_v<Dropout<0.5>, Dropout<>> && std::is_same_v<Dropout<0.2>, Dropout<0.2f>>);
static_assert(std::is_same_v<LeakyReLU<0.01>, LeakyReLU<>> && std::is_same_v<ELU<1>, ELU<>>);
static_assert(std::is_same_v<BatchNorm2d<4, 1e-3, 0.01>, BatchNorm2d<4, 1e-3f, 0.01f>>);
static_assert(std::is_same_v<LayerNorm<8, 1e-6>, LayerNorm<8, 1e-6f>> &&
              std::is_same_v<GroupNorm<2, 8, 1e-4>, GroupNorm<2, 8, 1e-4f>>);
static_assert(!std::is_same_v<Dropout<0.2>, Dropout<0.3>>);
static_assert(Dropout<0.2>::template accepts<kiln::Shape<kiln::dyn, 3>>);
// The arguments carried into SyncBatchNorm, cumulative_average (torch's momentum=None) included.
static_assert(std::is_same_v<
              convert_sync_batchnorm_t<Sequential<Linear<4, 8>, BatchNorm1d<8, 1e-3, cumulative_average>>>,
              Sequential<Linear<4, 8>, SyncBatchNorm<8, 1e-3f, cumulative_average>>>);
using Net = Sequential<Linear<4, 8>, LeakyReLU<0.2>, Dropout<0.1>, BatchNorm1d<8, 1e-3, 0.3>, ELU<0.5>,
                       LayerNorm<8, 1e-6>, GroupNorm<2, 8, 1e-4>, Linear<8, 2>>;
}  // namespace real_arguments_test

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(real_arguments)

BOOST_AUTO_TEST_CASE_TEMPLATE(double_literals_name_the_float_layers_and_run, D, kiln::test::devices) {
  using In = kiln::Shape<kiln::dyn, 4>;
  kiln::nn::Model<real_arguments_test::Net, In, kiln::Policy<kiln::Fp32, D>> model(3);
  const std::string s = model.summary();
  for (const char* name :
       {"LeakyReLU(negative_slope=0.2)", "Dropout(p=0.1, inplace=False)",
        "BatchNorm1d(8, eps=0.001, momentum=0.3, affine=True, track_running_stats=True)", "ELU(alpha=0.5)",
        "LayerNorm((8,), eps=1e-06, elementwise_affine=True)", "GroupNorm(2, 8, eps=0.0001, affine=True)"})
    BOOST_TEST(s.find(name) != std::string::npos, name << " in\n" << s);
  const auto x = kiln::test::make_tensor<D>(kiln::test::random_values<float>(6 * 4, -1.0f, 1.0f, 5),
                                            kiln::Extents<In>(6));
  auto y = model.forward(x);
  BOOST_TEST(y.size(0) == 6);
  model.zero_grad();
  model.backward_input(y);  // runs; the float layers' own tests check the numbers
  model.eval();
  const auto a = model.forward(x).to_vector(), b = model.forward(x).to_vector();
  BOOST_TEST(a == b);  // Dropout<0.1> is the identity in eval
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
