/// Reduction pieces shared by CUB and kiln's own kernels: per-kind state, combine, finish; the axis kernel.
#pragma once
#include "kiln/core/config.hpp"
#if !KILN_CUDA_COMPILER
#error "include kiln/cuda.hpp from a CUDA source (a .cu file, or LANGUAGE CUDA): kiln's kernels need nvcc"
#endif

#include <type_traits>

#include "kiln/backend/cpu/executor.hpp"
#include "kiln/backend/cuda/launch.cuh"
#include "kiln/core/index.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/expr/executor.hpp"

namespace kiln::cuda::detail {

/// A candidate of max/min/argmax: its value and its index along the reduced axis (or flat index; -1: none).
template <class V>
struct ArgValue {
  index_t index;
  V value;
};

/// Reduction K over values V, with the semantics of the CPU's backend::cpu::Reducer:
/// sum/mean/prod accumulate in backend::cpu::accumulator_t<V> (double for float; an integer sum or
/// product wraps); max/min/argmax keep the first NaN if there is one, else the first index of the extreme value. The combine is commutative
/// and associative (a total order on (is NaN, value, -index)), as CUB requires, so any reduction
/// order gives the CPU's answer.
template <ReduceKind K, class V>
struct ReduceOp {
  static constexpr bool keeps_index = K == ReduceKind::max || K == ReduceKind::min || K == ReduceKind::argmax;
  using State = std::conditional_t<keeps_index, ArgValue<V>, backend::cpu::accumulator_t<V>>;

  KILN_HOST_DEVICE KILN_FORCEINLINE static bool is_nan(V v) { return kiln::detail::is_nan(v); }
  /// The state of no element: the identity of the combine.
  KILN_HOST_DEVICE KILN_FORCEINLINE static State empty() {
    if constexpr (keeps_index) return State{-1, V{}};
    else if constexpr (K == ReduceKind::prod) return State(1);
    else return State(0);
  }
  /// The state of one element v at index k.
  KILN_HOST_DEVICE KILN_FORCEINLINE static State make(V v, index_t k) {
    if constexpr (keeps_index) return State{k, v};
    else return static_cast<State>(v);
  }
  /// True when a wins over b.
  KILN_HOST_DEVICE KILN_FORCEINLINE static bool prefer(const State& a, const State& b) {
    if (b.index < 0) return true;
    if (a.index < 0) return false;
    const bool an = is_nan(a.value), bn = is_nan(b.value);
    if (an != bn) return an;
    if (!an) {
      if (K == ReduceKind::min ? a.value < b.value : a.value > b.value) return true;
      if (K == ReduceKind::min ? b.value < a.value : b.value > a.value) return false;
    }
    return a.index < b.index;  // ties (and two NaNs): the first
  }
  KILN_HOST_DEVICE KILN_FORCEINLINE State operator()(const State& a, const State& b) const {
    if constexpr (keeps_index) return prefer(a, b) ? a : b;
    else if constexpr (K == ReduceKind::prod && std::is_integral_v<State>)
      return ::kiln::ops::detail::wrap_mul(a, b);
    else if constexpr (K == ReduceKind::prod) return a * b;
    else if constexpr (std::is_integral_v<State>) return ::kiln::ops::detail::wrap_add(a, b);
    else return a + b;
  }
  /// The output value of a state over an axis of `len` elements (index = k, or o * len + k).
  template <class Out>
  KILN_HOST_DEVICE KILN_FORCEINLINE static Out finish(const State& s, index_t len) {
    if constexpr (K == ReduceKind::argmax) return static_cast<Out>(s.index < 0 ? 0 : s.index % len);
    else if constexpr (keeps_index) return static_cast<Out>(s.value);
    else if constexpr (K == ReduceKind::mean && std::is_integral_v<State>)  // bool, int: no integer division
      return static_cast<Out>(static_cast<double>(s) / static_cast<double>(len));
    else if constexpr (K == ReduceKind::mean) return static_cast<Out>(s / static_cast<State>(len));  // 0/0: NaN
    else return static_cast<Out>(s);
  }
};

/// The state of expression element i (CUB's input: a transform of a counting iterator).
template <ReduceKind K, class E>
struct ReduceLoad {
  using Op = ReduceOp<K, typename E::value_type>;
  E e;
  KILN_HOST_DEVICE KILN_FORCEINLINE typename Op::State operator()(index_t i) const { return Op::make(e[i], i); }
};

/// A state to the output value (CUB's output: a transform output iterator over out).
template <ReduceKind K, class V, class Out>
struct ReduceFinish {
  using Op = ReduceOp<K, V>;
  index_t len;
  KILN_HOST_DEVICE KILN_FORCEINLINE Out operator()(const typename Op::State& s) const {
    return Op::template finish<Out>(s, len);
  }
};

/// Start of segment o (row o of [outer, len]).
struct SegmentBegin {
  index_t len;
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t operator()(index_t o) const { return o * len; }
};

/// The shape of the axis kernel's blocks: block_x consecutive outputs (coalesced reads along the
/// contiguous inner extent) times block_y threads splitting the reduced axis.
struct ReduceTuning {
  int block_x = 32;
  int block_y = 8;
};
constexpr ReduceTuning reduce_tuning() { return {}; }
/// A ReduceTuning as a type (kernel template argument; see ElementwiseConfig).
template <int BlockX, int BlockY>
struct ReduceConfig {
  static constexpr ReduceTuning value{BlockX, BlockY};
  static_assert(BlockX % 32 == 0 && BlockX * BlockY <= 1024 && BlockY >= 1, "kiln: invalid ReduceTuning");
};
template <ReduceTuning T>
using reduce_config = ReduceConfig<T.block_x, T.block_y>;

/// out[o * inner + j] = K over k of e[(o * len + k) * inner + j], for inner > 1. A block takes 32
/// consecutive j of one o; its 8 rows of threads each reduce every 8th k, then row 0 combines the rows in
/// order. Blocks grid-stride over the outer * ceil(inner / 32) tiles.
template <ReduceKind K, class Out, class E, class Config>
__global__ void __launch_bounds__(Config::value.block_x * Config::value.block_y)
    reduce_axis_kernel(Out* out, const __grid_constant__ E e, index_t outer, index_t len, index_t inner) {
  constexpr int bx = Config::value.block_x, by = Config::value.block_y;
  using Op = ReduceOp<K, typename E::value_type>;
  using State = typename Op::State;
  __shared__ alignas(State) unsigned char raw[sizeof(State) * bx * by];
  State* part = reinterpret_cast<State*>(raw);
  const index_t jtiles = (inner + bx - 1) / bx;
  const index_t tiles = outer * jtiles;
  for (index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const index_t o = t / jtiles;
    const index_t j = (t - o * jtiles) * bx + threadIdx.x;
    State s = Op::empty();
    if (j < inner)
      for (index_t k = threadIdx.y; k < len; k += by) s = Op{}(s, Op::make(e[(o * len + k) * inner + j], k));
    part[threadIdx.y * bx + threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < inner) {
      State r = part[threadIdx.x];
      for (int y = 1; y < by; ++y) r = Op{}(r, part[y * bx + threadIdx.x]);
      out[o * inner + j] = Op::template finish<Out>(r, len);
    }
    __syncthreads();
  }
}

/// out[i] = the output value of state[i] (after CUB's segmented reduce).
template <ReduceKind K, class Out, class V>
__global__ void reduce_finish_kernel(const typename ReduceOp<K, V>::State* state, Out* out, index_t count, index_t len) {
  using Op = ReduceOp<K, V>;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    out[i] = Op::template finish<Out>(state[i], len);
}

/// Every output of a reduction over an empty axis: what the CPU gives (sum 0, mean NaN).
template <ReduceKind K, class Out, class V>
__global__ void reduce_empty_kernel(Out* out, index_t count) {
  using Op = ReduceOp<K, V>;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    out[i] = Op::template finish<Out>(Op::empty(), 0);
}

}  // namespace kiln::cuda::detail
