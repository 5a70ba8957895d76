/// Adadelta (torch.optim.Adadelta): each step scaled by the ratio of the running RMS of past steps to the
/// running RMS of the gradients, one fused pass per step.
#pragma once
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
#include "kiln/optim/unfused_gradient.hpp"
#include "kiln/optim/from_model.hpp"
#include "kiln/optim/working_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

/// torch.optim.Adadelta's options and defaults, in its order.
struct AdadeltaOptions {
  double lr = 1.0;  ///< scales the step after the ratio of the RMS terms
  /// The decay of both running averages; a double, as torch's Python float (1 - 0.99f would be 5e-6
  /// relatively off 0.01).
  double rho = 0.9;
  double eps = 1e-6;          ///< added under both square roots
  double weight_decay = 0.0;  ///< an L2 term added to the gradient
  /// Step up the gradient: g = -grad before the weight decay and the averages (torch's maximize).
  bool maximize = false;
};

namespace detail {
/// One element of an Adadelta step, in torch 1.13's single-tensor order:
///   maximize: g = -g;  g += wd p;  v = rho v + (1 - rho) g g;
///   delta = sqrt(a + eps) / sqrt(v + eps) g;  a = rho a + (1 - rho) delta delta;  p += -lr delta
/// In float, or double for double master weights; the working copy rewritten in the same pass under
/// mixed precision. L2 is a template argument so the loop has no branch.
template <class M, class W = M, bool L2 = false>
struct AdadeltaStep {
  using C = std::conditional_t<std::is_same_v<M, double>, double, float>;
  M* p;
  const M* grad;
  M* v;     // torch's square_avg
  M* a;     // torch's acc_delta
  W* work;  // mixed precision only
  C rho, one_minus_rho, eps, weight_decay, neg_lr;
  bool maximize = false;  // g = -grad first, a multiply by -1 (exact), as SgdStep::maximize

  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    const C w = static_cast<C>(p[i]);
    C g = static_cast<C>(grad[i]);
    g = (maximize ? C(-1) : C(1)) * g;
    if constexpr (L2) g = g + weight_decay * w;
    const C vi = static_cast<C>(v[i]) * rho + one_minus_rho * g * g;  // torch's addcmul: (value t1) t2
    const C std_ = ops::detail::sqrt_(vi + eps);
    const C delta = ops::detail::sqrt_(static_cast<C>(a[i]) + eps) / std_ * g;
    const C ai = static_cast<C>(a[i]) * rho + one_minus_rho * delta * delta;
    v[i] = static_cast<M>(vi);
    a[i] = static_cast<M>(ai);
    const M next = static_cast<M>(w + neg_lr * delta);  // torch's add_ with alpha = -lr
    p[i] = next;
    if constexpr (!std::is_same_v<W, M>) work[i] = from_compute<W>(next);
  }
  /// p, v and a read and written, the gradient read, the working copy written; the arithmetic above.
  Traffic traffic(index_t n) const {
    const std::uint64_t per = 7 * sizeof(M) + (std::is_same_v<W, M> ? 0 : sizeof(W));
    return {static_cast<std::uint64_t>(n) * per,
            static_cast<std::uint64_t>(n) * (17 + (maximize ? 1 : 0) + (L2 ? 2 : 0))};
  }
};
}  // namespace detail

/// Adadelta (torch.optim.Adadelta, torch 1.13): steps a model's parameter arena with its gradient arena
/// in one fused pass (with fusion off, kiln::Unfused, one pass per operation in torch's single-tensor
/// order). The state, as torch's: square_avg (the running average of g^2), acc_delta (of the squared
/// steps) and the step count (counted, as torch's, though no formula reads it). Example:
///   kiln::optim::Adadelta opt(model);   // lr 1.0, rho 0.9, eps 1e-6
///   opt.zero_grad(); model.backward(dy); opt.step();
template <class M, class D, class W = M>
class Adadelta : public detail::ParameterArenas<M, D, W, Adadelta<M, D, W>>, public detail::OptionsAndSteps<AdadeltaOptions> {
  using base = detail::ParameterArenas<M, D, W, Adadelta>;
  using base::g_, base::p_, base::work_;

 public:
  using typename base::arena_type;
  using typename base::working_arena_type;
  using options_type = AdadeltaOptions;

  Adadelta(arena_type& params, arena_type& grads, AdadeltaOptions o = {}, working_arena_type* work = nullptr)
      : base(params, grads, work, "Adadelta", o.lr, o.weight_decay), detail::OptionsAndSteps<AdadeltaOptions>(o) {
    // torch's checks and words.
    detail::require_non_negative(o.lr, "Adadelta", "learning rate");
    if (!(o.rho >= 0.0 && o.rho <= 1.0))
      throw ValueError("kiln::optim::Adadelta: Invalid rho value: " + std::to_string(o.rho));
    detail::require_non_negative(o.eps, "Adadelta", "epsilon value");
    detail::require_non_negative(o.weight_decay, "Adadelta", "weight_decay value");
    v_ = this->state_like_parameters(M(0));
    a_ = this->state_like_parameters(M(0));
  }
  template <detail::trainable_model Model>
  explicit Adadelta(Model& m, AdadeltaOptions o = {})
      : Adadelta(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
                 detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit Adadelta(const X&, AdadeltaOptions o = {})
      : Adadelta(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  Adadelta(Model& m, X) : Adadelta(m, detail::refuse_positional_option<X, AdadeltaOptions>()) {}

  /// One pass over every parameter (fusion off: one per operation, as torch's foreach=False).
  void step() {
    if (!fusion_enabled()) this->require_one_group();
    const kiln::detail::device_scope<D> on(p_.device_index());  // the parameters' GPU, whichever is current
    this->count_step_call();
    this->advance_steps(steps_);  // (the count, torch's state["step"], is only kept)
    if (!fusion_enabled()) return step_unfused();
    using C = typename detail::AdadeltaStep<M, W>::C;
    const double rho = o_.rho;
    // One pass per span of a parameter group (one without groups), with the group's lr and decay.
    this->for_each_span([&](index_t offset, index_t n, double lr, double weight_decay) {
      const auto run = [&](auto l2) {
        kiln::detail::executor<D>::for_each(
            n, detail::AdadeltaStep<M, W, decltype(l2)::value>{
                   this->shifted(p_.data(), offset), this->shifted(g_.data(), offset),
                   this->shifted(v_.data(), offset), this->shifted(a_.data(), offset), this->shifted(work_, offset),
                   static_cast<C>(rho), static_cast<C>(1.0 - rho), static_cast<C>(o_.eps),
                   static_cast<C>(weight_decay), static_cast<C>(-lr), o_.maximize});
      };
      detail::with_flag(weight_decay != 0.0, run);
    });
  }
  /// torch's state["square_avg"], for checkpoints.
  arena_type& square_avg() { return v_; }
  const arena_type& square_avg() const { return v_; }
  /// torch's state["acc_delta"], for checkpoints.
  arena_type& acc_delta() { return a_; }
  const arena_type& acc_delta() const { return a_; }

 private:
  /// step() as torch.optim.Adadelta(foreach=False) runs it: -g into a new tensor (maximize); g + wd p
  /// into a new tensor; v *= rho, v += (1 - rho) g g; std = v + eps into a new tensor, sqrt; delta =
  /// a + eps into a new tensor, sqrt, /= std, *= g; a *= rho, a += (1 - rho) delta delta; p += -lr delta;
  /// and the working copy rewritten from p (mixed precision).
  void step_unfused() {
    using C = typename detail::AdadeltaStep<M, W>::C;
    const double rho = o_.rho;
    const C r = static_cast<C>(rho), one_minus_r = static_cast<C>(1.0 - rho), eps = static_cast<C>(o_.eps);
    arena_type g = detail::unfused_gradient(g_, p_, o_.maximize, C(o_.weight_decay));
    kiln::assign(v_, v_ * r);
    kiln::assign(v_, v_ + g * one_minus_r * g);  // torch's addcmul: (value t1) t2
    arena_type std_(p_.extents(), p_.device_index()), delta(p_.extents(), p_.device_index());
    kiln::assign(std_, v_ + eps);
    kiln::assign(std_, kiln::sqrt(std_));
    kiln::assign(delta, a_ + eps);
    kiln::assign(delta, kiln::sqrt(delta));
    kiln::assign(delta, delta / std_);
    kiln::assign(delta, delta * g);
    kiln::assign(a_, a_ * r);
    kiln::assign(a_, a_ + delta * one_minus_r * delta);
    kiln::assign(p_, p_ + delta * static_cast<C>(-static_cast<double>(o_.lr)));  // add_ with alpha = -lr
    this->rewrite_working_copy();
  }

  arena_type v_, a_;
};
template <detail::trainable_model Model>
Adadelta(Model&, AdadeltaOptions) -> Adadelta<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model>
Adadelta(Model&) -> Adadelta<typename Model::M, typename Model::D, typename Model::T>;
template <class M, class D>
Adadelta(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, AdadeltaOptions) -> Adadelta<M, D>;
template <class M, class D>
Adadelta(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&) -> Adadelta<M, D>;
template <detail::trainable_model Model, detail::positional_option X>
Adadelta(Model&, X) -> Adadelta<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
Adadelta(const Tensor<T, S, D>&, AdadeltaOptions) -> Adadelta<float, D>;
template <class T, class S, class D>
Adadelta(const Tensor<T, S, D>&) -> Adadelta<float, D>;

}  // namespace kiln::optim
