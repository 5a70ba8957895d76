/// clip_grad_norm: rescale gradients whose global norm exceeds a bound (torch.nn.utils.clip_grad_norm_),
/// reading the norm back, or on the device for a captured step (clip_grad_norm_capturable);
/// clip_grad_value: clamp each gradient (torch.nn.utils.clip_grad_value_).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/functors.hpp"
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

/// Throws ValueError when `grads` is a Model's parameter arena (its weights): torch's
/// clip_grad_norm_(model.parameters(), ...) clips the parameters' gradients, and the same words in kiln
/// would scale the weights themselves.
template <class M, class D>
void check_not_parameters(const Tensor<M, Shape<dyn>, D>& grads, const char* who) {
  if (grads.storage() && grads.storage()->model_parameters)
    throw ValueError(std::string("kiln::optim::") + who + ": given a model's parameters (" +
                     "model.parameters(): its weights), which it would change; torch's " + who +
                     "_(model.parameters(), ...) changes their gradients: pass the model (or the "
                     "optimizer), " + who + "(model, ...), or model.gradients()");
}

template <class M, class D>
double clip(Tensor<M, Shape<dyn>, D>& grads, double max_norm, double norm_type, bool error_if_nonfinite,
            const std::vector<nn::ParameterInfo>& parts) {
  if (kiln::detail::is_nan(norm_type))
    throw ValueError("kiln::optim::clip_grad_norm: norm_type is NaN; give 2 (the default), 1, another p, 0, or "
                     "+/-std::numeric_limits<double>::infinity()");
  if (grads.numel() == 0) return 0.0;
  const kiln::detail::device_scope<D> on(grads.device_index());  // the reductions on the gradients' GPU
  using C = compute_t<M>;
  const C total = static_cast<C>(total_norm(grads, norm_type, parts));
  if (error_if_nonfinite && kiln::detail::is_inf_or_nan(static_cast<double>(total)))
    throw ValueError("kiln::optim::clip_grad_norm: the total norm of order " + norm_name(norm_type) +
                     " of the gradients is non-finite (" + std::to_string(static_cast<double>(total)) +
                     "), so it cannot be clipped; the gradients are left as they are. To scale them by the "
                     "non-finite norm anyway, pass error_if_nonfinite = false");
  // torch: max_norm / (total + 1e-6) is Tensor.__rtruediv__, reciprocal(total + 1e-6) * max_norm (a
  // division would differ in the last bit for about a quarter of the norms with max_norm 0.7)
  const C coef = C(1) / (total + static_cast<C>(1e-6)) * static_cast<C>(max_norm);
  if (!(coef >= C(1))) grads *= coef;
  return static_cast<double>(total);
}

/// The total norm from its reduction r (Σ g^2 for the order 2, Σ |g| for 1, max |g| for infinity),
/// rounded to C as total_norm rounds it on the host: one thread, nothing read back.
template <class C, class R>
struct ClipTotal {
  const R* r;
  C* total;
  bool square_root;
  KILN_HOST_DEVICE void operator()(index_t) const {
    const double v = static_cast<double>(*r);
    *total = static_cast<C>(square_root ? ops::detail::sqrt_(v) : v);
  }
  Traffic traffic(index_t) const { return {sizeof(R) + sizeof(C), 1}; }
};
/// g *= coef where coef = max_norm / (total + 1e-6) is below 1 (or NaN), the host's rule and rounding,
/// with total read on the device.
template <class M>
struct ClipScale {
  using C = compute_t<M>;
  M* g;
  const C* total;
  C max_norm;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const C coef = C(1) / (*total + static_cast<C>(1e-6)) * max_norm;  // torch's order, as the host's
    if (!(coef >= C(1))) g[i] = from_compute<M>(to_compute(g[i]) * coef);
  }
  Traffic traffic(index_t n) const {
    return {2 * kiln::detail::bytes_of<M>(n) + sizeof(C), 3 * static_cast<std::uint64_t>(n)};
  }
};

/// g = min(max(g, -v), v), NaN kept (torch's clamp_: with v < 0 every element becomes v; with v NaN,
/// NaN).
template <class M>
struct ClipValue {
  using C = compute_t<M>;
  M* g;
  C lo, hi;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    C x = to_compute(g[i]);
    if (kiln::detail::is_nan(lo)) {
      x = lo;
    } else if (!kiln::detail::is_nan(x)) {
      x = x < lo ? lo : x;
      x = x > hi ? hi : x;
    }
    g[i] = from_compute<M>(x);
  }
  Traffic traffic(index_t n) const { return {2 * kiln::detail::bytes_of<M>(n), 2 * static_cast<std::uint64_t>(n)}; }
};

template <class M, class D>
Tensor<compute_t<M>, Shape<>, D> clip_on_device(Tensor<M, Shape<dyn>, D>& grads, double max_norm, double norm_type) {
  using C = compute_t<M>;
  const bool inf = norm_type == std::numeric_limits<double>::infinity();
  if (!(norm_type == 2.0 || norm_type == 1.0 || inf))
    throw ValueError("kiln::optim::clip_grad_norm_capturable: norm_type " + norm_name(norm_type) +
                     " is not offered here; give 2 (the default), 1 or infinity, or call clip_grad_norm, which "
                     "reads the norm back");
  const int device = grads.device_index();
  const kiln::detail::device_scope<D> on(device);
  Tensor<C, Shape<>, D> total(Extents<Shape<>>{}, device);
  if (grads.numel() == 0) {  // torch: a norm of 0, nothing to scale
    total.fill(C(0));
    return total;
  }
  const auto run = [&](const auto& r) {
    using R = std::remove_cvref_t<decltype(*r.data())>;
    kiln::detail::executor<D>::for_each(1, ClipTotal<C, R>{r.data(), total.data(), norm_type == 2.0});
  };
  if (norm_type == 2.0)
    run(sum(grads * grads));
  else if (norm_type == 1.0)
    run(sum(abs(grads)));
  else
    run(max(abs(grads)));
  kiln::detail::executor<D>::for_each(grads.numel(),
                                      ClipScale<M>{grads.data(), total.data(), static_cast<C>(max_norm)});
  return total;
}

/// The gradients a model's or an optimizer's clip sees: m.gradients() past the parameters that have none
/// (a Model's or an optimizer's parameters_without_gradient(): frozen or unreached), as torch
/// leaves out the parameters whose .grad is None. Their zeros would be the -inf norm's minimum, and a
/// negative clip value or a NaN coefficient would write into them.
template <class Model>
auto gradients_with_grad(Model& m) {
  auto g = m.gradients();  // a handle on the arena
  index_t skip = 0;
  if constexpr (requires { m.parameters_without_gradient(); }) skip = m.parameters_without_gradient();
  return g.slice(std::min(skip, g.numel()), g.numel());
}
/// The parameters of `parts` past the first `skip` elements, their offsets from there (the order 0's).
inline std::vector<nn::ParameterInfo> parts_from(std::vector<nn::ParameterInfo> parts, index_t skip) {
  std::erase_if(parts, [&](const nn::ParameterInfo& p) { return p.offset + p.count <= skip; });
  for (auto& p : parts) p.offset -= skip;
  return parts;
}
}  // namespace detail

/// Scales a gradient tensor in place so that its norm of order `norm_type` is at most `max_norm`, like
/// torch.nn.utils.clip_grad_norm_ on one parameter, and returns the norm before clipping. With
/// coef = max_norm / (total + 1e-6) (computed in float as torch does: 1 / (total + 1e-6), times max_norm)
/// the gradients are multiplied by
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
  detail::check_not_parameters(grads, "clip_grad_norm");
  return detail::clip(grads, max_norm, norm_type, error_if_nonfinite, {});
}

/// The same for a model or an optimizer: clips `m.gradients()`, one vector holding every parameter's
/// gradient, so the norm is the global norm of all parameters, past those without a gradient (frozen
/// layers, and those the last backward did not reach: torch's .grad None, left out). The order 0 counts a
/// Model's parameters that have a nonzero gradient (torch's norm of the per-parameter norms; one
/// reduction per parameter); an optimizer's arena counts as one parameter there.
template <class Model>
  requires requires(Model& m) { m.gradients(); }
double clip_grad_norm(Model& m, double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false) {
  auto grads = detail::gradients_with_grad(m);
  std::vector<nn::ParameterInfo> parts;
  if constexpr (requires { m.named_parameters(); })
    if (norm_type == 0.0)
      parts = detail::parts_from(m.named_parameters(), m.gradients().numel() - grads.numel());
  return detail::clip(grads, max_norm, norm_type, error_if_nonfinite, parts);
}

/// clip_grad_norm without reading anything back, for a step captured in a CUDA graph
/// (kiln::cuda::Graph), as torch's clip_grad_norm_ computes its coefficient on the device: the total
/// norm stays on the gradients' device and is returned there (a rank-0 tensor; `.item()` reads it, and
/// waits), and one pass multiplies the gradients by coef = max_norm / (total + 1e-6) where it is below 1
/// (or NaN), with clip_grad_norm's formulas and roundings, so the two give the same bits. norm_type 2,
/// 1 or infinity (the others, and error_if_nonfinite, need the norm on the host: clip_grad_norm).
/// Passes: the norm's reduction, a one-thread pass that finishes it, and the scaling pass.
/// Example (inside the captured step, before opt.step()):
///   const auto norm = kiln::optim::clip_grad_norm_capturable(model, 1.0);
template <class M, class D>
Tensor<compute_t<M>, Shape<>, D> clip_grad_norm_capturable(Tensor<M, Shape<dyn>, D>& grads, double max_norm,
                                                          double norm_type = 2.0) {
  detail::check_not_parameters(grads, "clip_grad_norm");
  return detail::clip_on_device(grads, max_norm, norm_type);
}
/// The same for a model or an optimizer: the global norm of `m.gradients()` past those without a
/// gradient (clip_grad_norm's).
template <class Model>
  requires requires(Model& m) { m.gradients(); }
auto clip_grad_norm_capturable(Model& m, double max_norm, double norm_type = 2.0) {
  auto grads = detail::gradients_with_grad(m);
  return detail::clip_on_device(grads, max_norm, norm_type);
}

/// torch.nn.utils.clip_grad_value_: clamps every gradient into [-clip_value, clip_value] in one pass (a
/// NaN stays NaN; a negative clip_value sets every element to it, as torch's clamp with min > max, and
/// a NaN one makes every element NaN). It reads nothing back, so a captured step can call it.
/// Example: `kiln::optim::clip_grad_value(model, 0.5);  // before opt.step()`
template <class M, class D>
void clip_grad_value(Tensor<M, Shape<dyn>, D>& grads, double clip_value) {
  detail::check_not_parameters(grads, "clip_grad_value");
  using C = compute_t<M>;
  const kiln::detail::device_scope<D> on(grads.device_index());
  const C v = static_cast<C>(clip_value);
  kiln::detail::executor<D>::for_each(grads.numel(), detail::ClipValue<M>{grads.data(), -v, v});
}
/// The same for a model or an optimizer: clamps `m.gradients()` past those without a gradient (a negative
/// clip_value would set them).
template <class Model>
  requires requires(Model& m) { m.gradients(); }
void clip_grad_value(Model& m, double clip_value) {
  auto grads = detail::gradients_with_grad(m);
  clip_grad_value(grads, clip_value);
}

}  // namespace kiln::optim
