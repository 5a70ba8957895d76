// to_entry / tensor_from_entry: a tensor goes into a safetensors file and comes back as it was, a
// floating-point entry converts into the tensor's type (rounded once), and an entry of another rank,
// static extent or kind of dtype is refused naming the entry, its shape or dtype and what was expected.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <kiln/io/tensor_entry.hpp>
#include <string>
#include <vector>

#include "support/optimizer_checks.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/temp_dir.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::test::says;
}  // namespace

BOOST_AUTO_TEST_SUITE(io)
BOOST_AUTO_TEST_SUITE(tensor_entry)

BOOST_AUTO_TEST_CASE_TEMPLATE(a_tensor_goes_through_a_file_and_comes_back_as_it_was, D, kiln::test::devices) {
  const kiln::test::TempDir dir;
  const std::vector<float> xs{1.5f, -2.0f, 3.25f, 0.0f, 1e-8f, -7.0f};
  const std::vector<std::int64_t> ys{3, 0};
  const auto x = kiln::test::make_tensor<D>(xs, Extents<Shape<dyn, 3>>(2));
  const auto y = kiln::test::make_tensor<D>(ys, Extents<Shape<dyn>>(2));
  const auto ex = kiln::to_entry(x);
  BOOST_TEST(ex.dtype == "F32");
  BOOST_TEST(ex.shape == (std::vector<kiln::index_t>{2, 3}), boost::test_tools::per_element());
  BOOST_TEST(ex.bytes.size() == 6 * sizeof(float));
  BOOST_TEST(kiln::to_entry(y).dtype == "I64");
  kiln::write_safetensors(dir.file("batch.safetensors"), {{"x", ex}, {"y", kiln::to_entry(y)}});
  const auto entries = kiln::read_safetensors(dir.file("batch.safetensors"));
  const auto x2 = kiln::tensor_from_entry<float, Shape<dyn, 3>, D>(entries.at("x"), "x");
  BOOST_TEST(x2.size(0) == 2);
  BOOST_TEST(x2.to_vector() == xs, boost::test_tools::per_element());
  const auto y2 = kiln::tensor_from_entry<std::int64_t, Shape<dyn>, D>(entries.at("y"), "y");
  BOOST_TEST(y2.to_vector() == ys, boost::test_tools::per_element());
  // A static shape that fits takes the entry too.
  const auto x3 = kiln::tensor_from_entry<float, Shape<2, 3>, D>(entries.at("x"), "x");
  BOOST_TEST(x3.to_vector() == xs, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_bool_mask_goes_through_a_file_as_torchs_bool_entries, D, kiln::test::devices) {
  // torch writes a bool tensor as BOOL, a byte each (0 or 1); any other byte reads as true.
  const kiln::test::TempDir dir;
  const auto mask = kiln::Tensor<bool, Shape<2, 3>, D>::from({true, false, false, true, true, false});
  const auto e = kiln::to_entry(mask);
  BOOST_TEST(e.dtype == "BOOL");
  const std::vector<std::uint8_t> bytes{1, 0, 0, 1, 1, 0};
  BOOST_TEST(e.bytes == bytes, boost::test_tools::per_element());
  kiln::write_safetensors(dir.file("mask.safetensors"), {{"mask", e}});
  const auto back = kiln::tensor_from_entry<bool, Shape<dyn, 3>, D>(
      kiln::read_safetensors(dir.file("mask.safetensors")).at("mask"), "mask");
  BOOST_TEST(back.to_vector() == mask.to_vector(), boost::test_tools::per_element());
  auto odd = e;
  odd.bytes[1] = 7;
  const auto seven = kiln::tensor_from_entry<bool, Shape<2, 3>, D>(odd).to_vector();
  BOOST_TEST(seven[1]);
  BOOST_CHECK_EXCEPTION((void)(kiln::tensor_from_entry<bool, Shape<2, 3>>(kiln::make_entry<std::uint8_t>(bytes, {2, 3}),
                                                                        "m")),
                        kiln::ValueError, says("'m' is U8, expected BOOL"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_floating_point_entry_converts_into_the_tensors_type, D, kiln::test::devices) {
  // torch saves float64 or float16 as often as float32; as its copy_ between dtypes, the values are
  // converted (rounded once, to nearest even).
  const std::vector<double> wide{0.1, -1.0 / 3.0, 65504.0, 1e-9};
  const auto f64 = kiln::make_entry<double>(wide, {2, 2});
  const auto as_float = kiln::tensor_from_entry<float, Shape<2, 2>, D>(f64).to_vector();
  const auto as_half = kiln::tensor_from_entry<kiln::half, Shape<2, 2>, D>(f64).to_vector();
  for (std::size_t i = 0; i != wide.size(); ++i) {
    BOOST_TEST(as_float[i] == static_cast<float>(wide[i]));
    BOOST_TEST(kiln::to_compute(as_half[i]) == kiln::to_compute(kiln::from_compute<kiln::half>(wide[i])));
  }
  // Rounded once: 1 + 2^-11 + 2^-40 lies just above the half midpoint between 1 and 1 + 2^-10, so it
  // rounds up; through float first it would lose 2^-40, land on the midpoint and round to even, 1.
  const std::vector<double> above_midpoint{1.0 + 0x1p-11 + 0x1p-40};
  const auto once = kiln::tensor_from_entry<kiln::half, Shape<1>, D>(kiln::make_entry<double>(above_midpoint, {1}));
  BOOST_TEST(kiln::to_compute(once.to_vector()[0]) == 1.0f + 0x1p-10f);
  // Half bits back into float: exact (every half is a float).
  const auto f16 = kiln::to_entry(kiln::tensor_from_entry<kiln::half, Shape<2, 2>>(f64));
  BOOST_TEST(f16.dtype == "F16");
  const auto back = kiln::tensor_from_entry<float, Shape<dyn, 2>, D>(f16).to_vector();
  for (std::size_t i = 0; i != wide.size(); ++i) BOOST_TEST(back[i] == kiln::to_compute(as_half[i]));
}

BOOST_AUTO_TEST_CASE(an_entry_that_does_not_fit_is_refused_naming_it_and_what_was_expected) {
  const std::vector<float> six(6, 1.0f);
  const std::vector<std::int64_t> two{1, 2};
  const auto x = kiln::make_entry<float>(six, {2, 3});
  BOOST_CHECK_EXCEPTION((void)(kiln::tensor_from_entry<float, Shape<dyn, 3, 1>>(x, "x")), kiln::ShapeError,
                        says("kiln::tensor_from_entry: 'x' has shape [2, 3] (rank 2), expected Shape<dyn, 3, 1>"));
  BOOST_CHECK_EXCEPTION((void)(kiln::tensor_from_entry<float, Shape<dyn, 4>>(x, "x")), kiln::ShapeError,
                        says("'x' has shape [2, 3], expected Shape<dyn, 4> (extent 1 is static: 4)"));
  BOOST_CHECK_EXCEPTION((void)(kiln::tensor_from_entry<std::int64_t, Shape<dyn, 3>>(x, "labels")), kiln::ValueError,
                        says("kiln::tensor_from_entry: 'labels' is F32, expected I64"));
  BOOST_CHECK_EXCEPTION((void)(kiln::tensor_from_entry<float, Shape<dyn>>(kiln::make_entry<std::int64_t>(two, {2}))),
                        kiln::ValueError,
                        says("'the entry' is I64, expected a floating-point dtype (F16, BF16, F32 or F64)"));
  auto negative = x;  // a hand-made entry (make_entry checks nothing): no allocation of -2 rows
  negative.shape = {-2, 3};
  BOOST_CHECK_THROW((void)(kiln::tensor_from_entry<float, Shape<dyn, 3>>(negative, "x")), kiln::ShapeError);
  auto short_bytes = x;
  short_bytes.bytes.resize(20);
  BOOST_CHECK_EXCEPTION((void)(kiln::tensor_from_entry<float, Shape<dyn, 3>>(short_bytes, "x")), kiln::ValueError,
                        says("'x' holds 20 bytes for shape [2, 3] of F32"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
