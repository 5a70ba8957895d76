/// clip_grad_norm: rescale gradients whose global norm exceeds a bound (torch.nn.utils.clip_grad_norm_).
#pragma once
#include <cmath>
#include <limits>
#include <string>

#include "kiln/core/errors.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

/// Scales a gradient arena in place so that its norm of order `norm_type` is at most `max_norm`, like
/// torch.nn.utils.clip_grad_norm_, and returns the norm before clipping. With
/// coef = max_norm / (total + 1e-6) (computed in float, as torch does) the gradients are multiplied by
/// coef when it is below 1 (or NaN: a non-finite norm spreads into the gradients, as in torch).
/// The arena is one vector, so its norm is the global norm of all parameters.
/// norm_type: 2 (default), 1, any p > 0, or infinity (the largest |g|).
/// Passes: one reduction, plus one scaling pass when clipping.
/// Example:
///   model.backward(dy);
///   double norm = kiln::optim::clip_grad_norm(model, 1.0);  // before opt.step()
template <class M, class D>
double clip_grad_norm(Tensor<M, Shape<dyn>, D>& grads, double max_norm, double norm_type = 2.0) {
  if (!(norm_type > 0.0))
    throw ValueError("kiln::optim::clip_grad_norm: norm_type " + std::to_string(norm_type) +
                     " is not a norm; give 2, 1, another p > 0, or std::numeric_limits<double>::infinity()");
  if (grads.numel() == 0) return 0.0;
  const kiln::detail::device_scope<D> on(grads.device_index());  // the reductions on the gradients' GPU
  using C = compute_t<M>;
  C total;
  if (std::isinf(norm_type)) {
    total = max(abs(grads)).item();
  } else if (norm_type == 2.0) {
    total = static_cast<C>(std::sqrt(static_cast<double>(sum(grads * grads).item())));
  } else if (norm_type == 1.0) {
    total = sum(abs(grads)).item();
  } else {
    const double s = static_cast<double>(sum(pow(abs(grads), static_cast<C>(norm_type))).item());
    total = static_cast<C>(std::pow(s, 1.0 / norm_type));
  }
  const C coef = static_cast<C>(max_norm) / (total + static_cast<C>(1e-6));
  if (!(coef >= C(1))) grads *= coef;
  return static_cast<double>(total);
}

/// The same for a model: clips `m.gradients()`.
template <class Model>
  requires requires(Model& m) { m.gradients(); }
double clip_grad_norm(Model& m, double max_norm, double norm_type = 2.0) {
  return clip_grad_norm(m.gradients(), max_norm, norm_type);
}

}  // namespace kiln::optim
