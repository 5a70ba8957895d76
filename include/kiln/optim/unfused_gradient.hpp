/// The gradient an optimizer's unfused step (kiln::Unfused: torch's single-tensor operations one by one)
/// works on, after torch's first two operations.
#pragma once
#include <utility>

#include "kiln/expr/assign.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim::detail {

/// `grad` itself (shared, never written: torch's step leaves p.grad as it is); under maximize -grad in a
/// new tensor; then, for an L2 term, g + weight_decay p in a new tensor: one pass each, as torch's
/// `grad = -grad` and `grad = grad.add(param, alpha=weight_decay)`.
template <class Arena, class C>
Arena unfused_gradient(const Arena& grad, const Arena& params, bool maximize, C weight_decay) {
  Arena g = grad;
  if (maximize) {  // rebinding g (a move: a copy assignment would write into the gradients)
    g = Arena(grad.extents(), grad.device_index());
    kiln::assign(g, -grad);
  }
  if (weight_decay != C(0)) {
    Arena d(grad.extents(), grad.device_index());
    kiln::assign(d, g + params * weight_decay);
    g = std::move(d);
  }
  return g;
}

}  // namespace kiln::optim::detail
