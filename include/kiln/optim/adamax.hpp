/// Adamax (torch.optim.Adamax): Adam with the infinity norm in place of the second moment, one fused
/// pass per step.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/fusion.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/optim/adam.hpp"
#include "kiln/optim/parameter_arenas.hpp"
#include "kiln/optim/step_counts.hpp"
#include "kiln/optim/unfused_gradient.hpp"
#include "kiln/optim/from_model.hpp"
#include "kiln/optim/working_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

/// torch.optim.Adamax's options and defaults, in its order.
struct AdamaxOptions {
  double lr = 2e-3;
  AdamBetas betas = {};       ///< beta1 for the first moment, beta2 for the decay of the infinity norm
  double eps = 1e-8;          ///< added to |g| before the maximum
  double weight_decay = 0.0;  ///< an L2 term added to the gradient
  /// Step up the gradient: g = -grad before the weight decay and the moments (torch's maximize).
  bool maximize = false;
};

namespace detail {
/// One element of an Adamax step, in torch 1.13's single-tensor order:
///   maximize: g = -g;  g += wd p;  m = beta1 m + (1 - beta1) g;  u = max(beta2 u, |g| + eps);
///   p += (-clr m) / u,  clr = lr / (1 - beta1^t)
/// (torch.amax: a NaN in either propagates). In float, or double for double master weights; the working
/// copy rewritten in the same pass under mixed precision. L2 is a template argument so the loop has no
/// branch.
template <class M, class W = M, bool L2 = false>
struct AdamaxStep {
  using C = std::conditional_t<std::is_same_v<M, double>, double, float>;
  M* p;
  const M* grad;
  M* m;
  M* u;
  W* work;  // mixed precision only
  C beta1, one_minus_beta1, beta2, eps, weight_decay, neg_clr;
  bool maximize = false;  // g = -grad first, a multiply by -1 (exact), as SgdStep::maximize

  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    const C w = static_cast<C>(p[i]);
    C g = static_cast<C>(grad[i]);
    g = (maximize ? C(-1) : C(1)) * g;
    if constexpr (L2) g = g + weight_decay * w;
    const C mi = static_cast<C>(m[i]) * beta1 + one_minus_beta1 * g;
    const C ui = ops::Maximum{}(static_cast<C>(u[i]) * beta2, ops::detail::abs_(g) + eps);
    m[i] = static_cast<M>(mi);
    u[i] = static_cast<M>(ui);
    const M next = static_cast<M>(w + (neg_clr * mi) / ui);  // torch's addcdiv
    p[i] = next;
    if constexpr (!std::is_same_v<W, M>) work[i] = from_compute<W>(next);
  }
  /// p, m and u read and written, the gradient read, the working copy written; the arithmetic above.
  Traffic traffic(index_t n) const {
    const std::uint64_t per = 7 * sizeof(M) + (std::is_same_v<W, M> ? 0 : sizeof(W));
    return {static_cast<std::uint64_t>(n) * per,
            static_cast<std::uint64_t>(n) * (10 + (maximize ? 1 : 0) + (L2 ? 2 : 0))};
  }
};
}  // namespace detail

/// Adamax (torch.optim.Adamax, torch 1.13): steps a model's parameter arena with its gradient arena in
/// one fused pass (with fusion off, kiln::Unfused, one pass per operation in torch's single-tensor
/// order). The state, as torch's: exp_avg (the first moment), exp_inf (the decayed infinity norm of the
/// gradients) and the step count, which the bias correction reads. Example:
///   kiln::optim::Adamax opt(model, {.lr = 2e-3});
///   opt.zero_grad(); model.backward(dy); opt.step();
template <class M, class D, class W = M>
class Adamax : public detail::ParameterArenas<M, D, W, Adamax<M, D, W>>, public detail::OptionsAndSteps<AdamaxOptions> {
  using base = detail::ParameterArenas<M, D, W, Adamax>;
  using base::g_, base::p_, base::work_;

 public:
  using typename base::arena_type;
  using typename base::working_arena_type;
  using options_type = AdamaxOptions;

  Adamax(arena_type& params, arena_type& grads, AdamaxOptions o = {}, working_arena_type* work = nullptr)
      : base(params, grads, work, "Adamax", o.lr, o.weight_decay), detail::OptionsAndSteps<AdamaxOptions>(o) {
    // torch's checks and words.
    detail::require_non_negative(o.lr, "Adamax", "learning rate");
    detail::require_non_negative(o.eps, "Adamax", "epsilon value");
    detail::require_betas(o.betas.beta1, o.betas.beta2, "Adamax");
    detail::require_non_negative(o.weight_decay, "Adamax", "weight_decay value");
    m_ = this->state_like_parameters(M(0));
    u_ = this->state_like_parameters(M(0));
  }
  template <detail::trainable_model Model>
  explicit Adamax(Model& m, AdamaxOptions o = {})
      : Adamax(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
               detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit Adamax(const X&, AdamaxOptions o = {})
      : Adamax(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  Adamax(Model& m, X) : Adamax(m, detail::refuse_positional_option<X, AdamaxOptions>()) {}

  /// One pass over every parameter (fusion off: one per operation, as torch's foreach=False).
  void step() {
    if (!fusion_enabled()) this->require_one_group(steps_);
    const kiln::detail::device_scope<D> on(p_.device_index());  // the parameters' GPU, whichever is current
    this->count_step_call();
    this->advance_steps(steps_);
    if (!fusion_enabled()) return step_unfused();
    using C = typename detail::AdamaxStep<M, W>::C;
    const double b1 = o_.betas.beta1, b2 = o_.betas.beta2;
    // One pass per span of a parameter group (one without groups), with the group's lr and decay, and
    // per run of step counts within it (layers unfrozen after steps that skipped them).
    this->for_each_span(steps_, [&](index_t offset, index_t n, double lr, double weight_decay,
                                    const StepRun& steps) {
      const auto run = [&](auto l2) {
        kiln::detail::executor<D>::for_each(
            n, detail::AdamaxStep<M, W, decltype(l2)::value>{
                   this->shifted(p_.data(), offset), this->shifted(g_.data(), offset),
                   this->shifted(m_.data(), offset), this->shifted(u_.data(), offset), this->shifted(work_, offset),
                   static_cast<C>(b1), static_cast<C>(1.0 - b1), static_cast<C>(b2), static_cast<C>(o_.eps),
                   static_cast<C>(weight_decay), static_cast<C>(-step_lr(lr, steps.steps)), o_.maximize});
      };
      detail::with_flag(weight_decay != 0.0, run);
    });
  }
  const AdamBetas& betas() const { return o_.betas; }
  /// New decay rates for the next steps (OneCycleLR cycles beta1), unchecked as torch's param_group.
  void set_betas(AdamBetas betas) { o_.betas = betas; }
  /// torch's state["exp_avg"], for checkpoints.
  arena_type& exp_avg() { return m_; }
  const arena_type& exp_avg() const { return m_; }
  /// torch's state["exp_inf"], for checkpoints.
  arena_type& exp_inf() { return u_; }
  const arena_type& exp_inf() const { return u_; }

 private:
  /// The learning rate of step t (t counts it): lr / (1 - beta1^t), in double as torch's clr.
  double step_lr(double lr, std::int64_t t) const {
    return lr / (1.0 - std::pow(static_cast<double>(o_.betas.beta1), static_cast<double>(t)));
  }
  /// step() as torch.optim.Adamax(foreach=False) runs it: -g into a new tensor (maximize); g + wd p into
  /// a new tensor; m *= b1, m += (1 - b1) g; u *= b2; |g| into a new tensor, += eps; u = max(u, that);
  /// p += (-clr m) / u; and the working copy rewritten from p (mixed precision).
  void step_unfused() {
    using C = typename detail::AdamaxStep<M, W>::C;
    const double b1 = o_.betas.beta1, b2 = o_.betas.beta2;
    arena_type g = detail::unfused_gradient(g_, p_, o_.maximize, C(o_.weight_decay));
    kiln::assign(m_, m_ * static_cast<C>(b1));
    kiln::assign(m_, m_ + g * static_cast<C>(1.0 - b1));
    kiln::assign(u_, u_ * static_cast<C>(b2));
    arena_type bound(p_.extents(), p_.device_index());
    kiln::assign(bound, kiln::abs(g));
    kiln::assign(bound, bound + static_cast<C>(o_.eps));
    kiln::assign(u_, kiln::max(u_, bound));                         // torch.amax over the two: NaN propagates
    // torch's addcdiv: (value t1) / t2
    kiln::assign(p_, p_ + (m_ * static_cast<C>(-step_lr(o_.lr, steps_.last()))) / u_);
    this->rewrite_working_copy();
  }

  arena_type m_, u_;
};
template <detail::trainable_model Model>
Adamax(Model&, AdamaxOptions) -> Adamax<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model>
Adamax(Model&) -> Adamax<typename Model::M, typename Model::D, typename Model::T>;
template <class M, class D>
Adamax(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, AdamaxOptions) -> Adamax<M, D>;
template <class M, class D>
Adamax(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&) -> Adamax<M, D>;
template <detail::trainable_model Model, detail::positional_option X>
Adamax(Model&, X) -> Adamax<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
Adamax(const Tensor<T, S, D>&, AdamaxOptions) -> Adamax<float, D>;
template <class T, class S, class D>
Adamax(const Tensor<T, S, D>&) -> Adamax<float, D>;

}  // namespace kiln::optim
