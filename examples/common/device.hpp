// What every training example needs of the device: batches moved to it (a DeviceLoader, or one tensor at a
// time), and the CPU thread count.
#pragma once
#include <type_traits>
#include <utility>

#include <kiln/core/config.hpp>
#include <kiln/data/device_loader.hpp>
#include <kiln/parallel/data_parallel.hpp>
#include <kiln/policy/device.hpp>
#include <kiln/expr/cast.hpp>
#include <kiln/tensor/tensor.hpp>

namespace examples {

/// The batch's tensor on device D (the CPU batch itself on the CPU): on the current device, which is
/// the rank's GPU under DistributedDataParallel (ProcessGroup<Nccl> makes it current).
template <class D, class T, class S>
auto to_device(const kiln::Tensor<T, S, kiln::Cpu>& t) {
  if constexpr (std::is_same_v<D, kiln::Cpu>) return t;
  else return t.template to<D>(-1, t.is_pinned());  // from pinned memory, ordered on the stream, not waited for
}

/// A tensor already on the GPU (a DeviceLoader's batch) as it is.
template <class D, class T, class S>
  requires(!std::is_same_v<D, kiln::Cpu>)
auto to_device(const kiln::Tensor<T, S, D>& t) {
  return t;
}

/// A batch's tensor on device D, float features as the model's storage type T (fp16 / bf16: one
/// conversion pass on the device) and anything else (int64 labels) as it is. Targets go to the loss
/// as `to_model_target`.
template <class D, class T, class E, class S, class From>
auto to_model_input(const kiln::Tensor<E, S, From>& t) {
  static_assert(std::is_same_v<From, kiln::Cpu> || std::is_same_v<From, D>, "a batch on another device");
  if constexpr (!std::is_same_v<E, float> || std::is_same_v<T, float>) {
    return to_device<D>(t);
  } else {
    const auto on_device = to_device<D>(t);
    kiln::Tensor<T, S, D> out(on_device.extents(), on_device.device_index());
    kiln::assign(out, kiln::cast<T>(on_device));
    return out;
  }
}

/// A batch's targets on device D for a loss of the model's outputs (storage type T): float targets in
/// T's compute type (float for fp16 / bf16, as autocast computes the loss in fp32 on the data's own
/// targets: a house price of 21.6 stays 21.6, not bfloat16's 21.625), labels as they are.
template <class D, class T, class E, class S, class From>
auto to_model_target(const kiln::Tensor<E, S, From>& t) {
  return to_model_input<D, kiln::compute_t<T>>(t);
}

/// The device a trained model takes its batches on: a model's (or a DistributedDataParallel rank's)
/// own; DataParallel splits host batches across its replicas itself.
template <class Trained>
struct batch_device {
  using type = typename Trained::D;
};
template <class Net, class In, class Prec, class D>
struct batch_device<kiln::parallel::DataParallel<Net, In, Prec, D>> {
  using type = kiln::Cpu;
};

/// `loader`'s batches where `trained` takes them (kiln::data::DeviceLoader: on the GPU, copied on a copy
/// stream ahead of use), scaled and normalised there by `t`. `loader` must outlive the result.
template <class Trained, class Loader>
auto device_batches(const Trained&, Loader& loader, kiln::data::ScaleNormalize t) {
  return kiln::data::DeviceLoader<typename batch_device<Trained>::type, Loader>(loader, std::move(t));
}

}  // namespace examples
