// What every training example needs of the device: batches moved to it, and the CPU thread count.
#pragma once
#include <type_traits>

#include <kiln/core/config.hpp>
#include <kiln/policy/device.hpp>
#include <kiln/expr/cast.hpp>
#include <kiln/tensor/tensor.hpp>

#if KILN_HAS_OPENMP
#include <omp.h>
#endif

namespace examples {

/// The batch's tensor on device D (the CPU batch itself on the CPU): on the current device, which is
/// the rank's GPU under DistributedDataParallel (ProcessGroup<Nccl> makes it current).
template <class D, class T, class S>
auto to_device(const kiln::Tensor<T, S, kiln::Cpu>& t) {
  if constexpr (std::is_same_v<D, kiln::Cpu>) return t;
  else return t.template to<D>(-1, false);  // blocking: the loss is read on the host right after
}

/// A batch's tensor on device D, float features as the model's storage type T (fp16 / bf16: one
/// conversion pass on the device) and anything else (int64 labels) as it is.
template <class D, class T, class E, class S>
auto to_model_input(const kiln::Tensor<E, S, kiln::Cpu>& t) {
  if constexpr (!std::is_same_v<E, float> || std::is_same_v<T, float>) {
    return to_device<D>(t);
  } else {
    const auto on_device = to_device<D>(t);
    kiln::Tensor<T, S, D> out(on_device.extents(), on_device.device_index());
    kiln::assign(out, kiln::cast<T>(on_device));
    return out;
  }
}

/// The threads the CPU loops run on (OMP_NUM_THREADS; 1 without OpenMP).
inline int threads() {
#if KILN_HAS_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace examples
