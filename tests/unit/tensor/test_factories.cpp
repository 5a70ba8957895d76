// Tensor factories against torch's (tests/parity/fixtures/factories.json): arange, linspace and eye values,
// their errors in torch's words; ones and the *_like family; rand, randn and randint drawn from a seed.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/tensor/factories.hpp"
#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/throws.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

/// The fixture's values against a factory's: integers exactly; floats within 4 float32 ulps of the range's
/// largest magnitude (torch's CPU kernels add the step to a vector's first element, kiln multiplies).
template <class T>
void check_values(const std::vector<T>& got, const nlohmann::json& want, double scale,
                  const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      if constexpr (std::is_integral_v<T>) {
        BOOST_TEST(static_cast<std::int64_t>(got[i]) == want[i].get<std::int64_t>(), "element " << i);
      } else {
        const double tolerance = 4 * std::numeric_limits<float>::epsilon() * scale;
        BOOST_TEST(std::abs(static_cast<double>(got[i]) - want[i].get<double>()) <= tolerance,
                   "element " << i << ": " << got[i] << " against " << want[i].get<double>());
      }
    }
  }
}

template <class D, class F>
void for_dtype(const std::string& dtype, F&& f) {
  if (dtype == "float32") f(float{});
  else if (dtype == "float64") f(double{});
  else if (dtype == "int64") f(std::int64_t{});
  else if (dtype == "int32") f(std::int32_t{});
  else if (dtype == "uint8") f(std::uint8_t{});
  else BOOST_FAIL("factories.json: unknown dtype " << dtype);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(tensor)
BOOST_AUTO_TEST_SUITE(factories)

BOOST_AUTO_TEST_CASE_TEMPLATE(arange_linspace_and_eye_match_pytorch, D, kiln::test::devices) {
  const nlohmann::json f = kiln::test::parity::load("factories.json");
  for (const auto& c : f["arange"]) {
    const std::string what = "arange(" + c["start"].dump() + ", " + c["end"].dump() + ", " +
                             c["step"].dump() + ", " + c["dtype"].get<std::string>() + ")";
    const double a = c["start"], b = c["end"], s = c["step"];
    for_dtype<D>(c["dtype"], [&]<class T>(T) {
      const Tensor<T, Shape<dyn>, D> t = kiln::arange<T, D>(a, b, s);
      check_values(t.to_vector(), c["values"], std::max({std::abs(a), std::abs(b), 1.0}), what);
    });
  }
  for (const auto& c : f["linspace"]) {
    const std::string what = "linspace(" + c["start"].dump() + ", " + c["end"].dump() + ", " +
                             c["steps"].dump() + ", " + c["dtype"].get<std::string>() + ")";
    const double a = c["start"], b = c["end"];
    const kiln::index_t n = c["steps"];
    for_dtype<D>(c["dtype"], [&]<class T>(T) {
      // an integer bound as torch's int Scalar (-1 into uint8 is 255; -1.0 does not fit)
      const Tensor<T, Shape<dyn>, D> t = c["start"].is_number_integer()
                                             ? kiln::linspace<T, D>(c["start"].get<std::int64_t>(), b, n)
                                             : kiln::linspace<T, D>(a, b, n);
      check_values(t.to_vector(), c["values"], std::max({std::abs(a), std::abs(b), 1.0}), what);
    });
  }
  for (const auto& c : f["eye"]) {
    const auto t = kiln::eye<float, D>(c["n"], c["m"]);
    BOOST_TEST(t.size(0) == c["n"].get<kiln::index_t>());
    BOOST_TEST(t.size(1) == c["m"].get<kiln::index_t>());
    check_values(t.to_vector(), c["values"], 1.0, "eye(" + c["n"].dump() + ", " + c["m"].dump() + ")");
  }
  // Integer bounds in their own types: arange(end) and int64 ranges far from 0, exact.
  BOOST_TEST((kiln::arange<std::int64_t, D>(4).to_vector()) == (std::vector<std::int64_t>{0, 1, 2, 3}),
             boost::test_tools::per_element());
  const std::int64_t big = std::int64_t{1} << 62;
  BOOST_TEST((kiln::arange<std::int64_t, D>(-big, big, big).to_vector()) ==
                 (std::vector<std::int64_t>{-big, 0}),
             boost::test_tools::per_element());
  BOOST_TEST((kiln::eye<std::int32_t, D>(2).to_vector()) == (std::vector<std::int32_t>{1, 0, 0, 1}),
             boost::test_tools::per_element());
  // half rounds each value once (torch: 50000 in float16 is 49984).
  const auto h = kiln::arange<kiln::half, D>(0, 70000, 10000).to_vector();
  BOOST_TEST_REQUIRE(h.size() == 7u);
  BOOST_TEST(kiln::to_compute(h[5]) == 49984.0f);
  const auto hl = kiln::linspace<kiln::bfloat16, D>(0, 1, 5).to_vector();
  BOOST_TEST_REQUIRE(hl.size() == 5u);
  BOOST_TEST(kiln::to_compute(hl[1]) == 0.25f);
  BOOST_TEST(kiln::to_compute(hl[4]) == 1.0f);
}

// Each error in torch's words, and the value that caused it.
BOOST_AUTO_TEST_CASE(bad_ranges_are_value_errors_in_torchs_words) {
  using kiln::test::throws_with;
  using V = kiln::ValueError;
  BOOST_TEST(throws_with<V>([] { (void)kiln::arange<float>(0, 5, 0); }, "step must be nonzero"));
  // 0.5 truncates to an int64 step of 0, as torch's
  BOOST_TEST(throws_with<V>([] { (void)kiln::arange<std::int64_t>(1, 2.5, 0.5); }, "step must be nonzero"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::arange<float>(5, 0); },
                            "upper bound and larger bound inconsistent with step sign (start 5, end 0, "
                            "step 1)"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::arange<float>(0, std::numeric_limits<double>::infinity()); },
                            "unsupported range: 0 -> inf"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::arange<float>(0, 1, std::nan("")); }, "step must be nonzero"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::arange<float>(0, 1e30); }, "invalid size, possible overflow?"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::arange<std::int64_t>(0, 1e30); }, "1e+30 does not fit int64"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::linspace<float>(0, 1, -1); },
                            "number of steps must be non-negative (got -1)"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::linspace<std::uint8_t>(0, 300, 3); },
                            "the number 300 does not fit uint8"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::eye<float>(-1); }, "n must be greater or equal to 0, got -1"));
  BOOST_TEST(throws_with<V>([] { (void)kiln::eye<float>(2, -2); },
                            "m must be greater or equal to 0, got -2"));
  // NaN bounds are torch's NaN values, not errors
  const auto nan = kiln::linspace<float>(std::nan(""), 1, 3).to_vector();
  BOOST_TEST(std::all_of(nan.begin(), nan.end(), [](float v) { return std::isnan(v); }));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(ones_and_the_like_family_keep_type_shape_and_device, D, kiln::test::devices) {
  const auto o = kiln::ones<float, Shape<dyn, 3>, D>(Extents<Shape<dyn, 3>>(2));
  BOOST_TEST(o.to_vector() == std::vector<float>(6, 1.0f), boost::test_tools::per_element());
  BOOST_TEST((kiln::ones<std::uint8_t, Shape<2>, D>().to_vector()) == (std::vector<std::uint8_t>{1, 1}),
             boost::test_tools::per_element());
  const auto z = kiln::zeros_like(o);
  static_assert(std::is_same_v<std::remove_const_t<decltype(z)>, Tensor<float, Shape<dyn, 3>, D>>);
  BOOST_TEST(z.size(0) == 2);
  BOOST_TEST(z.to_vector() == std::vector<float>(6, 0.0f), boost::test_tools::per_element());
  BOOST_TEST(z.data() != o.data());  // new storage
  BOOST_TEST(kiln::ones_like(z).to_vector() == std::vector<float>(6, 1.0f), boost::test_tools::per_element());
  BOOST_TEST(kiln::full_like(z, 2.5).to_vector() == std::vector<float>(6, 2.5f),
             boost::test_tools::per_element());
  BOOST_TEST(kiln::empty_like(z).numel() == 6);
  BOOST_TEST(z.device_index() == o.device_index());
  const Tensor<float, Shape<dyn, 3>, D> none;
  BOOST_TEST(kiln::zeros_like(none).numel() == 0);
  const auto u8 = kiln::zeros<std::uint8_t, Shape<2>, D>();
  BOOST_CHECK_THROW((void)kiln::full_like(u8, 300), kiln::ValueError);  // as full's
}

// rand: [0, 1) with T's significand bits (never 1, even in half); randn: mean 0, variance 1; randint:
// [low, high). One seed draws the same values on every device (they are drawn on the host).
BOOST_AUTO_TEST_CASE_TEMPLATE(seeded_draws_have_their_distributions, D, kiln::test::devices) {
  std::mt19937_64 g(7);
  const Extents<Shape<dyn>> n(20000);
  const auto u = kiln::rand<float, Shape<dyn>, D>(n, g).to_vector();
  const auto [lo, hi] = std::minmax_element(u.begin(), u.end());
  BOOST_TEST(*lo >= 0.0f);
  BOOST_TEST(*hi < 1.0f);
  double mean = 0, var = 0;
  for (float v : u) mean += v;
  mean /= static_cast<double>(u.size());
  for (float v : u) var += (v - mean) * (v - mean);
  var /= static_cast<double>(u.size());
  BOOST_TEST(std::abs(mean - 0.5) < 0.01);  // 4.9 standard errors (sqrt(1/12 / 20000) = 0.002)
  BOOST_TEST(std::abs(var - 1.0 / 12) < 0.003);

  const auto hu = kiln::rand<kiln::half, Shape<dyn>, D>(n, g).to_vector();  // 11 bits: 1 - 2^-11 at most
  BOOST_TEST(std::all_of(hu.begin(), hu.end(), [](kiln::half v) {
    const float f = kiln::to_compute(v);
    return f >= 0.0f && f < 1.0f && f * 2048.0f == std::floor(f * 2048.0f);
  }));

  const auto z = kiln::randn<double, Shape<dyn>, D>(n, g).to_vector();
  double zm = 0, zv = 0;
  for (double v : z) zm += v;
  zm /= static_cast<double>(z.size());
  for (double v : z) zv += (v - zm) * (v - zm);
  zv /= static_cast<double>(z.size());
  BOOST_TEST(std::abs(zm) < 0.035);  // 4.9 standard errors (1 / sqrt(20000) = 0.0071)
  BOOST_TEST(std::abs(zv - 1.0) < 0.05);

  const auto k = kiln::randint<std::int64_t, Shape<dyn>, D>(-3, 4, n, g).to_vector();
  std::vector<int> counts(7, 0);
  for (std::int64_t v : k) {
    BOOST_TEST_REQUIRE((v >= -3 && v < 4));
    ++counts[static_cast<std::size_t>(v + 3)];
  }
  for (int c : counts) BOOST_TEST(std::abs(c - 20000 / 7) < 250);  // each about 2857 +- 4.9 sigma (48)

  // The same seed, the same tensor, on any device; a static shape needs no extents.
  std::mt19937_64 g1(11), g2(11);
  const auto a = kiln::rand<float, Shape<2, 3>, D>(g1);
  const auto b = kiln::rand<float, Shape<2, 3>, kiln::Cpu>(g2);
  BOOST_TEST(a.to_vector() == b.to_vector(), boost::test_tools::per_element());
  const auto r = kiln::randn_like(a, g1);
  const auto r2 = kiln::randn<float, Shape<2, 3>>(g2);
  BOOST_TEST(r.to_vector() == r2.to_vector(), boost::test_tools::per_element());
  BOOST_TEST(kiln::rand_like(a, g1).numel() == 6);

  using kiln::test::throws_with;
  BOOST_TEST(throws_with<kiln::ValueError>([&] { (void)kiln::randint<std::int64_t, Shape<2>, D>(5, 5, g); },
                                           "expects 'from' to be less than 'to', but got from=5 >= to=5"));
  BOOST_TEST(throws_with<kiln::ValueError>([&] { (void)kiln::randint<std::uint8_t, Shape<2>, D>(-1, 5, g); },
                                           "[-1, 5) is outside uint8's range"));
  BOOST_TEST(throws_with<kiln::ValueError>([&] { (void)kiln::randint<std::uint8_t, Shape<2>, D>(0, 257, g); },
                                           "[0, 257) is outside uint8's range"));
  BOOST_TEST((kiln::randint<std::uint8_t, Shape<4>, D>(0, 256, g).numel()) == 4);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
