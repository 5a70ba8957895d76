/// Adam and AdamW (torch.optim.Adam / AdamW, torch 1.13 formulas and defaults), one fused pass per step.
#pragma once
#include <algorithm>
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
#include "kiln/optim/device_scalars.hpp"
#include "kiln/optim/from_model.hpp"
#include "kiln/optim/parameter_arenas.hpp"
#include "kiln/optim/step_counts.hpp"
#include "kiln/optim/unfused_gradient.hpp"
#include "kiln/optim/working_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

/// The decay rates of Adam's first and second moments (torch's `betas`).
struct AdamBetas {
  // Doubles, as torch's Python floats: 1 - 0.999f is 1.3e-5 (relative) off 1e-3, which moved RAdam's
  // rectification by 6e-6 and Adam's bias corrections by ~4e-7 (RMSprop's alpha, Adadelta's rho alike).
  double beta1 = 0.9;
  double beta2 = 0.999;
};

/// torch.optim.Adam's options and defaults. weight_decay is an L2 penalty added to the gradient.
/// Example: `kiln::optim::Adam opt(model, {.lr = 1e-2, .betas = {0.9, 0.99}});`
struct AdamOptions {
  double lr = 1e-3;
  AdamBetas betas = {};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  /// Step up the gradient: g = -grad before the weight decay and the moments (torch's maximize).
  bool maximize = false;
  /// The step count and learning rate live on the device and each step derives its bias corrections
  /// there (one extra one-thread pass), so a kiln::cuda::Graph that captured step() replays correct
  /// steps (torch's capturable=True). step_count(), set_step_count() and set_lr() then copy one value.
  bool capturable = false;
};

/// torch.optim.AdamW's options and defaults. weight_decay is decoupled: p *= 1 - lr * weight_decay.
struct AdamWOptions {
  double lr = 1e-3;
  AdamBetas betas = {};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;    ///< as AdamOptions::maximize
  bool capturable = false;  ///< as AdamOptions::capturable
};

namespace detail {

/// A capturable Adam's device-resident scalars (doubles): the step count and learning rate it keeps,
/// and what AdamPrepare derives from them for the step's pass (skip: 1 when the step is skipped).
struct AdamScalars {
  enum : int { step, lr, neg_step_size, bias_correction2_sqrt, decay, skip, count };
};

/// A capturable step's first pass (one thread): t += 1, then the host's formulas in double,
/// step_size = lr / (1 - beta1^t), sqrt(1 - beta2^t) and AdamW's 1 - lr wd. When `skip_if` points to
/// a nonzero flag (GradScaler found an inf/NaN), nothing advances and the update pass does nothing.
struct AdamPrepare {
  double* s;
  double beta1, beta2, weight_decay;
  bool decoupled;
  const std::int32_t* skip_if = nullptr;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t) const {
    const bool skip = skip_if != nullptr && *skip_if != 0;
    s[AdamScalars::skip] = skip ? 1.0 : 0.0;
    if (skip) return;
    const double t = s[AdamScalars::step] + 1.0;
    const double lr = s[AdamScalars::lr];
    s[AdamScalars::step] = t;
    s[AdamScalars::neg_step_size] = -(lr / (1.0 - ops::detail::pow_(beta1, t)));
    s[AdamScalars::bias_correction2_sqrt] = ops::detail::sqrt_(1.0 - ops::detail::pow_(beta2, t));
    s[AdamScalars::decay] = decoupled ? 1.0 - lr * weight_decay : 1.0;
  }
  /// Two scalars read, five written; the arithmetic above.
  Traffic traffic(index_t) const { return {7 * sizeof(double), 11}; }
};

/// One element of an Adam/AdamW step, in torch 1.13's single-tensor order:
///   maximize: g = -g
///   AdamW: p *= 1 - lr wd          Adam: g += wd p
///   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g;  (amsgrad: vmax = max(vmax, v), used for v)
///   p += -step_size m / (sqrt(v) / sqrt(bias_correction2) + eps),  step_size = lr / bias_correction1.
/// The scalars are computed once per step on the host, in double, and rounded to the compute type C as
/// torch rounds them to float. C is float, or double for double master weights (never rounded through
/// float). Decoupled, Amsgrad and L2 (Adam with a weight decay) are template arguments so the loop has no
/// branch and vectorises (a branch on the decay left the loop scalar when it also stores half: g++ does
/// not unswitch a body that large; the fp16 step was 5x slower than the bf16 one). Under
/// mixed precision (W, the working copy's type, differs from M) the same pass also rounds the new
/// parameter into the working copy. Capturable takes the step's scalars that depend on the step count
/// and the learning rate from the device (AdamScalars, written by AdamPrepare just before).
template <class M, bool Decoupled = false, bool Amsgrad = false, class W = M, bool L2 = !Decoupled,
          bool Capturable = false>
struct AdamStep {
  using C = std::conditional_t<std::is_same_v<M, double>, double, float>;
  M* p;
  const M* grad;
  M* m;
  M* v;
  M* vmax;  // amsgrad only
  W* work;  // mixed precision only
  C beta1, one_minus_beta1, beta2, one_minus_beta2;
  C l2;     // Adam's weight decay (0 for AdamW)
  C decay;  // AdamW's 1 - lr wd (1 for Adam)
  C neg_step_size, bias_correction2_sqrt, eps;
  const double* scalars = nullptr;  // Capturable: AdamScalars on the device
  bool maximize = false;  // g = -grad first, a multiply by -1 (exact), as SgdStep::maximize

  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    C neg_step = neg_step_size, bc2_sqrt = bias_correction2_sqrt, dec = decay;
    if constexpr (Capturable) {
      if (scalars[AdamScalars::skip] != 0.0) return;
      neg_step = static_cast<C>(scalars[AdamScalars::neg_step_size]);
      bc2_sqrt = static_cast<C>(scalars[AdamScalars::bias_correction2_sqrt]);
      dec = static_cast<C>(scalars[AdamScalars::decay]);
    }
    C w = static_cast<C>(p[i]);
    C g = static_cast<C>(grad[i]);
    g = (maximize ? C(-1) : C(1)) * g;
    if constexpr (Decoupled) w = w * dec;
    else if constexpr (L2) g = g + l2 * w;
    const C mi = static_cast<C>(m[i]) * beta1 + one_minus_beta1 * g;
    const C vi = static_cast<C>(v[i]) * beta2 + one_minus_beta2 * g * g;
    m[i] = static_cast<M>(mi);
    v[i] = static_cast<M>(vi);
    C s = vi;
    if constexpr (Amsgrad) {
      const C old = static_cast<C>(vmax[i]);
      s = (old > vi || old != old) ? old : vi;  // torch.maximum: NaN propagates
      vmax[i] = static_cast<M>(s);
    }
    const C denom = ops::detail::sqrt_(s) / bc2_sqrt + eps;
    const M next = static_cast<M>(w + neg_step * mi / denom);
    p[i] = next;
    if constexpr (!std::is_same_v<W, M>) work[i] = from_compute<W>(next);
  }
  /// p, m, v (and vmax) read and written, the gradient read, the working copy written; the arithmetic
  /// above (the decay or L2 counted, the comparison for amsgrad, the negation for maximize).
  Traffic traffic(index_t n) const {
    const std::uint64_t arrays = 7 + (Amsgrad ? 2 : 0);
    const std::uint64_t per = arrays * sizeof(M) + (std::is_same_v<W, M> ? 0 : sizeof(W));
    return {static_cast<std::uint64_t>(n) * per + (Capturable ? 4 * sizeof(double) : 0),
            static_cast<std::uint64_t>(n) *
                (13 + (Decoupled ? 1 : L2 ? 2 : 0) + (Amsgrad ? 1 : 0) + (maximize ? 1 : 0))};
  }
};

/// What Adam and AdamW share: the moment arenas, the step count and the fused step. Decoupled selects
/// AdamW's weight decay; W is the type of the working copy the step rewrites (M: none).
template <class M, class D, class Options, bool Decoupled, class W = M>
class AdamBase : public ParameterArenas<M, D, W, AdamBase<M, D, Options, Decoupled, W>> {
  using arenas = ParameterArenas<M, D, W, AdamBase>;
  using arenas::g_, arenas::p_, arenas::work_;

 public:
  using typename arenas::arena_type;
  using typename arenas::working_arena_type;
  using options_type = Options;
  /// AdamW (true) or Adam (false).
  static constexpr bool decoupled_weight_decay = Decoupled;

  AdamBase(arena_type& params, arena_type& grads, Options o, const char* who, working_arena_type* work)
      : arenas(params, grads, work, who, o.lr, o.weight_decay), o_(o) {
    const std::string name = who;
    if (!(o.lr >= 0.0)) throw ValueError("kiln::optim::" + name + ": invalid learning rate " + std::to_string(o.lr) + "; give lr >= 0");
    if (!(o.eps >= 0.0)) throw ValueError("kiln::optim::" + name + ": invalid eps " + std::to_string(o.eps) + "; give eps >= 0");
    check_betas(o.betas, who);
    if (!(o.weight_decay >= 0.0))
      throw ValueError("kiln::optim::" + name + ": invalid weight_decay " + std::to_string(o.weight_decay) +
                       "; give weight_decay >= 0");
    m_ = this->state_like_parameters(M(0));
    v_ = this->state_like_parameters(M(0));
    if (o.amsgrad) vmax_ = this->state_like_parameters(M(0));
    if (o.capturable) {
      double initial[AdamScalars::count] = {};
      initial[AdamScalars::lr] = o.lr;
      scalars_ = DeviceScalars<D>(initial, params.device_index());
    }
  }

  /// One step over every parameter: one pass (one loop on the CPU, one kernel on the GPU); with fusion
  /// off (kiln::Unfused), one pass per operation in torch's single-tensor order. Capturable: one more
  /// one-thread pass first, which advances the step count on the device.
  void step() { step_impl(nullptr); }
  /// A capturable step that GradScaler skips on the device when `*found_inf` is nonzero (its
  /// capturable form passes its flag); throws ValueError unless the optimizer is capturable.
  void step_unless(const std::int32_t* found_inf) {
    if (!o_.capturable)
      throw ValueError("kiln::optim::Adam::step_unless: the optimizer is not capturable; construct it with "
                       "{.capturable = true} to step under a capturable GradScaler");
    step_impl(found_inf);
  }

 private:
  void step_impl(const std::int32_t* skip_if) {
    if (!fusion_enabled()) this->require_one_group(steps_);
    if (o_.capturable && !steps_.uniform_from(this->frozen()))
      throw ValueError(std::string("kiln::optim::") + (Decoupled ? "AdamW" : "Adam") +
                       ": a capturable step keeps one step count on the device, and the layers unfrozen "
                       "since steps that skipped them have taken fewer (torch counts each parameter's); "
                       "build the optimizer without {.capturable = true}, or anew after unfreezing");
    this->count_step_call();
    // Every parameter frozen: nothing steps and nothing counts (torch: no parameter has a gradient).
    if (o_.capturable && this->frozen() >= p_.numel()) return;
    using C = typename detail::AdamStep<M>::C;
    const kiln::detail::device_scope<D> on(p_.device_index());  // the parameters' GPU, whichever is current
    // Hyperparameters as torch sees them: its Python floats are these options widened to double.
    const double lr = o_.lr, b1 = o_.betas.beta1, b2 = o_.betas.beta2, wd = o_.weight_decay;
    this->advance_steps(steps_);  // capturable: where the runs begin (the count is the device's)
    if (o_.capturable) {
      kiln::detail::executor<D>::for_each(1, AdamPrepare{scalars_.data(), b1, b2, wd, Decoupled, skip_if});
      if (fusion_enabled()) {
        run_fused<true>(this->frozen(), p_.numel() - this->frozen(), wd, C(0), C(0), C(0));  // past frozen layers
        return;
      }
      // Unfused: the host scalars from the device's count and skip flag (copies; waits).
      if (kiln::detail::graph_capture<D>::active(m_.device_index()))
        throw ValueError("kiln::optim::Adam: a capturable step with fusion switched off (kiln::Unfused) reads its "
                         "step count back to the host, which a CUDA graph capture cannot hold; capture the fused step");
      if (skip_if != nullptr && scalars_.get(AdamScalars::skip) != 0.0) return;
    }
    // The bias corrections of a parameter at its step t (torch's per-parameter state["step"]).
    const auto corrections = [&](std::int64_t step) {
      const double t = static_cast<double>(step);
      return std::pair{1.0 - std::pow(b1, t), 1.0 - std::pow(b2, t)};
    };
    if (!fusion_enabled()) {
      const auto [bias_correction1, bias_correction2] = corrections(step_count());
      step_unfused(static_cast<C>(b1), static_cast<C>(b2), static_cast<C>(Decoupled ? 0.0 : wd),
                   static_cast<C>(Decoupled ? 1.0 - lr * wd : 1.0), static_cast<C>(-(lr / bias_correction1)),
                   static_cast<C>(std::sqrt(bias_correction2)), static_cast<C>(o_.eps));
      return;
    }
    // One pass per span of a parameter group (one pass without groups), with the group's lr and decay,
    // and per run of step counts within it (layers unfrozen after steps that skipped them).
    this->for_each_span(steps_, [&](index_t offset, index_t n, double group_lr, double group_wd, const StepRun& run) {
      const auto [bias_correction1, bias_correction2] = corrections(run.steps);
      run_fused<false>(offset, n, group_wd, static_cast<C>(Decoupled ? 1.0 - group_lr * group_wd : 1.0),
                       static_cast<C>(-(group_lr / bias_correction1)), static_cast<C>(std::sqrt(bias_correction2)));
    });
  }

  /// The fused pass over elements [offset, offset + n) with weight decay wd; Capturable reads decay,
  /// step size and bias correction from scalars_ instead.
  template <bool Capturable, class C>
  void run_fused(index_t offset, index_t n, double wd, C decay, C neg_step_size, C bc2_sqrt) {
    const double b1 = o_.betas.beta1, b2 = o_.betas.beta2;
    const auto run = [&](auto amsgrad, auto l2) {
      const detail::AdamStep<M, Decoupled, decltype(amsgrad)::value, W, decltype(l2)::value, Capturable> f{
          this->shifted(p_.data(), offset),
          this->shifted(g_.data(), offset),
          this->shifted(m_.data(), offset),
          this->shifted(v_.data(), offset),
          this->shifted(vmax_.data(), offset),
          this->shifted(work_, offset),
          static_cast<C>(b1),
          static_cast<C>(1.0 - b1),
          static_cast<C>(b2),
          static_cast<C>(1.0 - b2),
          static_cast<C>(Decoupled ? 0.0 : wd),
          decay,
          neg_step_size,
          bc2_sqrt,
          static_cast<C>(o_.eps),
          scalars_.data(),
          o_.maximize};
      kiln::detail::executor<D>::for_each(n, f);
    };
    // Adam's L2 term only when the decay is not 0 (as torch).
    detail::with_flag(o_.amsgrad, [&](auto amsgrad) {
      detail::with_flag(!Decoupled && static_cast<C>(wd) != C(0), [&](auto l2) { run(amsgrad, l2); });
    });
  }
  /// step() with fusion off, as torch.optim.Adam(foreach=False) runs it: -g into a new tensor
  /// (maximize); p *= decay (AdamW); g + wd p into a new tensor (Adam's L2); m = m b1, m += (1 - b1) g;
  /// v = v b2, v += (1 - b2) g g; (amsgrad: vmax = max(vmax, v)); denom = sqrt(v), /= sqrt(bc2), += eps;
  /// p += (-step_size m) / denom; and the working copy rewritten from p (mixed precision).
  template <class C>
  void step_unfused(C b1, C b2, C l2, C decay, C neg_step_size, C bc2_sqrt, C eps) {
    // (AdamW has no L2 term, Adam no decoupled decay: the decay may come after the gradient's passes)
    arena_type g = detail::unfused_gradient(g_, p_, o_.maximize, l2);
    if constexpr (Decoupled) kiln::assign(p_, p_ * decay);
    kiln::assign(m_, m_ * b1);
    kiln::assign(m_, m_ + g * (C(1) - b1));
    kiln::assign(v_, v_ * b2);
    kiln::assign(v_, v_ + g * (C(1) - b2) * g);  // torch's addcmul: (value t1) t2
    if (o_.amsgrad) kiln::assign(vmax_, kiln::max(vmax_, v_));
    arena_type denom(p_.extents(), p_.device_index());
    kiln::assign(denom, kiln::sqrt(o_.amsgrad ? vmax_ : v_));
    kiln::assign(denom, denom / bc2_sqrt);
    kiln::assign(denom, denom + eps);
    kiln::assign(p_, p_ + (m_ * neg_step_size) / denom);
    this->rewrite_working_copy();
  }

 public:
  double lr() const { return o_.lr; }
  /// A new learning rate for the next steps (schedulers call it; capturable: copied to the device, so a
  /// captured step replays with it).
  void set_lr(double lr) {
    o_.lr = lr;
    if (o_.capturable) scalars_.set(AdamScalars::lr, lr);
  }
  const Options& options() const { return o_; }
  const AdamBetas& betas() const { return o_.betas; }
  /// New decay rates for the next steps (OneCycleLR cycles beta1): a write to torch's
  /// param_group['betas'], unchecked as that is; the bias corrections use them, as torch's. A captured
  /// step replays the betas it was captured with.
  void set_betas(AdamBetas betas) { o_.betas = betas; }
  /// Steps taken so far by the parameters that took every step (torch's state["step"] of the last
  /// layer's); bias correction uses it. Capturable: read from the device, replays of a captured step
  /// included.
  std::int64_t step_count() const {
    return o_.capturable ? static_cast<std::int64_t>(scalars_.get(AdamScalars::step)) : steps_.last();
  }
  /// Restores the step count from a checkpoint (with exp_avg() and exp_avg_sq()): every parameter's.
  void set_step_count(std::int64_t n) {
    steps_.set(n);
    if (o_.capturable) scalars_.set(AdamScalars::step, static_cast<double>(n));
  }
  /// Each parameter's count (torch's state["step"] per parameter): one run unless layers were frozen for
  /// some steps and then unfrozen (Model::freeze), for checkpoints. Capturable: the last run's is the
  /// device's count (replays of a captured step step it alone: a capturable step refuses to step runs
  /// that count unalike); the others' are the host's.
  std::vector<StepRun> step_runs() const {
    StepCounts counts;
    std::vector<StepRun> runs = steps_.runs();
    if (o_.capturable) runs.back().steps = step_count();
    counts.set_runs(std::move(runs));  // (merged: a step skipped on the device may leave two alike)
    return counts.runs();
  }
  void set_step_runs(std::vector<StepRun> runs) {
    steps_.set_runs(std::move(runs));
    if (o_.capturable) scalars_.set(AdamScalars::step, static_cast<double>(steps_.last()));
  }
  /// The first-moment arena (torch's state["exp_avg"]), for checkpoints.
  arena_type& exp_avg() { return m_; }
  const arena_type& exp_avg() const { return m_; }
  /// The second-moment arena (torch's state["exp_avg_sq"]), for checkpoints.
  arena_type& exp_avg_sq() { return v_; }
  const arena_type& exp_avg_sq() const { return v_; }
  /// The running maximum of exp_avg_sq (torch's state["max_exp_avg_sq"]); empty unless amsgrad.
  arena_type& max_exp_avg_sq() { return vmax_; }
  const arena_type& max_exp_avg_sq() const { return vmax_; }

 private:
  /// torch's checks of betas (a NaN is refused too).
  static void check_betas(AdamBetas b, const std::string& who) {
    if (!(b.beta1 >= 0.0 && b.beta1 < 1.0))
      throw ValueError("kiln::optim::" + who + ": invalid beta1 " + std::to_string(b.beta1) + "; give 0 <= beta1 < 1");
    if (!(b.beta2 >= 0.0 && b.beta2 < 1.0))
      throw ValueError("kiln::optim::" + who + ": invalid beta2 " + std::to_string(b.beta2) + "; give 0 <= beta2 < 1");
  }

  arena_type m_, v_, vmax_;
  DeviceScalars<D> scalars_;  // capturable only: AdamScalars
  Options o_;
  StepCounts steps_;  // per run of parameters (capturable: where runs begin; the count is the device's)
};

}  // namespace detail

/// Adam (torch.optim.Adam): steps a model's parameter arena with its gradient arena in one fused pass;
/// weight_decay adds an L2 term to the gradient. Example:
///   kiln::optim::Adam opt(model, {.lr = 1e-3});
///   opt.zero_grad(); model.backward(dy); opt.step();
template <class M, class D, class W = M>
class Adam : public detail::AdamBase<M, D, AdamOptions, false, W> {
  using base = detail::AdamBase<M, D, AdamOptions, false, W>;

 public:
  using arena_type = typename base::arena_type;
  using working_arena_type = typename base::working_arena_type;
  Adam(arena_type& params, arena_type& grads, AdamOptions o = {}, working_arena_type* work = nullptr)
      : base(params, grads, o, "Adam", work) {}
  template <detail::trainable_model Model>
  explicit Adam(Model& m, AdamOptions o = {})
      : Adam(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
             detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit Adam(const X&, AdamOptions o = {})
      : Adam(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  Adam(Model& m, X) : Adam(m, detail::refuse_positional_option<X, AdamOptions>()) {}
};
template <detail::trainable_model Model>
Adam(Model&, AdamOptions) -> Adam<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model>
Adam(Model&) -> Adam<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model, detail::positional_option X>
Adam(Model&, X) -> Adam<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
Adam(const Tensor<T, S, D>&, AdamOptions) -> Adam<float, D>;
template <class T, class S, class D>
Adam(const Tensor<T, S, D>&) -> Adam<float, D>;
template <class M, class D>
Adam(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, AdamOptions) -> Adam<M, D>;
template <class M, class D>
Adam(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&) -> Adam<M, D>;

/// AdamW (torch.optim.AdamW): Adam with decoupled weight decay, p *= 1 - lr * weight_decay before the
/// update (default weight_decay 1e-2). Example:
///   kiln::optim::AdamW opt(model, {.lr = 1e-3, .weight_decay = 0.05});
template <class M, class D, class W = M>
class AdamW : public detail::AdamBase<M, D, AdamWOptions, true, W> {
  using base = detail::AdamBase<M, D, AdamWOptions, true, W>;

 public:
  using arena_type = typename base::arena_type;
  using working_arena_type = typename base::working_arena_type;
  AdamW(arena_type& params, arena_type& grads, AdamWOptions o = {}, working_arena_type* work = nullptr)
      : base(params, grads, o, "AdamW", work) {}
  template <detail::trainable_model Model>
  explicit AdamW(Model& m, AdamWOptions o = {})
      : AdamW(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
              detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit AdamW(const X&, AdamWOptions o = {})
      : AdamW(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  AdamW(Model& m, X) : AdamW(m, detail::refuse_positional_option<X, AdamWOptions>()) {}
};
template <detail::trainable_model Model>
AdamW(Model&, AdamWOptions) -> AdamW<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model>
AdamW(Model&) -> AdamW<typename Model::M, typename Model::D, typename Model::T>;
template <detail::trainable_model Model, detail::positional_option X>
AdamW(Model&, X) -> AdamW<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
AdamW(const Tensor<T, S, D>&, AdamWOptions) -> AdamW<float, D>;
template <class T, class S, class D>
AdamW(const Tensor<T, S, D>&) -> AdamW<float, D>;
template <class M, class D>
AdamW(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, AdamWOptions) -> AdamW<M, D>;
template <class M, class D>
AdamW(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&) -> AdamW<M, D>;

}  // namespace kiln::optim
