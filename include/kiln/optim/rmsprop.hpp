/// RMSprop (torch.optim.RMSprop): a running mean of squared gradients, optionally centred and with
/// momentum, one fused pass per step.
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
#include "kiln/optim/unfused_gradient.hpp"
#include "kiln/optim/from_model.hpp"
#include "kiln/optim/working_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

/// torch.optim.RMSprop's options and defaults, in its order.
struct RMSpropOptions {
  double lr = 1e-2;
  /// The smoothing constant of the running mean of g², a double as torch's Python float: the first
  /// steps divide by sqrt(1 - alpha), so 1 - 0.99f (9.9999905e-3) against torch's 1e-2 would move the
  /// parameters by 5e-7 of a step more.
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< an L2 term added to the gradient
  double momentum = 0.0;
  bool centered = false;  ///< divide by an estimate of the gradient's variance, not its second moment
  /// Step up the gradient: g = -grad before the weight decay and the averages (torch's maximize).
  bool maximize = false;
};

namespace detail {
/// One element of an RMSprop step, in torch 1.13's single-tensor order:
///   maximize: g = -g;  g += wd p;  v = alpha v + (1 - alpha) g g;
///   centered: m = alpha m + (1 - alpha) g, avg = sqrt(v - m m) + eps;  else avg = sqrt(v) + eps;
///   momentum: buf = momentum buf + g / avg, p -= lr buf;  else p -= (lr g) / avg.
/// In float, or double for double master weights; the working copy rewritten in the same pass under
/// mixed precision. Momentum, Centered and L2 are template arguments so the loop has no branch.
template <class M, class W = M, bool Momentum = false, bool Centered = false, bool L2 = false>
struct RMSpropStep {
  using C = std::conditional_t<std::is_same_v<M, double>, double, float>;
  M* p;
  const M* grad;
  M* square_avg;
  M* grad_avg;  // centered only
  M* buf;       // momentum only
  W* work;      // mixed precision only
  C lr, alpha, one_minus_alpha, eps, weight_decay, momentum;
  bool maximize = false;  // g = -grad first, a multiply by -1 (exact), as SgdStep::maximize

  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    const C w = static_cast<C>(p[i]);
    C g = static_cast<C>(grad[i]);
    g = (maximize ? C(-1) : C(1)) * g;
    if constexpr (L2) g = g + weight_decay * w;
    const C v = static_cast<C>(square_avg[i]) * alpha + one_minus_alpha * g * g;
    square_avg[i] = static_cast<M>(v);
    C avg;
    if constexpr (Centered) {
      const C m = static_cast<C>(grad_avg[i]) * alpha + one_minus_alpha * g;
      grad_avg[i] = static_cast<M>(m);
      avg = ops::detail::sqrt_(v - m * m) + eps;
    } else {
      avg = ops::detail::sqrt_(v) + eps;
    }
    M next;
    if constexpr (Momentum) {
      const C b = static_cast<C>(buf[i]) * momentum + g / avg;
      buf[i] = static_cast<M>(b);
      next = static_cast<M>(w - lr * b);
    } else {
      next = static_cast<M>(w - (lr * g) / avg);  // torch's addcdiv: (value t1) / t2
    }
    p[i] = next;
    if constexpr (!std::is_same_v<W, M>) work[i] = from_compute<W>(next);
  }
  /// p, the square average (and the gradient average, the momentum buffer) read and written, the
  /// gradient read, the working copy written; the arithmetic above.
  Traffic traffic(index_t n) const {
    const std::uint64_t arrays = 5 + (Centered ? 2 : 0) + (Momentum ? 2 : 0);
    const std::uint64_t per = arrays * sizeof(M) + (std::is_same_v<W, M> ? 0 : sizeof(W));
    return {static_cast<std::uint64_t>(n) * per,
            static_cast<std::uint64_t>(n) *
                (8 + (maximize ? 1 : 0) + (L2 ? 2 : 0) + (Centered ? 5 : 0) + (Momentum ? 1 : 0))};
  }
};
}  // namespace detail

/// RMSprop (torch.optim.RMSprop, torch 1.13): steps a model's parameter arena with its gradient arena
/// in one fused pass (with fusion off, kiln::Unfused, one pass per operation in torch's single-tensor
/// order). The state, as torch's: square_avg, and momentum_buffer (momentum > 0) and grad_avg
/// (centered), zeros before the first step; the step count. Example:
///   kiln::optim::RMSprop opt(model, {.lr = 1e-3, .momentum = 0.9});
///   opt.zero_grad(); model.backward(dy); opt.step();
template <class M, class D, class W = M>
class RMSprop : public detail::ParameterArenas<M, D, W, RMSprop<M, D, W>>, public detail::OptionsAndSteps<RMSpropOptions> {
  using base = detail::ParameterArenas<M, D, W, RMSprop>;
  using base::g_, base::p_, base::work_;

 public:
  using typename base::arena_type;
  using typename base::working_arena_type;
  using options_type = RMSpropOptions;

  RMSprop(arena_type& params, arena_type& grads, RMSpropOptions o = {}, working_arena_type* work = nullptr)
      : base(params, grads, work, "RMSprop", o.lr, o.weight_decay), detail::OptionsAndSteps<RMSpropOptions>(o) {
    // torch's checks and words.
    detail::require_non_negative(o.lr, "RMSprop", "learning rate");
    detail::require_non_negative(o.eps, "RMSprop", "epsilon value");
    detail::require_non_negative(o.momentum, "RMSprop", "momentum value");
    detail::require_non_negative(o.weight_decay, "RMSprop", "weight_decay value");
    detail::require_non_negative(o.alpha, "RMSprop", "alpha value");
    square_avg_ = zeros();
    if (o.centered) grad_avg_ = zeros();
    if (o.momentum > 0.0) buf_ = zeros();
  }
  template <detail::trainable_model Model>
  explicit RMSprop(Model& m, RMSpropOptions o = {})
      : RMSprop(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
                detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit RMSprop(const X&, RMSpropOptions o = {})
      : RMSprop(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  RMSprop(Model& m, X) : RMSprop(m, detail::refuse_positional_option<X, RMSpropOptions>()) {}

  /// One pass over every parameter (fusion off: one per operation, as torch's foreach=False).
  void step() {
    if (!fusion_enabled()) this->require_one_group();
    const kiln::detail::device_scope<D> on(p_.device_index());  // the parameters' GPU, whichever is current
    this->count_step_call();
    this->advance_steps(steps_);  // (the count, torch's state["step"], is only kept)
    if (!fusion_enabled()) return step_unfused();
    using C = typename detail::RMSpropStep<M, W>::C;
    // One pass per span of a parameter group (one without groups), with the group's lr and decay.
    this->for_each_span([&](index_t offset, index_t n, double lr, double weight_decay) {
      const auto run = [&](auto momentum, auto centered, auto l2) {
        kiln::detail::executor<D>::for_each(
            n, detail::RMSpropStep<M, W, decltype(momentum)::value, decltype(centered)::value, decltype(l2)::value>{
                   this->shifted(p_.data(), offset), this->shifted(g_.data(), offset),
                   this->shifted(square_avg_.data(), offset), this->shifted(grad_avg_.data(), offset),
                   this->shifted(buf_.data(), offset), this->shifted(work_, offset), static_cast<C>(lr),
                   static_cast<C>(o_.alpha), static_cast<C>(1.0 - o_.alpha), static_cast<C>(o_.eps),
                   static_cast<C>(weight_decay), static_cast<C>(o_.momentum), o_.maximize});
      };
      using detail::with_flag;
      with_flag(o_.momentum > 0.0, [&](auto momentum) {
        with_flag(o_.centered, [&](auto centered) {
          with_flag(weight_decay != 0.0, [&](auto l2) { run(momentum, centered, l2); });
        });
      });
    });
  }
  double momentum() const { return o_.momentum; }
  /// A new momentum for the next steps (OneCycleLR cycles it): a write to torch's param_group, unchecked
  /// as that is. Turned on where there was none, the buffers start at zero: torch's state before its
  /// first step (after one, torch 1.13 fails with KeyError: 'momentum_buffer'; kiln goes on from zeros).
  void set_momentum(double momentum) {
    if (momentum > 0.0) make_momentum_buffer();
    o_.momentum = momentum;
  }
  /// torch's state["square_avg"], ["grad_avg"] (centered; else empty) and ["momentum_buffer"] (a
  /// momentum; else empty), for checkpoints.
  arena_type& square_avg() { return square_avg_; }
  const arena_type& square_avg() const { return square_avg_; }
  arena_type& grad_avg() { return grad_avg_; }
  const arena_type& grad_avg() const { return grad_avg_; }
  arena_type& momentum_buffer() { return buf_; }
  const arena_type& momentum_buffer() const { return buf_; }
  /// Makes the momentum buffers (zeros) where there are none: a checkpoint's load into them.
  void make_momentum_buffer() {
    if (buf_.empty() && p_.numel() > 0) buf_ = zeros();
  }

 private:
  arena_type zeros() const { return this->state_like_parameters(M(0)); }
  /// step() as torch.optim.RMSprop(foreach=False) runs it: -g into a new tensor (maximize); g + wd p
  /// into a new tensor; v *= alpha,
  /// v += (1 - alpha) g g; (centered: m *= alpha, m += (1 - alpha) g, avg = sqrt(v - m m)) avg =
  /// sqrt(v), += eps; momentum: buf *= momentum, buf += g / avg, p += -lr buf; else p += -lr g / avg;
  /// and the working copy rewritten from p (mixed precision).
  void step_unfused() {
    using C = typename detail::RMSpropStep<M, W>::C;
    arena_type g = detail::unfused_gradient(g_, p_, o_.maximize, C(o_.weight_decay));
    const C alpha = C(o_.alpha), rest = static_cast<C>(1.0 - o_.alpha);
    kiln::assign(square_avg_, square_avg_ * alpha);
    kiln::assign(square_avg_, square_avg_ + g * rest * g);  // torch's addcmul: (value t1) t2
    arena_type avg(p_.extents(), p_.device_index());
    if (o_.centered) {
      kiln::assign(grad_avg_, grad_avg_ * alpha);
      kiln::assign(grad_avg_, grad_avg_ + g * rest);
      kiln::assign(avg, square_avg_ - grad_avg_ * grad_avg_);
      kiln::assign(avg, kiln::sqrt(avg));
    } else {
      kiln::assign(avg, kiln::sqrt(square_avg_));
    }
    kiln::assign(avg, avg + C(o_.eps));
    if (o_.momentum > 0.0) {
      kiln::assign(buf_, buf_ * C(o_.momentum));
      kiln::assign(buf_, buf_ + g / avg);
      kiln::assign(p_, p_ + buf_ * C(-o_.lr));
    } else {
      kiln::assign(p_, p_ + (g * C(-o_.lr)) / avg);
    }
    this->rewrite_working_copy();
  }

  arena_type square_avg_, grad_avg_, buf_;
};
template <detail::trainable_model Model>
RMSprop(Model&, RMSpropOptions) -> RMSprop<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model>
RMSprop(Model&) -> RMSprop<typename Model::M, typename Model::D, typename Model::T>;
template <class M, class D>
RMSprop(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, RMSpropOptions) -> RMSprop<M, D>;
template <class M, class D>
RMSprop(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&) -> RMSprop<M, D>;
template <detail::trainable_model Model, detail::positional_option X>
RMSprop(Model&, X) -> RMSprop<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
RMSprop(const Tensor<T, S, D>&, RMSpropOptions) -> RMSprop<float, D>;
template <class T, class S, class D>
RMSprop(const Tensor<T, S, D>&) -> RMSprop<float, D>;

}  // namespace kiln::optim
