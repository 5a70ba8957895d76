// Element access checks (this module is compiled with KILN_BOUNDS_CHECK=1, tests/CMakeLists.txt): t[i]
// and t(i, ...) outside their extents throw IndexError as torch's indexing raises; at() is checked in
// every build and takes torch's negative indices.
#include <boost/test/unit_test.hpp>
#include <kiln/kiln.hpp>
#include <string>

static_assert(KILN_BOUNDS_CHECK == 1, "tests/unit/bounds is compiled with -DKILN_BOUNDS_CHECK=1");

namespace {
using kiln::dyn;
using kiln::Shape;
using kiln::Tensor;
auto says(std::string text) {
  return [text = std::move(text)](const kiln::IndexError& e) { return std::string(e.what()) == text; };
}
}  // namespace

BOOST_AUTO_TEST_SUITE(bounds)

BOOST_AUTO_TEST_CASE(an_index_past_its_extent_is_an_index_error_naming_it) {
  Tensor<float, Shape<dyn, 3>> x(4);
  for (kiln::index_t i = 0; i < 12; ++i) x[i] = static_cast<float>(i);
  BOOST_TEST(x(3, 2) == 11.0f);
  BOOST_TEST(x[11] == 11.0f);
  BOOST_CHECK_EXCEPTION((void)x(4, 0), kiln::IndexError,
                        says("kiln::Tensor: index 4 is out of bounds for dimension 0 with size 4"));
  BOOST_CHECK_EXCEPTION((void)x(0, 3), kiln::IndexError,
                        says("kiln::Tensor: index 3 is out of bounds for dimension 1 with size 3"));
  BOOST_CHECK_EXCEPTION((void)x(-1, 0), kiln::IndexError,  // unchecked access has no negative indices
                        says("kiln::Tensor: index -1 is out of bounds for dimension 0 with size 4"));
  BOOST_CHECK_EXCEPTION((void)x[12], kiln::IndexError,
                        says("kiln::Tensor: flat index 12 is out of bounds for 12 elements"));
  const auto& c = x;
  BOOST_CHECK_THROW((void)c(0, 3), kiln::IndexError);
  BOOST_CHECK_THROW((void)c[-1], kiln::IndexError);
  BOOST_CHECK_THROW((void)x(0, 3), kiln::Error);  // an IndexError is a kiln::Error
}

BOOST_AUTO_TEST_CASE(at_takes_negative_indices_from_the_end_as_torch_does) {
  Tensor<int, Shape<2, 3>> x;
  for (kiln::index_t i = 0; i < 6; ++i) x[i] = static_cast<int>(i);
  BOOST_TEST(x.at(-1, -1) == 5);
  BOOST_TEST(x.at(-2, 0) == 0);
  BOOST_TEST(x.at(1, -3) == 3);
  x.at(0, -1) = 42;
  BOOST_TEST(x(0, 2) == 42);
  BOOST_CHECK_EXCEPTION((void)x.at(-3, 0), kiln::IndexError,
                        says("kiln::Tensor: index -3 is out of bounds for dimension 0 with size 2"));
  BOOST_CHECK_EXCEPTION((void)x.at(0, 3), kiln::IndexError,
                        says("kiln::Tensor: index 3 is out of bounds for dimension 1 with size 3"));
}

BOOST_AUTO_TEST_SUITE_END()
