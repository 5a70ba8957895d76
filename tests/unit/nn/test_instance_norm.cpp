// InstanceNorm1d and InstanceNorm2d: forward against the definition in long double (each sample's
// channel normalised over its positions by its own mean and biased variance, then the per-channel weight
// and bias), the same numbers as GroupNorm<C, C>, backward against float64 finite differences, names and
// parameters as torch's, refusals. PyTorch parity is in test_parity_layers.cpp (layers_instance_norm.json).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <kiln/nn/nn.hpp>
#include <span>
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

/// Layer (InstanceNorm over C channels of `plane` positions each, eps) on 3 samples in double, with
/// drawn weights and biases when it has them, against the definition in long double.
template <class Layer, class In, class D>
void check_forward(kiln::index_t c, kiln::index_t plane, double eps) {
  knn::Model<knn::Sequential<Layer>, In, kiln::Policy<kt::Fp64, D>> model(0);
  constexpr auto count = decltype(model)::parameter_count;
  std::vector<double> w(static_cast<std::size_t>(c), 1.0), b(static_cast<std::size_t>(c), 0.0);
  if constexpr (count > 0) {
    const auto theta = kt::random_values<double>(count, 0.5, 1.5, 3);
    model.parameters().copy_from(std::span<const double>(theta));
    w.assign(theta.begin(), theta.begin() + c);
    b.assign(theta.begin() + c, theta.end());
  }
  const auto xs = kt::random_values<double>(static_cast<std::size_t>(3 * c * plane), -2.0, 3.0, 4);
  const auto y = model.forward(kt::make_tensor<D>(xs, Extents<In>(3))).to_vector();
  double worst = 0;
  for (kiln::index_t r = 0; r < 3 * c; ++r) {
    const auto* xr = xs.data() + r * plane;
    long double s = 0, q = 0;
    for (kiln::index_t l = 0; l < plane; ++l) s += xr[l];
    const long double mean = s / plane;
    for (kiln::index_t l = 0; l < plane; ++l) q += (xr[l] - mean) * (xr[l] - mean);
    const long double rstd = 1 / std::sqrt(q / plane + eps);
    const auto ch = static_cast<std::size_t>(r % c);
    for (kiln::index_t l = 0; l < plane; ++l) {
      const auto want = static_cast<double>((xr[l] - mean) * rstd * w[ch] + b[ch]);
      worst = std::max(worst, std::abs(y[static_cast<std::size_t>(r * plane + l)] - want));
    }
  }
  BOOST_TEST(worst <= 1e-14, model.net().template layer<0>().name() << ": worst " << worst);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(instance_norm)

BOOST_AUTO_TEST_CASE_TEMPLATE(instance_norm_follows_its_definition, D, kt::devices) {
  check_forward<knn::InstanceNorm2d<3>, Shape<dyn, 3, 4, 5>, D>(3, 20, 1e-5f);
  check_forward<knn::InstanceNorm2d<2, 1e-3f, 0.1f, true>, Shape<dyn, 2, 3, 3>, D>(2, 9, 1e-3f);
  check_forward<knn::InstanceNorm1d<4, 1e-5f, 0.1f, true>, Shape<dyn, 4, 6>, D>(4, 6, 1e-5f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(instance_norm_is_group_norm_with_a_group_per_channel, D, kt::devices) {
  using P = kiln::Policy<kt::Fp64, D>;
  using In = Shape<dyn, 4, 3, 5>;
  knn::Model<knn::Sequential<knn::Conv2d<4, 4, 1>, knn::InstanceNorm2d<4, 1e-5f, 0.1f, true>, knn::ReLU>, In,
             P>
      a(1);
  knn::Model<knn::Sequential<knn::Conv2d<4, 4, 1>, knn::GroupNorm<4, 4>, knn::ReLU>, In, P> b(2);
  const auto theta = kt::random_values<double>(decltype(a)::parameter_count, 0.5, 1.5, 5);
  a.parameters().copy_from(std::span<const double>(theta));
  b.parameters().copy_from(std::span<const double>(theta));
  const auto x = kt::make_tensor<D>(kt::random_values<double>(2 * 4 * 3 * 5, -1, 1, 6), Extents<In>(2));
  const auto r = kt::make_tensor<D>(kt::random_values<double>(2 * 4 * 3 * 5, -1, 1, 7), Extents<In>(2));
  const auto ya = a.forward(x).to_vector(), yb = b.forward(x).to_vector();
  a.zero_grad(), b.zero_grad();
  const auto dxa = a.backward_input(r).to_vector(), dxb = b.backward_input(r).to_vector();
  BOOST_TEST(ya == yb, boost::test_tools::per_element());
  BOOST_TEST(dxa == dxb, boost::test_tools::per_element());
  BOOST_TEST(a.gradients().to_vector() == b.gradients().to_vector(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(instance_norm_backward_matches_finite_differences, D, kt::devices) {
  kt::check_model_gradients<knn::Sequential<knn::InstanceNorm2d<3>>, Shape<dyn, 3, 3, 4>, D>(
      Extents<Shape<dyn, 3, 3, 4>>(2), -2, 2, 0, 121);
  kt::check_model_gradients<knn::Sequential<knn::InstanceNorm2d<2, 1e-3f, 0.1f, true>>, Shape<dyn, 2, 3, 3>,
                            D>(Extents<Shape<dyn, 2, 3, 3>>(2), -2, 2, 0, 122, true);
  kt::check_model_gradients<knn::Sequential<knn::InstanceNorm1d<3, 1e-5f, 0.1f, true>>, Shape<dyn, 3, 5>, D>(
      Extents<Shape<dyn, 3, 5>>(2), -2, 2, 0, 123, true);
  // a generator's block: reflection padding, convolution, instance norm, ReLU, transposed convolution
  using Block = knn::Sequential<knn::ReflectionPad2d<1>, knn::Conv2d<2, 3, 3>,
                                knn::InstanceNorm2d<3, 1e-5f, 0.1f, true>, knn::ReLU,
                                knn::ConvTranspose2d<3, 2, 3, 2, 1, 1>, knn::Tanh>;
  kt::check_model_gradients<Block, Shape<dyn, 2, 4, 4>, D>(Extents<Shape<dyn, 2, 4, 4>>(2), -2, 2, 0, 124,
                                                           true);
}

BOOST_AUTO_TEST_CASE(instance_norm_refuses_channels_of_one_position_as_torch) {
  // torch: "Expected more than 1 spatial element when training" (in evaluation too, without running
  // statistics). Static extents: not accepted (a Sequential shape mismatch); dyn ones: a ValueError.
  static_assert(!knn::InstanceNorm1d<2>::accepts<Shape<dyn, 2, 1>> &&
                !knn::InstanceNorm2d<2>::accepts<Shape<dyn, 2, 1, 1>>);
  static_assert(knn::InstanceNorm2d<2>::accepts<Shape<dyn, 2, 1, 2>> &&
                knn::InstanceNorm2d<2>::accepts<Shape<dyn, 2, dyn, dyn>>);
  using S = Shape<dyn, 2, dyn, dyn>;
  knn::InstanceNorm2d<2>::module<S, kiln::Policy<kiln::Fp32, kiln::Cpu>> norm;
  Extents<S> one = {};
  one[0] = 3, one[2] = 1, one[3] = 1;
  BOOST_CHECK_EXCEPTION(
      norm.forward(kiln::Tensor<float, S>(one), {}), kiln::ValueError, [](const kiln::ValueError& e) {
        return std::string(e.what()).find(
                   "InstanceNorm2d(2, eps=1e-05, momentum=0.1, affine=False, "
                   "track_running_stats=False): expected more than 1 spatial element") != std::string::npos;
      });
  Extents<S> two = one;
  two[3] = 2;
  const auto y = norm.forward(kiln::Tensor<float, S>(two), {});  // two positions: fine
  BOOST_TEST(y.numel() == 3 * 2 * 2);
}

BOOST_AUTO_TEST_CASE(instance_norm_has_torchs_names_parameters_and_refusals) {
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  using In = Shape<dyn, 4, 5, 6>;
  BOOST_TEST((knn::InstanceNorm2d<4>::module<In, P>().name()) ==
             "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)");
  BOOST_TEST((knn::InstanceNorm2d<4, 1e-3f, 0.1f, true>::module<In, P>().name()) ==
             "InstanceNorm2d(4, eps=0.001, momentum=0.1, affine=True, track_running_stats=False)");
  BOOST_TEST((knn::InstanceNorm1d<4, 1e-5f, 0.2f, true>::module<Shape<dyn, 4, 7>, P>().name()) ==
             "InstanceNorm1d(4, eps=1e-05, momentum=0.2, affine=True, track_running_stats=False)");
  static_assert(knn::InstanceNorm2d<4>::module<In, P>::parameter_count == 0);
  using Affine = knn::InstanceNorm2d<4, 1e-5f, 0.1f, true>::module<In, P>;
  static_assert(Affine::parameter_count == 8);
  const auto params = Affine().parameters();
  BOOST_REQUIRE(params.size() == 2u);
  BOOST_TEST((params[0].name == "weight" && params[1].name == "bias" && params[1].offset == 4));
  static_assert(!knn::InstanceNorm2d<4>::accepts<Shape<dyn, 4, 6>> && !knn::InstanceNorm2d<3>::accepts<In>);
  static_assert(knn::InstanceNorm1d<4>::accepts<Shape<dyn, 4, 6>> && !knn::InstanceNorm1d<4>::accepts<In>);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
