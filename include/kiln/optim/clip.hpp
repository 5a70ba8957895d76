/// clip_grad_norm: rescale gradients whose global norm exceeds a bound (torch.nn.utils.clip_grad_norm_).
#pragma once
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

namespace detail {

inline std::string norm_name(double norm_type) {  // 2, 0.5, 1e-07, inf, -inf
  std::ostringstream os;
  os << norm_type;
  return os.str();
}

/// The norm of order p over `grads`, whose parameters are `parts` (offset, count) for the order 0: torch
/// takes each parameter's norm and then the norm of those, which for p != 0 is the norm of all the
/// elements, and for p = 0 counts the parameters with a nonzero (or NaN) gradient: an empty `parts`
/// means one parameter (the whole tensor), so 0 or 1.
template <class M, class D>
double total_norm(const Tensor<M, Shape<dyn>, D>& grads, double p, const std::vector<nn::ParameterInfo>& parts) {
  using C = compute_t<M>;
  if (p == std::numeric_limits<double>::infinity()) return static_cast<double>(C(max(abs(grads)).item()));
  if (p == -std::numeric_limits<double>::infinity()) return static_cast<double>(C(min(abs(grads)).item()));
  if (p == 0.0) {
    const auto any_nonzero = [](const Tensor<M, Shape<dyn>, D>& g) { return sum(ne(g, C(0))).item() != 0; };
    if (parts.empty()) return any_nonzero(grads) ? 1.0 : 0.0;
    double n = 0;
    for (const auto& part : parts)
      if (part.count > 0 && any_nonzero(grads.slice(part.offset, part.offset + part.count))) n += 1;
    return n;
  }
  if (p == 2.0) return static_cast<double>(static_cast<C>(std::sqrt(static_cast<double>(sum(grads * grads).item()))));
  if (p == 1.0) return static_cast<double>(C(sum(abs(grads)).item()));
  const double s = static_cast<double>(sum(pow(abs(grads), static_cast<C>(p))).item());
  return static_cast<double>(static_cast<C>(std::pow(s, 1.0 / p)));
}

template <class M, class D>
double clip(Tensor<M, Shape<dyn>, D>& grads, double max_norm, double norm_type, bool error_if_nonfinite,
            const std::vector<nn::ParameterInfo>& parts) {
  if (std::isnan(norm_type))
    throw ValueError("kiln::optim::clip_grad_norm: norm_type is NaN; give 2 (the default), 1, another p, 0, or "
                     "+/-std::numeric_limits<double>::infinity()");
  if (grads.numel() == 0) return 0.0;
  const kiln::detail::device_scope<D> on(grads.device_index());  // the reductions on the gradients' GPU
  using C = compute_t<M>;
  const C total = static_cast<C>(total_norm(grads, norm_type, parts));
  if (error_if_nonfinite && !std::isfinite(static_cast<double>(total)))
    throw ValueError("kiln::optim::clip_grad_norm: the total norm of order " + norm_name(norm_type) +
                     " of the gradients is non-finite (" + std::to_string(static_cast<double>(total)) +
                     "), so it cannot be clipped; the gradients are left as they are. To scale them by the "
                     "non-finite norm anyway, pass error_if_nonfinite = false");
  const C coef = static_cast<C>(max_norm) / (total + static_cast<C>(1e-6));
  if (!(coef >= C(1))) grads *= coef;
  return static_cast<double>(total);
}

}  // namespace detail

/// Scales a gradient tensor in place so that its norm of order `norm_type` is at most `max_norm`, like
/// torch.nn.utils.clip_grad_norm_ on one parameter, and returns the norm before clipping. With
/// coef = max_norm / (total + 1e-6) (computed in float, as torch does) the gradients are multiplied by
/// coef when it is below 1 (or NaN: a non-finite norm spreads into the gradients, as in torch; with
/// `error_if_nonfinite` a non-finite norm throws ValueError instead and nothing changes).
/// norm_type: 2 (default), 1, any other p (negative too: (sum |g|^p)^(1/p)), infinity (the largest |g|),
/// -infinity (the smallest |g|), or 0 (torch counts the parameters with a nonzero gradient: one tensor
/// gives 1, or 0 when all its elements are 0; for a Model, its parameters are counted).
/// Passes: one reduction, plus one scaling pass when clipping.
/// Example:
///   model.backward(dy);
///   double norm = kiln::optim::clip_grad_norm(model, 1.0);  // before opt.step()
template <class M, class D>
double clip_grad_norm(Tensor<M, Shape<dyn>, D>& grads, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false) {
  return detail::clip(grads, max_norm, norm_type, error_if_nonfinite, {});
}

/// The same for a model or an optimizer: clips `m.gradients()`, one vector holding every parameter's
/// gradient, so the norm is the global norm of all parameters. The order 0 counts a Model's parameters
/// that have a nonzero gradient (torch's norm of the per-parameter norms; one reduction per parameter);
/// an optimizer's arena counts as one parameter there.
template <class Model>
  requires requires(Model& m) { m.gradients(); }
double clip_grad_norm(Model& m, double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false) {
  std::vector<nn::ParameterInfo> parts;
  if constexpr (requires { m.named_parameters(); })
    if (norm_type == 0.0) parts = m.named_parameters();
  return detail::clip(m.gradients(), max_norm, norm_type, error_if_nonfinite, parts);
}

}  // namespace kiln::optim
