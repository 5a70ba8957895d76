/// Sums in eight interleaved lanes: the floating-point sums of the CPU reductions and the normalisation
/// layers (and, the same way, their maxima and minima: lane_extreme). One running sum waits for each add
/// before the next (the adder's latency, 4 cycles, per element); eight independent ones keep the adder
/// busy and the compiler keeps them in vector registers. The order is fixed by this code (element l in
/// lane (l - first) % 8, the lanes added pairwise at the end), so a sum is the same whatever the thread
/// count, the vector width or the device.
#pragma once
#include <cmath>
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/nan.hpp"

namespace kiln::detail {

/// The number of interleaved lanes.
inline constexpr index_t sum_lanes = 8;

/// f(l, pa[j], pb[j]) for l in [first, last), element first + j in lane j % sum_lanes. Simd: the lanes
/// under `omp simd` (independent sums, the same bits): the normalisation layers' two sums over a row or
/// a channel's run are 7-9 % faster at -O3; a reduction's single sum (lane_sum) leaves it off.
template <bool Simd, class A, class F>
KILN_HOST_DEVICE KILN_FORCEINLINE void add_to_lanes(index_t first, index_t last, A (&pa)[sum_lanes],
                                                    A (&pb)[sum_lanes], F&& f) {
  constexpr index_t W = sum_lanes;
  index_t l = first;
  for (; l + W <= last; l += W) {
    if constexpr (Simd) {
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < W; ++j) f(l + j, pa[j], pb[j]);
    } else {
      for (index_t j = 0; j < W; ++j) f(l + j, pa[j], pb[j]);
    }
  }
  for (index_t j = 0; j < W && l + j < last; ++j) f(l + j, pa[j], pb[j]);  // the last < W
}

/// The lanes added pairwise.
template <class A>
KILN_HOST_DEVICE KILN_FORCEINLINE A lanes_total(const A (&p)[sum_lanes]) {
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/// a += Σ A(l), b += Σ B(l) over l in [first, last), f(l, a_lane, b_lane) adding one element's terms to
/// its lane's two partial sums, in A (double: a mean and a sum of squares in one pass, or two sums).
template <class A = double, class F>
KILN_HOST_DEVICE KILN_FORCEINLINE void lane_sums(index_t first, index_t last, A& a, A& b, F&& f) {
  A pa[sum_lanes] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  A pb[sum_lanes] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  add_to_lanes<true>(first, last, pa, pb, f);
  a += lanes_total(pa);
  b += lanes_total(pb);
}

/// lane_sums' lanes kept across calls: add(first, last, f) over consecutive ranges gives the sums (and
/// bits) of one lane_sums over their union when every range but the last holds a multiple of sum_lanes
/// elements (a run read in pieces, BatchNorm's staged derivative).
template <class A = double>
struct LaneSums {
  A pa[sum_lanes] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  A pb[sum_lanes] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  template <class F>
  KILN_HOST_DEVICE KILN_FORCEINLINE void add(index_t first, index_t last, F&& f) {
    add_to_lanes<true>(first, last, pa, pb, f);
  }
  /// a += the lanes' a sums, b += their b sums.
  KILN_HOST_DEVICE KILN_FORCEINLINE void finish(A& a, A& b) const {
    a += lanes_total(pa);
    b += lanes_total(pb);
  }
};

/// Σ static_cast<A>(x[l]) over l in [first, last), for a floating A (x: a pointer or an expression), in
/// the lanes and order of lane_sums; 0 for an empty range. Without `omp simd` on the lanes: over rows of
/// 10 it made a sum 2.6x slower at -O2. Stage (a tree that calls a vector function: calls_vector_math,
/// backend/cpu/executor.hpp): pieces of 64 elements, then of 8, are evaluated first, in a loop of their
/// own under `omp simd`, so that the function runs four lanes a call (core/vector_math.hpp): the sums
/// along the rows of exp([2048, 1024]) took 5.1 ms one element a call, and take 1.5. Staged, a plain
/// load takes 50 % longer and x * x 35 %: only such trees are.
template <class A, bool Stage = false, class X>
KILN_HOST_DEVICE KILN_FORCEINLINE A lane_sum(const X& x, index_t first, index_t last) {
  constexpr index_t W = sum_lanes;
  A p[W] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  A unused[W] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  index_t l = first;
  if constexpr (Stage) {
    using V = std::remove_cvref_t<decltype(x[first])>;
    constexpr index_t piece = 8 * W;
    for (; l + piece <= last; l += piece) {
      V v[piece];
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < piece; ++j) v[j] = x[l + j];
      for (index_t k = 0; k < piece; k += W)
        for (index_t j = 0; j < W; ++j) p[j] += static_cast<A>(v[k + j]);
    }
    for (; l + W <= last; l += W) {
      V v[W];
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < W; ++j) v[j] = x[l + j];
      for (index_t j = 0; j < W; ++j) p[j] += static_cast<A>(v[j]);
    }
  }
  add_to_lanes<false>(l, last, p, unused, [&x](index_t i, A& pa, A&) { pa += static_cast<A>(x[i]); });
  return lanes_total(p);
}

/// The max (Min: the min) of static_cast<A>(x[l]) over l in [first, last), for a floating A: the first
/// NaN where there is one, as torch's (and as one running max that tests each element); -inf (inf) for
/// an empty range. Eight running maxima, element l in lane (l - first) % 8, under `omp simd`, then the
/// lanes' (a max is exact in any order; only where the max is 0 and both -0 and +0 are in the range may
/// the sign differ from the first one's). One running max took 0.91 ms over the rows of [2048, 1024],
/// and these take 0.21; half of cross entropy's forward over [512, 8192] was its row maxima.
template <bool Min, class A, class X>
KILN_HOST_DEVICE KILN_FORCEINLINE A lane_extreme(const X& x, index_t first, index_t last) {
  static_assert(std::is_floating_point_v<A>, "kiln: lane_extreme is for float and double");
  constexpr index_t W = sum_lanes;
  A m[W];
  unsigned nan[W];
  for (index_t k = 0; k < W; ++k) m[k] = Min ? A(INFINITY) : -A(INFINITY), nan[k] = 0;
  const auto add = [&m, &nan](index_t k, A v) {
    m[k] = (Min ? v < m[k] : v > m[k]) ? v : m[k];
    nan[k] |= is_nan(v);
  };
  index_t l = first;
  for (; l + W <= last; l += W) {
    KILN_PRAGMA_OMP(simd)
    for (index_t k = 0; k < W; ++k) add(k, static_cast<A>(x[l + k]));
  }
  for (index_t k = 0; l + k < last; ++k) add(k, static_cast<A>(x[l + k]));
  for (index_t k = 1; k < W; ++k) add(0, m[k]), nan[0] |= nan[k];
  if (nan[0])
    for (l = first;; ++l)
      if (is_nan(static_cast<A>(x[l]))) return static_cast<A>(x[l]);
  return m[0];
}

}  // namespace kiln::detail
