/// The one elementwise kernel: dst[i] = tree[i] over the flat index, grid-stride, vector loads when aligned.
#pragma once
#include "kiln/core/config.hpp"
#if !KILN_CUDA_COMPILER
#error "include kiln/cuda.hpp from a CUDA source (a .cu file, or LANGUAGE CUDA): kiln's kernels need nvcc"
#endif

#include <type_traits>

#include "kiln/backend/cuda/launch.cuh"
#include "kiln/core/index.hpp"
#include "kiln/expr/node.hpp"

namespace kiln::cuda::detail {

/// A node that offers vector loads: `packet<W>(i)` and host `aligned_for(W)` (every kiln node does;
/// a user-defined node without them runs the scalar kernel).
template <class E>
concept packet_readable = requires(const E& e, index_t i) {
  e.template packet<2>(i);
  { e.aligned_for(2) } -> std::convertible_to<bool>;
};
/// A destination that offers vector stores.
template <class Dst>
concept packet_writable = requires(const Dst& d, index_t i, Packet<typename Dst::value_type, 2> p) {
  d.template store_packet<2>(i, p);
  { d.aligned_for(2) } -> std::convertible_to<bool>;
};

/// dst[i] = tree[i] for i in [0, n). Each thread handles `items_per_thread` vectors of W values
/// (W = vector_width(tuning, sizeof element); 1: scalar), spaced a block apart so that a warp's
/// accesses stay contiguous, all loaded before any is stored; blocks grid-stride over tiles. With
/// W > 1 the last n % W values are the tail, written by block 0. Dst and Tree arrive by value in
/// constant parameter space (__grid_constant__): no copy into each thread's registers or local memory.
template <class Dst, class Tree, class Config>
__global__ void __launch_bounds__(Config::value.block)
    elementwise_kernel(const __grid_constant__ Dst dst, const __grid_constant__ Tree tree, index_t n) {
  constexpr ElementwiseTuning tuning = Config::value;
  using V = typename Tree::value_type;
  constexpr int W = vector_width(tuning, sizeof(typename Dst::element_type));
  constexpr int items = tuning.items_per_thread;
  constexpr index_t tile = static_cast<index_t>(tuning.block) * items;
  const index_t units = n / W;  // whole vectors (all of n when scalar)
  const index_t stride = static_cast<index_t>(gridDim.x) * tile;
  for (index_t base = static_cast<index_t>(blockIdx.x) * tile + threadIdx.x; base < units; base += stride) {
    if constexpr (W == 1) {
      V v[items];
      KILN_UNROLL
      for (int j = 0; j < items; ++j) {
        const index_t i = base + static_cast<index_t>(j) * tuning.block;
        if (i < units) v[j] = tree[i];
      }
      KILN_UNROLL
      for (int j = 0; j < items; ++j) {
        const index_t i = base + static_cast<index_t>(j) * tuning.block;
        if (i < units) dst.store(i, v[j]);
      }
    } else {
      Packet<V, W> p[items];
      KILN_UNROLL
      for (int j = 0; j < items; ++j) {
        const index_t u = base + static_cast<index_t>(j) * tuning.block;
        if (u < units) p[j] = tree.template packet<W>(u * W);
      }
      KILN_UNROLL
      for (int j = 0; j < items; ++j) {
        const index_t u = base + static_cast<index_t>(j) * tuning.block;
        if (u < units) dst.template store_packet<W>(u * W, p[j]);
      }
    }
  }
  if constexpr (W > 1) {
    const index_t i = units * W + threadIdx.x;  // fewer than W < block tail elements
    if (blockIdx.x == 0 && i < n) dst.store(i, tree[i]);
  }
}

}  // namespace kiln::cuda::detail
