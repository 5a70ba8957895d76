/// Reference-counted device memory behind tensors, and the per-device allocator and copy hooks.
#pragma once
#include <cstddef>
#include <cstring>
#include <memory>

#include "kiln/backend/cpu/memory.hpp"
#include "kiln/core/type_list.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/allocator.hpp"

namespace kiln {

namespace detail {
/// Memory services of device D:
/// - `allocator(index)`: its caching allocator (index < 0: the current device);
/// - `indexed`: whether D has several devices (cuda:N) at all; the rest is asked only if so;
/// - `pointer_device(p)`: the device memory p belongs to, as libtorch's getDeviceFromPtr (-1: memory
///   the runtime does not know, or no driver);
/// - `resident_device(p)`: the device p's memory is on if only that device reads it (-1 for memory
///   every device reads: managed, pinned host);
/// - `several_in_use()`: whether this process has used more than one device of D (allocators created,
///   memory wrapped; only then can two operands differ, so a process that uses one GPU of several never
///   asks), and `device_in_use()`, the first (while not several, the only one; -1: none);
///   `note_device(index)` records a device as used.
/// Cpu is defined here; Cuda in kiln/backend/cuda/memory.hpp (needs kiln::cuda).
template <class D>
struct device_memory {
  // >>> Stopped here? A tensor on this device needs its backend linked. <<<
  static_assert(dependent_false<D>,
                "kiln: tensors on kiln::Cuda need the CUDA runtime: link your target to kiln::cuda "
                "(find_package(kiln COMPONENTS cuda)), which defines KILN_WITH_CUDA");
  static constexpr bool indexed = false;  // declarations only: no second error after the assertion's
  static CachingAllocator& allocator(int);
  static int pointer_device(const void*);
  static int resident_device(const void*);
  static bool several_in_use();
  static int device_in_use();
  static void note_device(int);
};

template <>
struct device_memory<Cpu> {
  static constexpr bool indexed = false;
  static CachingAllocator& allocator(int) { return backend::cpu::allocator(); }
};

/// Page-locked host memory (cudaHostAlloc): pinned_host_memory<Cpu> is defined in
/// kiln/backend/cuda/memory.hpp.
template <class D>
struct pinned_host_memory {
  static_assert(dependent_false<D>, "kiln::Tensor::pin_memory: pinned memory needs the CUDA runtime: link your "
                                   "target to kiln::cuda");
};

/// Whether the calling thread is recording a CUDA graph on device `index`'s current stream
/// (kiln::cuda::Graph). Layers whose kernels take host state that must change from call to call
/// (Dropout's mask counter) refuse to be captured. The CPU never captures; the Cuda case is in
/// kiln/backend/cuda/graph.hpp.
template <class D>
struct graph_capture {
  static_assert(dependent_false<D>, "kiln: kiln::Cuda layers need kiln/cuda.hpp (it defines graph_capture<Cuda>)");
};
template <>
struct graph_capture<Cpu> {
  static bool active(int) { return false; }
};

/// Makes device `index` current for a scope: kernels launch on the current device, so a pass over a
/// tensor of another GPU runs under one. Nothing on the CPU; the Cuda case is in kiln/backend/cuda/memory.hpp.
template <class D>
struct device_scope {
  static_assert(dependent_false<D>, "kiln: tensors on kiln::Cuda need the CUDA runtime: link your target to kiln::cuda");
  explicit device_scope(int) {}  // no second error after the assertion's
};
template <>
struct device_scope<Cpu> {
  explicit device_scope(int) {}
};

/// Bytes from one device's memory to another's; asynchronous on the current stream when
/// non_blocking and a GPU is involved. Specialised for CUDA pairs in kiln/backend/cuda/memory.hpp.
template <class DstD, class SrcD>
struct device_copy {
  static_assert(dependent_false<DstD, SrcD>,
                "kiln: copies to or from kiln::Cuda need the CUDA runtime: link your target to kiln::cuda");
};
template <>
struct device_copy<Cpu, Cpu> {
  static void run(void* dst, int, const void* src, int, std::size_t bytes, bool) {
    if (bytes) std::memmove(dst, src, bytes);  // (copy_from a span of the tensor's own storage may overlap)
  }
};
}  // namespace detail

/// One allocation: freed back to its allocator's cache when the last tensor using it goes away.
struct Storage {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  CachingAllocator* owner = nullptr;  ///< null: memory owned by someone else (from_blob)
  int device = 0;                     ///< device index (cuda:N); 0 on the CPU
  bool pinned = false;                ///< page-locked host memory (for asynchronous copies)
  /// A Model's parameter arena: the functions that take gradients (clip_grad_norm, clip_grad_value) refuse
  /// it, as torch's spelling clip_grad_norm_(model.parameters(), ...) would otherwise scale the weights.
  bool model_parameters = false;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (owner) owner->deallocate(ptr);
  }

  static std::shared_ptr<Storage> allocate(CachingAllocator& a, std::size_t bytes, bool pinned = false) {
    auto s = std::make_shared<Storage>();
    s->ptr = a.allocate(bytes);
    s->bytes = bytes;
    s->owner = &a;
    s->device = a.device();
    s->pinned = pinned;
    return s;
  }
};

/// The caching allocator of device D (index: which GPU; < 0: the current one).
template <device_policy D>
CachingAllocator& caching_allocator(int index = -1) {
  return detail::device_memory<D>::allocator(index);
}

/// Allocator statistics of device D (torch.cuda.memory_stats).
template <device_policy D>
MemoryStats memory_stats(int index = -1) {
  return caching_allocator<D>(index).stats();
}

/// Returns device D's cached blocks to the system (torch.cuda.empty_cache()).
template <device_policy D>
void empty_cache(int index = -1) {
  caching_allocator<D>(index).empty_cache();
}

}  // namespace kiln
