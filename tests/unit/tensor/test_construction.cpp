// Tensors: extents and element counts, dynamic construction, host round trips, from_blob, devices.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
template <class X, class I>
concept at_takes = requires(X& t, I i) { t.at(i, 0); };
}  // namespace

BOOST_AUTO_TEST_SUITE(tensor)

// Shape facts are compile-time.
static_assert(Shape<2, 3, 5>::rank == 3 && Shape<2, 3, 5>::is_static && Shape<2, 3, 5>::static_numel() == 30);
static_assert(Shape<dyn, 3>::rank_dynamic == 1 && !Shape<dyn, 3>::is_static &&
              Shape<dyn, 3>::static_numel() == dyn);
static_assert(Shape<>::rank == 0 && Shape<>::static_numel() == 1);
static_assert(kiln::shape<Shape<dyn, 4>> && !kiln::shape<int>);
static_assert(kiln::broadcastable<Shape<dyn, 4>, Shape<4>> && !kiln::broadcastable<Shape<dyn, 3>, Shape<4>>);
static_assert(std::is_same_v<kiln::broadcast_shape_t<Shape<dyn, 1>, Shape<1, 7>>, Shape<dyn, 7>>);
static_assert(std::is_same_v<kiln::broadcast_shape_t<Shape<5, 1, 3>, Shape<4, 1>>, Shape<5, 4, 3>>);
// A dynamic extent against a static one > 1 is that one (the dynamic one must be 1 or equal at run time).
static_assert(std::is_same_v<kiln::broadcast_shape_t<Shape<dyn, 3>, Shape<4, 3>>, Shape<4, 3>>);
static_assert(std::is_same_v<kiln::broadcast_shape_t<Shape<4, 3>, Shape<dyn, 1>>, Shape<4, 3>>);
static_assert(std::is_same_v<kiln::broadcast_shape_t<Shape<dyn, 3>, Shape<dyn, 3>>, Shape<dyn, 3>>);
static_assert(std::is_same_v<Tensor<float, Shape<4>>::device, kiln::Cpu>, "the device defaults to the CPU");
static_assert(std::is_same_v<Tensor<kiln::half, Shape<4>>::value_type, float>, "half computes in float");
static_assert(kiln::dtype_name<float>() == "float32" && kiln::dtype_name<kiln::half>() == "float16" &&
              kiln::dtype_name<kiln::bfloat16>() == "bfloat16" &&
              kiln::dtype_name<std::int64_t>() == "int64");

BOOST_AUTO_TEST_CASE_TEMPLATE(static_shape_has_its_extents_and_numel, D, kiln::test::devices) {
  Tensor<float, Shape<2, 3, 5>, D> t;
  BOOST_TEST(t.rank == 3u);
  BOOST_TEST(t.size(0) == 2);
  BOOST_TEST(t.size(1) == 3);
  BOOST_TEST(t.size(2) == 5);
  BOOST_TEST(t.numel() == 30);
  BOOST_TEST(t.nbytes() == 30 * sizeof(float));
  BOOST_TEST(!t.empty());
  BOOST_TEST(t.data() != nullptr);
  BOOST_TEST(kiln::to_string(t.extents()) == "[2, 3, 5]");

  Tensor<double, Shape<>, D> scalar;  // rank 0: one element
  BOOST_TEST(scalar.numel() == 1);
  BOOST_TEST(kiln::to_string(scalar.extents()) == "[]");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dynamic_extents_come_from_the_constructor, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 4>, D> a(7);
  BOOST_TEST(a.size(0) == 7);
  BOOST_TEST(a.size(1) == 4);
  BOOST_TEST(a.numel() == 28);

  Tensor<float, Shape<dyn, 3, dyn>, D> b(2, 5);  // one value per dyn extent, in order
  BOOST_TEST(kiln::to_string(b.extents()) == "[2, 3, 5]");
  BOOST_TEST(b.numel() == 30);

  Tensor<float, Shape<dyn, 4>, D> c(Extents<Shape<dyn, 4>>(3));
  BOOST_TEST(c.numel() == 12);

  Tensor<float, Shape<dyn, 4>, D> empty;  // a dyn shape starts empty, without storage
  BOOST_TEST(empty.numel() == 0);
  BOOST_TEST(empty.empty());
  BOOST_TEST(empty.storage() == nullptr);

  Tensor<float, Shape<dyn, 4>, D> zero_rows(0);
  BOOST_TEST(zero_rows.empty());
  BOOST_TEST(zero_rows.to_vector().empty());
}

// size(-1) is the last extent, as torch's; a dimension outside [-rank, rank) is a ShapeError naming it
// (it read past the extents before).
BOOST_AUTO_TEST_CASE(size_counts_negative_dimensions_from_the_end_and_checks_the_range) {
  Tensor<float, Shape<dyn, 3>> t(2);
  BOOST_TEST(t.size(-1) == 3);
  BOOST_TEST(t.size(-2) == 2);
  BOOST_TEST(t.size(1) == 3);
  const auto says = [](const std::string& part) {
    return [part](const kiln::ShapeError& e) { return std::string(e.what()).find(part) != std::string::npos; };
  };
  BOOST_CHECK_EXCEPTION((void)t.size(2), kiln::ShapeError, says("dimension 2 is out of range for a tensor of rank 2 (expected in [-2, 1])"));
  BOOST_CHECK_EXCEPTION((void)t.size(-3), kiln::ShapeError, says("dimension -3 is out of range"));
  Tensor<float, Shape<>> scalar;
  BOOST_CHECK_EXCEPTION((void)scalar.size(0), kiln::ShapeError, says("rank 0"));
}

// An Extents whose static extent was overwritten makes no tensor and no reshape: the slip `e[0] = n` where
// `e[1]` was meant would have made a Shape<2, 3> tensor of [3, 2].
BOOST_AUTO_TEST_CASE(extents_that_contradict_a_static_shape_are_a_shape_error) {
  Extents<Shape<2, 3>> e;
  e[0] = 3;
  e[1] = 2;
  const auto says = [](const kiln::ShapeError& err) {
    return std::string(err.what()).find("extents [3, 2] do not fit Shape<2, 3> (extent 0 is static: 2)") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION((Tensor<float, Shape<2, 3>>(e)), kiln::ShapeError, says);
  Tensor<float, Shape<6>> flat;
  BOOST_CHECK_EXCEPTION((void)flat.reshape(e), kiln::ShapeError, says);
  Extents<Shape<2, 3>> fine;
  BOOST_TEST(flat.reshape(fine).size(1) == 3);
}

BOOST_AUTO_TEST_CASE(negative_dynamic_extent_is_a_shape_error) {
  BOOST_CHECK_EXCEPTION((Extents<Shape<dyn, 4>>(-3)), kiln::ShapeError, kiln::test::message_contains({"-3"}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(extents_too_large_to_address_are_a_shape_error, D, kiln::test::devices) {
  using Big = Tensor<float, Shape<dyn, dyn>, D>;
  const kiln::index_t e32 = kiln::index_t{1} << 32, e40 = kiln::index_t{1} << 40;
  // 2^32 x 2^32 wraps to 0 elements in int64: without the check this is an empty allocation.
  BOOST_CHECK_EXCEPTION(Big(e32, e32), kiln::ShapeError, kiln::test::message_contains({"[4294967296, 4294967296]"}));
  BOOST_CHECK_EXCEPTION(Big(e40, e40), kiln::ShapeError, kiln::test::message_contains({"memory can address"}));
  BOOST_CHECK_THROW(Big(kiln::index_t{1} << 62, 1), kiln::ShapeError);  // 2^62 floats: 2^64 bytes
  const Tensor<float, Shape<dyn, dyn, dyn>, D> none(e40, e40, 0);  // no elements at all: fine
  BOOST_TEST(none.numel() == 0);
}

BOOST_AUTO_TEST_CASE(extents_and_shapes_print_like_numpy) {
  BOOST_TEST(kiln::to_string(Extents<Shape<dyn, 4>>(3)) == "[3, 4]");
  BOOST_TEST((kiln::shape_name<Shape<dyn, 3, 32, 32>>() == "Shape<dyn, 3, 32, 32>"));
  BOOST_TEST(kiln::shape_name<Shape<>>() == "Shape<>");
  BOOST_TEST((Extents<Shape<dyn, 4>>(3) == Extents<Shape<dyn, 4>>(3)));
  BOOST_TEST(!(Extents<Shape<dyn, 4>>(3) == Extents<Shape<dyn, 4>>(5)));
}

template <class T, class D>
void check_round_trip(std::size_t n, std::uint32_t stream) {
  using S = Shape<dyn>;
  std::vector<T> values;
  if constexpr (std::is_integral_v<T>)
    values = kiln::test::random_integers<T>(n, -1000, 1000, stream);
  else
    values = kiln::test::random_values<T>(n, -100.0, 100.0, stream);
  auto t = kiln::test::make_tensor<D>(values, Extents<S>(static_cast<kiln::index_t>(n)));
  BOOST_TEST(t.numel() == static_cast<kiln::index_t>(n));
  BOOST_TEST(kiln::test::all_equal(t.to_vector(), values));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(from_and_to_vector_round_trip_every_element_type, D, kiln::test::devices) {
  for (std::size_t n : {1u, 7u, 1023u, 100003u}) {
    check_round_trip<float, D>(n, 1);
    check_round_trip<double, D>(n, 2);
    check_round_trip<kiln::half, D>(n, 3);
    check_round_trip<kiln::bfloat16, D>(n, 4);
    check_round_trip<std::int32_t, D>(n, 5);
    check_round_trip<std::int64_t, D>(n, 6);
  }
  const bool flags[] = {true, false, false, true, true, false, true};  // std::vector<bool> has no data()
  auto b = Tensor<bool, Shape<7>, kiln::Cpu>::from(std::span<const bool>(flags, 7), Extents<Shape<7>>{})
               .template to<D>();
  const std::vector<bool> got = b.to_vector();
  BOOST_TEST(got == std::vector<bool>(flags, flags + 7), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(from_keeps_row_major_order, D, kiln::test::devices) {
  const std::vector<float> v = {0, 1, 2, 3, 4, 5};
  auto t = kiln::test::make_tensor<D>(v, Extents<Shape<2, 3>>{});
  BOOST_TEST(t.to_vector() == v, boost::test_tools::per_element());
  auto s = Tensor<float, Shape<2, 3>>::from({0, 1, 2, 3, 4, 5});  // static shapes: an initializer list
  BOOST_TEST(s(1, 0) == 3.0f);
  BOOST_TEST(s(0, 2) == 2.0f);
  BOOST_TEST(s[5] == 5.0f);
  s(1, 2) = 7.0f;
  BOOST_TEST(s.to_vector()[5] == 7.0f);
}

BOOST_AUTO_TEST_CASE(from_rejects_a_wrong_number_of_values) {
  const std::vector<float> v(10, 1.0f);
  BOOST_CHECK_EXCEPTION(
      (Tensor<float, Shape<dyn, 4>>::from(std::span<const float>(v), Extents<Shape<dyn, 4>>(3))),
      kiln::ShapeError, kiln::test::message_contains({"10 values", "[3, 4]", "12 elements"}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fill_sets_every_element_in_one_pass, D, kiln::test::devices) {
  Tensor<double, Shape<dyn, 9>, D> t(1001);
  const auto before = kiln::passes();
  t.fill(2.5);
  BOOST_TEST(kiln::passes() - before == 1u);
  BOOST_TEST(kiln::test::all_equal(t.to_vector(), std::vector<double>(1001 * 9, 2.5)));

  Tensor<kiln::half, Shape<13>, D> h;
  h.fill(0.1);  // stored rounded to half
  const float want = kiln::test::reference_round_half(0.1f);
  BOOST_TEST(kiln::test::all_equal(h.to_vector(), std::vector<float>(13, want)));

  Tensor<float, Shape<dyn>, D> f(5);
  f = 3;  // assigning a number is a fill
  BOOST_TEST(kiln::test::all_equal(f.to_vector(), std::vector<float>(5, 3.0f)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(full_and_zeros_make_filled_tensors, D, kiln::test::devices) {
  auto z = kiln::zeros<float, Shape<dyn, 3>, D>(Extents<Shape<dyn, 3>>(5));
  BOOST_TEST(kiln::test::all_equal(z.to_vector(), std::vector<float>(15, 0.0f)));
  auto f = kiln::full<std::int32_t, Shape<4>, D>(Extents<Shape<4>>{}, 7);
  BOOST_TEST(kiln::test::all_equal(f.to_vector(), std::vector<std::int32_t>(4, 7)));
  // A number that does not fit is refused as fill refuses it (torch.full(..., 300, dtype=uint8) raises),
  // read at run time so that no narrowing happens before the check.
  volatile int big = 300;
  volatile double huge = 1e39;
  BOOST_CHECK_THROW((kiln::full<std::uint8_t, Shape<2>, D>(Extents<Shape<2>>{}, big)), kiln::ValueError);
  BOOST_CHECK_THROW((kiln::full<float, Shape<2>, D>(Extents<Shape<2>>{}, huge)), kiln::ValueError);
  BOOST_TEST((kiln::full<std::uint8_t, Shape<2>, D>(Extents<Shape<2>>{}, 255.0).to_vector()[0] == 255));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(item_reads_a_single_element, D, kiln::test::devices) {
  auto one = kiln::test::make_tensor<D>(std::vector<double>{-4.25}, Extents<Shape<>>{});
  BOOST_TEST(one.item() == -4.25);
  auto h = kiln::test::make_tensor<D>(std::vector<kiln::half>{kiln::from_compute<kiln::half>(1.5f)},
                                      Extents<Shape<1, 1>>{});
  BOOST_TEST(h.item() == 1.5f);  // value_type of half is float
  static_assert(std::is_same_v<decltype(h.item()), float>);

  auto many = kiln::test::make_tensor<D>(std::vector<float>(3, 1.0f), Extents<Shape<3>>{});
  BOOST_CHECK_EXCEPTION(many.item(), kiln::ShapeError, kiln::test::message_contains({"3 elements"}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(from_blob_wraps_memory_without_owning_it, D, kiln::test::devices) {
  const auto values = kiln::test::random_values<float>(35, -1, 1, 11);
  auto owner = kiln::test::make_tensor<D>(values, Extents<Shape<dyn, 5>>(7));
  const auto stats_before = kiln::memory_stats<D>();
  {
    auto blob =
        Tensor<float, Shape<5, 7>, D>::from_blob(owner.data(), Extents<Shape<5, 7>>{}, owner.device_index());
    BOOST_TEST(kiln::memory_stats<D>().num_requests == stats_before.num_requests);  // no allocation
    BOOST_TEST(blob.data() == owner.data());
    BOOST_TEST(blob.storage()->owner == nullptr);
    BOOST_TEST(kiln::test::all_equal(blob.to_vector(), values));
    blob.fill(2.0f);  // writes land in the owner's memory
  }
  // The blob is gone; the memory is still the owner's and holds what the blob wrote.
  BOOST_TEST(kiln::memory_stats<D>().allocated_bytes == stats_before.allocated_bytes);
  BOOST_TEST(kiln::test::all_equal(owner.to_vector(), std::vector<float>(35, 2.0f)));

  if constexpr (std::is_same_v<D, kiln::Cpu>) {
    std::vector<double> host(6, 1.0);
    {
      auto t = Tensor<double, Shape<dyn, 3>>::from_blob(host.data(), Extents<Shape<dyn, 3>>(2));
      t = t * 3.0;
    }
    BOOST_TEST(host == std::vector<double>(6, 3.0), boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(to_another_device_copies_and_to_its_own_is_the_tensor_itself, D,
                              kiln::test::devices) {
  const auto values = kiln::test::random_values<double>(1023, -5, 5, 12);
  auto t = kiln::test::make_tensor<D>(values, Extents<Shape<dyn, 3>>(341));
  // torch: x.to(device) of a tensor already on that device is x itself (no copy, the same storage).
  auto same = t.template to<D>();
  BOOST_TEST(same.shares_storage_with(t));
  BOOST_TEST(t.to(D{}, t.device_index()).shares_storage_with(t));
  Tensor<double, Shape<dyn, 3>, kiln::Cpu> h = t.template to<kiln::Cpu>();
  BOOST_TEST(kiln::to_string(h.extents()) == "[341, 3]");
  BOOST_TEST(kiln::test::all_equal(h.to_vector(), values));
  if constexpr (std::is_same_v<D, kiln::Cpu>) {
    BOOST_TEST(h.shares_storage_with(t));  // x.to("cpu") of a CPU tensor: x; a copy is clone()
    BOOST_TEST(!t.clone().shares_storage_with(t));
    h = t.clone();  // from here h is a copy, as a GPU tensor's .to<kiln::Cpu>() is
  } else {
    BOOST_TEST(static_cast<const void*>(h.data()) != static_cast<const void*>(t.data()));
  }
  h.fill(0.0);  // the copy is independent of the original
  BOOST_TEST(kiln::test::all_equal(t.to_vector(), values));

  auto back = h.to(D{});  // the tag overload
  static_assert(std::is_same_v<decltype(back), Tensor<double, Shape<dyn, 3>, D>>);
  BOOST_TEST(kiln::test::all_equal(back.to_vector(), std::vector<double>(1023, 0.0)));
  if constexpr (std::is_same_v<D, kiln::Cpu>)
    BOOST_TEST(back.shares_storage_with(h));
  else
    BOOST_TEST(!back.shares_storage_with(t));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(assigning_a_tensor_of_other_extents_names_both_shapes, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 4>, D> dst(3), src(5);
  src.fill(1.0f);
  BOOST_CHECK_EXCEPTION(dst = src, kiln::ShapeError,
                        kiln::test::message_contains({"[3, 4]", "[5, 4]", "Shape<dyn, 4>"}));
  BOOST_CHECK_EXCEPTION(kiln::assign(dst, src * 2.0f), kiln::ShapeError,
                        kiln::test::message_contains({"[3, 4]", "[5, 4]"}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_empty_dynamic_tensor_takes_the_extents_it_is_assigned, D,
                              kiln::test::devices) {
  const auto values = kiln::test::random_values<float>(21, -1, 1, 13);
  auto src = kiln::test::make_tensor<D>(values, Extents<Shape<dyn, 7>>(3));
  Tensor<float, Shape<dyn, 7>, D> dst;
  dst = src * 2.0f;
  BOOST_TEST(kiln::to_string(dst.extents()) == "[3, 7]");
  BOOST_TEST(kiln::test::all_close(dst.to_vector(),
                                   kiln::test::reference_map([](double x) { return 2 * x; }, values)));

  auto e = kiln::eval(src + 1.0f);  // eval: a new tensor of the expression's type and extents
  static_assert(std::is_same_v<decltype(e), Tensor<float, Shape<dyn, 7>, D>>);
  BOOST_TEST(kiln::to_string(e.extents()) == "[3, 7]");
}

BOOST_AUTO_TEST_CASE(at_is_checked_in_every_build_and_counts_negative_indices_from_the_end) {
  // (this module is built without KILN_BOUNDS_CHECK; tests/unit/bounds has it on)
  Tensor<float, Shape<dyn, 3>> x(2);
  for (kiln::index_t i = 0; i < 6; ++i) x[i] = static_cast<float>(i);
  BOOST_TEST(x.at(1, 2) == 5.0f);
  BOOST_TEST(x.at(-1, -3) == 3.0f);
  BOOST_CHECK_THROW((void)x.at(2, 0), kiln::IndexError);
  BOOST_CHECK_THROW((void)x.at(0, -4), kiln::IndexError);
  const Tensor<float, Shape<dyn, 3>> empty;
  BOOST_CHECK_THROW((void)empty.at(0, 0), kiln::IndexError);  // no rows at all
  static_assert(!at_takes<Tensor<float, Shape<dyn, 3>>, double>, "at() takes integer indices");
  static_assert(at_takes<Tensor<float, Shape<dyn, 3>>, int>);
}

BOOST_AUTO_TEST_SUITE_END()
