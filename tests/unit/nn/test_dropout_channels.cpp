// Dropout2d and Dropout1d: in training each channel of each sample is zeroed as a whole or scaled by
// 1 / (1 - p), about p of them zeroed; backward applies the forward's mask; evaluation is the identity;
// refusals and names as torch's.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <kiln/nn/nn.hpp>
#include <string>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace knn = kiln::nn;
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;

/// Layer (channel dropout with p) in training on N x C channels of `plane` positions of 1: every channel
/// all 0 or all 1 / (1 - p), between 4 standard deviations of N C p of them zeroed; backward of ones
/// gives the same mask.
template <class Layer, class In, class D>
void check_channels(const Extents<In>& e, index_t plane, double p) {
  using P = kiln::Policy<kiln::Fp32, D>;
  knn::Model<knn::Sequential<Layer>, In, P> model(11);
  const auto ones = kt::make_tensor<D>(std::vector<float>(static_cast<std::size_t>(e.numel()), 1.0f), e);
  const auto y = model.forward(ones).to_vector();
  const float kept = static_cast<float>(1.0 / (1.0 - p));
  const index_t channels = e.numel() / plane;
  index_t zeroed = 0, mixed = 0;
  for (index_t c = 0; c < channels; ++c) {
    const float first = y[static_cast<std::size_t>(c * plane)];
    zeroed += first == 0.0f;
    for (index_t q = 0; q < plane; ++q) {
      const float v = y[static_cast<std::size_t>(c * plane + q)];
      mixed += v != first || (v != 0.0f && v != kept);
    }
  }
  BOOST_TEST(mixed == 0, mixed << " values differ from their channel's or from 0 and 1 / (1 - p)");
  const double mean = channels * p, sd = std::sqrt(channels * p * (1 - p));
  BOOST_TEST(std::abs(static_cast<double>(zeroed) - mean) <= 4 * sd,
             zeroed << " of " << channels << " zeroed");
  BOOST_TEST(model.backward_input(ones).to_vector() == y, boost::test_tools::per_element());
  model.train(false);
  BOOST_TEST(model.forward(ones).to_vector() == ones.to_vector(), boost::test_tools::per_element());
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(dropout_channels)

BOOST_AUTO_TEST_CASE_TEMPLATE(channel_dropout_zeroes_whole_channels, D, kt::devices) {
  check_channels<knn::Dropout2d<>, Shape<dyn, 16, 3, 5>, D>(Extents<Shape<dyn, 16, 3, 5>>(8), 15, 0.5);
  check_channels<knn::Dropout2d<0.2f>, Shape<dyn, 32, 2, 2>, D>(Extents<Shape<dyn, 32, 2, 2>>(16), 4, 0.2f);
  check_channels<knn::Dropout1d<0.3f>, Shape<dyn, 24, 7>, D>(Extents<Shape<dyn, 24, 7>>(10), 7, 0.3f);
}

BOOST_AUTO_TEST_CASE(channel_dropout_has_torchs_names_and_shapes) {
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  static_assert(knn::Dropout2d<>::accepts<Shape<dyn, 3, 4, 4>> &&
                !knn::Dropout2d<>::accepts<Shape<dyn, 3, 4>>);
  static_assert(knn::Dropout1d<>::accepts<Shape<dyn, 3, 4>> &&
                !knn::Dropout1d<>::accepts<Shape<dyn, 3, 4, 4>>);
  static_assert(knn::Dropout<>::accepts<Shape<dyn, 3>> && knn::Dropout<>::accepts<Shape<dyn, 3, 4, 4>>);
  BOOST_TEST((knn::Dropout2d<>::module<Shape<dyn, 3, 4, 4>, P>().name()) ==
             "Dropout2d(p=0.5, inplace=False)");
  BOOST_TEST((knn::Dropout1d<0.2f>::module<Shape<dyn, 3, 4>, P>().name()) ==
             "Dropout1d(p=0.2, inplace=False)");
  BOOST_TEST((knn::Dropout<0.1f>::module<Shape<dyn, 3>, P>().name()) == "Dropout(p=0.1, inplace=False)");
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
