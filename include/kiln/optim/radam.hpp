/// RAdam (torch.optim.RAdam): Adam with its adaptive learning rate rectified, and left out while the
/// variance estimate is too short to trust; one fused pass per step.
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

/// torch.optim.RAdam's options and defaults, in its order.
struct RAdamOptions {
  double lr = 1e-3;
  AdamBetas betas = {};
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< an L2 term added to the gradient
  /// Step up the gradient: g = -grad before the weight decay and the moments (torch >= 2.1's maximize;
  /// torch 1.13's RAdam has none).
  bool maximize = false;
};

namespace detail {
/// One element of a RAdam step, in torch 1.13's single-tensor order:
///   maximize: g = -g;  g += wd p;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g;
///   mhat = m / bias_correction1;
///   Rectified (rho_t > 5):  p -= ((mhat lr) (sqrt(bias_correction2) / (sqrt(v) + eps))) rect
///   else:                   p -= mhat lr
/// where torch's `scalar / tensor` is reciprocal(tensor) * scalar. The scalars (bias corrections, rect)
/// are computed once per step on the host in double and rounded to C as torch rounds its Python floats.
/// In float, or double for double master weights; the working copy rewritten in the same pass under
/// mixed precision. Rectified (which the host decides each step) and L2 are template arguments so the
/// loop has no branch.
template <class M, class W = M, bool Rectified = false, bool L2 = false>
struct RAdamStep {
  using C = std::conditional_t<std::is_same_v<M, double>, double, float>;
  M* p;
  const M* grad;
  M* m;
  M* v;
  W* work;  // mixed precision only
  C beta1, one_minus_beta1, beta2, one_minus_beta2, weight_decay;
  C bias_correction1, lr, bias_correction2_sqrt, eps, rect;
  bool maximize = false;  // g = -grad first, a multiply by -1 (exact), as SgdStep::maximize

  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    const C w = static_cast<C>(p[i]);
    C g = static_cast<C>(grad[i]);
    g = (maximize ? C(-1) : C(1)) * g;
    if constexpr (L2) g = g + weight_decay * w;
    const C mi = static_cast<C>(m[i]) * beta1 + one_minus_beta1 * g;
    const C vi = static_cast<C>(v[i]) * beta2 + one_minus_beta2 * g * g;
    m[i] = static_cast<M>(mi);
    v[i] = static_cast<M>(vi);
    C update = (mi / bias_correction1) * lr;
    if constexpr (Rectified) {
      const C adaptive_lr = (C(1) / (ops::detail::sqrt_(vi) + eps)) * bias_correction2_sqrt;
      update = (update * adaptive_lr) * rect;
    }
    const M next = static_cast<M>(w - update);  // torch's add_(update, alpha=-1): the -1 is exact
    p[i] = next;
    if constexpr (!std::is_same_v<W, M>) work[i] = from_compute<W>(next);
  }
  /// p, m and v read and written, the gradient read, the working copy written; the arithmetic above.
  Traffic traffic(index_t n) const {
    const std::uint64_t per = 7 * sizeof(M) + (std::is_same_v<W, M> ? 0 : sizeof(W));
    return {static_cast<std::uint64_t>(n) * per,
            static_cast<std::uint64_t>(n) * (9 + (Rectified ? 6 : 0) + (maximize ? 1 : 0) + (L2 ? 2 : 0))};
  }
};
}  // namespace detail

/// RAdam (torch.optim.RAdam, torch 1.13): steps a model's parameter arena with its gradient arena in one
/// fused pass (with fusion off, kiln::Unfused, one pass per operation in torch's single-tensor order).
/// While the length of the approximated simple moving average rho_t is at most 5 (the first five steps
/// with beta2 = 0.999) the step is momentum SGD with a bias-corrected first moment; after, Adam's step
/// rectified by rect(rho_t). The state, as torch's: exp_avg, exp_avg_sq and the step count. Example:
///   kiln::optim::RAdam opt(model, {.lr = 1e-3});
///   opt.zero_grad(); model.backward(dy); opt.step();
template <class M, class D, class W = M>
class RAdam : public detail::ParameterArenas<M, D, W, RAdam<M, D, W>>, public detail::OptionsAndSteps<RAdamOptions> {
  using base = detail::ParameterArenas<M, D, W, RAdam>;
  using base::g_, base::p_, base::work_;

 public:
  using typename base::arena_type;
  using typename base::working_arena_type;
  using options_type = RAdamOptions;

  RAdam(arena_type& params, arena_type& grads, RAdamOptions o = {}, working_arena_type* work = nullptr)
      : base(params, grads, work, "RAdam", o.lr, o.weight_decay), detail::OptionsAndSteps<RAdamOptions>(o) {
    // torch's checks and words.
    detail::require_non_negative(o.lr, "RAdam", "learning rate");
    detail::require_non_negative(o.eps, "RAdam", "epsilon value");
    detail::require_betas(o.betas.beta1, o.betas.beta2, "RAdam");
    detail::require_non_negative(o.weight_decay, "RAdam", "weight_decay value");
    m_ = this->state_like_parameters(M(0));
    v_ = this->state_like_parameters(M(0));
  }
  template <detail::trainable_model Model>
  explicit RAdam(Model& m, RAdamOptions o = {})
      : RAdam(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
              detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit RAdam(const X&, RAdamOptions o = {})
      : RAdam(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  RAdam(Model& m, X) : RAdam(m, detail::refuse_positional_option<X, RAdamOptions>()) {}

  /// One pass over every parameter (fusion off: one per operation, as torch's foreach=False).
  void step() {
    if (!fusion_enabled()) this->require_one_group(steps_);
    const kiln::detail::device_scope<D> on(p_.device_index());  // the parameters' GPU, whichever is current
    this->count_step_call();
    using C = typename detail::RAdamStep<M, W>::C;
    // torch's Python floats: the options widened to double.
    const double lr = o_.lr, b1 = o_.betas.beta1, b2 = o_.betas.beta2;
    this->advance_steps(steps_);
    // What a parameter's step t computes from it, in double (torch's per-parameter state["step"]).
    struct Scalars {
      bool rectified;
      C bc1, bc2_sqrt, rect;
    };
    const auto at = [&](std::int64_t step) {
      const double t = static_cast<double>(step);
      const double bias_correction1 = 1.0 - std::pow(b1, t);
      const double bias_correction2 = 1.0 - std::pow(b2, t);
      const double rho_inf = 2.0 / (1.0 - b2) - 1.0;
      const double rho_t = rho_inf - 2.0 * t * std::pow(b2, t) / bias_correction2;
      const bool rectified = rho_t > 5.0;
      const double rect =
          rectified
              ? std::sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
              : 0.0;
      return Scalars{rectified, static_cast<C>(bias_correction1), static_cast<C>(std::sqrt(bias_correction2)),
                     static_cast<C>(rect)};
    };
    if (!fusion_enabled()) {
      const Scalars s = at(steps_.last());
      return step_unfused(s.rectified, s.bc1, static_cast<C>(lr), s.bc2_sqrt, s.rect);
    }
    // One pass per span of a parameter group (one without groups), with the group's lr and decay, and
    // per run of step counts within it (layers unfrozen after steps that skipped them).
    this->for_each_span(steps_, [&](index_t offset, index_t n, double group_lr, double weight_decay,
                                    const StepRun& steps) {
      const Scalars s = at(steps.steps);
      const auto run = [&](auto rectify, auto l2) {
        kiln::detail::executor<D>::for_each(
            n, detail::RAdamStep<M, W, decltype(rectify)::value, decltype(l2)::value>{
                   this->shifted(p_.data(), offset), this->shifted(g_.data(), offset),
                   this->shifted(m_.data(), offset), this->shifted(v_.data(), offset), this->shifted(work_, offset),
                   static_cast<C>(b1), static_cast<C>(1.0 - b1), static_cast<C>(b2), static_cast<C>(1.0 - b2),
                   static_cast<C>(weight_decay), s.bc1, static_cast<C>(group_lr), s.bc2_sqrt,
                   static_cast<C>(o_.eps), s.rect, o_.maximize});
      };
      detail::with_flag(s.rectified, [&](auto rectify) {
        detail::with_flag(weight_decay != 0.0, [&](auto l2) { run(rectify, l2); });
      });
    });
  }
  const AdamBetas& betas() const { return o_.betas; }
  /// New decay rates for the next steps (OneCycleLR cycles beta1): a write to torch's
  /// param_group['betas'], unchecked as that is.
  void set_betas(AdamBetas betas) { o_.betas = betas; }
  /// The first-moment arena (torch's state["exp_avg"]), for checkpoints.
  arena_type& exp_avg() { return m_; }
  const arena_type& exp_avg() const { return m_; }
  /// The second-moment arena (torch's state["exp_avg_sq"]), for checkpoints.
  arena_type& exp_avg_sq() { return v_; }
  const arena_type& exp_avg_sq() const { return v_; }

 private:
  /// step() as torch.optim.RAdam(foreach=False) runs it: -g into a new tensor (maximize); g + wd p into a
  /// new tensor; m *= b1, m += (1 - b1) g; v *= b2, v += (1 - b2) g g; mhat = m / bc1 into a new tensor;
  /// rectified: a = sqrt(v), += eps, reciprocal, * sqrt(bc2); u = mhat lr, u *= a, u *= rect; else
  /// u = mhat lr; p += -u; and the working copy rewritten from p (mixed precision).
  template <class C>
  void step_unfused(bool rectified, C bc1, C lr, C bc2_sqrt, C rect) {
    const double b1 = o_.betas.beta1, b2 = o_.betas.beta2;
    arena_type g = detail::unfused_gradient(g_, p_, o_.maximize, C(o_.weight_decay));
    kiln::assign(m_, m_ * static_cast<C>(b1));
    kiln::assign(m_, m_ + g * static_cast<C>(1.0 - b1));
    kiln::assign(v_, v_ * static_cast<C>(b2));
    kiln::assign(v_, v_ + g * static_cast<C>(1.0 - b2) * g);  // torch's addcmul: (value t1) t2
    arena_type update(p_.extents(), p_.device_index());
    kiln::assign(update, m_ / bc1);
    if (rectified) {
      arena_type adaptive_lr(p_.extents(), p_.device_index());
      kiln::assign(adaptive_lr, kiln::sqrt(v_));
      kiln::assign(adaptive_lr, adaptive_lr + static_cast<C>(o_.eps));
      kiln::assign(adaptive_lr, C(1) / adaptive_lr);  // torch's scalar / tensor: reciprocal, then times
      kiln::assign(adaptive_lr, adaptive_lr * bc2_sqrt);
      kiln::assign(update, update * lr);
      kiln::assign(update, update * adaptive_lr);
      kiln::assign(update, update * rect);
    } else {
      kiln::assign(update, update * lr);
    }
    kiln::assign(p_, p_ - update);
    this->rewrite_working_copy();
  }

  arena_type m_, v_;
};
template <detail::trainable_model Model>
RAdam(Model&, RAdamOptions) -> RAdam<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model>
RAdam(Model&) -> RAdam<typename Model::M, typename Model::D, typename Model::T>;
template <class M, class D>
RAdam(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, RAdamOptions) -> RAdam<M, D>;
template <class M, class D>
RAdam(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&) -> RAdam<M, D>;
template <detail::trainable_model Model, detail::positional_option X>
RAdam(Model&, X) -> RAdam<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
RAdam(const Tensor<T, S, D>&, RAdamOptions) -> RAdam<float, D>;
template <class T, class S, class D>
RAdam(const Tensor<T, S, D>&) -> RAdam<float, D>;

}  // namespace kiln::optim
