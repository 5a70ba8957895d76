/// The CUDA executor: an assignment is one elementwise kernel; a reduction is CUB or one axis kernel.
#pragma once
#include "kiln/core/config.hpp"
#if !KILN_CUDA_COMPILER
#error "include kiln/cuda.hpp from a CUDA source (a .cu file, or LANGUAGE CUDA): kiln's kernels need nvcc"
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>

#include "kiln/backend/cuda/check.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/kernels/elementwise.cuh"
#include "kiln/backend/cuda/kernels/for_each.cuh"
#include "kiln/backend/cuda/kernels/reduce.cuh"
#include "kiln/backend/cuda/launch.cuh"
#include "kiln/backend/cuda/memory.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/index.hpp"
#include "kiln/expr/detail/traffic.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/storage.hpp"

namespace kiln::cuda::detail {

/// Elementwise launches that took the vector path (tests check that aligned operands get it).
inline std::atomic<std::uint64_t>& vector_launch_counter() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}
inline std::uint64_t vector_launches() { return vector_launch_counter().load(std::memory_order_relaxed); }

/// Scratch bytes from a device's caching allocator for the length of a scope (stream-ordered reuse).
class Scratch {
 public:
  Scratch(std::size_t bytes, int device)
      : allocator_(kiln::caching_allocator<Cuda>(device)), ptr_(allocator_.allocate(std::max<std::size_t>(bytes, 1))) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { allocator_.deallocate(ptr_); }
  void* get() const { return ptr_; }

 private:
  CachingAllocator& allocator_;
  void* ptr_;
};

/// Throws BackendError for a failed CUB call (`what`: the algorithm).
inline void check_cub(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw BackendError(kiln::detail::backend_message("CUB", what, __FILE__, __LINE__, static_cast<int>(e),
                                                   cuda_error_text(e)));
}

/// Runs a CUB device algorithm `f(temp, temp_bytes)` twice: size query, then with scratch memory.
template <class F>
void run_cub(const char* what, int device, F&& f) {
  std::size_t bytes = 0;
  check_cub(f(static_cast<void*>(nullptr), bytes), what);
  Scratch temp(bytes, device);
  check_cub(f(temp.get(), bytes), what);
}

}  // namespace kiln::cuda::detail

namespace kiln::detail {

/// Runs expressions on the current device, on its current stream (kiln::cuda::current_stream()).
/// Asynchronous like every CUDA call: reading results back (to_vector, item) synchronises.
template <>
struct executor<Cuda> {
  /// dst[i] = e[i]: one launch of elementwise_kernel (none when dst is empty); vector accesses when dst
  /// and every leaf are aligned for them, scalar otherwise.
  template <class Dst, class E>
  static void run(const Dst& dst, const E& e) {
    using namespace kiln::cuda;
    using namespace kiln::cuda::detail;
    count_pass(assignment_traffic(dst, e));
    const index_t n = dst.size();
    if (n == 0) return;
    const int device = current_device();
    const cudaStream_t stream = current_stream(device);
    constexpr std::size_t bytes = sizeof(typename Dst::element_type);
    constexpr ElementwiseTuning vector = elementwise_tuning(bytes, true);
    constexpr ElementwiseTuning scalar = elementwise_tuning(bytes, false);
    constexpr int width = vector_width(vector, bytes);
    if constexpr (width > 1 && packet_readable<E> && packet_writable<Dst>) {
      if (dst.aligned_for(width) && e.aligned_for(width)) {
        launch(&elementwise_kernel<Dst, E, elementwise_config<vector>>, dim3(grid_for(n / width, vector, device)), dim3(vector.block), 0,
               stream, dst, e, n);
        vector_launch_counter().fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
    launch(&elementwise_kernel<Dst, E, elementwise_config<scalar>>, dim3(grid_for(n, scalar, device)), dim3(scalar.block), 0, stream, dst,
           e, n);
  }

  /// How many threads device `device` runs at once (2048 per multiprocessor): the work a pass needs
  /// to fill it.
  static index_t resident_threads(int device) {
    return static_cast<index_t>(kiln::cuda::detail::multiprocessor_count(device)) * 2048;
  }

  /// f(i) for every i in [0, n): one launch (a fused pass with several outputs, e.g. an optimizer step).
  template <class F>
  static void for_each(index_t n, const F& f, index_t /*work*/ = 1) {
    using namespace kiln::cuda;
    using namespace kiln::cuda::detail;
    static_assert(counted_functor<F>, "kiln: a for_each functor says what it moves: Traffic traffic(index_t n) const");
    count_pass(f.traffic(n));
    if (n == 0) return;
    const int device = current_device();
    constexpr ElementwiseTuning t = elementwise_tuning(4, false);
    launch(&for_each_kernel<F>, dim3(grid_for(n, t, device)), dim3(256), 0, current_stream(device), f, n);
  }

  /// out[o * inner + j] = K over k in [0, len) of e[(o * len + k) * inner + j] (see expr/executor.hpp),
  /// with the CPU's semantics. One output: cub::DeviceReduce; inner == 1: cub::DeviceSegmentedReduce
  /// (row o is a segment); inner > 1: reduce_axis_kernel.
  template <ReduceKind K, class Out, class E>
  static void reduce(Out* out, const E& e, index_t outer, index_t len, index_t inner) {
    using namespace kiln::cuda;
    using namespace kiln::cuda::detail;
    using V = typename E::value_type;
    using Op = ReduceOp<K, V>;
    count_pass(reduction_traffic<Out>(e, outer * len * inner, outer * inner));
    const index_t count = outer * inner;
    if (count == 0) return;
    const int device = current_device();
    const cudaStream_t stream = current_stream(device);
    if (len == 0) {
      constexpr ElementwiseTuning t = elementwise_tuning(sizeof(Out), false);
      launch(&reduce_empty_kernel<K, Out, V>, dim3(grid_for(count, t, device)), dim3(t.block), 0, stream, out, count);
      return;
    }
    if (inner == 1) {
      const auto in = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), ReduceLoad<K, E>{e});
      if (outer == 1) {
        const auto to = thrust::make_transform_output_iterator(out, ReduceFinish<K, V, Out>{len});
        run_cub("cub::DeviceReduce::Reduce", device, [&](void* temp, std::size_t& bytes) {
          return cub::DeviceReduce::Reduce(temp, bytes, in, to, len, Op{}, Op::empty(), stream);
        });
      } else {
        // CUB's segmented reduce takes the type of its initial value from the output iterator, so the
        // row states land in scratch memory and one more kernel turns them into outputs.
        using State = typename Op::State;
        const auto begin = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), SegmentBegin{len});
        Scratch states(static_cast<std::size_t>(outer) * sizeof(State), device);
        State* s = static_cast<State*>(states.get());
        run_cub("cub::DeviceSegmentedReduce::Reduce", device, [&](void* temp, std::size_t& bytes) {
          return cub::DeviceSegmentedReduce::Reduce(temp, bytes, in, s, outer, begin, begin + 1, Op{}, Op::empty(),
                                                    stream);
        });
        constexpr ElementwiseTuning t = elementwise_tuning(sizeof(Out), false);
        launch(&reduce_finish_kernel<K, Out, V>, dim3(grid_for(outer, t, device)), dim3(t.block), 0, stream,
               static_cast<const State*>(s), out, outer, len);
      }
      return;
    }
    constexpr ReduceTuning t = reduce_tuning();
    const index_t tiles = outer * ((inner + t.block_x - 1) / t.block_x);
    const index_t resident = static_cast<index_t>(multiprocessor_count(device)) * (2048 / (t.block_x * t.block_y));
    const auto blocks = static_cast<unsigned>(std::clamp<index_t>(tiles, 1, resident * 4));
    launch(&reduce_axis_kernel<K, Out, E, reduce_config<t>>, dim3(blocks), dim3(t.block_x, t.block_y), 0, stream, out, e, outer, len,
           inner);
  }
};

}  // namespace kiln::detail
