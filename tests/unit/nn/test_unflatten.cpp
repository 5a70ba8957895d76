// Unflatten: torch's shapes (negative dims, an inferred -1, dyn dimensions around it), the values kept
// in order both ways, a decoder (Linear -> Unflatten -> ConvTranspose2d) against float64 finite
// differences, and the refusals and names as torch's. PyTorch parity: test_parity_layers.cpp
// (layers_pixel_shuffle.json's unflatten cases).
#include <boost/test/unit_test.hpp>
#include <kiln/nn/nn.hpp>
#include <string>
#include <type_traits>
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
BOOST_AUTO_TEST_SUITE(unflatten)

BOOST_AUTO_TEST_CASE(unflatten_has_torchs_shapes_refusals_and_names) {
  using P = kiln::Policy<kiln::Fp32, kiln::Cpu>;
  static_assert(std::is_same_v<knn::Unflatten<1, 16, 4, 4>::output<Shape<dyn, 256>>, Shape<dyn, 16, 4, 4>>);
  static_assert(std::is_same_v<knn::Unflatten<-1, 3, -1>::output<Shape<dyn, dyn, 12>>, Shape<dyn, dyn, 3, 4>>);
  static_assert(std::is_same_v<knn::Unflatten<1, -1, 2>::output<Shape<dyn, 12, 5>>, Shape<dyn, 6, 2, 5>>);
  static_assert(std::is_same_v<knn::Unflatten<-2, 12>::output<Shape<dyn, 12, 5>>, Shape<dyn, 12, 5>>);
  // The batch (dimension 0) stays: a model's backward counts its rows there (kiln::unflatten<0, ...>
  // views a tensor so).
  static_assert(!knn::Unflatten<0, 2, 3>::accepts<Shape<6, 4>> && !knn::Unflatten<-2, 2, 3>::accepts<Shape<6, 4>>);
  static_assert(std::is_same_v<knn::Unflatten<0, 2, 3>::expects<Shape<6, 4>>, knn::unflatten_keeps_the_batch>);
  // torch: "Provided sizes [5, 2] don't multiply up to the size of dim 1 (12)"; kiln: a compile error.
  static_assert(!knn::Unflatten<1, 5, 2>::accepts<Shape<dyn, 12>>);
  static_assert(!knn::Unflatten<1, 5, -1>::accepts<Shape<dyn, 12>>);  // 12 is no multiple of 5
  static_assert(!knn::Unflatten<1, 3, 4>::accepts<Shape<dyn, dyn>>);  // a dyn extent: not known to fit
  static_assert(!knn::Unflatten<2, 3, 4>::accepts<Shape<dyn, 12>>);   // no dimension 2
  static_assert(!knn::Unflatten<-3, 3, 4>::accepts<Shape<dyn, 12>>);
  // What the compile error shows it takes.
  static_assert(std::is_same_v<knn::Unflatten<1, 16, 4, 4>::expects<Shape<dyn, 100>>, Shape<dyn, 256>>);
  static_assert(std::is_same_v<knn::Unflatten<2, 3, 4>::expects<Shape<dyn, 12>>,
                               knn::any_shape_of_rank_at_least<3>>);
  BOOST_TEST((knn::Unflatten<1, 16, 4, 4>::module<Shape<dyn, 256>, P>().name()) ==
             "Unflatten(dim=1, unflattened_size=(16, 4, 4))");
  BOOST_TEST((knn::Unflatten<-1, 3, -1>::module<Shape<dyn, 2, 12>, P>().name()) ==
             "Unflatten(dim=-1, unflattened_size=(3, -1))");
  BOOST_TEST((knn::Unflatten<1, 12>::module<Shape<dyn, 12>, P>().name()) == "Unflatten(dim=1, unflattened_size=(12,))");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unflatten_keeps_the_values_in_order_both_ways, D, kt::devices) {
  using In = Shape<dyn, dyn, 12>;  // a sequence of 12 features, of any length
  using P = kiln::Policy<kiln::Fp32, D>;
  knn::Model<knn::Sequential<knn::Unflatten<-1, 3, -1>>, In, P> m(0);
  static_assert(std::is_same_v<typename decltype(m)::output_shape, Shape<dyn, dyn, 3, 4>>);
  std::vector<float> xs(2 * 5 * 12);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);
  const auto x = kt::make_tensor<D>(xs, Extents<In>(2, 5));
  const auto y = m.forward(x);
  BOOST_TEST((y.extents() == Extents<Shape<dyn, dyn, 3, 4>>(2, 5)));
  BOOST_TEST(y.to_vector() == xs, boost::test_tools::per_element());  // a view: row-major order kept
  const auto dx = m.backward_input(y);
  BOOST_TEST((dx.extents() == Extents<In>(2, 5)));
  BOOST_TEST(dx.to_vector() == xs, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_decoder_through_unflatten_matches_numeric, D, kt::devices) {
  // torch: nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Unflatten(1, (2, 4, 4)), nn.ConvTranspose2d(2, 3, 2, 2))
  using Decoder = knn::Sequential<knn::Linear<6, 32>, knn::Tanh, knn::Unflatten<1, 2, 4, 4>,
                                  knn::ConvTranspose2d<2, 3, 2, 2>, knn::Sigmoid>;
  static_assert(std::is_same_v<typename knn::Model<Decoder, Shape<dyn, 6>, kiln::Policy<kiln::Fp32, D>>::output_shape,
                               Shape<dyn, 3, 8, 8>>);
  kt::check_model_gradients<Decoder, Shape<dyn, 6>, D>(Extents<Shape<dyn, 6>>(3), -1, 1, 0, 141, true);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
