// Tensors that share storage: copies, reshapes and slices; clone and copy-assignment copy the data.
#include <boost/test/unit_test.hpp>
#include <span>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

std::vector<float> iota(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(tensor)

BOOST_AUTO_TEST_CASE_TEMPLATE(copies_share_storage_and_clone_does_not, D, kiln::test::devices) {
  auto a = kiln::test::make_tensor<D>(iota(12), Extents<Shape<dyn, 4>>(3));
  Tensor<float, Shape<dyn, 4>, D> b = a;  // copy construction shares, like torch::Tensor
  BOOST_TEST(b.shares_storage_with(a));
  BOOST_TEST(b.data() == a.data());
  b.fill(5.0f);
  BOOST_TEST(kiln::test::all_equal(a.to_vector(), std::vector<float>(12, 5.0f)));

  auto c = a.clone();
  BOOST_TEST(!c.shares_storage_with(a));
  BOOST_TEST(c.data() != a.data());
  BOOST_TEST(kiln::to_string(c.extents()) == "[3, 4]");
  BOOST_TEST(kiln::test::all_equal(c.to_vector(), std::vector<float>(12, 5.0f)));
  c.fill(1.0f);
  BOOST_TEST(kiln::test::all_equal(a.to_vector(), std::vector<float>(12, 5.0f)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(copy_assignment_writes_values_and_move_assignment_rebinds, D,
                              kiln::test::devices) {
  auto a = kiln::test::make_tensor<D>(iota(6), Extents<Shape<2, 3>>{});
  Tensor<float, Shape<2, 3>, D> b;
  const float* b_data = b.data();
  b = a;  // copy assignment evaluates into b's own storage
  BOOST_TEST(b.data() == b_data);
  BOOST_TEST(!b.shares_storage_with(a));
  BOOST_TEST(kiln::test::all_equal(b.to_vector(), iota(6)));

  Tensor<float, Shape<2, 3>, D> c;
  c = std::move(a);  // move assignment takes a's storage
  BOOST_TEST(kiln::test::all_equal(c.to_vector(), iota(6)));

  Tensor<float, Shape<2, 3>, D> self = c;
  self = self;  // self-assignment is a no-op
  BOOST_TEST(kiln::test::all_equal(self.to_vector(), iota(6)));

  // A temporary view on the right is moved in too: t becomes a view of x (torch's t = x[0:2]), and
  // writing t writes x (docs/tensors.md); clone() copies.
  auto x = kiln::test::make_tensor<D>(iota(12), Extents<Shape<dyn, 3>>(4));
  Tensor<float, Shape<dyn, 3>, D> t(4), copied(2);
  t = x.slice(0, 2);
  copied = x.slice(0, 2).clone();
  BOOST_TEST(t.size(0) == 2);
  BOOST_TEST(t.shares_storage_with(x));
  BOOST_TEST(!copied.shares_storage_with(x));
  t = 0.0f;
  BOOST_TEST(kiln::test::all_equal(x.to_vector(), std::vector<float>{0, 0, 0, 0, 0, 0, 6, 7, 8, 9, 10, 11}));
  BOOST_TEST(kiln::test::all_equal(copied.to_vector(), std::vector<float>{0, 1, 2, 3, 4, 5}));
}

// libtorch's rule: a temporary view on the left (a slice, a reshape) is written into, whatever the right
// side, a temporary Tensor included; rebinding it would write nothing (torch: x[1:] = x[:-1] * 2).
BOOST_AUTO_TEST_CASE_TEMPLATE(a_temporary_view_is_written_into_by_a_temporary_tensor, D, kiln::test::devices) {
  auto x = kiln::test::make_tensor<D>(iota(5), Extents<Shape<dyn>>(5));
  x.slice(1, 5) = kiln::eval(x.slice(0, 4) * 2.0f);
  BOOST_TEST(kiln::test::all_equal(x.to_vector(), std::vector<float>{0, 0, 2, 4, 6}));
  x.slice(0, 2) = x.slice(3, 5).clone();
  BOOST_TEST(kiln::test::all_equal(x.to_vector(), std::vector<float>{4, 6, 2, 4, 6}));
  auto m = kiln::test::make_tensor<D>(iota(6), Extents<Shape<dyn, 3>>(2));
  m.reshape(Extents<Shape<dyn>>(6)) = kiln::test::make_tensor<D>(std::vector<float>(6, 7.0f), Extents<Shape<dyn>>(6));
  BOOST_TEST(kiln::test::all_equal(m.to_vector(), std::vector<float>(6, 7.0f)));
  // An overlapping temporary view is refused as any overlapping operand is, before anything is written.
  BOOST_CHECK_THROW(x.slice(1, 5) = x.slice(0, 4), kiln::ValueError);
  BOOST_TEST(kiln::test::all_equal(x.to_vector(), std::vector<float>{4, 6, 2, 4, 6}));
  // A named tensor still takes a temporary's storage.
  Tensor<float, Shape<dyn>, D> named = x;
  named = kiln::eval(x * 10.0f);
  BOOST_TEST(!named.shares_storage_with(x));
  BOOST_TEST(kiln::test::all_equal(x.to_vector(), std::vector<float>{4, 6, 2, 4, 6}));
  // Compound assignment writes a temporary view in place (torch: x[1:3] += 1), with broadcasting.
  x.slice(1, 3) += 1.0f;
  x.slice(0, 2) *= kiln::test::make_tensor<D>(std::vector<float>{2, 3}, Extents<Shape<dyn>>(2));
  (x.slice(3, 5) -= 1.0f) /= 2.0f;
  BOOST_TEST(kiln::test::all_equal(x.to_vector(), std::vector<float>{8, 21, 3, 1.5f, 2.5f}));
  auto rows = kiln::test::make_tensor<D>(iota(6), Extents<Shape<dyn, 3>>(2));
  rows.slice(1, 2) += kiln::Tensor<float, Shape<3>, D>::from({10, 20, 30});
  BOOST_TEST(kiln::test::all_equal(rows.to_vector(), std::vector<float>{0, 1, 2, 13, 24, 35}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_view_of_a_tensor_without_storage_is_not_given_one, D, kiln::test::devices) {
  // A default-constructed tensor has no storage and no elements; so has any view of it. Assigning to
  // the view used to allocate the temporary view and write there, so the values were lost without a
  // word; now, as torch's copy_ into an empty view, another shape is a ShapeError.
  const auto x = kiln::test::make_tensor<D>(iota(6), Extents<Shape<dyn, 3>>(2));
  Tensor<float, Shape<dyn, 3>, D> t;
  BOOST_CHECK_THROW(kiln::flatten(t) = kiln::flatten(x), kiln::ShapeError);
  BOOST_CHECK_THROW(t.reshape(Extents<Shape<dyn>>(0)) = kiln::eval(kiln::flatten(x) * 2.0f),
                    kiln::ShapeError);
  BOOST_CHECK_THROW(t.slice(0, 0) = x, kiln::ShapeError);
  BOOST_CHECK_THROW(kiln::flatten(t) = kiln::flatten(x) * 2.0f, kiln::ShapeError);
  BOOST_TEST(t.storage() == nullptr);
  BOOST_TEST(t.numel() == 0);
  kiln::flatten(t) = 1.0f;  // a fill of nothing, as torch's fill_ of an empty tensor
  kiln::flatten(t) = kiln::Tensor<float, Shape<dyn>, D>();  // nothing into nothing
  BOOST_TEST(t.storage() == nullptr);
  // The named tensor itself still takes the expression's extents (kiln's `Tensor t; t = e;`).
  t = x * 2.0f;
  BOOST_TEST(kiln::test::all_equal(t.to_vector(), std::vector<float>{0, 2, 4, 6, 8, 10}));
}

BOOST_AUTO_TEST_CASE(copy_from_a_span_of_the_tensors_own_storage_is_a_memmove) {
  // x[0:6].copy_from(x[2:8]): overlapping bytes (memcpy's undefined behaviour; ASan's
  // memcpy-param-overlap), copied as memmove does.
  auto x = kiln::test::make_tensor<kiln::Cpu>(iota(8), Extents<Shape<dyn>>(8));
  x.slice(0, 6).copy_from(std::span<const float>(x.data() + 2, 6));
  BOOST_TEST(kiln::test::all_equal(x.to_vector(), std::vector<float>{2, 3, 4, 5, 6, 7, 6, 7}));
  x.slice(2, 8).copy_from(std::span<const float>(x.data(), 6));
  BOOST_TEST(kiln::test::all_equal(x.to_vector(), std::vector<float>{2, 3, 2, 3, 4, 5, 6, 7}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reshape_views_the_same_storage, D, kiln::test::devices) {
  auto a = kiln::test::make_tensor<D>(iota(24), Extents<Shape<dyn, 4>>(6));
  auto b = a.template reshape<Shape<dyn, 8>>();  // the dyn extent is inferred
  static_assert(std::is_same_v<decltype(b), Tensor<float, Shape<dyn, 8>, D>>);
  BOOST_TEST(kiln::to_string(b.extents()) == "[3, 8]");
  BOOST_TEST(b.storage() == a.storage());                      // shares_storage_with takes the same type
  BOOST_TEST(kiln::test::all_equal(b.to_vector(), iota(24)));  // row-major order kept

  auto flat = a.template reshape<Shape<24>>();
  BOOST_TEST(flat.numel() == 24);
  auto cube = a.reshape(Extents<Shape<dyn, dyn, 2>>(3, 4));
  BOOST_TEST(kiln::to_string(cube.extents()) == "[3, 4, 2]");
  cube.fill(-1.0f);  // writes through the view
  BOOST_TEST(kiln::test::all_equal(a.to_vector(), std::vector<float>(24, -1.0f)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reshape_to_another_element_count_names_both_shapes, D, kiln::test::devices) {
  auto a = kiln::test::make_tensor<D>(iota(24), Extents<Shape<dyn, 4>>(6));
  BOOST_CHECK_EXCEPTION(a.reshape(Extents<Shape<dyn, 5>>(5)), kiln::ShapeError,
                        kiln::test::message_contains({"[6, 4]", "[5, 5]", "24 elements", "25 elements"}));
  BOOST_CHECK_EXCEPTION((a.template reshape<Shape<dyn, 5>>()), kiln::ShapeError,
                        kiln::test::message_contains({"[6, 4]", "Shape<dyn, 5>"}));
  BOOST_CHECK_EXCEPTION((a.template reshape<Shape<5, 5>>()), kiln::ShapeError,
                        kiln::test::message_contains({"[6, 4]", "[5, 5]"}));
  // Extents whose product wraps to 24 ((2^62 + 6) x 4 = 24 mod 2^64), and negative ones ([-6, -4]):
  // refused, not a view of 24 elements with 2^62 rows (a slice of which wrote past the storage).
  BOOST_CHECK_EXCEPTION(a.reshape(Extents<Shape<dyn, 4>>((kiln::index_t{1} << 62) + 6)), kiln::ShapeError,
                        kiln::test::message_contains({"more elements than memory can address"}));
  Extents<Shape<dyn, dyn>> negative(6, 4);
  negative[0] = -6;
  negative[1] = -4;
  BOOST_CHECK_EXCEPTION(a.reshape(negative), kiln::ShapeError, kiln::test::message_contains({"negative extent"}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(slice_is_a_view_of_rows_sharing_storage, D, kiln::test::devices) {
  auto a = kiln::test::make_tensor<D>(iota(15), Extents<Shape<dyn, 3>>(5));
  auto s = a.slice(1, 4);
  BOOST_TEST(kiln::to_string(s.extents()) == "[3, 3]");
  BOOST_TEST(s.shares_storage_with(a));
  BOOST_TEST(s.data() == a.data() + 3);
  BOOST_TEST(kiln::test::all_equal(s.to_vector(), std::vector<float>{3, 4, 5, 6, 7, 8, 9, 10, 11}));

  s.fill(-2.0f);  // writes land in rows 1..3 of a
  std::vector<float> want = iota(15);
  for (int i = 3; i < 12; ++i) want[static_cast<std::size_t>(i)] = -2.0f;
  BOOST_TEST(kiln::test::all_equal(a.to_vector(), want));

  s = s + 1.0f;  // an expression into a slice: only the slice changes
  for (int i = 3; i < 12; ++i) want[static_cast<std::size_t>(i)] = -1.0f;
  BOOST_TEST(kiln::test::all_equal(a.to_vector(), want));

  BOOST_TEST(a.slice(2, 2).numel() == 0);
  BOOST_TEST(a.slice(0, 5).numel() == 15);
  BOOST_CHECK_EXCEPTION(a.slice(3, 6), kiln::ShapeError, kiln::test::message_contains({"[3, 6)", "[5, 3]"}));
  BOOST_CHECK_THROW(a.slice(-1, 2), kiln::ShapeError);
  BOOST_CHECK_THROW(a.slice(3, 2), kiln::ShapeError);

  auto fixed = kiln::test::make_tensor<D>(iota(6), Extents<Shape<2, 3>>{});
  BOOST_CHECK_THROW(fixed.slice(0, 1), kiln::ShapeError);  // a static first extent cannot change
  BOOST_TEST(fixed.slice(0, 2).numel() == 6);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(storage_outlives_the_tensor_that_made_it, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 2>, D> view;
  {
    auto a = kiln::test::make_tensor<D>(iota(10), Extents<Shape<dyn, 2>>(5));
    view = a.slice(3, 5);  // move-assigned: rebinds to a's storage
  }
  BOOST_TEST(kiln::test::all_equal(view.to_vector(), std::vector<float>{6, 7, 8, 9}));
}

BOOST_AUTO_TEST_SUITE_END()
