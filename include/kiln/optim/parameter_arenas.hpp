/// What every optimizer steps: a model's parameter and gradient arenas, and its working copy under mixed
/// precision.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/core/errors.hpp"
#include "kiln/expr/assign.hpp"
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
/// mixed-precision step rewrites (null for W = M). zero_grad() and gradients() are the optimizer's own.
template <class M, class D, class W>
class ParameterArenas {
 public:
  using arena_type = Tensor<M, Shape<dyn>, D>;
  using working_arena_type = Tensor<W, Shape<dyn>, D>;

  /// Sets every gradient to 0 (one pass).
  void zero_grad() { g_.fill(M(0)); }
  /// The gradient arena a step reads (GradScaler unscales it in place).
  arena_type& gradients() { return g_; }
  const arena_type& gradients() const { return g_; }
  /// Calls of step() (or step_unless) since construction, steps a GradScaler skipped included: what a
  /// scheduler's first step() looks at to warn that it ran before the optimizer's (torch's
  /// optimizer._step_count; not saved in checkpoints).
  std::int64_t step_calls() const { return step_calls_; }
  /// Counts a step that GradScaler skipped (an inf/NaN gradient) as called: the order was right.
  void count_skipped_step() { ++step_calls_; }

 protected:
  /// `who` names the optimizer in the errors.
  ParameterArenas(arena_type& params, arena_type& grads, working_arena_type* work, const char* who)
      : p_(params), g_(grads), work_(working_copy(params, work, who)) {
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

  arena_type& p_;
  arena_type& g_;
  W* work_;  // mixed precision: the model's working copy; null otherwise
  std::int64_t step_calls_ = 0;
};

/// What the optimizers whose step count lives on the host (RMSprop, Adagrad, NAdam, RAdam, Adamax,
/// Adadelta) keep besides their arenas: their options, of which the learning rate is what schedulers
/// move (lr(), set_lr()), and torch's state["step"] (step_count(), set_step_count(): restored from a
/// checkpoint).
template <class Options>
class OptionsAndSteps {
 public:
  double lr() const { return o_.lr; }
  void set_lr(double lr) { o_.lr = lr; }
  const Options& options() const { return o_; }
  /// Steps taken (torch's state["step"]).
  std::int64_t step_count() const { return steps_; }
  void set_step_count(std::int64_t n) { steps_ = n; }

 protected:
  explicit OptionsAndSteps(const Options& o) : o_(o) {}

  Options o_;
  std::int64_t steps_ = 0;
};

}  // namespace kiln::optim::detail
