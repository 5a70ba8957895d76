/// The CPU executor: an assignment is one OpenMP `parallel for simd` loop over the flat index.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/index.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/policy/device.hpp"

namespace kiln::backend::cpu {

/// Loops shorter than this run on one thread (forking costs more than the work).
inline constexpr index_t parallel_threshold = 1 << 15;
/// Full reductions split the range into blocks this long; the block partials combine in order, so the
/// result does not depend on the thread count.
inline constexpr index_t reduce_block = 1 << 13;

/// The accumulator of a reduction over values of type V: double for float (more exact sums).
template <class V>
using accumulator_t = std::conditional_t<std::is_same_v<V, float>, double,
                                         std::conditional_t<std::is_same_v<V, bool>, std::int64_t, V>>;

template <ReduceKind K, class V>
struct Reducer {
  using Acc = std::conditional_t<K == ReduceKind::argmax || K == ReduceKind::max || K == ReduceKind::min, V,
                                 accumulator_t<V>>;
  Acc acc{};
  index_t arg = 0;
  bool started = false;
  void add(V v, index_t k) {
    if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) {
      if (!started) acc = Acc(0), started = true;
      acc += static_cast<Acc>(v);
    } else {
      // max/min/argmax: the first NaN wins and sticks (torch semantics); ties keep the first index.
      const bool better = !started || (acc == acc && (v != v || (K == ReduceKind::min ? v < acc : v > acc)));
      if (better) acc = v, arg = k, started = true;
    }
  }
  void merge(const Reducer& o) {
    if (!o.started) return;
    if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) {
      if (!started) *this = o;
      else acc += o.acc;
    } else {
      add(o.acc, o.arg);  // o covers later indices, so ties keep ours
    }
  }
};

}  // namespace kiln::backend::cpu

namespace kiln::detail {

template <>
struct executor<Cpu> {
  template <class Dst, class E>
  static void run(const Dst& dst_, const E& e_) {
    count_pass();
    const index_t n = dst_.size();
    const bool parallel = n >= backend::cpu::parallel_threshold;
    (void)parallel;
    // Each thread takes its own copy of the (trivially copyable) tree: read through the shared reference,
    // the loop reloads every pointer and scalar per element and g++ 12 does not vectorise it (2.5x slower).
    const Dst dst = dst_;
    const E e = e_;
    KILN_PRAGMA_OMP(parallel for simd schedule(static) if(parallel) firstprivate(dst, e))
    for (index_t i = 0; i < n; ++i) dst.store(i, e[i]);
  }

  /// f(i) for every i in [0, n): one OpenMP loop (a fused pass with several outputs, e.g. an optimizer
  /// step that updates parameters and moments together).
  template <class F>
  static void for_each(index_t n, const F& f_) {
    count_pass();
    const bool parallel = n >= backend::cpu::parallel_threshold;
    (void)parallel;
    const F f = f_;
    KILN_PRAGMA_OMP(parallel for simd schedule(static) if(parallel) firstprivate(f))
    for (index_t i = 0; i < n; ++i) f(i);
  }

  template <ReduceKind K, class Out, class E>
  static void reduce(Out* out, const E& e, index_t outer, index_t len, index_t inner) {
    using namespace backend::cpu;
    using V = typename E::value_type;
    using R = Reducer<K, V>;
    count_pass();
    const auto finish = [len](const R& r) -> Out {
      if constexpr (K == ReduceKind::argmax) return static_cast<Out>(r.arg);
      else if constexpr (K == ReduceKind::mean && std::is_integral_v<decltype(r.acc)>)  // bool, int: no integer division
        return static_cast<Out>(static_cast<double>(r.acc) / static_cast<double>(len));
      else if constexpr (K == ReduceKind::mean) return static_cast<Out>(r.acc / static_cast<decltype(r.acc)>(len));
      else return static_cast<Out>(r.acc);
    };
    if (outer * inner == 1) {  // a full reduction: blocks in parallel, combined in order
      const index_t blocks = (len + reduce_block - 1) / reduce_block;
      std::vector<R> part(static_cast<std::size_t>(std::max<index_t>(blocks, 1)));
      const bool parallel = blocks > 1;
      (void)parallel;
      KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel))
      for (index_t b = 0; b < blocks; ++b) {
        R r{};
        const index_t end = std::min(len, (b + 1) * reduce_block);
        for (index_t k = b * reduce_block; k < end; ++k) r.add(e[k], k);
        part[static_cast<std::size_t>(b)] = r;
      }
      R total{};
      for (const R& r : part) total.merge(r);
      out[0] = finish(total);
      return;
    }
    // Per output: rows of `inner` contiguous outputs, accumulated over k, in column blocks.
    constexpr index_t J = 64;
    const index_t jblocks = (inner + J - 1) / J;
    const bool parallel = outer * len * inner >= parallel_threshold;
    (void)parallel;
    KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel))
    for (index_t t = 0; t < outer * jblocks; ++t) {
      const index_t o = t / jblocks, j0 = (t % jblocks) * J, j1 = std::min(inner, j0 + J);
      R r[J]{};
      for (index_t k = 0; k < len; ++k) {
        const index_t base = (o * len + k) * inner;
        for (index_t j = j0; j < j1; ++j) r[j - j0].add(e[base + j], k);
      }
      for (index_t j = j0; j < j1; ++j) out[o * inner + j] = finish(r[j - j0]);
    }
  }
};

}  // namespace kiln::detail
