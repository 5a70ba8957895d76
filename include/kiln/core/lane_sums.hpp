/// Sums in eight interleaved lanes: the floating-point sums of the CPU reductions and the normalisation
/// layers. One running sum waits for each add before the next (the adder's latency, 4 cycles, per
/// element); eight independent ones keep the adder busy and the compiler keeps them in vector registers.
/// The order is fixed by this code (element l in lane (l - first) % 8, the lanes added pairwise at the
/// end), so a sum is the same whatever the thread count, the vector width or the device.
#pragma once
#include "kiln/core/config.hpp"
#include "kiln/core/index.hpp"

namespace kiln::detail {

/// The number of interleaved lanes.
inline constexpr index_t sum_lanes = 8;

/// The eight lanes' two partial sums, kept across calls: add(first, last, f) over consecutive ranges
/// gives the sums (and bits) of one lane_sums over their union when every range but the last holds a
/// multiple of sum_lanes elements (a run read in tiles).
template <class A = double>
struct LaneSums {
  static constexpr index_t W = sum_lanes;
  A pa[W] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  A pb[W] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  /// f(l, a_lane, b_lane) for l in [first, last), element first + j in lane j % W.
  template <class F>
  KILN_HOST_DEVICE KILN_FORCEINLINE void add(index_t first, index_t last, F&& f) {
    index_t l = first;
    for (; l + W <= last; l += W)
      for (index_t j = 0; j < W; ++j) f(l + j, pa[j], pb[j]);
    for (index_t j = 0; j < W && l + j < last; ++j) f(l + j, pa[j], pb[j]);  // the last < W
  }
  /// a += the lanes' a sums, b += their b sums, added pairwise.
  KILN_HOST_DEVICE KILN_FORCEINLINE void finish(A& a, A& b) const {
    a += ((pa[0] + pa[1]) + (pa[2] + pa[3])) + ((pa[4] + pa[5]) + (pa[6] + pa[7]));
    b += ((pb[0] + pb[1]) + (pb[2] + pb[3])) + ((pb[4] + pb[5]) + (pb[6] + pb[7]));
  }
};

/// a += Σ A(l), b += Σ B(l) over l in [first, last), f(l, a_lane, b_lane) adding one element's terms to
/// its lane's two partial sums, in A (double: a mean and a sum of squares in one pass, or two sums).
template <class A = double, class F>
KILN_HOST_DEVICE KILN_FORCEINLINE void lane_sums(index_t first, index_t last, A& a, A& b, F&& f) {
  LaneSums<A> lanes;
  lanes.add(first, last, f);
  lanes.finish(a, b);
}

/// Σ static_cast<A>(x[l]) over l in [first, last), for a floating A (x: a pointer or an expression): the
/// first of lane_sums' two sums; 0 for an empty range.
template <class A, class X>
KILN_HOST_DEVICE KILN_FORCEINLINE A lane_sum(const X& x, index_t first, index_t last) {
  A a(0), unused(0);
  lane_sums<A>(first, last, a, unused, [&x](index_t l, A& pa, A&) { pa += static_cast<A>(x[l]); });
  return a;
}

}  // namespace kiln::detail
