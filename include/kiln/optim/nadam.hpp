/// NAdam (torch.optim.NAdam): Adam with Nesterov momentum and a decaying momentum schedule, one fused
/// pass per step.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

/// torch.optim.NAdam's options and defaults, in its order.
struct NAdamOptions {
  double lr = 2e-3;
  AdamBetas betas = {};
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< an L2 term added to the gradient
  /// psi in the momentum schedule mu_t = beta1 (1 - 0.96^(t psi) / 2).
  double momentum_decay = 4e-3;
  /// Step up the gradient: g = -grad before the weight decay and the moments (torch >= 2.1's maximize;
  /// torch 1.13's NAdam has none).
  bool maximize = false;
};

namespace detail {
/// One element of a NAdam step, in torch 1.13's single-tensor order:
///   maximize: g = -g;  g += wd p;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g;
///   denom = sqrt(v / bias_correction2) + eps;  p += (-a g) / denom;  p += (-b m) / denom
/// with a = lr (1 - mu) / (1 - mu_product), b = lr mu_next / (1 - mu_product mu mu_next) (torch 1.13's:
/// mu twice, where torch 2.0 has one), computed once per step on the host and rounded to C as torch
/// rounds its Python floats. In float, or double for double master weights; the working copy rewritten
/// in the same pass under mixed precision. L2 is a template argument so the loop has no branch.
template <class M, class W = M, bool L2 = false>
struct NAdamStep {
  using C = std::conditional_t<std::is_same_v<M, double>, double, float>;
  M* p;
  const M* grad;
  M* m;
  M* v;
  W* work;  // mixed precision only
  C beta1, one_minus_beta1, beta2, one_minus_beta2, weight_decay;
  C bias_correction2, eps, neg_grad_step, neg_avg_step;
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
    const C denom = ops::detail::sqrt_(vi / bias_correction2) + eps;
    const C half = static_cast<C>(w + (neg_grad_step * g) / denom);  // torch's two addcdivs
    const M next = static_cast<M>(half + (neg_avg_step * mi) / denom);
    p[i] = next;
    if constexpr (!std::is_same_v<W, M>) work[i] = from_compute<W>(next);
  }
  /// p, m and v read and written, the gradient read, the working copy written; the arithmetic above.
  Traffic traffic(index_t n) const {
    const std::uint64_t per = 7 * sizeof(M) + (std::is_same_v<W, M> ? 0 : sizeof(W));
    return {static_cast<std::uint64_t>(n) * per,
            static_cast<std::uint64_t>(n) * (16 + (maximize ? 1 : 0) + (L2 ? 2 : 0))};
  }
};
}  // namespace detail

/// NAdam (torch.optim.NAdam, torch 1.13): steps a model's parameter arena with its gradient arena in one
/// fused pass (with fusion off, kiln::Unfused, one pass per operation in torch's single-tensor order).
/// The state, as torch's: exp_avg, exp_avg_sq, the step count and mu_product (the product of the
/// momentum schedule so far; torch keeps it as a float32 tensor, so it is rounded to float at each step
/// whatever M is, as torch's). Example:
///   kiln::optim::NAdam opt(model, {.lr = 2e-3});
///   opt.zero_grad(); model.backward(dy); opt.step();
template <class M, class D, class W = M>
class NAdam : public detail::ParameterArenas<M, D, W, NAdam<M, D, W>>, public detail::OptionsAndSteps<NAdamOptions> {
  using base = detail::ParameterArenas<M, D, W, NAdam>;
  using base::g_, base::p_, base::work_;

 public:
  using typename base::arena_type;
  using typename base::working_arena_type;
  using options_type = NAdamOptions;

  NAdam(arena_type& params, arena_type& grads, NAdamOptions o = {}, working_arena_type* work = nullptr)
      : base(params, grads, work, "NAdam", o.lr, o.weight_decay), detail::OptionsAndSteps<NAdamOptions>(o) {
    // torch's checks and words.
    detail::require_non_negative(o.lr, "NAdam", "learning rate");
    detail::require_non_negative(o.eps, "NAdam", "epsilon value");
    detail::require_betas(o.betas.beta1, o.betas.beta2, "NAdam");
    detail::require_non_negative(o.weight_decay, "NAdam", "weight_decay value");
    detail::require_non_negative(o.momentum_decay, "NAdam", "momentum_decay value");
    m_ = this->state_like_parameters(M(0));
    v_ = this->state_like_parameters(M(0));
  }
  template <detail::trainable_model Model>
  explicit NAdam(Model& m, NAdamOptions o = {})
      : NAdam(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
              detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit NAdam(const X&, NAdamOptions o = {})
      : NAdam(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  NAdam(Model& m, X) : NAdam(m, detail::refuse_positional_option<X, NAdamOptions>()) {}

  /// One pass over every parameter (fusion off: one per operation, as torch's foreach=False).
  void step() {
    if (!fusion_enabled()) this->require_one_group(steps_);
    const kiln::detail::device_scope<D> on(p_.device_index());  // the parameters' GPU, whichever is current
    this->count_step_call();
    using C = typename detail::NAdamStep<M, W>::C;
    // torch's Python floats: the options widened to double; mu_product a float32 tensor.
    const double lr = o_.lr, b1 = o_.betas.beta1, b2 = o_.betas.beta2, psi = o_.momentum_decay;
    const auto mu_at = [&](double t) { return b1 * (1.0 - 0.5 * std::pow(0.96, t * psi)); };
    // Each run of parameters that stepped (one unless layers were unfrozen after steps that skipped
    // them) multiplies its product by the schedule at its own step.
    for (StepRun& run : this->advance_steps(steps_))
      run.mu_product = static_cast<float>(run.mu_product) * static_cast<float>(mu_at(static_cast<double>(run.steps)));
    // The step's factors for a run at step t: a = (1 - mu) / (1 - mu_product) and b = mu_next /
    // (1 - mu_product mu mu_next) (torch 1.13's), times -lr; and bias_correction2.
    struct Scalars {
      double grad_factor, avg_factor, bias_correction2;
    };
    const auto at = [&](const StepRun& run) {
      const double t = static_cast<double>(run.steps);
      const double mu = mu_at(t), mu_next = mu_at(t + 1.0);
      const float product = static_cast<float>(run.mu_product);
      const float product_next = product * static_cast<float>(mu) * static_cast<float>(mu_next);
      return Scalars{(1.0 - mu) / (1.0 - static_cast<double>(product)),
                     mu_next / (1.0 - static_cast<double>(product_next)), 1.0 - std::pow(b2, t)};
    };
    if (!fusion_enabled()) {
      const Scalars s = at(steps_.runs().back());
      return step_unfused(static_cast<C>(s.bias_correction2), static_cast<C>(-lr * s.grad_factor),
                          static_cast<C>(-lr * s.avg_factor));
    }
    // One pass per span of a parameter group (one without groups), with the group's lr and decay, and
    // per run of step counts within it.
    this->for_each_span(steps_, [&](index_t offset, index_t n, double group_lr, double weight_decay,
                                    const StepRun& steps) {
      const Scalars s = at(steps);
      const double neg_grad_step = -group_lr * s.grad_factor;
      const double neg_avg_step = -group_lr * s.avg_factor;
      const double bias_correction2 = s.bias_correction2;
      const auto run = [&](auto l2) {
        kiln::detail::executor<D>::for_each(
            n, detail::NAdamStep<M, W, decltype(l2)::value>{
                   this->shifted(p_.data(), offset), this->shifted(g_.data(), offset),
                   this->shifted(m_.data(), offset), this->shifted(v_.data(), offset), this->shifted(work_, offset),
                   static_cast<C>(b1), static_cast<C>(1.0 - b1), static_cast<C>(b2), static_cast<C>(1.0 - b2),
                   static_cast<C>(weight_decay), static_cast<C>(bias_correction2), static_cast<C>(o_.eps),
                   static_cast<C>(neg_grad_step), static_cast<C>(neg_avg_step), o_.maximize});
      };
      detail::with_flag(weight_decay != 0.0, run);
    });
  }
  const AdamBetas& betas() const { return o_.betas; }
  /// New decay rates for the next steps (OneCycleLR cycles beta1): a write to torch's
  /// param_group['betas'], unchecked as that is.
  void set_betas(AdamBetas betas) { o_.betas = betas; }
  /// The product of the momentum schedule mu_1 ... mu_t so far (torch's state["mu_product"], 1 before
  /// the first step) of the parameters that took every step, for checkpoints (per run: step_runs()).
  double mu_product() const { return steps_.runs().back().mu_product; }
  /// Sets every parameter's product (a checkpoint's; set_step_runs sets them per run).
  void set_mu_product(double product) {
    std::vector<StepRun> runs = steps_.runs();
    for (StepRun& r : runs) r.mu_product = product;
    steps_.set_runs(std::move(runs));
  }
  /// The first-moment arena (torch's state["exp_avg"]), for checkpoints.
  arena_type& exp_avg() { return m_; }
  const arena_type& exp_avg() const { return m_; }
  /// The second-moment arena (torch's state["exp_avg_sq"]), for checkpoints.
  arena_type& exp_avg_sq() { return v_; }
  const arena_type& exp_avg_sq() const { return v_; }

 private:
  /// step() as torch.optim.NAdam(foreach=False) runs it: -g into a new tensor (maximize); g + wd p into a
  /// new tensor; m *= b1, m += (1 - b1) g; v *= b2, v += (1 - b2) g g; denom = v / bc2, sqrt, += eps;
  /// p += (-a g) / denom; p += (-b m) / denom; and the working copy rewritten from p (mixed precision).
  template <class C>
  void step_unfused(C bias_correction2, C neg_grad_step, C neg_avg_step) {
    const double b1 = o_.betas.beta1, b2 = o_.betas.beta2;
    arena_type g = detail::unfused_gradient(g_, p_, o_.maximize, C(o_.weight_decay));
    kiln::assign(m_, m_ * static_cast<C>(b1));
    kiln::assign(m_, m_ + g * static_cast<C>(1.0 - b1));
    kiln::assign(v_, v_ * static_cast<C>(b2));
    kiln::assign(v_, v_ + g * static_cast<C>(1.0 - b2) * g);  // torch's addcmul: (value t1) t2
    arena_type denom(p_.extents(), p_.device_index());
    kiln::assign(denom, v_ / bias_correction2);
    kiln::assign(denom, kiln::sqrt(denom));
    kiln::assign(denom, denom + static_cast<C>(o_.eps));
    kiln::assign(p_, p_ + (g * neg_grad_step) / denom);  // torch's addcdiv: (value t1) / t2
    kiln::assign(p_, p_ + (m_ * neg_avg_step) / denom);
    this->rewrite_working_copy();
  }

  arena_type m_, v_;
};
template <detail::trainable_model Model>
NAdam(Model&, NAdamOptions) -> NAdam<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model>
NAdam(Model&) -> NAdam<typename Model::M, typename Model::D, typename Model::T>;
template <class M, class D>
NAdam(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, NAdamOptions) -> NAdam<M, D>;
template <class M, class D>
NAdam(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&) -> NAdam<M, D>;
template <detail::trainable_model Model, detail::positional_option X>
NAdam(Model&, X) -> NAdam<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
NAdam(const Tensor<T, S, D>&, NAdamOptions) -> NAdam<float, D>;
template <class T, class S, class D>
NAdam(const Tensor<T, S, D>&) -> NAdam<float, D>;

}  // namespace kiln::optim
