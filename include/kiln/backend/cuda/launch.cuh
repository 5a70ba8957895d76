/// Kernel launches: grid sizing from constexpr tuning knobs, an error check naming the kernel, a counter.
#pragma once
#include "kiln/core/config.hpp"
#if !KILN_CUDA_COMPILER
#error "include kiln/cuda.hpp from a CUDA source (a .cu file, or LANGUAGE CUDA): kiln's kernels need nvcc"
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>

#include <cuda_runtime.h>
#include <cxxabi.h>

#include "kiln/backend/cuda/check.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"

namespace kiln::cuda {

/// The knobs of an elementwise kernel: threads per block, items (vectors) each thread handles per
/// grid-stride step, and the bytes one vector load/store moves (0: scalar).
struct ElementwiseTuning {
  int block = 256;
  int items_per_thread = 4;
  int vector_bytes = 16;
};

/// Requirements on a tuning: a block of whole warps (32..1024 threads), at least one item per
/// thread, and a vector width of 0 (scalar) or a power of two up to 16 bytes (one 128-bit access).
constexpr bool valid_tuning(ElementwiseTuning t) {
  return t.block >= 32 && t.block <= 1024 && t.block % 32 == 0 && t.items_per_thread >= 1 &&
         t.items_per_thread <= 16 && t.vector_bytes >= 0 && t.vector_bytes <= 16 &&
         (t.vector_bytes & (t.vector_bytes - 1)) == 0;
}

/// The tuning for an elementwise kernel writing elements of `element_bytes` bytes, for the GPUs kiln
/// targets (sm_75 .. sm_120: 128-bit accesses, 2048 threads per SM): 256 threads, 16-byte vectors,
/// four vectors per thread (two for 8-byte elements, whose vectors hold only two values of work).
/// `vectorized = false` gives the scalar variant (unaligned operands).
constexpr ElementwiseTuning elementwise_tuning(std::size_t element_bytes, bool vectorized = true) {
  ElementwiseTuning t{};
  t.items_per_thread = element_bytes >= 8 ? 2 : 4;
  t.vector_bytes = vectorized ? 16 : 0;
  return t;
}
static_assert(valid_tuning(elementwise_tuning(1)) && valid_tuning(elementwise_tuning(8, false)));

/// An ElementwiseTuning as a type, to pass as a kernel's template argument (nvcc's host stubs cannot
/// spell class-type non-type template arguments): `elementwise_config<elementwise_tuning(4)>`.
template <int Block, int ItemsPerThread, int VectorBytes>
struct ElementwiseConfig {
  static constexpr ElementwiseTuning value{Block, ItemsPerThread, VectorBytes};
  static_assert(valid_tuning(value), "kiln: invalid ElementwiseTuning (see kiln::cuda::valid_tuning)");
};
template <ElementwiseTuning T>
using elementwise_config = ElementwiseConfig<T.block, T.items_per_thread, T.vector_bytes>;

/// Values per vector access for elements of `element_bytes` under tuning t (1 = scalar); at most 8,
/// so a vector of a narrow destination does not drag wide operands into huge register packets.
constexpr int vector_width(ElementwiseTuning t, std::size_t element_bytes) {
  const std::size_t w = t.vector_bytes == 0 ? 1 : static_cast<std::size_t>(t.vector_bytes) / element_bytes;
  return w < 1 ? 1 : (w > 8 ? 8 : static_cast<int>(w));
}

namespace detail {
inline std::atomic<std::uint64_t>& launch_counter() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

/// Streaming multiprocessors of `device`, cached (grid sizing asks on every launch).
inline int multiprocessor_count(int device) {
  static std::atomic<int> cache[max_devices] = {};
  if (device < 0) device = current_device();
  if (device >= max_devices) return 1;
  int n = cache[device].load(std::memory_order_relaxed);
  if (n == 0) {
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cache[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

/// The demangled name of a kernel, for error messages ("kiln::cuda::detail::elementwise_kernel<...>").
inline std::string kernel_name(const void* kernel, const char* signature) {
  const char* name = nullptr;
  if (cudaFuncGetName(&name, kernel) != cudaSuccess || name == nullptr) {
    (void)cudaGetLastError();
    name = signature;
  }
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}
}  // namespace detail

/// Kernel launches made through launch() so far in this process (tests diff it to prove fusion).
inline std::uint64_t launches() { return detail::launch_counter().load(std::memory_order_relaxed); }

/// Blocks for `work` units of which each block handles block * items_per_thread, capped at a few
/// waves of resident blocks (the kernels grid-stride over the rest); at least 1.
inline unsigned grid_for(index_t work, ElementwiseTuning t, int device = -1) {
  const index_t tile = static_cast<index_t>(t.block) * t.items_per_thread;
  const index_t wanted = (work + tile - 1) / tile;
  const index_t resident = static_cast<index_t>(detail::multiprocessor_count(device)) * std::max(1, 2048 / t.block);
  return static_cast<unsigned>(std::clamp<index_t>(wanted, 1, resident * 4));
}

/// kernel<<<grid, block, shared_bytes, stream>>>(args...), counted in launches(); throws BackendError
/// naming the kernel when the launch fails (or an earlier asynchronous error surfaces here).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
            Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args),
                "kiln::cuda::launch: the number of arguments differs from the kernel's parameters");
  kernel<<<grid, block, shared_bytes, stream>>>(static_cast<Params>(std::forward<Args>(args))...);
  detail::launch_counter().fetch_add(1, std::memory_order_relaxed);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    const std::string name = detail::kernel_name(reinterpret_cast<const void*>(kernel), typeid(kernel).name());
    throw BackendError(kiln::detail::backend_message("CUDA", "kernel launch", __FILE__, __LINE__, static_cast<int>(e),
                                                     cuda::detail::cuda_error_text(e)) +
                       " launching " + name + " with grid (" + std::to_string(grid.x) + ", " + std::to_string(grid.y) +
                       ", " + std::to_string(grid.z) + "), block (" + std::to_string(block.x) + ", " +
                       std::to_string(block.y) + ", " + std::to_string(block.z) + "), " + std::to_string(shared_bytes) +
                       " bytes of shared memory");
  }
}

}  // namespace kiln::cuda
