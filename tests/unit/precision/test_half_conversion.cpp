// The host conversions between float and binary16 / bfloat16 (core/half.hpp; every load and store of a
// half or bfloat16 on the CPU goes through them): every one of the 65536 values loads exactly, and stores
// round to the nearest value with ties to even, subnormals included, overflowing to inf, NaN staying NaN.
// Checked against values computed from the bit fields in double precision, independently of the code
// under test.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <kiln/core/half.hpp>
#include <limits>
#include <random>
#include <vector>

namespace {
/// The value of binary16 bits, from the definition (double holds every one exactly); NaN for NaNs.
double half_value(std::uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 25);
  return sign ? -v : v;
}
std::uint16_t bits_of(kiln::half h) {
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
/// The binary16 value nearest to x (ties to the even mantissa), by search over the positive finite values;
/// 0x7c00 (inf) beyond 65504 + half an ulp.
std::uint16_t nearest_half(double x) {
  const double a = std::abs(x);
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (a >= 65520.0) return sign | 0x7c00;  // 65504 + 16: the tie rounds to the even one, which is inf
  std::uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {  // the largest value <= a
    const std::uint16_t mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
    if (half_value(mid) <= a) lo = mid;
    else hi = static_cast<std::uint16_t>(mid - 1);
  }
  std::uint16_t r = lo;
  if (lo < 0x7bff) {
    const double below = a - half_value(lo), above = half_value(static_cast<std::uint16_t>(lo + 1)) - a;
    if (above < below || (above == below && (lo & 1))) r = static_cast<std::uint16_t>(lo + 1);
  }
  return sign | r;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(precision)
BOOST_AUTO_TEST_SUITE(half_conversion)

BOOST_AUTO_TEST_CASE(every_half_loads_exactly_and_stores_back_to_itself) {
  int wrong = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    kiln::half h;
    std::memcpy(static_cast<void*>(&h), &bits, 2);
    const float f = kiln::to_compute(h);
    const double want = half_value(bits);
    if (std::isnan(want)) {
      wrong += !std::isnan(f) || !std::isnan(kiln::to_compute(kiln::from_compute<kiln::half>(f)));
      // A quiet float NaN with the sign and payload, signalling ones quietened, as torch's loads
      // (0x7c01 -> 0x7fc02000).
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      wrong += u != ((static_cast<std::uint32_t>(bits & 0x8000u) << 16) | 0x7fc00000u |
                     (static_cast<std::uint32_t>(bits & 0x3ffu) << 13));
    } else {
      wrong += static_cast<double>(f) != want || std::signbit(f) != std::signbit(want);
      wrong += bits_of(kiln::from_compute<kiln::half>(f)) != bits;
    }
  }
  BOOST_TEST(wrong == 0);
}

BOOST_AUTO_TEST_CASE(stores_round_to_nearest_even_with_subnormals_and_overflow) {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e6f, 5.96e-8f, 2.98e-8f, 2.99e-8f,
                           6.1e-5f, 6.103515625e-05f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1e-30f,
                           std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity()};
  std::mt19937 g(20261130);
  std::uniform_int_distribution<int> e(-30, 17);
  std::uniform_real_distribution<float> m(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) xs.push_back((i % 2 ? -1.0f : 1.0f) * std::ldexp(m(g), e(g)));
  for (std::uint16_t b = 0; b < 0x7c00; ++b) {  // every midpoint between neighbours: the ties
    const double mid = (half_value(b) + half_value(static_cast<std::uint16_t>(b + 1))) / 2;
    xs.push_back(static_cast<float>(mid));  // exact in float: binary16 midpoints need 12 bits
  }
  int wrong = 0;
  for (float x : xs) {
    const std::uint16_t got = bits_of(kiln::from_compute<kiln::half>(x));
    const std::uint16_t want = std::isinf(x) ? (x > 0 ? 0x7c00 : 0xfc00) : nearest_half(x);
    if (got != want && wrong++ < 5) BOOST_TEST_MESSAGE(x << ": got " << got << ", want " << want);
  }
  BOOST_TEST(wrong == 0);
  const std::uint16_t nan = bits_of(kiln::from_compute<kiln::half>(std::numeric_limits<float>::quiet_NaN()));
  BOOST_TEST(((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0));
}

BOOST_AUTO_TEST_CASE(doubles_and_wide_integers_round_once) {
  // A double just past a tie between two binary16 neighbours rounds to the nearer one; through float it
  // would first land on the tie, then go to the even neighbour (half of these cases).
  int wrong = 0;
  for (std::uint16_t b = 0; b < 0x7bff; ++b) {
    const double mid = (half_value(b) + half_value(static_cast<std::uint16_t>(b + 1))) / 2;
    for (const double x : {mid * (1 + 0x1p-40), mid * (1 - 0x1p-40), -mid * (1 + 0x1p-40), mid}) {
      const std::uint16_t got = bits_of(kiln::from_compute<kiln::half>(x)), want = nearest_half(x);
      if (got != want && wrong++ < 5) BOOST_TEST_MESSAGE(x << ": got " << got << ", want " << want);
    }
  }
  BOOST_TEST(wrong == 0);
  BOOST_TEST(bits_of(kiln::from_compute<kiln::half>(70000.0)) == 0x7c00);
  BOOST_TEST(bits_of(kiln::from_compute<kiln::half>(-std::numeric_limits<double>::infinity())) == 0xfc00);
  BOOST_TEST(
      std::isnan(kiln::to_compute(kiln::from_compute<kiln::half>(std::numeric_limits<double>::quiet_NaN()))));
  // bfloat16: 1 + 2^-8 + 2^-40 is past the tie between 1 and 1 + 2^-7; the tie itself goes to the even 1.
  const auto bf = [](auto v) { return kiln::to_compute(kiln::from_compute<kiln::bfloat16>(v)); };
  BOOST_TEST(bf(1 + 0x1p-8 + 0x1p-40) == 1.0078125f);
  BOOST_TEST(bf(-(1 + 0x1p-8 + 0x1p-40)) == -1.0078125f);
  BOOST_TEST(bf(1 + 0x1p-8) == 1.0f);
  BOOST_TEST(bf(1 + 0x1p-8 - 0x1p-40) == 1.0f);
  // An int64 past a tie: 2^30 + 2^22 + 1 lies between 2^30 and 2^30 + 2^23; float would round it onto
  // the tie (2^30 + 2^22), and bfloat16 then to 2^30.
  BOOST_TEST(bf(std::int64_t{(1 << 30) + (1 << 22) + 1}) == 0x1p30f + 0x1p23f);
  BOOST_TEST(bf(std::int64_t{(1 << 30) + (1 << 22)}) == 0x1p30f);
  // Past 2^53 too (a double in between would round 2^62 + 2^54 + 1 onto the tie 2^62 + 2^54), and for
  // the most negative int64, and unsigned.
  BOOST_TEST(bf((std::int64_t{1} << 62) + (std::int64_t{1} << 54) + 1) == 0x1.02p62f);
  BOOST_TEST(bf(-(std::int64_t{1} << 62) - (std::int64_t{1} << 54) - 1) == -0x1.02p62f);
  BOOST_TEST(bf(std::numeric_limits<std::int64_t>::min()) == -0x1p63f);
  BOOST_TEST(bf(std::uint64_t{0xffffffffffffffffu}) == 0x1p64f);
  BOOST_TEST(kiln::to_compute(kiln::from_compute<kiln::half>(std::int64_t{2049})) ==
             2048.0f);  // the tie: even
  BOOST_TEST(kiln::to_compute(kiln::from_compute<kiln::half>(std::int32_t{2051})) == 2052.0f);
  // long double, compared in its own type: 1 + 2^-11 + 2^-60 is past the tie (a double would drop 2^-60).
  BOOST_TEST(kiln::to_compute(kiln::from_compute<kiln::half>(1.0L + 0x1p-11L + 0x1p-60L)) == 1.0f + 0x1p-10f);
  // Constructed from a double (`kiln::half h = x;`), also once: CUDA's types and kiln's stand-ins
  // (tests/unit/halfless) alike.
  const kiln::half direct = 1 + 0x1p-11 + 0x1p-40;
  BOOST_TEST(bits_of(direct) == 0x3c01);
  const kiln::bfloat16 direct_bf = 1 + 0x1p-8 + 0x1p-40;
  BOOST_TEST(kiln::to_compute(direct_bf) == 1.0078125f);
  // Past float's range: inf, as the value itself rounds to in both types.
  BOOST_TEST(std::isinf(bf(1e39)));
  BOOST_TEST(bf(3.39e38) == 0x1.fep127f);  // bfloat16's largest finite value, 3.3895e38
}

BOOST_AUTO_TEST_CASE(every_bfloat16_loads_exactly_and_stores_round_to_nearest_even) {
  // bfloat16 is float's upper 16 bits: value = sign, 8-bit exponent, 7-bit mantissa.
  const auto value = [](std::uint16_t b) {
    const int sign = b >> 15, e = (b >> 7) & 0xff, m = b & 0x7f;
    double v;
    if (e == 255) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else if (e == 0) v = std::ldexp(m, -133);
    else v = std::ldexp(128 + m, e - 134);
    return sign ? -v : v;
  };
  const auto bits = [](kiln::bfloat16 h) {
    std::uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  };
  int wrong = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto raw = static_cast<std::uint16_t>(b);
    kiln::bfloat16 h;
    std::memcpy(static_cast<void*>(&h), &raw, 2);
    const float f = kiln::to_compute(h);
    const double want = value(raw);
    if (std::isnan(want)) {
      wrong += !std::isnan(f) || !std::isnan(kiln::to_compute(kiln::from_compute<kiln::bfloat16>(f)));
    } else {
      wrong += static_cast<double>(f) != want || std::signbit(f) != std::signbit(want);
      wrong += bits(kiln::from_compute<kiln::bfloat16>(f)) != raw;
    }
    // The midpoint above each finite value is a tie: it rounds to the even mantissa of the two.
    const auto next = static_cast<std::uint16_t>(raw + 1);
    if ((raw & 0x7f80) != 0x7f80 && (next & 0x7f80) != 0x7f80 && (raw & 0x7fff) != 0x7fff && !(raw & 0x8000)) {
      const float mid = static_cast<float>((value(raw) + value(next)) / 2);  // exact: 9 bits of mantissa
      const std::uint16_t even = (raw & 1) ? next : raw;
      if (bits(kiln::from_compute<kiln::bfloat16>(mid)) != even && wrong++ < 5)
        BOOST_TEST_MESSAGE("tie above " << raw << " rounds to " << bits(kiln::from_compute<kiln::bfloat16>(mid)));
      // Just above and below the tie round up and down.
      const float up = std::nextafter(mid, std::numeric_limits<float>::infinity());
      const float down = std::nextafter(mid, -std::numeric_limits<float>::infinity());
      wrong += bits(kiln::from_compute<kiln::bfloat16>(up)) != next;
      wrong += bits(kiln::from_compute<kiln::bfloat16>(down)) != raw;
    }
  }
  BOOST_TEST(wrong == 0);
  BOOST_TEST(bits(kiln::from_compute<kiln::bfloat16>(3.4e38f)) == 0x7f80);  // beyond the largest finite: inf
  const std::uint16_t nan = bits(kiln::from_compute<kiln::bfloat16>(std::numeric_limits<float>::quiet_NaN()));
  BOOST_TEST(((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0));
  const std::uint16_t snan = bits(kiln::from_compute<kiln::bfloat16>(std::numeric_limits<float>::signaling_NaN()));
  BOOST_TEST(((snan & 0x7f80) == 0x7f80 && (snan & 0x7f) != 0));  // never rounds into inf
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
