/// The CPU executor: an assignment is one OpenMP loop, over the flat index or, when a broadcast is in
/// the tree, over rows with an inner simd loop.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/lane_sums.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/expr/detail/row.hpp"
#include "kiln/expr/detail/traffic.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/policy/device.hpp"

namespace kiln::backend::cpu {

/// Loops shorter than this run on one thread (forking costs more than the work).
inline constexpr index_t parallel_threshold = 1 << 15;
/// A tree with a broadcast runs row by row when the destination's innermost extent is at least this
/// (shorter rows: the flat loop, whose broadcast divides per element).
inline constexpr index_t min_row_length = 8;
/// Rows longer than this are cut into equal pieces no longer than it, so that a rank-1 destination or
/// a few long rows still spread over the threads.
inline constexpr index_t max_row_piece = 1 << 14;
/// Full reductions split the range into blocks this long; the block partials combine in order, so the
/// result does not depend on the thread count.
inline constexpr index_t reduce_block = 1 << 13;

/// The accumulator of a reduction over values of type V: double for float (more exact sums), int64
/// for integers and bools (counts and sums that do not overflow int32).
template <class V>
using accumulator_t = std::conditional_t<std::is_same_v<V, float>, double,
                                         std::conditional_t<std::is_integral_v<V>, std::int64_t, V>>;

/// a + b, wrapping for an integer accumulator as torch's int64 sums do (ops::detail::wrap_add).
template <class A>
A accumulate(A a, A b) {
  if constexpr (std::is_integral_v<A>) return ops::detail::wrap_add(a, b);
  else return a + b;
}
/// a * b, wrapping for an integer accumulator as torch's int64 products do.
template <class A>
A multiply(A a, A b) {
  if constexpr (std::is_integral_v<A>) return ops::detail::wrap_mul(a, b);
  else return a * b;
}

template <ReduceKind K, class V>
struct Reducer {
  static constexpr ReduceKind kind = K;
  using Acc = std::conditional_t<K == ReduceKind::argmax || K == ReduceKind::max || K == ReduceKind::min, V,
                                 accumulator_t<V>>;
  Acc acc = K == ReduceKind::prod ? Acc(1) : Acc{};  // a product of nothing is 1
  index_t arg = 0;
  bool started = false;
  void add(V v, index_t k) {
    if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) {
      if (!started) acc = Acc(0), started = true;
      acc = accumulate(acc, static_cast<Acc>(v));
    } else if constexpr (K == ReduceKind::prod) {
      if (!started) acc = Acc(1), started = true;
      acc = multiply(acc, static_cast<Acc>(v));
    } else {
      // max/min/argmax: the first NaN wins and sticks (torch semantics); ties keep the first index.
      // is_nan, not v != v: a user's -ffast-math folds the latter to false (kiln/core/nan.hpp).
      const bool better = !started || (!kiln::detail::is_nan(acc) &&
                                       (kiln::detail::is_nan(v) || (K == ReduceKind::min ? v < acc : v > acc)));
      if (better) acc = v, arg = k, started = true;
    }
  }
  void merge(const Reducer& o) {
    if (!o.started) return;
    if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) {
      if (!started) *this = o;
      else acc = accumulate(acc, o.acc);
    } else if constexpr (K == ReduceKind::prod) {
      if (!started) *this = o;
      else acc = multiply(acc, o.acc);
    } else {
      add(o.acc, o.arg);  // o covers later indices, so ties keep ours
    }
  }
};

}  // namespace kiln::backend::cpu

namespace kiln::detail {

/// Whether a tree calls exp, erf, tanh, log1p or expm1, which run four elements a call in a vector loop
/// where a vector math library is linked (core/vector_math.hpp): a sum of such a tree evaluates its
/// elements in one (lane_sum's Stage; a cheap tree, x * x, is 35 % slower so).
template <class F>
inline constexpr bool vector_math_functor =
    (KILN_VECTOR_EXP && (std::is_same_v<F, ops::Exp> || std::is_same_v<F, ops::Sigmoid>)) ||
    (KILN_VECTOR_MATH &&
     (std::is_same_v<F, ops::Tanh> || std::is_same_v<F, ops::Log1p> || std::is_same_v<F, ops::Erf> ||
      std::is_same_v<F, ops::Expm1>));
template <class E>
struct calls_vector_math : std::false_type {};
template <class F, class A>
struct calls_vector_math<Unary<F, A>>
    : std::bool_constant<vector_math_functor<F> || calls_vector_math<A>::value> {};
template <class F, class A, class B>
struct calls_vector_math<Binary<F, A, B>>
    : std::bool_constant<calls_vector_math<A>::value || calls_vector_math<B>::value> {};
template <class C, class A, class B>
struct calls_vector_math<Where<C, A, B>>
    : std::bool_constant<calls_vector_math<C>::value || calls_vector_math<A>::value ||
                         calls_vector_math<B>::value> {};
template <class T, class A>
struct calls_vector_math<Cast<T, A>> : calls_vector_math<A> {};

template <>
struct executor<Cpu> {
  template <class Dst, class E>
  static void run(const Dst& dst_, const E& e_) {
    count_pass(assignment_traffic(dst_, e_));
    const index_t n = dst_.size();
    const bool parallel = n >= backend::cpu::parallel_threshold;
    (void)parallel;
    // A broadcast's operator[] divides per element, which also stops the loop from vectorising: such a
    // tree runs row by row instead, each row a node that reads like the others (expr/detail/row.hpp).
    using R = row_reader<E>;
    constexpr std::size_t rank = Dst::shape_type::rank;
    if constexpr (R::broadcasts > 0 && rank >= 1) {
      const index_t len = dst_.extents()[rank - 1];
      if (len >= backend::cpu::min_row_length) {
        if constexpr (R::deferred == 0) {
          return run_rows<RowMode::contiguous>(dst_, e_, n, len, parallel);
        } else {
          RowKinds k;
          R::kinds(e_, k);
          if (!k.constant) return run_rows<RowMode::contiguous>(dst_, e_, n, len, parallel);
          if (!k.contiguous) return run_rows<RowMode::constant>(dst_, e_, n, len, parallel);
          if constexpr (R::deferred > 1) return run_rows<RowMode::mixed>(dst_, e_, n, len, parallel);
        }
      }
    }
    // Each thread takes its own copy of the (trivially copyable) tree: read through the shared reference,
    // the loop reloads every pointer and scalar per element and g++ 12 does not vectorise it (2.5x slower).
    const Dst dst = dst_;
    const E e = e_;
    KILN_PRAGMA_OMP(parallel for simd schedule(static) if(parallel) firstprivate(dst, e))
    for (index_t i = 0; i < n; ++i) dst.store(i, e[i]);
  }

  /// dst[i] = e[i] row by row: rows of `len` (the innermost extent), cut into pieces of at most
  /// max_row_piece, in parallel; each piece builds its row once and runs a simd loop over it.
  template <RowMode M, class Dst, class E>
  static void run_rows(const Dst& dst_, const E& e_, index_t n, index_t len, bool parallel) {
    (void)parallel;
    const index_t pieces = (len + backend::cpu::max_row_piece - 1) / backend::cpu::max_row_piece;
    const index_t piece = (len + pieces - 1) / pieces;
    const index_t segments = n / len * pieces;
    const Dst dst = dst_;  // per-thread copies, as in run()
    const E e = e_;
    KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel) firstprivate(dst, e))
    for (index_t s = 0; s < segments; ++s) {
      const index_t r = s / pieces;
      const index_t begin = r * len + (s - r * pieces) * piece;
      const index_t m = std::min(piece, (r + 1) * len - begin);
      const auto row = row_of<M>(e, begin, m);
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < m; ++j) dst.store(begin + j, row[j]);
    }
  }

  /// f(i) for every i in [0, n): one OpenMP loop (a fused pass with several outputs, e.g. an optimizer
  /// step that updates parameters and moments together). `work` is the elements one call touches (a
  /// row functor's row length): the loop forks only when n * work is worth it.
  template <class F>
  static void for_each(index_t n, const F& f_, index_t work = 1) {
    static_assert(counted_functor<F>, "kiln: a for_each functor says what it moves: Traffic traffic(index_t n) const");
    count_pass(f_.traffic(n));
    const bool parallel = n > 1 && n * work >= backend::cpu::parallel_threshold;
    (void)parallel;
    // The copy is made inside the parallel region, a local of each thread that never escapes, so the
    // compiler keeps its pointers and scalars in registers and vectorises f. A firstprivate copy lives
    // in memory the stores through f's pointers might alias: g++ 12 then reloads it per element and does
    // not vectorise (an fp32 Adam step over 2^24 parameters took 102 ms on one thread; now 28 ms).
    KILN_PRAGMA_OMP(parallel if(parallel))
    {
      const F f = f_;
      KILN_PRAGMA_OMP(for simd schedule(static))
      for (index_t i = 0; i < n; ++i) f(i);
    }
  }

  /// Reducer R over e[begin, end), element k at index k - origin (an argmax's). A floating sum or mean
  /// adds in eight interleaved lanes (core/lane_sums.hpp): a full fp32 sum of 2^22 elements, accumulated
  /// in double, took 2.2 ms on one thread in one running sum and takes 1.2 ms; a sum over each 1024-long
  /// row of [2048, 1024], 4.2 -> 0.7 ms. Not the one-sum order, as torch's CPU sums are not either (they
  /// add in vector lanes and pairs). A floating max or min takes eight lanes too (lane_extreme: the
  /// same value, the first NaN); integer sums (exact in any order) and the rest run in one pass.
  template <class R, class E>
  static R reduce_range(const E& e, index_t begin, index_t end, index_t origin) {
    R r{};
    if constexpr ((R::kind == ReduceKind::sum || R::kind == ReduceKind::mean) &&
                  std::is_floating_point_v<typename R::Acc>) {
      r.acc = lane_sum<typename R::Acc, calls_vector_math<E>::value>(e, begin, end);
      r.started = end > begin;
    } else if constexpr ((R::kind == ReduceKind::max || R::kind == ReduceKind::min) &&
                         std::is_floating_point_v<typename R::Acc>) {
      r.acc = lane_extreme<R::kind == ReduceKind::min, typename R::Acc>(e, begin, end);
      r.started = end > begin;
    } else {
      for (index_t k = begin; k < end; ++k) r.add(e[k], k - origin);
    }
    return r;
  }

  template <ReduceKind K, class Out, class E>
  static void reduce(Out* out, const E& e, index_t outer, index_t len, index_t inner) {
    using namespace backend::cpu;
    using V = typename E::value_type;
    using R = Reducer<K, V>;
    count_pass(reduction_traffic<Out>(e, outer * len * inner, outer * inner));
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
      for (index_t b = 0; b < blocks; ++b)
        part[static_cast<std::size_t>(b)] =
            reduce_range<R>(e, b * reduce_block, std::min(len, (b + 1) * reduce_block), 0);
      R total{};
      for (const R& r : part) total.merge(r);
      out[0] = finish(total);
      return;
    }
    if (inner == 1) {  // over the last axis: each output reduces one contiguous row
      const bool parallel = outer * len >= parallel_threshold;
      (void)parallel;
      // A broadcast read per element divides its index (and keeps a vector function in the tree one
      // element a call: exp(x - max) in a softmax's sum): such a tree is read row by row, as run() does.
      if constexpr (row_reader<E>::broadcasts > 0 && row_reader<E>::deferred == 0) {
        if (len >= min_row_length) {
          KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel))
          for (index_t o = 0; o < outer; ++o)
            out[o] = finish(reduce_range<R>(row_of<RowMode::contiguous>(e, o * len, len), 0, len, 0));
          return;
        }
      }
      KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel))
      for (index_t o = 0; o < outer; ++o)
        out[o] = finish(reduce_range<R>(e, o * len, (o + 1) * len, o * len));
      return;
    }
    // Per output: rows of `inner` contiguous outputs, accumulated over k, in column blocks (the
    // accumulators of neighbouring outputs are independent chains, which the compiler vectorises).
    constexpr index_t J = 64;
    const index_t jblocks = (inner + J - 1) / J;
    const bool parallel = outer * len * inner >= parallel_threshold;
    (void)parallel;
    KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel))
    for (index_t t = 0; t < outer * jblocks; ++t) {
      const index_t o = t / jblocks, j0 = (t % jblocks) * J, j1 = std::min(inner, j0 + J);
      if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) {  // plain additions: a vector loop
        using A = typename R::Acc;
        A acc[J]{};
        for (index_t k = 0; k < len; ++k) {
          const index_t base = (o * len + k) * inner + j0;
          for (index_t j = 0; j < j1 - j0; ++j) acc[j] = accumulate(acc[j], static_cast<A>(e[base + j]));
        }
        for (index_t j = j0; j < j1; ++j) {
          R r{};
          r.acc = acc[j - j0];
          r.started = len > 0;
          out[o * inner + j] = finish(r);
        }
      } else {
        R r[J]{};
        for (index_t k = 0; k < len; ++k) {
          const index_t base = (o * len + k) * inner;
          for (index_t j = j0; j < j1; ++j) r[j - j0].add(e[base + j], k);
        }
        for (index_t j = j0; j < j1; ++j) out[o * inner + j] = finish(r[j - j0]);
      }
    }
  }
};

}  // namespace kiln::detail
