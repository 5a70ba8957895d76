// PixelShuffle and PixelUnshuffle: forward by the definition (channel c R² + a R + b of pixel (h, w) is
// pixel (h R + a, w R + b) of channel c), each the other's inverse, backward against float64 finite
// differences, the shapes, refusals and names as torch's. PyTorch parity: test_parity_layers.cpp.
#include <boost/test/unit_test.hpp>
#include <kiln/nn/nn.hpp>
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
using kiln::index_t;
using kiln::Shape;
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(pixel_shuffle)

BOOST_AUTO_TEST_CASE_TEMPLATE(pixel_shuffle_follows_its_definition_and_unshuffle_undoes_it, D, kt::devices) {
  constexpr index_t R = 3, C = 2, H = 2, W = 4;
  using Small = Shape<dyn, C * R * R, H, W>;
  using Big = Shape<dyn, C, H * R, W * R>;
  using P = kiln::Policy<kiln::Fp32, D>;
  knn::Model<knn::Sequential<knn::PixelShuffle<R>>, Small, P> up(0);
  knn::Model<knn::Sequential<knn::PixelUnshuffle<R>>, Big, P> down(0);
  static_assert(std::is_same_v<typename decltype(up)::output_shape, Big>);
  static_assert(std::is_same_v<typename decltype(down)::output_shape, Small>);
  std::vector<float> xs(static_cast<std::size_t>(2 * C * R * R * H * W));
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);  // every value apart
  const auto x = kt::make_tensor<D>(xs, Extents<Small>(2));
  const auto y = up.forward(x);
  const auto got = y.to_vector();
  int wrong = 0;
  for (index_t n = 0; n < 2; ++n)
    for (index_t c = 0; c < C; ++c)
      for (index_t h = 0; h < H; ++h)
        for (index_t w = 0; w < W; ++w)
          for (index_t a = 0; a < R; ++a)
            for (index_t b = 0; b < R; ++b) {
              const index_t big = ((n * C + c) * H * R + h * R + a) * W * R + w * R + b;
              const index_t small = ((n * C * R * R + c * R * R + a * R + b) * H + h) * W + w;
              wrong += got[static_cast<std::size_t>(big)] != xs[static_cast<std::size_t>(small)];
            }
  BOOST_TEST(wrong == 0);
  BOOST_TEST(down.forward(y).to_vector() == xs, boost::test_tools::per_element());
  // backward: the inverse permutation of dy, for both
  BOOST_TEST(up.backward_input(y).to_vector() == xs, boost::test_tools::per_element());
  (void)down.forward(y);
  BOOST_TEST(down.backward_input(x).to_vector() == got, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pixel_shuffle_backward_matches_numeric, D, kt::devices) {
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 8, 3, 1, 1>, knn::PixelShuffle<2>, knn::Tanh>,
                            Shape<dyn, 2, 3, 3>, D>(Extents<Shape<dyn, 2, 3, 3>>(2), -1, 1, 0, 131, true);
  kt::check_model_gradients<knn::Sequential<knn::PixelUnshuffle<2>, knn::Conv2d<12, 2, 1>, knn::Sigmoid>,
                            Shape<dyn, 3, 4, 6>, D>(Extents<Shape<dyn, 3, 4, 6>>(2), -1, 1, 0, 132, true);
}

BOOST_AUTO_TEST_CASE(pixel_shuffle_has_torchs_shapes_refusals_and_names) {
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  static_assert(knn::PixelShuffle<2>::accepts<Shape<dyn, 8, 3, 3>> &&
                !knn::PixelShuffle<2>::accepts<Shape<dyn, 6, 3, 3>>);
  static_assert(knn::PixelUnshuffle<2>::accepts<Shape<dyn, 3, 4, 6>> &&
                !knn::PixelUnshuffle<2>::accepts<Shape<dyn, 3, 4, 5>> &&
                !knn::PixelUnshuffle<2>::accepts<Shape<dyn, 3, 3, 6>>);
  static_assert(!knn::PixelShuffle<2>::accepts<Shape<dyn, 8, 3>>);
  BOOST_TEST((knn::PixelShuffle<2>::module<Shape<dyn, 8, 3, 3>, P>().name()) ==
             "PixelShuffle(upscale_factor=2)");
  BOOST_TEST((knn::PixelUnshuffle<3>::module<Shape<dyn, 1, 3, 6>, P>().name()) ==
             "PixelUnshuffle(downscale_factor=3)");
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
