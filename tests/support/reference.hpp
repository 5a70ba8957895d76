/// Test references: seeded random inputs, float64 reference math, and closeness checks whose
/// tolerances come from the element type (float ~1e-6 relative, half ~1e-3, bfloat16 ~1e-2).
#pragma once
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <kiln/kiln.hpp>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::test {

// ---- element types -------------------------------------------------------------------------------

/// Any element type as double (exact: every kiln element type converts exactly).
template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bool>)
    return v ? 1.0 : 0.0;
  else
    return static_cast<double>(kiln::to_compute(v));
}
/// A double stored as element type T (through float for half and bfloat16, as kiln stores them).
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, kiln::half> || std::is_same_v<T, kiln::bfloat16>)
    return kiln::from_compute<T>(static_cast<float>(v));
  else
    return static_cast<T>(v);
}
template <class T>
std::vector<double> to_doubles(const std::vector<T>& v) {
  std::vector<double> d(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) d[i] = to_double<T>(v[i]);
  return d;
}

/// How close a result of element type T must be to the float64 reference: |got - want| <= abs + rel |want|.
/// rel is a few units in the last place of T (one rounding of an exactly computed value, plus the
/// libm error of float functions); abs only matters for results near zero (a subnormal of T).
template <class T>
struct tolerance {
  static constexpr double rel = 1e-6;  // float: 2^-24 = 6e-8 per rounding; 1e-6 leaves room for libm
  static constexpr double abs = 1e-37;
};
template <>
struct tolerance<double> {
  static constexpr double rel = 1e-12;
  static constexpr double abs = 1e-300;
};
template <>
struct tolerance<kiln::half> {
  static constexpr double rel = 1e-3;  // 2^-11 = 4.9e-4 per rounding
  static constexpr double abs = 6e-8;  // the smallest half subnormal
};
template <>
struct tolerance<kiln::bfloat16> {
  static constexpr double rel = 1e-2;  // 2^-8 = 3.9e-3 per rounding
  static constexpr double abs = 1e-37;
};

// ---- random inputs -------------------------------------------------------------------------------

/// The seed of every random input: fixed, so a failure reproduces; varied per call site by `stream`.
inline constexpr std::uint32_t base_seed = 20240611u;

/// n values uniform in [lo, hi), stored as T (so the reference sees exactly what kiln sees).
template <class T>
std::vector<T> random_values(std::size_t n, double lo, double hi, std::uint32_t stream = 0) {
  std::mt19937 gen(base_seed + 7919u * stream);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = from_double<T>(dist(gen));
  return v;
}
/// n values in [lo, hi) away from zero by at least `gap` (divisors, tie-free comparisons).
template <class T>
std::vector<T> random_nonzero(std::size_t n, double lo, double hi, double gap, std::uint32_t stream = 0) {
  std::mt19937 gen(base_seed + 7919u * stream + 1u);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) {
    double d = dist(gen);
    while (std::abs(d) < gap) d = dist(gen);
    x = from_double<T>(d);
  }
  return v;
}
/// n random integers in [lo, hi] stored as T (exact ties for max/argmax).
template <class T>
std::vector<T> random_integers(std::size_t n, int lo, int hi, std::uint32_t stream = 0) {
  std::mt19937 gen(base_seed + 7919u * stream + 2u);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = from_double<T>(dist(gen));
  return v;
}

/// `v` rounded to the 16-bit storage type H: the H values, and the same values read back as float (so
/// that an fp32 run reads exactly what a 16-bit run stores). Mixed-precision tests feed both.
template <class H>
std::pair<std::vector<float>, std::vector<H>> rounded_to(std::vector<float> v) {
  std::vector<H> h;
  h.reserve(v.size());
  for (auto& x : v) {
    h.push_back(kiln::from_compute<H>(x));
    x = kiln::to_compute(h.back());
  }
  return {std::move(v), std::move(h)};
}

/// The largest |got - want| and the largest |want| over the elements (got of any element type, read as
/// float): a 16-bit result against fp32 within a fraction of want's scale, where a sum that cancels
/// leaves small elements with the rounding of large ones.
/// A NaN on either side makes `worst` NaN (which fails every bound); sizes must agree.
template <class G>
std::pair<float, float> worst_and_largest(const std::vector<G>& got, const std::vector<float>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  float worst = 0, largest = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::abs(want[i]));
    const float d = std::abs(static_cast<float>(kiln::to_compute(got[i])) - want[i]);
    if (std::isnan(d) || d > worst) worst = d;
    if (std::isnan(worst)) break;
  }
  return {worst, largest};
}

// ---- host tensors --------------------------------------------------------------------------------

/// A tensor on device D holding `values` (built on the host, then moved).
template <class D, class S, class T>
kiln::Tensor<T, S, D> make_tensor(const std::vector<T>& values, const kiln::Extents<S>& ext) {
  auto host = kiln::Tensor<T, S, kiln::Cpu>::from(std::span<const T>(values.data(), values.size()), ext);
  if constexpr (std::is_same_v<D, kiln::Cpu>)
    return host;
  else
    return host.template to<D>();
}

// ---- float64 references --------------------------------------------------------------------------

/// f applied to every element of the inputs (as double).
template <class F, class... T>
std::vector<double> reference_map(F f, const std::vector<T>&... in) {
  const std::size_t n = std::max({in.size()...});
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = f(to_double<T>(in[i])...);
  return out;
}

/// Row-major reduction of a [outer, len, inner] array over its middle axis.
struct ReduceDims {
  std::size_t outer, len, inner;
};
inline double ref_nan() { return std::numeric_limits<double>::quiet_NaN(); }
inline std::vector<double> reference_sum(const std::vector<double>& x, ReduceDims d) {
  std::vector<double> out(d.outer * d.inner, 0.0);
  for (std::size_t o = 0; o < d.outer; ++o)
    for (std::size_t k = 0; k < d.len; ++k)
      for (std::size_t j = 0; j < d.inner; ++j) out[o * d.inner + j] += x[(o * d.len + k) * d.inner + j];
  return out;
}
inline std::vector<double> reference_mean(const std::vector<double>& x, ReduceDims d) {
  auto s = reference_sum(x, d);
  for (auto& v : s) v = d.len ? v / static_cast<double>(d.len) : ref_nan();
  return s;
}
/// max (sign +1) or min (sign -1): NaN propagates.
inline std::vector<double> reference_extreme(const std::vector<double>& x, ReduceDims d, int sign) {
  std::vector<double> out(d.outer * d.inner);
  for (std::size_t o = 0; o < d.outer; ++o)
    for (std::size_t j = 0; j < d.inner; ++j) {
      double m = x[o * d.len * d.inner + j];
      for (std::size_t k = 0; k < d.len; ++k) {
        const double v = x[(o * d.len + k) * d.inner + j];
        if (std::isnan(v)) {
          m = v;
          break;
        }
        if (sign > 0 ? v > m : v < m) m = v;
      }
      out[o * d.inner + j] = m;
    }
  return out;
}
/// Index of the maximum along the axis: the first maximum on ties, the first NaN if any.
inline std::vector<std::int64_t> reference_argmax(const std::vector<double>& x, ReduceDims d) {
  std::vector<std::int64_t> out(d.outer * d.inner);
  for (std::size_t o = 0; o < d.outer; ++o)
    for (std::size_t j = 0; j < d.inner; ++j) {
      std::size_t best = 0;
      double m = x[o * d.len * d.inner + j];
      for (std::size_t k = 0; k < d.len; ++k) {
        const double v = x[(o * d.len + k) * d.inner + j];
        if (std::isnan(v)) {
          best = k;
          break;
        }
        if (v > m) m = v, best = k;
      }
      out[o * d.inner + j] = static_cast<std::int64_t>(best);
    }
  return out;
}

/// C = op(A) op(B) in double, row-major, and the sum of |products| per element (the scale of the
/// rounding error of any summation order). A is [M, K] ([K, M] when ta), B is [K, N] ([N, K] when tb).
struct GemmReference {
  std::vector<double> c, magnitude;
};
inline GemmReference reference_gemm(const std::vector<double>& a, const std::vector<double>& b, std::size_t m,
                                    std::size_t n, std::size_t k, bool ta, bool tb) {
  GemmReference r{std::vector<double>(m * n, 0.0), std::vector<double>(m * n, 0.0)};
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t p = 0; p < k; ++p) {
        const double x = ta ? a[p * m + i] : a[i * k + p];
        const double y = tb ? b[j * k + p] : b[p * n + j];
        r.c[i * n + j] += x * y;
        r.magnitude[i * n + j] += std::abs(x * y);
      }
  return r;
}

/// x rounded to the nearest value with `mantissa` significand bits (including the implicit one),
/// smallest normal exponent `emin` and largest finite value `max_finite`, ties to even: an
/// independent model of float -> half (11, -14, 65504) and float -> bfloat16 (8, -126, ~3.39e38).
inline float reference_round(float x, int mantissa, int emin, double max_finite) {
  if (std::isnan(x)) return x;
  const double d = x;
  if (std::isinf(d) || d == 0.0) return x;
  int e = 0;
  std::frexp(d, &e);  // |d| = f 2^e, f in [0.5, 1): the leading bit has weight 2^(e-1)
  const int lead = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, lead - (mantissa - 1));
  const double r = std::nearbyint(d / quantum) * quantum;  // default rounding mode: ties to even
  // Past the largest finite value by half a quantum or more: infinity (as IEEE rounding does).
  const double top_quantum = std::ldexp(1.0, std::ilogb(max_finite) - (mantissa - 1));
  if (std::abs(r) > max_finite || std::abs(d) >= max_finite + top_quantum / 2)
    return std::signbit(d) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  return static_cast<float>(std::copysign(r, d));
}
inline float reference_round_half(float x) { return reference_round(x, 11, -14, 65504.0); }
inline float reference_round_bfloat16(float x) {
  return reference_round(x, 8, -126, std::ldexp(2.0 - std::ldexp(1.0, -7), 127));  // 3.3895e38
}

// ---- checks --------------------------------------------------------------------------------------

/// True when got is within tolerance of want (both NaN counts as equal; infinities must match).
inline bool close(double got, double want, double rel, double abs) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= abs + rel * std::abs(want);
}

/// Every got[i] close to want[i] (|got - want| <= abs + rel |want|); the message names the worst one.
template <class T>
boost::test_tools::assertion_result all_close(const std::vector<T>& got, const std::vector<double>& want,
                                              double rel = tolerance<T>::rel,
                                              double abs = tolerance<T>::abs) {
  boost::test_tools::assertion_result res(true);
  if (got.size() != want.size()) {
    res = false;
    res.message() << "size " << got.size() << " != expected " << want.size();
    return res;
  }
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = to_double<T>(got[i]);
    if (!close(g, want[i], rel, abs)) {
      const double excess = std::isfinite(g - want[i])
                                ? std::abs(g - want[i]) / (abs + rel * std::abs(want[i]))
                                : std::numeric_limits<double>::infinity();
      if (bad++ == 0 || excess > worst_excess) worst = i, worst_excess = excess;
    }
  }
  if (bad) {
    res = false;
    res.message().stream().precision(17);
    res.message() << bad << " of " << got.size() << " elements differ; worst at [" << worst << "]: got "
                  << to_double<T>(got[worst]) << ", expected " << want[worst] << " (tolerance " << abs
                  << " + " << rel << " * |expected|)";
  }
  return res;
}
/// Same, against per-element error scales: |got - want| <= rel * scale[i] + abs (e.g. GEMM magnitudes).
template <class T>
boost::test_tools::assertion_result all_close_scaled(const std::vector<T>& got,
                                                     const std::vector<double>& want,
                                                     const std::vector<double>& scale,
                                                     double rel = tolerance<T>::rel,
                                                     double abs = tolerance<T>::abs) {
  boost::test_tools::assertion_result res(true);
  if (got.size() != want.size() || scale.size() != want.size()) {
    res = false;
    res.message() << "size " << got.size() << " != expected " << want.size();
    return res;
  }
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = to_double<T>(got[i]);
    const bool ok = std::isfinite(g) && std::abs(g - want[i]) <= abs + rel * scale[i];
    if (!ok && bad++ == 0) first = i;
  }
  if (bad) {
    res = false;
    res.message().stream().precision(17);
    res.message() << bad << " of " << got.size() << " elements differ; first at [" << first << "]: got "
                  << to_double<T>(got[first]) << ", expected " << want[first] << " (tolerance " << abs
                  << " + " << rel << " * " << scale[first] << ")";
  }
  return res;
}
/// Element-for-element equality (bitwise for floating point, so -0 != +0; NaN equals NaN).
template <class T, class U>
boost::test_tools::assertion_result all_equal(const std::vector<T>& got, const std::vector<U>& want) {
  boost::test_tools::assertion_result res(true);
  if (got.size() != want.size()) {
    res = false;
    res.message() << "size " << got.size() << " != expected " << want.size();
    return res;
  }
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = to_double<T>(got[i]), w = to_double<U>(want[i]);
    const bool same = (std::isnan(g) && std::isnan(w)) || (g == w && std::signbit(g) == std::signbit(w));
    if (!same && bad++ == 0) first = i;
  }
  if (bad) {
    res = false;
    res.message().stream().precision(17);
    res.message() << bad << " of " << got.size() << " elements differ; first at [" << first << "]: got "
                  << to_double<T>(got[first]) << ", expected " << to_double<U>(want[first]);
  }
  return res;
}

/// A BOOST_CHECK_EXCEPTION predicate: the exception's message contains every one of `parts`.
struct message_contains {
  std::vector<std::string> parts;
  message_contains(std::initializer_list<std::string> p) : parts(p) {}
  bool operator()(const std::exception& e) const {
    const std::string_view what = e.what();
    bool ok = true;
    for (const auto& p : parts)
      if (what.find(p) == std::string_view::npos) {
        BOOST_TEST_MESSAGE("message lacks \"" << p << "\": " << what);
        ok = false;
      }
    if (!ok) BOOST_ERROR("unexpected exception message: " << what);
    return ok;
  }
};

}  // namespace kiln::test
