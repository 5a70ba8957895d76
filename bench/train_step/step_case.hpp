// A training step of one model under one precision on one device, as bench_train_step (CPU) and
// bench_train_step_cuda time it: Adam(1e-3), cross entropy, the GradScaler loop (a pass-through for fp32
// and bf16), inputs rounded to the storage type once; and the activation memory of a training forward.
#pragma once
#include <cstdint>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <kiln/optim/grad_scaler.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#endif

namespace kiln::bench {

template <class Net, class In, class Prec, class D>
struct StepCase {
  using T = typename Prec::storage;
  kiln::nn::Model<Net, In, kiln::Policy<Prec, D>> model{0};
  kiln::optim::Adam<float, D, T> opt{model, {.lr = 1e-3f}};
  kiln::optim::GradScaler<D> scaler{{.enabled = Prec::loss_scaling}};
  kiln::Tensor<T, In, D> x;
  const kiln::Tensor<std::int64_t, kiln::Shape<kiln::dyn>, D>& y;
  kiln::nn::CrossEntropyLoss ce;

  StepCase(const kiln::Tensor<float, In, D>& x32, const kiln::Tensor<std::int64_t, kiln::Shape<kiln::dyn>, D>& labels)
      : x(x32.extents(), x32.device_index()), y(labels) {
    kiln::assign(x, kiln::cast<T>(x32));
  }
  void step() {
    opt.zero_grad();
    const auto logits = model.forward(x);
    model.backward(ce.backward(logits, y, scaler.scale()));
    scaler.step(opt);
    scaler.update();
  }
  /// Bytes a training forward leaves allocated: the activations kept for backward, and the logits.
  double activation_bytes() {
    auto& alloc = kiln::caching_allocator<D>();
    sync();
    const auto before = alloc.stats().allocated_bytes;
    const auto logits = model.forward(x);
    const auto held = static_cast<double>(alloc.stats().allocated_bytes - before);
    model.backward(ce.backward(logits, y, scaler.scale()));  // releases them
    sync();
    return held;
  }

 private:
  static void sync() {
#if KILN_CUDA_COMPILER
    if constexpr (std::is_same_v<D, kiln::Cuda>) kiln::cuda::synchronize();
#endif
  }
};

}  // namespace kiln::bench
