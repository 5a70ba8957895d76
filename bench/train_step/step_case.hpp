// A training step of one model under one precision on one device, as bench_train_step (CPU),
// bench_train_step_cuda and kiln-bench time it: Adam(1e-3), a loss (cross entropy unless told), the
// GradScaler loop (a pass-through for fp32 and bf16), inputs rounded to the storage type once
// (regression targets in its compute type, fp32, as under autocast); an inference step; and the activation memory of a training forward. Both
// steps can be captured into a kiln::cuda::Graph (the training step with a capturable Adam and
// GradScaler).
#pragma once
#include <cstdint>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <kiln/optim/grad_scaler.hpp>
#include <type_traits>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#endif

namespace kiln::bench {

template <class Net, class In, class Prec, class D, class Loss = kiln::nn::CrossEntropyLoss, class Y = std::int64_t,
          class SY = kiln::Shape<kiln::dyn>>
struct StepCase {
  using T = typename Prec::storage;
  using YT = std::conditional_t<std::is_floating_point_v<Y>, kiln::compute_t<T>, Y>;  // regression targets: fp32
  kiln::nn::Model<Net, In, kiln::Policy<Prec, D>> model{0};
  kiln::optim::Adam<float, D, T> opt;
  kiln::optim::GradScaler<D> scaler;
  kiln::Tensor<T, In, D> x;
  kiln::Tensor<YT, SY, D> y;  // a copy of the caller's targets (converted to fp32 for a regression)
  Loss loss{};

  /// capturable: Adam and the GradScaler keep their state on the device, so a kiln::cuda::Graph can
  /// replay step().
  StepCase(const kiln::Tensor<float, In, D>& x32, const kiln::Tensor<Y, SY, D>& targets, bool capturable = false)
      : opt(model, {.lr = 1e-3, .capturable = capturable}),
        scaler({.enabled = Prec::loss_scaling, .capturable = capturable}),
        x(x32.extents(), x32.device_index()) {
    kiln::assign(x, kiln::cast<T>(x32));
    if constexpr (std::is_same_v<YT, Y>) {
      y = targets;
    } else {
      y = kiln::Tensor<YT, SY, D>(targets.extents(), targets.device_index());
      kiln::assign(y, targets);
    }
  }
  void step() {
    opt.zero_grad();
    const auto pred = model.forward(x);
    model.backward(loss.backward(pred, y, scaler.loss_scale()));
    scaler.step(opt);
    scaler.update();
  }
  /// A forward without gradients in evaluation mode.
  void infer_step() {
    kiln::nn::NoGrad guard(model);
    model.eval();
    (void)model.forward(x);
    model.train();
  }
  /// Bytes a training forward leaves allocated: the activations kept for backward, and the logits.
  double activation_bytes() {
    auto& alloc = kiln::caching_allocator<D>();
    sync();
    const auto before = alloc.stats().allocated_bytes;
    const auto logits = model.forward(x);
    const auto held = static_cast<double>(alloc.stats().allocated_bytes - before);
    model.backward(loss.backward(logits, y, scaler.scale()));  // releases them
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
