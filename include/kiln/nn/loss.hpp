/// Losses with mean reduction: MSELoss (forward value and gradient w.r.t. the prediction).
#pragma once
#include "kiln/expr/reduce.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// mean((pred - target)^2), as torch.nn.MSELoss(). Shapes: pred and target alike -> a scalar.
/// Example:
///   kiln::nn::MSELoss mse;
///   auto loss = mse(pred, target);          // rank-0 tensor: loss.item()
///   auto dpred = mse.backward(pred, target);  // dL/dpred, [N, 1]
struct MSELoss {
  template <class T, class S, class D>
  auto operator()(const Tensor<T, S, D>& pred, const Tensor<T, S, D>& target) const {
    const auto d = pred - target;
    return mean(d * d);  // one pass
  }
  /// 2 (pred - target) / numel, times the loss's own gradient `scale` (1 for a plain step).
  template <class T, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<T, S, D>& target, double scale = 1.0) const {
    Tensor<T, S, D> g(pred.extents(), pred.device_index());
    const auto k = static_cast<compute_t<T>>(2.0 * scale / static_cast<double>(pred.numel()));
    g = (pred - target) * k;
    return g;
  }
};

}  // namespace kiln::nn
