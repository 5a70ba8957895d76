/// SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD), one fused pass per step.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/fusion.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/optim/device_scalars.hpp"
#include "kiln/optim/parameter_arenas.hpp"
#include "kiln/optim/unfused_gradient.hpp"
#include "kiln/optim/from_model.hpp"
#include "kiln/optim/working_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

/// torch.optim.SGD's options and defaults. lr has none there, and none here: `SGD opt(model)` does not
/// compile, and options without an lr throw. Doubles, as torch's Python floats: what a step derives from
/// them (1 - dampening) is computed in double and rounded once, to the step's type.
struct SGDOptions {
  double lr = std::numeric_limits<double>::quiet_NaN();  ///< required: {.lr = 0.01}
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  /// Step up the gradient: g = -grad before the weight decay and the momentum (torch's maximize).
  bool maximize = false;
  /// The learning rate and whether the momentum buffer is still empty live on the device, so a
  /// kiln::cuda::Graph that captured step() replays correct steps (a one-thread pass first), and a
  /// capturable GradScaler can skip a step there (step_unless). As AdamOptions::capturable.
  bool capturable = false;
};

namespace detail {
/// A capturable SGD's scalars on the device (doubles): the learning rate; `pending_first` until a step
/// has run; `first` and `skip` for the step's pass (SgdPrepare writes them).
struct SgdScalars {
  enum : int { lr, pending_first, first, skip, count };
};

/// A capturable step's first pass (one thread): skip when `skip_if` points to a nonzero flag
/// (GradScaler found an inf/NaN); otherwise, for a step with a momentum, this step is the first if none
/// ran before (a step without one, a graph captured before a momentum was turned on say, leaves the
/// flag for the first step that has one).
struct SgdPrepare {
  double* s;
  const std::int32_t* skip_if = nullptr;
  bool momentum = true;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t) const {
    const bool skip = skip_if != nullptr && *skip_if != 0;
    s[SgdScalars::skip] = skip ? 1.0 : 0.0;
    if (skip || !momentum) return;
    s[SgdScalars::first] = s[SgdScalars::pending_first];
    s[SgdScalars::pending_first] = 0.0;
  }
  Traffic traffic(index_t) const { return {4 * sizeof(double), 0}; }
};

/// One element of an SGD step: g = grad (-grad with maximize) + wd p; buf = momentum buf + (1 -
/// dampening) g (buf = g on the first step); g = nesterov ? g + momentum buf : buf; p -= lr g. Computed
/// in float, or in double for double master weights (so they are never rounded through float). Under
/// mixed precision (W, the working copy's type, differs from M) the same pass also rounds the new
/// parameter into the working copy.
/// Momentum, Decay (momentum, weight decay not 0), First (the first step) and Nesterov are template
/// arguments, so the loop has no branch and vectorises (with them as run-time branches g++ left the step
/// scalar when it also stores half: 9 ms against 1.6 ms for bf16 over 2 M parameters). Capturable reads
/// the learning rate, the first-step flag and the skip flag from the device (SgdScalars).
template <class M, class W = M, bool Momentum = false, bool Decay = false, bool First = false, bool Nesterov = false,
          bool Capturable = false>
struct SgdStep {
  using C = std::conditional_t<std::is_same_v<M, double>, double, float>;
  M* p;
  const M* grad;
  M* buf;
  W* work;  // mixed precision only
  C lr, momentum;
  C keep;  // 1 - dampening, computed in double (torch's alpha) and rounded once
  C weight_decay;
  const double* scalars = nullptr;  // Capturable: SgdScalars on the device
  /// g = -grad first (torch's maximize), as a multiply by -1 (exact; 1 otherwise): a run-time flag
  /// that leaves the loop vectorised, where a select (`maximize ? -g : g`) left the fp16 step scalar
  /// (7.1 ms against 2.5 ms over 2 M parameters), and no more instantiations than a template argument.
  bool maximize = false;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    bool first = First;
    C rate = lr;
    if constexpr (Capturable) {
      if (scalars[SgdScalars::skip] != 0.0) return;
      rate = static_cast<C>(scalars[SgdScalars::lr]);
      first = scalars[SgdScalars::first] != 0.0;
    }
    C g = static_cast<C>(grad[i]);
    g = (maximize ? C(-1) : C(1)) * g;
    const C w = static_cast<C>(p[i]);
    if constexpr (Decay) g += weight_decay * w;
    if constexpr (Momentum) {
      C b = g;
      if (!first) b = momentum * static_cast<C>(buf[i]) + keep * g;
      buf[i] = static_cast<M>(b);
      if constexpr (Nesterov) g = g + momentum * b;
      else g = b;
    }
    const M next = static_cast<M>(w - rate * g);
    p[i] = next;
    if constexpr (!std::is_same_v<W, M>) work[i] = from_compute<W>(next);
  }
  /// p read and written, the gradient read, the momentum buffer read (not on the first step) and
  /// written, the working copy written; the arithmetic above (the negation counted).
  Traffic traffic(index_t n) const {
    const std::uint64_t per = (3 + (Momentum ? (First ? 1 : 2) : 0)) * sizeof(M) + (std::is_same_v<W, M> ? 0 : sizeof(W));
    const std::uint64_t ops =
        2 + (maximize ? 1 : 0) + (Decay ? 2 : 0) + (Momentum ? (First ? 0 : 3) + (Nesterov ? 2 : 0) : 0);
    return {static_cast<std::uint64_t>(n) * per + (Capturable ? 3 * sizeof(double) : 0),
            static_cast<std::uint64_t>(n) * ops};
  }
};
}  // namespace detail

/// Steps a model's parameter arena with its gradient arena (and, under mixed precision, rewrites the
/// model's working copy, element type W, in the same pass). Example:
///   kiln::optim::SGD opt(model, {.lr = 0.1, .momentum = 0.9});
///   opt.step();  // one pass over every parameter
template <class M, class D, class W = M>
class SGD : public detail::ParameterArenas<M, D, W, SGD<M, D, W>> {
  using base = detail::ParameterArenas<M, D, W, SGD>;
  using base::g_, base::p_, base::work_;

 public:
  using options_type = SGDOptions;
  using typename base::arena_type;
  using typename base::working_arena_type;
  SGD(arena_type& params, arena_type& grads, SGDOptions o, working_arena_type* work = nullptr)
      : base(params, grads, work, "SGD", o.lr, o.weight_decay), o_(o), filled_from_(params.numel()) {
    // torch.optim.SGD's checks (a NaN is refused too), in Adam's words.
    if (kiln::detail::is_nan(o.lr))
      throw ValueError("kiln::optim::SGD: no learning rate (lr not given, or NaN); it has no default, as in "
                       "torch.optim.SGD: SGD(model, {.lr = 0.01})");
    if (o.lr < 0.0) throw ValueError("kiln::optim::SGD: invalid learning rate " + std::to_string(o.lr) + "; give lr >= 0");
    if (!(o.momentum >= 0.0))
      throw ValueError("kiln::optim::SGD: invalid momentum " + std::to_string(o.momentum) + "; give momentum >= 0");
    if (!(o.weight_decay >= 0.0))
      throw ValueError("kiln::optim::SGD: invalid weight_decay " + std::to_string(o.weight_decay) +
                       "; give weight_decay >= 0");
    if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0))
      throw ValueError("kiln::optim::SGD: Nesterov momentum requires a momentum and zero dampening");
    // zeros until the first step sets it (a checkpoint before it holds zeros)
    if (o.momentum != 0.0) buf_ = this->state_like_parameters(M(0));
    if (o.capturable) {
      const double initial[detail::SgdScalars::count] = {o.lr, 1.0, 0.0, 0.0};
      scalars_ = detail::DeviceScalars<D>(initial, params.device_index());
    }
  }
  template <detail::trainable_model Model>
  SGD(Model& m, SGDOptions o)
      : SGD(detail::parameters_for<M, D, W>(m), detail::gradients_for<M, D, W>(m), o,
            detail::working_arena_for<M, D, W>(m)) {
    this->name_parameters(m);
  }
  /// Torch's habits, refused with one message each (from_model.hpp).
  template <tensor X>
  explicit SGD(const X&, SGDOptions o = {})
      : SGD(detail::refuse_tensor_argument<X, arena_type>(), detail::refuse_tensor_argument<X, arena_type>(), o) {}
  template <detail::trainable_model Model, detail::positional_option X>
  SGD(Model& m, X) : SGD(m, detail::refuse_positional_option<X, SGDOptions>()) {}
  template <detail::trainable_model Model>
  explicit SGD(Model& m) : SGD(m, detail::require_lr<Model, SGDOptions>()) {}

  /// One pass over every parameter; with fusion off (kiln::Unfused), one pass per operation in torch's
  /// single-tensor order. Capturable: a one-thread pass first (the first-step flag on the device).
  void step() { step_impl(nullptr); }
  /// A capturable step that GradScaler skips on the device when `*found_inf` is nonzero; throws
  /// ValueError unless the optimizer is capturable.
  void step_unless(const std::int32_t* found_inf) {
    if (!o_.capturable)
      throw ValueError("kiln::optim::SGD::step_unless: the optimizer is not capturable; construct it with "
                       "{.capturable = true} to step under a capturable GradScaler");
    step_impl(found_inf);
  }

 private:
  void step_impl(const std::int32_t* skip_if) {
    if (!fusion_enabled()) {
      this->require_one_group();
      if (filled_from_ != 0 && filled_from_ != p_.numel())
        throw ValueError("kiln::optim::SGD: a step with fusion switched off (kiln::Unfused) starts every momentum "
                         "buffer or none, and the layers unfrozen since steps that skipped them have none yet; "
                         "step fused");
    }
    if (o_.capturable && o_.momentum != 0.0 && filled_from_ > this->frozen() && filled_from_ < p_.numel())
      throw ValueError("kiln::optim::SGD: a capturable step keeps one first-step flag on the device, and the "
                       "layers unfrozen since steps that skipped them have no momentum buffer yet (torch starts "
                       "each parameter's); build the optimizer without {.capturable = true}, or anew after "
                       "unfreezing");
    this->count_step_call();
    // Every parameter frozen: nothing steps, no buffer starts (capturable: nor the device's flag).
    if (o_.capturable && this->frozen() >= p_.numel()) return;
    const kiln::detail::device_scope<D> on(p_.device_index());  // the parameters' GPU, whichever is current
    // A step without a momentum leaves the buffers as they are, unfilled if no step filled them yet.
    const bool fills = o_.momentum != 0.0;
    if (o_.capturable) {
      kiln::detail::executor<D>::for_each(1, detail::SgdPrepare{scalars_.data(), skip_if, o_.momentum != 0.0});
      if (fusion_enabled()) {
        run_fused<true>();
        if (fills) filled_from_ = std::min(filled_from_, this->frozen());
        return;
      }
      // Unfused: the host's flags from the device's (copies; waits).
      if (kiln::detail::graph_capture<D>::active(g_.device_index()))
        throw ValueError("kiln::optim::SGD: a capturable step with fusion switched off (kiln::Unfused) reads its "
                         "flags back to the host, which a CUDA graph capture cannot hold; capture the fused step");
      if (scalars_.get(detail::SgdScalars::skip) != 0.0) return;
      filled_from_ = scalars_.get(detail::SgdScalars::first) != 0.0 ? p_.numel() : 0;
    }
    if (!fusion_enabled()) {
      step_unfused();
    } else {
      run_fused<false>();
    }
    if (fills) filled_from_ = std::min(filled_from_, this->frozen());
  }
  /// The fused pass, once per span of a parameter group (once without groups) with the group's lr and
  /// weight decay, and a span cut where the filled momentum buffers begin (before: their first step,
  /// buf = g, as torch starts each parameter's); Capturable takes the learning rate and the first-step
  /// flag from the device.
  template <bool Capturable>
  void run_fused() {
    using C = typename detail::SgdStep<M, W>::C;
    this->for_each_span([&](index_t span_offset, index_t span_n, double lr, double weight_decay) {
      const auto pass = [&](index_t offset, index_t n, bool first_step) {
        const auto run = [&](auto momentum, auto decay, auto first, auto nesterov) {
          kiln::detail::executor<D>::for_each(
              n, detail::SgdStep<M, W, decltype(momentum)::value, decltype(decay)::value, decltype(first)::value,
                                 decltype(nesterov)::value, Capturable>{
                     this->shifted(p_.data(), offset), this->shifted(g_.data(), offset),
                     this->shifted(buf_.data(), offset), this->shifted(work_, offset), static_cast<C>(lr),
                     static_cast<C>(o_.momentum), static_cast<C>(1.0 - o_.dampening),
                     static_cast<C>(weight_decay), scalars_.data(), o_.maximize});
        };
        using detail::with_flag;
        with_flag(weight_decay != 0.0, [&](auto decay) {
          if (o_.momentum == 0.0) return run(std::false_type{}, decay, std::false_type{}, std::false_type{});
          // Capturable: the first step is decided on the device (First = false, a run-time flag).
          with_flag(first_step && !Capturable, [&](auto first) {
            with_flag(o_.nesterov, [&](auto nesterov) { run(std::true_type{}, decay, first, nesterov); });
          });
        });
      };
      const index_t end = span_offset + span_n;
      const index_t filled = Capturable ? span_offset : std::clamp(filled_from_, span_offset, end);
      if (filled > span_offset) pass(span_offset, filled - span_offset, true);
      if (end > filled) pass(filled, end - filled, false);
    });
  }

 public:
  double lr() const { return o_.lr; }
  /// A new learning rate for the next steps (capturable: copied to the device, so replays use it).
  void set_lr(double lr) {
    o_.lr = lr;
    if (o_.capturable) scalars_.set(detail::SgdScalars::lr, lr);
  }
  const SGDOptions& options() const { return o_; }
  double momentum() const { return o_.momentum; }
  /// A new momentum for the next steps (OneCycleLR cycles it): a write to torch's
  /// param_group['momentum'], unchecked as that is. Turned on where the optimizer had none, the buffers
  /// are made (zeros) and the next step starts them from its gradient, as torch's. A step captured in a
  /// CUDA graph replays the momentum it was captured with (and one captured without a momentum keeps
  /// none): set the momentum before capturing.
  void set_momentum(double momentum) {
    if (momentum != 0.0 && buf_.empty()) make_momentum_buffer();
    o_.momentum = momentum;
  }
  /// Makes the momentum buffers (zeros, not yet filled by a step) where there are none: a checkpoint's
  /// buffers load into them whatever the momentum is now.
  void make_momentum_buffer() {
    if (!buf_.empty() || p_.numel() == 0) return;
    buf_ = this->state_like_parameters(M(0));
    set_momentum_initialized(false);
  }
  /// The momentum buffers (torch's state["momentum_buffer"]; empty without momentum), for checkpoints.
  arena_type& momentum_buffer() { return buf_; }
  const arena_type& momentum_buffer() const { return buf_; }
  /// Whether a step has filled the momentum buffers (torch: the state holds a momentum_buffer; with
  /// layers frozen, some of them: momentum_filled_from()). Until
  /// then a step starts them from the gradient, so a checkpoint restores this with the buffers (else the
  /// next step would overwrite them). Capturable: read from / written to the device.
  bool momentum_initialized() const {
    return o_.capturable ? scalars_.get(detail::SgdScalars::pending_first) == 0.0 : filled_from_ < p_.numel();
  }
  void set_momentum_initialized(bool on) { set_momentum_filled_from(on ? 0 : p_.numel()); }
  /// Where the filled momentum buffers begin: a step fills those of the parameters it steps, so with
  /// layers frozen for the first steps (Model::freeze) the buffers of the layers after them are filled
  /// and theirs wait for their first step (torch starts each parameter's buffer at its own first step).
  /// numel(): none filled; 0: all. For checkpoints.
  index_t momentum_filled_from() const { return momentum_initialized() ? filled_from_ : p_.numel(); }
  void set_momentum_filled_from(index_t offset) {
    filled_from_ = std::clamp<index_t>(offset, 0, p_.numel());
    if (o_.capturable) scalars_.set(detail::SgdScalars::pending_first, filled_from_ < p_.numel() ? 0.0 : 1.0);
  }

 private:
  /// step() as torch.optim.SGD(foreach=False) runs it: -g into a new tensor (maximize); g + wd p into
  /// a new tensor; buf = g (first step) or buf = momentum buf, buf += (1 - dampening) g; g + momentum
  /// buf (nesterov) or buf; p += -lr g; and the working copy rewritten from p (mixed precision).
  void step_unfused() {
    using C = typename detail::SgdStep<M, W>::C;
    arena_type g = detail::unfused_gradient(g_, p_, o_.maximize, C(o_.weight_decay));
    if (o_.momentum != 0.0) {
      if (filled_from_ > 0) {  // none filled (a partial fill is refused before)
        kiln::assign(buf_, g);
      } else {
        kiln::assign(buf_, buf_ * C(o_.momentum));
        kiln::assign(buf_, buf_ + g * C(1.0 - o_.dampening));
      }
      // Rebinding g (a move; a copy assignment would write into the tensor g shares: the gradients).
      if (o_.nesterov) {
        arena_type n(g_.extents(), g_.device_index());
        kiln::assign(n, g + buf_ * C(o_.momentum));
        g = std::move(n);
      } else {
        g = arena_type(buf_);
      }
    }
    kiln::assign(p_, p_ + g * C(-o_.lr));
    this->rewrite_working_copy();
  }

  arena_type buf_;
  SGDOptions o_;
  index_t filled_from_;  // the momentum buffers at offsets from here on are filled (numel: none)
  detail::DeviceScalars<D> scalars_;  // capturable only: detail::SgdScalars
};
template <detail::trainable_model Model>
SGD(Model&, SGDOptions) -> SGD<typename Model::M, typename Model::D, typename Model::T>;
template <class M, class D>
SGD(Tensor<M, Shape<dyn>, D>&, Tensor<M, Shape<dyn>, D>&, SGDOptions) -> SGD<M, D>;
template <detail::trainable_model Model, detail::positional_option X>
SGD(Model&, X) -> SGD<typename Model::M, typename Model::D, typename Model::T>;
template <class T, class S, class D>
SGD(const Tensor<T, S, D>&, SGDOptions) -> SGD<float, D>;
template <class T, class S, class D>
SGD(const Tensor<T, S, D>&) -> SGD<float, D>;
template <detail::trainable_model Model>
SGD(Model&) -> SGD<typename Model::M, typename Model::D, typename Model::T>;

}  // namespace kiln::optim
