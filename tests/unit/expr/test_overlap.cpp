// Partial overlap (as torch's assert_no_partial_overlap): an assignment whose expression reads the
// destination's memory at other indices (a shifted slice, a broadcast row of the destination) is refused
// before anything is written, fused or not; the destination read in place, and disjoint slices of one
// storage, are fine.
#include <boost/test/unit_test.hpp>
#include <kiln/core/fusion.hpp>
#include <optional>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
using Rows = Shape<dyn, 7>;
constexpr kiln::index_t n = 1001;  // long enough for several CPU threads and many CUDA blocks
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)
BOOST_AUTO_TEST_SUITE(overlap)

BOOST_AUTO_TEST_CASE_TEMPLATE(a_shifted_slice_of_the_destination_is_refused_and_nothing_is_written, D, kiln::test::devices) {
  const auto v = kt::random_values<float>(static_cast<std::size_t>(n * 7), -1, 1, 5);
  auto t = kt::make_tensor<D>(v, kiln::Extents<Rows>(n));
  auto head = t.slice(0, n - 1), tail = t.slice(1, n);
  for (const bool fused : {true, false}) {
    BOOST_TEST_CONTEXT("fused " << fused) {
      std::optional<kiln::Unfused> off;
      if (!fused) off.emplace();
      BOOST_CHECK_EXCEPTION(head = tail * 2.0f + 1.0f, kiln::ValueError,
                            kt::message_contains({"kiln::assign", "unsupported operation", "clone()"}));
      BOOST_CHECK_EXCEPTION(tail = head * 2.0f, kiln::ValueError, kt::message_contains({"unsupported operation"}));
      BOOST_CHECK_EXCEPTION(head += tail, kiln::ValueError, kt::message_contains({"unsupported operation"}));
      BOOST_TEST(t.to_vector() == v);
    }
  }
  head = tail.clone() * 2.0f;  // the way out: the operand in memory of its own
  const auto got = t.to_vector();
  for (std::size_t i = 0; i < static_cast<std::size_t>((n - 1) * 7); ++i) BOOST_TEST_REQUIRE(got[i] == 2.0f * v[i + 7]);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_row_of_the_destination_broadcast_over_it_is_refused, D, kiln::test::devices) {
  Tensor<float, Rows, D> t(n);
  t.fill(1.0f);
  const auto row = t.slice(0, 1).template reshape<Shape<7>>();  // [7], read by every row while row 0 is written
  BOOST_CHECK_EXCEPTION(t = t + row, kiln::ValueError, kt::message_contains({"unsupported operation"}));
  const auto column = t.template reshape<Shape<dyn>>().slice(0, n).template reshape<Shape<dyn, 1>>();  // t's first n values
  BOOST_CHECK_EXCEPTION(t += column, kiln::ValueError, kt::message_contains({"unsupported operation"}));
  BOOST_CHECK_EXCEPTION(t = kiln::where(t > 0.0f, row, 0.0f), kiln::ValueError, kt::message_contains({"unsupported operation"}));
  for (float x : t.to_vector()) BOOST_TEST_REQUIRE(x == 1.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_destination_in_place_and_disjoint_slices_are_fine, D, kiln::test::devices) {
  const auto v = kt::random_values<float>(static_cast<std::size_t>(n * 7), -1, 1, 6);
  auto t = kt::make_tensor<D>(v, kiln::Extents<Rows>(n));
  t = t * 2.0f + t;  // every read at the index it writes
  t += t;
  auto flat = t.template reshape<Shape<dyn>>();  // the same memory, the same elements
  flat = kiln::cast<float>(flat) - 1.0f;
  auto a = t.slice(0, 500), b = t.slice(500, 1000);  // one storage, no element in common
  a = b * 0.5f;
  const auto got = t.to_vector();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::size_t src = i < 500 * 7 ? i + 500 * 7 : i;
    const float want = i < 500 * 7 ? ((v[src] * 2.0f + v[src]) * 2.0f - 1.0f) * 0.5f : (v[i] * 2.0f + v[i]) * 2.0f - 1.0f;
    BOOST_TEST_REQUIRE(got[i] == want);
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
