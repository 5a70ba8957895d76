/// Adagrad (torch.optim.Adagrad): each parameter's step divided by the root of its summed squared
/// gradients, one fused pass per step.
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
#include "kiln/optim/parameter_arenas.hpp"
#include "kiln/optim/step_counts.hpp"
#include "kiln/optim/unfused_gradient.hpp"
#include "kiln/optim/from_model.hpp"
#include "kiln/optim/working_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

/// torch.optim.Adagrad's options and defaults, in its order.
struct AdagradOptions {
  double lr = 1e-2;
  /// The learning rate at step t is lr / (1 + (t - 1) lr_decay), in double as torch's Python floats.
  double lr_decay = 0.0;
  double weight_decay = 0.0;               ///< an L2 term added to the gradient
  double initial_accumulator_value = 0.0;  ///< what the sums of squared gradients start from
  double eps = 1e-10;
  /// Step up the gradient: g = -grad before the weight decay and the sum (torch's maximize).
  bool maximize = false;
};

namespace detail {
/// One element of an Adagrad step, in torch 1.13's single-tensor order:
///   maximize: g = -g;  g += wd p;  sum += g g;  p += (-clr g) / (sqrt(sum) + eps)
/// with clr the step's learning rate. In float, or double for double master weights; the working copy
/// rewritten in the same pass under mixed precision. L2 is a template argument so the loop has no branch.
template <class M, class W = M, bool L2 = false>
struct AdagradStep {
  using C = std::conditional_t<std::is_same_v<M, double>, double, float>;
  M* p;
  const M* grad;
  M* sum;
  W* work;  // mixed precision only
  C neg_clr, eps, weight_decay;
  bool maximize = false;  // g = -grad first, a multiply by -1 (exact), as SgdStep::maximize

  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    const C w = static_cast<C>(p[i]);
    C g = static_cast<C>(grad[i]);
    g = (maximize ? C(-1) : C(1)) * g;
    if constexpr (L2) g = g + weight_decay * w;
    const C s = static_cast<C>(sum[i]) + g * g;
    sum[i] = static_cast<M>(s);
    const M next = static_cast<M>(w + (neg_clr * g) / (ops::detail::sqrt_(s) + eps));  // torch's addcdiv
    p[i] = next;
    if constexpr (!std::is_same_v<W, M>) work[i] = from_compute<W>(next);
  }
  /// p and the sum read and written, the gradient read, the working copy written; the arithmetic above.
  Traffic traffic(index_t n) const {
    const std::uint64_t per = 5 * sizeof(M) + (std::is_same_v<W, M> ? 0 : sizeof(W));
    return {static_cast<std::uint64_t>(n) * per,
            static_cast<std::uint64_t>(n) * (7 + (maximize ? 1 : 0) + (L2 ? 2 : 0))};
  }
};
}  // namespace detail

/// Adagrad (torch.optim.Adagrad, torch 1.13): steps a model's parameter arena with its gradient arena in
/// one fused pass (with fusion off, kiln::Unfused, one pass per operation in torch's single-tensor
/// order). The state, as torch's: sum (initial_accumulator_value before the first step) and the step
/// count, which lr_decay reads. Example:
///   kiln::optim::Adagrad opt(model, {.lr = 0.05});
///   opt.zero_grad(); model.backward(dy); opt.step();
template <class M, class D, class W = M>
class Adagrad : public detail::ParameterArenas<M, D, W, Adagrad<M, D, W>>, public detail::OptionsAndSteps<AdagradOptions> {
  using base = detail::ParameterArenas<M, D, W, Adagrad>;
  using base::g_, base::p_, base::work_;

 public:
  using typename base::arena_type;
  using typename base::working_arena_type;
  using options_type = AdagradOptions;

  Adagrad(arena_type& params, arena_type& grads, AdagradOptions o = {}, working_arena_type* work = nullptr)
      : base(params, grads, work, "Adagrad", o.lr, o.weight_decay), detail::OptionsAndSteps<AdagradOptions>(o) {
    // torch's checks and words.
    detail::require_non_negative(o.lr, "Adagrad", "learning rate");
    detail::require_non_negative(o.lr_decay, "Adagrad", "lr_decay value");
    detail::require_non_negative(o.weight_decay, "Adagrad", "weight_decay value");
    detail::require_non_negative(o.initial_accumulator_value, "Adagrad", "initial_accumulator_value value");
    detail::require_non_negative(o.eps, "Adagrad", "epsilon value");
    sum_ = this->state_like_parameters(static_cast<M>(o.initial_accumulator_value));
  }
  template <detail::trainable_model Model>
  explicit Adagrad(Model& m, AdagradOptions o = {})
      : Adagrad(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
                detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit Adagrad(const X&, AdagradOptions o = {})
      : Adagrad(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  Adagrad(Model& m, X) : Adagrad(m, detail::refuse_positional_option<X, AdagradOptions>()) {}

  /// One pass over every parameter (fusion off: one per operation, as torch's foreach=False).
  void step() {
    if (!fusion_enabled()) this->require_one_group(steps_);
    const kiln::detail::device_scope<D> on(p_.device_index());  // the parameters' GPU, whichever is current
    this->count_step_call();
    this->advance_steps(steps_);
    if (!fusion_enabled()) return step_unfused();
    using C = typename detail::AdagradStep<M, W>::C;
    // One pass per span of a parameter group (one without groups), with the group's lr and decay, and
    // per run of step counts within it (layers unfrozen after steps that skipped them).
    this->for_each_span(steps_, [&](index_t offset, index_t n, double lr, double weight_decay,
                                    const StepRun& steps) {
      const auto run = [&](auto l2) {
        kiln::detail::executor<D>::for_each(
            n, detail::AdagradStep<M, W, decltype(l2)::value>{
                   this->shifted(p_.data(), offset), this->shifted(g_.data(), offset),
                   this->shifted(sum_.data(), offset), this->shifted(work_, offset),
                   static_cast<C>(-step_lr(lr, steps.steps)),
                   static_cast<C>(o_.eps), static_cast<C>(weight_decay), o_.maximize});
      };
      detail::with_flag(weight_decay != 0.0, run);
    });
  }
  /// torch's state["sum"], for checkpoints.
  arena_type& sum() { return sum_; }
  const arena_type& sum() const { return sum_; }

 private:
  /// The learning rate of step t for a group's lr: lr / (1 + (t - 1) lr_decay), in double as torch's clr.
  double step_lr(double lr, std::int64_t t) const { return lr / (1.0 + static_cast<double>(t - 1) * o_.lr_decay); }
  /// step() as torch.optim.Adagrad(foreach=False) runs it: -g into a new tensor (maximize); g + wd p into
  /// a new tensor; sum += g g; std = sqrt(sum), += eps; p += (-clr g) / std; and the working copy
  /// rewritten from p (mixed precision).
  void step_unfused() {
    using C = typename detail::AdagradStep<M, W>::C;
    arena_type g = detail::unfused_gradient(g_, p_, o_.maximize, C(o_.weight_decay));
    kiln::assign(sum_, sum_ + g * g);  // torch's addcmul with value 1
    arena_type std_(p_.extents(), p_.device_index());
    kiln::assign(std_, kiln::sqrt(sum_));
    kiln::assign(std_, std_ + C(o_.eps));
    // torch's addcdiv: (value t1) / t2
    kiln::assign(p_, p_ + (g * static_cast<C>(-step_lr(o_.lr, steps_.last()))) / std_);
    this->rewrite_working_copy();
  }

  arena_type sum_;
};
template <detail::trainable_model Model>
Adagrad(Model&, AdagradOptions) -> Adagrad<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model>
Adagrad(Model&) -> Adagrad<typename Model::M, typename Model::D, typename Model::T>;
template <class M, class D>
Adagrad(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, AdagradOptions) -> Adagrad<M, D>;
template <class M, class D>
Adagrad(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&) -> Adagrad<M, D>;
template <detail::trainable_model Model, detail::positional_option X>
Adagrad(Model&, X) -> Adagrad<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
Adagrad(const Tensor<T, S, D>&, AdagradOptions) -> Adagrad<float, D>;
template <class T, class S, class D>
Adagrad(const Tensor<T, S, D>&) -> Adagrad<float, D>;

}  // namespace kiln::optim
