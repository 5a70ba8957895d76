// flatten, unflatten, unsqueeze and squeeze (ops/views.hpp), as torch's x.flatten(start, end),
// x.unflatten(dim, sizes), x.unsqueeze(dim), x.squeeze(dim): the shapes in the type (static where they
// can be), views sharing the tensor's storage with its values in order, each the other's inverse, and
// torch's refusals (sizes that do not multiply up, in its words).
#include <boost/test/unit_test.hpp>
#include <type_traits>
#include <vector>

#include <kiln/kiln.hpp>

#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/throws.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)
BOOST_AUTO_TEST_SUITE(views)

BOOST_AUTO_TEST_CASE_TEMPLATE(the_shapes_are_torchs_and_the_storage_shared, D, kt::devices) {
  const auto v = kt::random_values<float>(2 * 3 * 4 * 5, -1, 1, 331);
  const auto x = kt::make_tensor<D>(v, Extents<Shape<dyn, 3, 4, 5>>(2));
  const auto all = kiln::flatten(x);  // torch's default start_dim 0
  static_assert(std::is_same_v<typename decltype(all)::shape_type, Shape<dyn>>);
  BOOST_TEST(all.size(0) == 120);
  const auto features = kiln::flatten<1>(x);  // nn.Flatten's [N, C H W]
  static_assert(std::is_same_v<typename decltype(features)::shape_type, Shape<dyn, 60>>);
  const auto middle = kiln::flatten<1, 2>(x);
  static_assert(std::is_same_v<typename decltype(middle)::shape_type, Shape<dyn, 12, 5>>);
  const auto same = kiln::flatten<-1, -1>(x);  // one dimension: as it is
  static_assert(std::is_same_v<typename decltype(same)::shape_type, Shape<dyn, 3, 4, 5>>);
  BOOST_TEST((all.data() == x.data() && features.data() == x.data() && middle.data() == x.data()));  // views
  BOOST_TEST(middle.to_vector() == v, boost::test_tools::per_element());  // row-major order kept

  const auto back = kiln::unflatten<1, 3, -1>(features);  // the inverse, one size inferred
  static_assert(std::is_same_v<typename decltype(back)::shape_type, Shape<dyn, 3, 20>>);
  const auto images = kiln::unflatten<-1, 4, 5>(back);
  static_assert(std::is_same_v<typename decltype(images)::shape_type, Shape<dyn, 3, 4, 5>>);
  const bool same_extents = images.extents() == x.extents();
  BOOST_TEST(same_extents);
  const auto rows = kiln::unflatten<0, 2, -1>(all);  // a dyn extent: the inferred size is dyn too
  static_assert(std::is_same_v<typename decltype(rows)::shape_type, Shape<2, dyn>>);
  BOOST_TEST(rows.size(1) == 60);

  const auto column = kiln::unsqueeze<-1>(features);  // [N, 60, 1]
  static_assert(std::is_same_v<typename decltype(column)::shape_type, Shape<dyn, 60, 1>>);
  const auto batch = kiln::unsqueeze<0>(x);  // [1, N, 3, 4, 5]
  static_assert(std::is_same_v<typename decltype(batch)::shape_type, Shape<1, dyn, 3, 4, 5>>);
  const auto squeezed = kiln::squeeze<-1>(column);
  static_assert(std::is_same_v<typename decltype(squeezed)::shape_type, Shape<dyn, 60>>);
  const auto kept = kiln::squeeze<1>(x);  // extent 3: torch's squeeze leaves it
  static_assert(std::is_same_v<typename decltype(kept)::shape_type, Shape<dyn, 3, 4, 5>>);
  BOOST_TEST((squeezed.data() == x.data() && kept.shares_storage_with(x) && batch.data() == x.data()));
  BOOST_TEST(batch.to_vector() == v, boost::test_tools::per_element());

  Tensor<float, Shape<>, D> scalar;
  scalar = 2.5f;
  const auto one = kiln::flatten(scalar);  // torch: a 0-d tensor flattens to [1]
  static_assert(std::is_same_v<typename decltype(one)::shape_type, Shape<1>>);
  BOOST_TEST(one.to_vector() == std::vector<float>{2.5f});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_view_is_written_through, D, kt::devices) {
  Tensor<float, Shape<dyn, 4>, D> x(2);
  x = 0.0f;
  auto u = kiln::unflatten<1, 2, 2>(x);
  u = 1.0f;  // assigning writes into x's storage, as torch's x.unflatten(1, (2, 2)).fill_(1)
  BOOST_TEST(kiln::sum(x).item() == 8.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sizes_that_do_not_multiply_up_are_refused, D, kt::devices) {
  Tensor<float, Shape<dyn, dyn>, D> x(2, 12);
  x = 1.0f;
  const auto split = kiln::unflatten<1, 3, 4>(x);  // a dyn extent that fits
  BOOST_TEST(split.size(2) == 4);
  BOOST_TEST(kt::throws_with<kiln::ShapeError>(
      [&] { (void)kiln::unflatten<1, 5, 2>(x); },
      "kiln::unflatten: provided sizes [5, 2] don't multiply up to the size of dim 1 (12) in the input tensor [2, 12]"));
  BOOST_TEST(kt::throws_with<kiln::ShapeError>([&] { (void)kiln::unflatten<-1, 5, -1>(x); }, "sizes [5, -1]"));
  // Static extents: compile errors (tests/compile_fail/unflatten_size_mismatch.cpp for the layer).
  static_assert(!kiln::detail::unflattened_sizes<5, 2>::fit(12));
  static_assert(kiln::detail::unflattened_sizes<3, -1>::fit(12));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
