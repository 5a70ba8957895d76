/// The executor seam: how a device runs an elementwise assignment and a reduction.
#pragma once
#include <concepts>

#include "kiln/core/counters.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/type_list.hpp"

namespace kiln {

/// What a reduction computes over its axis.
enum class ReduceKind { sum, mean, max, min, argmax, prod };

namespace detail {
/// A functor for executor<D>::for_each: it says what n of its calls move and compute.
template <class F>
concept counted_functor = requires(const F& f, index_t n) {
  { f.traffic(n) } -> std::same_as<Traffic>;
};

/// executor<D>::run(dst_view, expr): dst[i] = expr[i] for every flat i, in one pass.
/// executor<D>::reduce<K>(out, expr, outer, len, inner): out[o * inner + j] = K over
/// expr[(o * len + k) * inner + j] for k in [0, len).
/// executor<D>::for_each(n, f, work = 1): f(i) for every i in [0, n) in one pass (f: trivially copyable,
/// KILN_HOST_DEVICE operator()(index_t), and `Traffic traffic(index_t n) const`: what the n calls move
/// and compute, for kiln::counters()); for passes with several outputs. `work`: elements per call
/// (the CPU forks only for enough work).
/// Every pass adds its traffic to kiln::counters() (run and reduce count their trees: expr/detail/traffic.hpp).
/// Cpu: kiln/backend/cpu/executor.hpp. Cuda: kiln/backend/cuda/executor.cuh (nvcc only).
template <class D>
struct executor {
  // >>> Stopped here? A CUDA expression is evaluated in a file nvcc does not compile. <<<
  static_assert(dependent_false<D>,
                "kiln: evaluating an expression on kiln::Cuda needs nvcc: compile this file as CUDA (a .cu "
                "file, or set_source_files_properties(f.cpp PROPERTIES LANGUAGE CUDA)) and include "
                "<kiln/cuda.hpp>");
};
}  // namespace detail
}  // namespace kiln
