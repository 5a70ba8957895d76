/// What every optimizer steps: a model's parameter and gradient arenas, and its working copy under mixed
/// precision.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/optim/param_groups.hpp"
#include "kiln/optim/step_counts.hpp"
#include "kiln/optim/working_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim::detail {

/// torch's check of an option that must not be negative (a NaN is refused too), in torch's words:
/// "Invalid learning rate: -1.000000", "Invalid epsilon value: ..." (what = "epsilon value").
inline void require_non_negative(double v, const char* who, const char* what) {
  if (!(v >= 0.0))
    throw ValueError(std::string("kiln::optim::") + who + ": Invalid " + what + ": " + std::to_string(v));
}

/// torch's check of betas (NAdam, RAdam, Adamax), in its words: "Invalid beta parameter at index 1: 1.000000"
/// (a NaN refused too).
inline void require_betas(double beta1, double beta2, const char* who) {
  const double betas[2] = {beta1, beta2};
  for (int k = 0; k < 2; ++k)
    if (!(betas[k] >= 0.0 && betas[k] < 1.0))
      throw ValueError(std::string("kiln::optim::") + who + ": Invalid beta parameter at index " +
                       std::to_string(k) + ": " + std::to_string(betas[k]));
}

/// Calls f(std::true_type{}) or f(std::false_type{}) as b is: a run-time option (weight decay, amsgrad,
/// momentum) turned into the compile-time flag a fused step is instantiated on.
template <class F>
void with_flag(bool b, F&& f) {
  if (b)
    f(std::true_type{});
  else
    f(std::false_type{});
}

/// The arenas an optimizer (SGD, Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, Adadelta) derives from:
/// the parameters p_ and gradients g_ it was built on, checked to be as long, and the working copy work_ a
/// mixed-precision step rewrites (null for W = M); and its parameter groups. zero_grad() and gradients()
/// are the optimizer's own. Opt is the optimizer (its lr(), set_lr() and options() are group 0's).
template <class M, class D, class W, class Opt>
class ParameterArenas {
 public:
  using arena_type = Tensor<M, Shape<dyn>, D>;
  using working_arena_type = Tensor<W, Shape<dyn>, D>;

  /// Sets every gradient to 0 (one pass).
  void zero_grad() { g_.fill(M(0)); }
  /// The gradient arena a step reads (GradScaler unscales it in place).
  arena_type& gradients() { return g_; }
  const arena_type& gradients() const { return g_; }
  /// The arena's first parameters that have no gradient (the model's frozen layers', or those its last
  /// backward did not reach; Model::parameters_without_gradient): a step, and a clip, leave them out.
  index_t parameters_without_gradient() const { return frozen(); }
  /// Calls of step() (or step_unless) since construction, steps a GradScaler skipped included: what a
  /// scheduler's first step() looks at to warn that it ran before the optimizer's (torch's
  /// optimizer._step_count; not saved in checkpoints).
  std::int64_t step_calls() const { return step_calls_; }
  /// Counts a step that GradScaler skipped (an inf/NaN gradient) as called: the order was right.
  void count_skipped_step() { ++step_calls_; }

  /// torch's optimizer.add_param_group: the group's parameters (named_parameters() entries, or names
  /// for an optimizer built from a model) leave group 0 and step from now on with its lr and
  /// weight_decay (unset: those the optimizer was built with). The new group is number
  /// param_group_count() - 1; its state (moments, buffers) stays as it was. Throws ValueError for
  /// another model's parameter, an unknown name, a parameter in a group added before, a negative
  /// option, or a capturable optimizer (whose one learning rate lives on the device).
  void add_param_group(const ParamGroup& g) {
    if constexpr (requires { self().options().capturable; })
      if (self().options().capturable)
        throw ValueError(std::string("kiln::optim::") + who_ + "::add_param_group: a capturable optimizer "
                         "keeps one learning rate on the device; build it without {.capturable = true} to "
                         "use parameter groups");
    groups_.add(g, default_lr_, default_weight_decay_, p_.numel(), p_.data(), named_, who_);
  }
  /// torch's len(optimizer.param_groups): 1 + the groups added.
  std::size_t param_group_count() const { return groups_.count(); }
  /// torch's param_groups[k]["lr"]; group 0's is lr(). Schedulers move every group's.
  double group_lr(std::size_t k) const { return k == 0 ? self().lr() : groups_.group(k, who_).lr; }
  /// Writes param_groups[k]["lr"] (unchecked, as torch's); group 0's is set_lr().
  void set_group_lr(std::size_t k, double lr) {
    if (k == 0)
      self().set_lr(lr);
    else
      groups_.group(k, who_).lr = lr;
  }
  /// torch's param_groups[k]["weight_decay"]; group 0's is options().weight_decay.
  double group_weight_decay(std::size_t k) const {
    return k == 0 ? self().options().weight_decay : groups_.group(k, who_).weight_decay;
  }
  /// The names of group k's parameters, in the arena's order; group 0's are the rest of the model's
  /// (a ValueError for an optimizer built from arenas, which has no names).
  std::vector<std::string> group_parameter_names(std::size_t k) const {
    return k == 0 ? groups_.rest(named_, who_) : groups_.group(k, who_).names;
  }
  /// The lr group k was added with (k = 0: the optimizer's as built). A scheduler built before the group
  /// existed moves it from this lr at the epoch it was added, as torch's chainable schedules move a
  /// late group from its lr.
  double group_initial_lr(std::size_t k) const { return k == 0 ? default_lr_ : groups_.group(k, who_).initial_lr; }

 protected:
  /// `who` names the optimizer in the errors; lr and weight_decay are its options as built (the
  /// defaults of a group added later).
  ParameterArenas(arena_type& params, arena_type& grads, working_arena_type* work, const char* who, double lr,
                  double weight_decay)
      : p_(params), g_(grads), work_(working_copy(params, work, who)), who_(who), default_lr_(lr),
        default_weight_decay_(weight_decay) {
    if (params.numel() != grads.numel())
      throw ShapeError(std::string("kiln::optim::") + who + ": " + std::to_string(params.numel()) +
                       " parameters but " + std::to_string(grads.numel()) +
                       " gradients; pass a model's parameters() and gradients()");
  }
  /// State shaped as the parameters (a moment, a sum, a momentum buffer), on their device, filled.
  arena_type state_like_parameters(M fill) const {
    arena_type a(p_.extents(), p_.device_index());
    a.fill(fill);
    return a;
  }
  /// The working copy rewritten from the parameters (an unfused step's last pass; no-op without one).
  void rewrite_working_copy() {
    if (work_ == nullptr) return;
    auto work = working_arena_type::from_blob(work_, p_.extents(), p_.device_index());
    kiln::assign(work, p_);
  }

  /// Every step path begins with it (step_calls()).
  void count_step_call() { ++step_calls_; }
  /// The optimizer's constructor from a model gives its named_parameters() (names in add_param_group)
  /// and its frozen layers (Model::freeze), whose parameters every step skips.
  template <class Model>
  void name_parameters(const Model& m) {
    if constexpr (requires { m.named_parameters(); }) named_ = m.named_parameters();
    if constexpr (requires { m.parameters_without_gradient(); })
      frozen_ = [&m] { return m.parameters_without_gradient(); };
  }
  /// The parameters a step leaves as they are: the arena's first frozen() (the model's frozen layers',
  /// or those its last backward did not reach).
  index_t frozen() const { return frozen_ ? frozen_() : 0; }

  /// Calls f(offset, count, lr, weight_decay) for each span of the arena that one group covers, with
  /// that group's options (one group: f(0, numel, lr, weight_decay) once, group 0's), past the frozen
  /// parameters (a span in them is left out, or begins where they end). A fused step runs its pass
  /// once per call, on its arrays shifted by offset (shifted()).
  template <class F>
  void for_each_span(F&& f) const {
    const index_t frozen = this->frozen();
    if (groups_.empty()) {
      if (frozen < p_.numel()) f(frozen, p_.numel() - frozen, self().lr(), self().options().weight_decay);
      return;
    }
    for (const auto& s : groups_.spans()) {
      const index_t begin = std::max(s.offset, frozen), end = s.offset + s.count;
      if (begin < end) f(begin, end - begin, group_lr(s.group), group_weight_decay(s.group));
    }
  }
  /// for_each_span cut where the parameters' step counts differ (layers unfrozen after steps that
  /// skipped them): f(offset, count, lr, weight_decay, run), the run's counts those of the step being
  /// taken (`counts` advanced already).
  template <class F>
  void for_each_span(const StepCounts& counts, F&& f) const {
    for_each_span([&](index_t offset, index_t n, double lr, double weight_decay) {
      counts.for_each_part(offset, n, [&](index_t o, index_t k, const StepRun& run) { f(o, k, lr, weight_decay, run); });
    });
  }
  /// Counts a step of every parameter past the frozen ones (torch: a parameter without a gradient
  /// keeps its state["step"]); returns the runs that stepped (none when every parameter is frozen).
  std::span<StepRun> advance_steps(StepCounts& counts) const {
    const index_t from = frozen();
    return from < p_.numel() ? counts.advance(from) : std::span<StepRun>();
  }
  /// p + offset, or null for an array the step does not have (no momentum, no amsgrad, no working copy).
  template <class T>
  static T* shifted(T* p, index_t offset) {
    return p == nullptr ? nullptr : p + offset;
  }
  /// An unfused step (kiln::Unfused: torch's single-tensor passes over the whole arena) with groups
  /// added: a ValueError, before anything changes.
  /// The same with layers frozen (Model::freeze).
  void require_one_group() const {
    if (!groups_.empty())
      throw ValueError(std::string("kiln::optim::") + who_ + ": a step with fusion switched off (kiln::Unfused) "
                       "runs over the whole arena with one learning rate; with parameter groups, step fused");
    if (frozen() > 0)
      throw ValueError(std::string("kiln::optim::") + who_ + ": a step with fusion switched off (kiln::Unfused) "
                       "runs over the whole arena; with layers frozen (Model::freeze), step fused");
  }
  /// The same, and an optimizer whose parameters have stepped unalike (layers unfrozen after steps that
  /// skipped them) refused too: an unfused step has one step count.
  void require_one_group(const StepCounts& counts) const {
    require_one_group();
    if (!counts.uniform_from(0))
      throw ValueError(std::string("kiln::optim::") + who_ + ": a step with fusion switched off (kiln::Unfused) "
                       "has one step count, and layers unfrozen after steps that skipped them have fewer; step fused");
  }

  arena_type& p_;
  arena_type& g_;
  W* work_;  // mixed precision: the model's working copy; null otherwise
  std::int64_t step_calls_ = 0;

 private:
  const Opt& self() const { return static_cast<const Opt&>(*this); }
  Opt& self() { return static_cast<Opt&>(*this); }

  const char* who_;
  double default_lr_, default_weight_decay_;
  std::vector<nn::ParameterInfo> named_;  // the model's, when built from one
  std::function<index_t()> frozen_;       // the model's parameters_without_gradient(), when built from one
  GroupTable groups_;
};

/// What the optimizers whose step count lives on the host (RMSprop, Adagrad, NAdam, RAdam, Adamax,
/// Adadelta) keep besides their arenas: their options, of which the learning rate is what schedulers
/// move (lr(), set_lr()), and torch's state["step"] (step_count(), set_step_count(): restored from a
/// checkpoint), per run of parameters once layers were frozen for some steps (step_runs()).
template <class Options>
class OptionsAndSteps {
 public:
  double lr() const { return o_.lr; }
  void set_lr(double lr) { o_.lr = lr; }
  const Options& options() const { return o_; }
  /// Steps taken by the parameters that took every step (torch's state["step"] of the last layer's).
  std::int64_t step_count() const { return steps_.last(); }
  /// Every parameter at n steps.
  void set_step_count(std::int64_t n) { steps_.set(n); }
  /// Each parameter's count (torch's state["step"] per parameter): one run unless layers were frozen
  /// for some steps and then unfrozen (Model::freeze), for checkpoints.
  const std::vector<StepRun>& step_runs() const { return steps_.runs(); }
  void set_step_runs(std::vector<StepRun> runs) { steps_.set_runs(std::move(runs)); }

 protected:
  explicit OptionsAndSteps(const Options& o) : o_(o) {}

  Options o_;
  StepCounts steps_;
};

}  // namespace kiln::optim::detail
