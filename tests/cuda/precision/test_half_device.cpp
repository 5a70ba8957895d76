// Half and bfloat16 on the GPU convert exactly as kiln's host conversions do (which tests/unit/precision
// checks against the definition): every one of the 65536 bit patterns loads to the same float, and
// floats store to the same bits: random bit patterns, every tie between neighbouring 16-bit values
// (round half to even), subnormals, the overflow boundary, infinities. NaN must stay NaN (the payload
// may differ: the device's conversion gives the canonical NaN). Doubles and int64s store as on the host too,
// each rounded once.
#include <kiln/cuda.hpp>

#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

namespace {
using kiln::Cuda;
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
using Vec = Shape<dyn>;

template <class H>
std::uint16_t bits_of(H h) {
  return std::bit_cast<std::uint16_t>(h);
}
template <class H>
H from_bits(std::uint16_t b) {
  return std::bit_cast<H>(b);
}

/// Every 16-bit pattern, loaded on the device (one cast pass) and on the host.
template <class H>
int load_mismatches() {
  std::vector<H> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = from_bits<H>(static_cast<std::uint16_t>(i));
  const auto d = Tensor<H, Vec>::from(std::span<const H>(all), Extents<Vec>(65536)).template to<Cuda>();
  Tensor<float, Vec, Cuda> f(65536);
  kiln::assign(f, kiln::cast<float>(d));
  const std::vector<float> got = f.to_vector();
  int bad = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const float want = kiln::to_compute(all[i]);
    const bool ok = std::isnan(want) ? std::isnan(got[i]) : std::bit_cast<std::uint32_t>(want) == std::bit_cast<std::uint32_t>(got[i]);
    if (!ok && ++bad <= 5)
      BOOST_TEST_MESSAGE("load 0x" << std::hex << i << std::dec << ": host " << want << ", device " << got[i]);
  }
  return bad;
}

/// Floats that exercise rounding to H: random bit patterns, the ties between neighbouring H values (and
/// their negatives), and the specials.
template <class H>
std::vector<float> store_cases() {
  std::vector<float> v;
  std::mt19937 gen(7);
  for (int i = 0; i < (1 << 20); ++i) v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(gen())));
  constexpr std::uint32_t largest_finite = std::is_same_v<H, kiln::half> ? 0x7bffu : 0x7f7fu;
  for (std::uint32_t b = 0; b < largest_finite; ++b) {
    const float a = kiln::to_compute(from_bits<H>(static_cast<std::uint16_t>(b)));
    const float c = kiln::to_compute(from_bits<H>(static_cast<std::uint16_t>(b + 1)));
    const float mid = a + (c - a) / 2;  // exact: the neighbours are 11 (or 8) significant bits apart
    v.push_back(mid);
    v.push_back(-mid);
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, 65504.0f, 65519.996f, 65520.0f, 65536.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-45f,
                  3.3895314e38f, 3.3961776e38f, 3.4028235e38f, inf, -inf, std::numeric_limits<float>::quiet_NaN()})
    v.push_back(x);
  return v;
}

/// Values of type V (float, double, int64) stored to H on the device and on the host: each rounded once,
/// so both give the same bits (NaN: a NaN).
template <class H, class V>
int store_mismatches(const std::vector<V>& v) {
  const auto n = static_cast<index_t>(v.size());
  const auto d = Tensor<V, Vec>::from(std::span<const V>(v), Extents<Vec>(n)).template to<Cuda>();
  Tensor<H, Vec, Cuda> h(n);
  kiln::assign(h, kiln::cast<H>(d));
  const std::vector<H> got = h.to_vector();
  int bad = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const H want = kiln::from_compute<H>(v[i]);
    const bool nan = std::isnan(kiln::to_compute(want));
    const bool ok = nan ? std::isnan(kiln::to_compute(got[i])) : bits_of(want) == bits_of(got[i]);
    if (!ok && ++bad <= 5)
      BOOST_TEST_MESSAGE("store " << v[i] << ": host 0x" << std::hex << bits_of(want) << ", device 0x"
                                  << bits_of(got[i]) << std::dec);
  }
  return bad;
}
/// Doubles at, just past and just short of every tie between neighbouring H values (through float, the
/// ones just off a tie would land on it), and their negatives.
template <class H>
std::vector<double> double_cases() {
  std::vector<double> v;
  constexpr std::uint32_t largest_finite = std::is_same_v<H, kiln::half> ? 0x7bffu : 0x7f7fu;
  for (std::uint32_t b = 0; b < largest_finite; ++b) {
    const double a = kiln::to_compute(from_bits<H>(static_cast<std::uint16_t>(b)));
    const double c = kiln::to_compute(from_bits<H>(static_cast<std::uint16_t>(b + 1)));
    const double mid = a + (c - a) / 2;
    for (const double x : {mid, mid * (1 + 0x1p-40), mid * (1 - 0x1p-40)}) v.push_back(x), v.push_back(-x);
  }
  v.push_back(std::numeric_limits<double>::quiet_NaN());
  v.push_back(1e300);
  return v;
}
/// int64s: random ones of every magnitude, past-the-tie ones beyond 2^53, the extremes.
std::vector<std::int64_t> int64_cases() {
  std::vector<std::int64_t> v = {0,
                                 1,
                                 -1,
                                 2049,
                                 2051,
                                 (std::int64_t{1} << 62) + (std::int64_t{1} << 54) + 1,
                                 std::numeric_limits<std::int64_t>::min(),
                                 std::numeric_limits<std::int64_t>::max()};
  std::mt19937_64 gen(11);
  for (int i = 0; i < 100000; ++i) v.push_back(static_cast<std::int64_t>(gen() >> (gen() % 64)));
  return v;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(precision)
BOOST_AUTO_TEST_SUITE(device_conversions)

BOOST_AUTO_TEST_CASE(every_half_and_bfloat16_loads_on_the_device_as_on_the_host) {
  BOOST_TEST(load_mismatches<kiln::half>() == 0);
  BOOST_TEST(load_mismatches<kiln::bfloat16>() == 0);
}

BOOST_AUTO_TEST_CASE(floats_store_to_half_and_bfloat16_on_the_device_as_on_the_host) {
  BOOST_TEST(store_mismatches<kiln::half>(store_cases<kiln::half>()) == 0);
  BOOST_TEST(store_mismatches<kiln::bfloat16>(store_cases<kiln::bfloat16>()) == 0);
}

BOOST_AUTO_TEST_CASE(doubles_and_int64s_store_to_half_and_bfloat16_on_the_device_as_on_the_host) {
  BOOST_TEST((store_mismatches<kiln::half>(double_cases<kiln::half>())) == 0);
  BOOST_TEST((store_mismatches<kiln::bfloat16>(double_cases<kiln::bfloat16>())) == 0);
  BOOST_TEST((store_mismatches<kiln::half>(int64_cases())) == 0);
  BOOST_TEST((store_mismatches<kiln::bfloat16>(int64_cases())) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
