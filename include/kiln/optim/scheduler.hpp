/// Learning-rate schedulers: StepLR, MultiStepLR, ExponentialLR, LambdaLR, CosineAnnealingLR,
/// CosineAnnealingWarmRestarts, ConstantLR, LinearLR, PolynomialLR and LinearWarmup over epochs,
/// ChainedScheduler (their product), SequentialLR (one after another at milestones), OneCycleLR over
/// batches (with the momentum), and ReduceLROnPlateau on a metric (torch 1.13 semantics).
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/core/number_text.hpp"
#include "kiln/core/warning.hpp"

namespace kiln::optim {

/// An optimizer a scheduler can drive: `lr()` and `set_lr(double)` (SGD, Adam, AdamW, RMSprop, Adagrad,
/// NAdam, RAdam, Adamax, Adadelta; one of yours may hold a float, set_lr(float)).
template <class O>
concept lr_optimizer = requires(O& o, const O& c, double lr) {
  { c.lr() } -> std::convertible_to<double>;
  o.set_lr(lr);
};

/// An optimizer with parameter groups (kiln's): every scheduler moves each group's lr as torch's moves
/// each param_groups entry's, from that group's lr when the scheduler was built.
template <class O>
concept grouped_optimizer = requires(O& o, const O& c, std::size_t k, double lr) {
  { c.param_group_count() } -> std::convertible_to<std::size_t>;
  { c.group_lr(k) } -> std::convertible_to<double>;
  o.set_group_lr(k, lr);
};

/// An optimizer whose momentum a scheduler can cycle: SGD's `momentum()` / `set_momentum(double)`, or
/// Adam's (AdamW's, NAdam's, RAdam's, Adamax's) first decay rate, `betas()` / `set_betas(AdamBetas)` (torch's
/// betas[0]).
template <class O>
concept momentum_optimizer = requires(O& o, const O& c, double m) {
  { c.momentum() } -> std::convertible_to<double>;
  o.set_momentum(m);
} || requires(O& o, const O& c) {
  { c.betas().beta1 } -> std::convertible_to<double>;
  o.set_betas(c.betas());
};

/// A learning-rate schedule over epochs: `lr_at(epoch)` in closed form, `base_lr()`, and the optimizer
/// it drives (`optimizer_type`, `optimizer()`).
template <class S>
concept lr_schedule = requires(const S& s, std::int64_t epoch) {
  typename S::optimizer_type;
  { s.lr_at(epoch) } -> std::convertible_to<double>;
  { s.base_lr() } -> std::convertible_to<double>;
  { s.optimizer() } -> std::same_as<typename S::optimizer_type&>;
};

template <class First, class... Rest>
class ChainedScheduler;
template <class First, class... Rest>
class SequentialLR;

namespace detail {

/// lr as optimizer `opt` holds it once set: itself for kiln's optimizers (doubles), rounded for one of
/// yours that holds a float.
template <class Opt>
double as_held(const Opt& opt, double lr) {
  return static_cast<double>(static_cast<std::remove_cvref_t<decltype(opt.lr())>>(lr));
}

struct Rebase;
template <class S>
void rebase(S& s, double lr);

/// Parameter group k's lr at a scheduler's last step (torch's get_last_lr()[k]): group 0's `first`, else
/// later[k - 1]; a ValueError naming `who` for a group the optimizer did not have then.
inline double last_group_lr(std::size_t k, double first, const std::vector<double>& later, const char* who) {
  if (k == 0) return first;
  if (k > later.size())
    throw ValueError(std::string(who) + ": get_last_lr(" + std::to_string(k) + "): the optimizer had " +
                     std::to_string(later.size() + 1) + " parameter groups at the last step");
  return later[k - 1];
}

/// The lrs of an optimizer's groups after group 0 (torch's param_groups[1:]; none for one without groups).
template <class Opt>
std::vector<double> lrs_of_later_groups(const Opt& opt) {
  std::vector<double> lrs;
  if constexpr (grouped_optimizer<Opt>)
    for (std::size_t k = 1; k < opt.param_group_count(); ++k) lrs.push_back(static_cast<double>(opt.group_lr(k)));
  return lrs;
}

/// The lrs of a saved state's group list (state(prefix)'s, joined by ','; empty: none), each finite and
/// >= 0, or NaN where `nan` allows it (a group a schedule leaves at its lr); nullopt where one is not.
inline std::optional<std::vector<double>> parse_lrs(const std::string& text, bool nan) {
  std::vector<double> lrs;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    double v = 0.0;
    const bool read = kiln::detail::parse_whole(text.substr(at, comma - at), v);
    const bool lr = v >= 0.0 && !kiln::detail::is_inf_or_nan(v);
    if (!read || !(lr || (nan && kiln::detail::is_nan(v))) || comma + 1 == text.size())  // (a trailing ',')
      return std::nullopt;
    lrs.push_back(v);
    at = comma + 1;
  }
  return lrs;
}

/// What every scheduler shares, like torch's _LRScheduler: the optimizer, its lr when the scheduler was
/// built (base_lr, torch's initial_lr), the epoch (last_epoch) and the last lr set. Schedule provides
/// `double lr_at(std::int64_t epoch) const`; its constructor ends with `apply()` (epoch 0), as torch's
/// constructor performs the initial step.
template <class Opt, class Schedule>
class LRScheduler {
 public:
  using optimizer_type = Opt;

  /// Advances one epoch and sets the optimizer's lr, like torch's scheduler.step(). The first call
  /// warns (kiln::warn) when the optimizer has not stepped since the scheduler was built, as torch
  /// does: step the optimizer first, or the schedule's first lr is never used.
  void step() {
    check_order();
    apply(epoch_ + 1);
  }
  /// The lr set by the last step (a double, as the optimizer holds it), like torch's get_last_lr()[0].
  double get_last_lr() const { return last_lr_; }
  /// The lr the last step set in parameter group k (torch's get_last_lr()[k]; 0: get_last_lr()).
  double get_last_lr(std::size_t k) const {
    return detail::last_group_lr(k, last_lr_, last_group_lrs_, "kiln::optim");
  }
  /// Epochs stepped so far (torch's last_epoch; 0 right after construction).
  std::int64_t last_epoch() const { return epoch_; }
  /// Jumps to an epoch (resuming from a checkpoint) and sets the lr of that epoch; a negative epoch
  /// throws ValueError (torch: "Expected non-negative epoch").
  void set_last_epoch(std::int64_t epoch) {
    if (epoch < 0)
      throw ValueError("kiln::optim: set_last_epoch(" + std::to_string(epoch) + "): expected a non-negative epoch");
    apply(epoch);
  }
  /// What a checkpoint keeps of the schedule, as strings for its metadata (as GradScaler's and
  /// ReduceLROnPlateau's state(prefix)): `<prefix>last_epoch`, `<prefix>base_lr` and
  /// `<prefix>group_base_lrs` (groups 1, 2, ... joined by ','; "nan" for a group the schedule leaves at
  /// its lr; empty without groups), every double as the shortest text that reads back to it: torch's
  /// scheduler.state_dict() keeps last_epoch and base_lrs too (and its arguments: build the scheduler
  /// with the same). Example:
  ///   auto meta = sched.state("scheduler.");  // merge into save_checkpoint's metadata
  std::map<std::string, std::string> state(std::string_view prefix = {}) const {
    const std::string p(prefix);
    std::string groups;
    for (std::size_t k = 0; k < group_base_lrs_.size(); ++k)
      groups += (k ? "," : "") + kiln::detail::shortest_text(group_base_lrs_[k]);
    return {{p + "last_epoch", std::to_string(epoch_)},
            {p + "base_lr", kiln::detail::shortest_text(base_lr_)},
            {p + "group_base_lrs", groups}};
  }
  /// Restores what state(prefix) wrote, as torch's load_state_dict: the base lrs, then the epoch and its
  /// lr in every group (set_last_epoch), so the scheduler may be built before or after the optimizer's
  /// state is loaded (the base lr it found when built is replaced). Other keys are ignored. Throws
  /// ValueError naming the key when one is missing or not a number in range (last_epoch >= 0, lrs finite
  /// and >= 0 or nan for a group), for more groups than the optimizer has, or when the schedule refuses
  /// the epoch; nothing changes then.
  void load_state(const std::map<std::string, std::string>& state, std::string_view prefix = {}) {
    const Saved s = parse_state(state, prefix);
    auto& schedule = static_cast<Schedule&>(*this);
    const double old_base = base_lr_;
    std::vector<double> old_groups = group_base_lrs_;
    try {
      rebase(schedule, s.base_lr);
      group_base_lrs_ = s.group_base_lrs;
      schedule.set_last_epoch(s.last_epoch);
    } catch (...) {
      rebase(schedule, old_base);
      group_base_lrs_ = std::move(old_groups);
      throw;
    }
  }
  /// load_state's checks without its writes (a resume checks every part of a checkpoint first).
  void check_state(const std::map<std::string, std::string>& state, std::string_view prefix = {}) const {
    (void)parse_state(state, prefix);
  }
  /// The optimizer's lr when the scheduler was built (or the one load_state restored).
  double base_lr() const { return base_lr_; }
  /// The lrs of the optimizer's parameter groups 1, 2, ... when the scheduler was built (torch's
  /// base_lrs[1:]); each group's lr is the schedule's from its own. A group added later gets the base
  /// that puts it at the lr it was added with at the epoch it was added (the schedule's lr is affine in
  /// its base): it goes on from there as torch's chainable schedules move it. NaN: a late group this
  /// schedule leaves at its lr (LambdaLR and CosineAnnealingWarmRestarts, as torch's; OneCycleLR, whose
  /// cycle has no base; a schedule at a factor of 0 when the group came).
  const std::vector<double>& group_base_lrs() const { return group_base_lrs_; }
  Opt& optimizer() const { return *opt_; }

 protected:
  /// `group_base_lrs`: those of groups 1, 2, ... (a schedule built around others takes theirs).
  LRScheduler(Opt& opt, double base_lr, std::vector<double> group_base_lrs)
      : opt_(&opt), base_lr_(base_lr), group_base_lrs_(std::move(group_base_lrs)),
        optimizer_steps_at_build_(optimizer_steps(opt)) {}
  /// Every group starts from `base_lr` (OneCycleLR's max_lr / div_factor, as torch's initial_lr).
  LRScheduler(Opt& opt, double base_lr)
      : LRScheduler(opt, base_lr, std::vector<double>(lrs_of_later_groups(opt).size(), base_lr)) {}
  explicit LRScheduler(Opt& opt) : LRScheduler(opt, static_cast<double>(opt.lr()), lrs_of_later_groups(opt)) {}
  /// Moves to `epoch` and sets its lr in every parameter group (and, for a schedule that cycles it, the
  /// momentum: `apply_momentum`); an epoch the schedule refuses (lr_at throws) changes nothing.
  void apply(std::int64_t epoch) {
    auto& schedule = static_cast<Schedule&>(*this);
    const double lr = schedule.lr_at(epoch);
    std::vector<double> group_lrs = later_group_lrs_at(epoch);
    epoch_ = epoch;
    last_lr_ = lr;
    opt_->set_lr(last_lr_);
    if constexpr (grouped_optimizer<Opt>)
      for (std::size_t k = 0; k < group_lrs.size(); ++k) opt_->set_group_lr(k + 1, group_lrs[k]);
    last_group_lrs_ = std::move(group_lrs);
    if constexpr (requires { schedule.apply_momentum(epoch_); }) schedule.apply_momentum(epoch_);
  }
  void apply() { apply(epoch_); }
  /// The first step's check that the optimizer stepped first (warn_if_before_optimizer).
  void check_order() {
    if (!order_checked_) warn_if_before_optimizer();
  }

 private:
  /// The schedule's lr at `epoch` for groups 1, 2, ...: lr_at with each group's base lr in place of
  /// group 0's (and in the schedules this one holds), put back after, also when lr_at throws.
  std::vector<double> later_group_lrs_at(std::int64_t epoch) {
    std::vector<double> lrs;
    if constexpr (grouped_optimizer<Opt>) {
      const std::size_t groups = opt_->param_group_count();
      if (groups <= 1) return lrs;
      auto& schedule = static_cast<Schedule&>(*this);
      struct Restore {
        Schedule& s;
        double lr;
        ~Restore() { rebase(s, lr); }
      } restore{schedule, base_lr_};
      while (group_base_lrs_.size() + 1 < groups) {
        // A group added since (at this epoch, epoch_): the base b with lr_at(epoch_) = its lr then,
        // from lr_at = a b + c (c: the lr of base 0, a + c: of base 1). Where no base gets there (a is
        // 0: a factor of 0, OneCycleLR's base-free cycle) or the schedule is not one of torch's
        // chainable ones (LambdaLR, CosineAnnealingWarmRestarts: torch's leave a late group alone), NaN:
        // the group is left at its lr.
        const std::size_t k = group_base_lrs_.size() + 1;
        double added = static_cast<double>(opt_->group_lr(k));
        if constexpr (requires { opt_->group_initial_lr(k); }) added = static_cast<double>(opt_->group_initial_lr(k));
        double b = std::numeric_limits<double>::quiet_NaN();
        if constexpr (!requires { Schedule::leaves_late_groups; }) {
          rebase(schedule, 0.0);
          const double c = schedule.lr_at(epoch_);
          rebase(schedule, 1.0);
          const double a = schedule.lr_at(epoch_) - c;
          if (a != 0.0) b = (added - c) / a;
        }
        group_base_lrs_.push_back(b);
      }
      for (std::size_t k = 1; k < groups; ++k) {
        const double b = group_base_lrs_[k - 1];
        if (kiln::detail::is_nan(b)) {
          lrs.push_back(static_cast<double>(opt_->group_lr(k)));
          continue;
        }
        rebase(schedule, b);
        lrs.push_back(schedule.lr_at(epoch));
      }
    }
    return lrs;
  }

  /// A state as load_state reads it.
  struct Saved {
    std::int64_t last_epoch = 0;
    double base_lr = 0.0;
    std::vector<double> group_base_lrs;
  };
  Saved parse_state(const std::map<std::string, std::string>& state, std::string_view prefix) const {
    const std::string p(prefix);
    const auto get = [&](const char* key) -> const std::string& {
      const auto it = state.find(p + key);
      if (it == state.end())
        throw ValueError("kiln::optim: a scheduler's load_state: no '" + p + key +
                         "' in the state; give what state(\"" + p + "\") returned");
      return it->second;
    };
    const auto bad = [&](const char* key, const char* want) {
      return ValueError("kiln::optim: a scheduler's load_state: '" + p + key + "' is '" + get(key) +
                        "'; expected " + want);
    };
    const auto an_lr = [](double v) { return v >= 0.0 && !kiln::detail::is_inf_or_nan(v); };
    Saved s;
    if (!kiln::detail::parse_whole(get("last_epoch"), s.last_epoch) || s.last_epoch < 0)
      throw bad("last_epoch", "an integer >= 0");
    if (!kiln::detail::parse_whole(get("base_lr"), s.base_lr) || !an_lr(s.base_lr))
      throw bad("base_lr", "a finite lr >= 0");
    auto groups = parse_lrs(get("group_base_lrs"), true);
    if (!groups) throw bad("group_base_lrs", "finite lrs >= 0 (or nan) joined by ','");
    s.group_base_lrs = std::move(*groups);
    const std::size_t later = lrs_of_later_groups(*opt_).size();
    if (s.group_base_lrs.size() > later)
      throw ValueError("kiln::optim: a scheduler's load_state: the state has the base lrs of " +
                       std::to_string(s.group_base_lrs.size() + 1) + " parameter groups, the optimizer " +
                       std::to_string(later + 1) + "; add the same groups before loading");
    return s;
  }

  template <class First, class... Rest>
  friend class kiln::optim::ChainedScheduler;  // sets its copies' base_lr to 1, to read their factors
  friend struct Rebase;                        // SequentialLR sets its copies' base_lr to its own
  /// What Rebase also sets in a schedule that holds others (LinearWarmup around one, SequentialLR):
  /// nothing here.
  void rebase_held(double) {}

  /// The optimizer's step() calls so far (kiln's optimizers count them, GradScaler's skips included);
  /// -1 for one of yours that does not.
  static std::int64_t optimizer_steps(const Opt& opt) {
    if constexpr (requires { { opt.step_calls() } -> std::convertible_to<std::int64_t>; })
      return opt.step_calls();
    else
      return -1;
  }
  void warn_if_before_optimizer() {
    order_checked_ = true;
    if (optimizer_steps_at_build_ >= 0 && optimizer_steps(*opt_) == optimizer_steps_at_build_)
      kiln::warn(
          "kiln::optim: a scheduler's step() ran before its optimizer's step(); call opt.step() first, "
          "then sched.step() (torch's order since 1.1.0), or the schedule's first learning rate is "
          "skipped");
  }

  Opt* opt_;
  double base_lr_;
  std::vector<double> group_base_lrs_;
  std::int64_t epoch_ = 0;
  double last_lr_ = 0.0;
  std::vector<double> last_group_lrs_;
  std::int64_t optimizer_steps_at_build_;
  bool order_checked_ = false;
};

/// Sets a schedule's base lr and that of the schedules it holds (a LinearWarmup's wrapped one, a
/// SequentialLR's): SequentialLR starts every schedule from its initial lr, as torch's all take the
/// optimizer's initial_lr.
struct Rebase {
  template <class S>
  static void to(S& s, double lr) {
    constexpr bool kilns = std::is_base_of_v<LRScheduler<typename S::optimizer_type, S>, S>;
    // >>> Stopped here? A schedule of your own in a SequentialLR (or wrapped by a LinearWarmup in one). <<<
    static_assert(
        kilns,
        "kiln::optim::SequentialLR: every schedule in it (and one a LinearWarmup in it wraps) must be "
        "one of kiln's, which it restarts from its initial lr as torch's does; write a schedule of "
        "your own as a LambdaLR (base_lr times a function of the epoch)");
    if constexpr (kilns) {
      s.base_lr_ = lr;
      s.rebase_held(lr);
    }
  }
};

template <class S>
void rebase(S& s, double lr) {
  Rebase::to(s, lr);
}

/// Whether schedule S, taking over at a SequentialLR's milestone or after a LinearWarmup's warm-up, goes on
/// from the lr the schedule before it set: torch's hand-over calls step(0), where a MultiplicativeLR (it
/// has no closed form) keeps the lr in the group; every other schedule restarts from initial_lr.
template <class S>
constexpr bool continues_from_the_lr_set = requires { S::continues_from_the_lr_set; };

/// Sets a cycling schedule's momentum: SGD's and RMSprop's momentum, or Adam's (AdamW's, ...) beta1;
/// nothing for an optimizer without (whose schedule refused cycle_momentum when built).
template <class Opt>
void set_momentum(Opt& opt, double m) {
  if constexpr (requires { opt.set_momentum(m); }) {
    opt.set_momentum(m);
  } else if constexpr (momentum_optimizer<Opt>) {
    auto betas = opt.betas();
    betas.beta1 = m;
    opt.set_betas(betas);
  }
}

inline void require_positive(std::int64_t v, const char* who, const char* what) {
  if (v <= 0)
    throw ValueError(std::string("kiln::optim::") + who + ": " + what + " must be positive, got " +
                     std::to_string(v));
}

}  // namespace detail

/// lr = base_lr * gamma^(epoch / step_size) (integer division), torch.optim.lr_scheduler.StepLR.
/// Example:
///   kiln::optim::StepLR sched(opt, /*step_size=*/30, /*gamma=*/0.1);
///   for (int epoch = 0; epoch < 90; ++epoch) { train_one_epoch(); sched.step(); }
template <lr_optimizer Opt>
class StepLR : public detail::LRScheduler<Opt, StepLR<Opt>> {
  using base = detail::LRScheduler<Opt, StepLR<Opt>>;

 public:
  StepLR(Opt& opt, std::int64_t step_size, double gamma = 0.1) : base(opt), step_size_(step_size), gamma_(gamma) {
    detail::require_positive(step_size, "StepLR", "step_size");
    this->apply();
  }
  double lr_at(std::int64_t epoch) const {
    return this->base_lr() * std::pow(gamma_, static_cast<double>(epoch / step_size_));
  }
  std::int64_t step_size() const { return step_size_; }
  double gamma() const { return gamma_; }

 private:
  std::int64_t step_size_;
  double gamma_;
};

/// lr = base_lr * gamma^(number of milestones in [0, epoch]), torch.optim.lr_scheduler.MultiStepLR (a
/// milestone given twice counts twice; a negative one never counts).
/// Example: `kiln::optim::MultiStepLR sched(opt, {30, 80}, 0.1);`
template <lr_optimizer Opt>
class MultiStepLR : public detail::LRScheduler<Opt, MultiStepLR<Opt>> {
  using base = detail::LRScheduler<Opt, MultiStepLR<Opt>>;

 public:
  MultiStepLR(Opt& opt, std::vector<std::int64_t> milestones, double gamma = 0.1)
      : base(opt), milestones_(std::move(milestones)), gamma_(gamma) {
    std::sort(milestones_.begin(), milestones_.end());
    this->apply();
  }
  double lr_at(std::int64_t epoch) const {
    // Milestones in [0, epoch]: torch's epochs start at 0, so a negative milestone is never reached.
    const auto first = std::lower_bound(milestones_.begin(), milestones_.end(), std::int64_t{0});
    const auto passed = std::upper_bound(first, milestones_.end(), epoch) - first;
    return this->base_lr() * std::pow(gamma_, static_cast<double>(passed));
  }
  const std::vector<std::int64_t>& milestones() const { return milestones_; }
  double gamma() const { return gamma_; }

 private:
  std::vector<std::int64_t> milestones_;
  double gamma_;
};

/// lr = base_lr * gamma^epoch, torch.optim.lr_scheduler.ExponentialLR.
/// Example: `kiln::optim::ExponentialLR sched(opt, /*gamma=*/0.95);`
template <lr_optimizer Opt>
class ExponentialLR : public detail::LRScheduler<Opt, ExponentialLR<Opt>> {
  using base = detail::LRScheduler<Opt, ExponentialLR<Opt>>;

 public:
  ExponentialLR(Opt& opt, double gamma) : base(opt), gamma_(gamma) { this->apply(); }
  double lr_at(std::int64_t epoch) const { return this->base_lr() * std::pow(gamma_, static_cast<double>(epoch)); }
  double gamma() const { return gamma_; }

 private:
  double gamma_;
};

/// lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2, torch's
/// CosineAnnealingLR (its closed form; past T_max the cosine continues, rising again, as torch's does).
/// Example: `kiln::optim::CosineAnnealingLR sched(opt, /*T_max=*/100, /*eta_min=*/1e-5);`
template <lr_optimizer Opt>
class CosineAnnealingLR : public detail::LRScheduler<Opt, CosineAnnealingLR<Opt>> {
  using base = detail::LRScheduler<Opt, CosineAnnealingLR<Opt>>;

 public:
  CosineAnnealingLR(Opt& opt, std::int64_t T_max, double eta_min = 0.0) : base(opt), t_max_(T_max), eta_min_(eta_min) {
    detail::require_positive(T_max, "CosineAnnealingLR", "T_max");
    this->apply();
  }
  double lr_at(std::int64_t epoch) const {
    const double c = std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_));
    return eta_min_ + (this->base_lr() - eta_min_) * (1.0 + c) / 2.0;
  }
  std::int64_t T_max() const { return t_max_; }
  double eta_min() const { return eta_min_; }

 private:
  std::int64_t t_max_;
  double eta_min_;
};

/// lr = eta_min + (base_lr - eta_min) (1 + cos(pi T_cur / T_i)) / 2, torch's CosineAnnealingWarmRestarts
/// (SGDR): the cosine restarts after T_0 epochs, then after T_0 T_mult, T_0 T_mult^2, ...; T_cur counts
/// the epochs since the last restart and T_i is the current period (as torch's step() advances them).
/// Example: `kiln::optim::CosineAnnealingWarmRestarts sched(opt, /*T_0=*/10, /*T_mult=*/2, /*eta_min=*/1e-5);`
/// Per batch, as torch documents it: `sched.step(epoch + double(i) / iters)` after each opt.step() (the
/// fraction is kept: a later step() goes on from 2.75 to 3.75).
template <lr_optimizer Opt>
class CosineAnnealingWarmRestarts : public detail::LRScheduler<Opt, CosineAnnealingWarmRestarts<Opt>> {
  using base = detail::LRScheduler<Opt, CosineAnnealingWarmRestarts<Opt>>;

 public:
  /// A parameter group added after the scheduler was built keeps its lr (torch's base_lrs has no entry for it).
  static constexpr bool leaves_late_groups = true;
  CosineAnnealingWarmRestarts(Opt& opt, std::int64_t T_0, std::int64_t T_mult = 1, double eta_min = 0.0)
      : base(opt), t0_(T_0), t_mult_(T_mult), eta_min_(eta_min) {
    detail::require_positive(T_0, "CosineAnnealingWarmRestarts", "T_0");
    if (T_mult < 1)
      throw ValueError("kiln::optim::CosineAnnealingWarmRestarts: Expected integer T_mult >= 1, but got " +
                       std::to_string(T_mult));
    this->apply();
  }
  using base::step;
  /// Moves to a fractional epoch, torch's step(epoch): T_cur is epoch's place in its period, fraction
  /// included, and last_epoch() its whole part. The fraction stays until the next step(epoch) or
  /// set_last_epoch: step() adds 1 to it, as torch's T_cur += 1. A negative or non-finite epoch throws
  /// ValueError and changes nothing.
  void step(double epoch) {
    if (!(epoch >= 0.0) || !std::isfinite(epoch))
      throw ValueError("kiln::optim::CosineAnnealingWarmRestarts::step: Expected non-negative epoch, but got " +
                       kiln::detail::shortest_text(epoch));
    const double whole = std::floor(epoch);
    if (whole >= 0x1p63)
      throw ValueError("kiln::optim::CosineAnnealingWarmRestarts::step: epoch " + kiln::detail::shortest_text(epoch) +
                       " is past int64's range");
    step_to(static_cast<std::int64_t>(whole), epoch - whole);
  }
  /// Jumps to a whole epoch (the fraction a step(epoch) kept goes), as the base's set_last_epoch.
  void set_last_epoch(std::int64_t epoch) {
    const double kept = fraction_;
    fraction_ = 0.0;
    try {
      base::set_last_epoch(epoch);
    } catch (...) {
      fraction_ = kept;  // a refused epoch changes nothing
      throw;
    }
  }
  /// The fraction of an epoch a step(epoch) left (0 otherwise): T_cur is that much past last_epoch()'s.
  double epoch_fraction() const { return fraction_; }
  /// O(1) for T_mult 1 (a remainder), O(log epoch) otherwise (one period per restart); a period past
  /// int64's range ends the walk (it outlasts any epoch) instead of overflowing. The fraction a
  /// step(epoch) kept is added within the period (it is below 1, every period a whole number of epochs).
  double lr_at(std::int64_t epoch) const {
    std::int64_t t_cur = epoch < 0 ? 0 : epoch;
    double t_i = static_cast<double>(t0_);
    if (t_mult_ == 1) {
      t_cur %= t0_;
    } else {
      for (std::int64_t period = t0_; t_cur >= period;) {
        t_cur -= period;
        if (period > std::numeric_limits<std::int64_t>::max() / t_mult_) {
          t_i = static_cast<double>(period) * static_cast<double>(t_mult_);
          break;
        }
        period *= t_mult_;
        t_i = static_cast<double>(period);
      }
    }
    const double c = std::cos(std::numbers::pi * (static_cast<double>(t_cur) + fraction_) / t_i);
    return eta_min_ + (this->base_lr() - eta_min_) * (1.0 + c) / 2.0;
  }
  std::int64_t T_0() const { return t0_; }
  std::int64_t T_mult() const { return t_mult_; }
  double eta_min() const { return eta_min_; }

 private:
  void step_to(std::int64_t epoch, double fraction) {
    this->check_order();
    fraction_ = fraction;
    this->apply(epoch);
  }
  std::int64_t t0_, t_mult_;
  double eta_min_;
  double fraction_ = 0.0;
};

/// lr = base_lr * lr_lambda(epoch), torch.optim.lr_scheduler.LambdaLR: any schedule as a function of
/// the epoch (a lambda, or anything callable with an int64 returning a number).
/// Example: `kiln::optim::LambdaLR sched(opt, [](std::int64_t e) { return 1.0 / (1.0 + 0.1 * e); });`
template <lr_optimizer Opt, class F>
  requires std::is_invocable_r_v<double, const F&, std::int64_t>
class LambdaLR : public detail::LRScheduler<Opt, LambdaLR<Opt, F>> {
  using base = detail::LRScheduler<Opt, LambdaLR<Opt, F>>;

 public:
  /// A parameter group added after the scheduler was built keeps its lr (torch's base_lrs has no entry for it).
  static constexpr bool leaves_late_groups = true;
  LambdaLR(Opt& opt, F lr_lambda) : base(opt), f_(std::move(lr_lambda)) { this->apply(); }
  double lr_at(std::int64_t epoch) const { return this->base_lr() * static_cast<double>(f_(epoch)); }

 private:
  F f_;
};

/// lr = base_lr * lr_lambda(1) * ... * lr_lambda(epoch), torch.optim.lr_scheduler.MultiplicativeLR (each
/// step multiplies the lr by lr_lambda of the new epoch), in closed form from the products: each
/// epoch's factor is asked for once (a step asks for its epoch's, set_last_epoch for those not asked
/// yet), as torch's steps ask.
/// Example: `kiln::optim::MultiplicativeLR sched(opt, [](std::int64_t) { return 0.95; });`
template <lr_optimizer Opt, class F>
  requires std::is_invocable_r_v<double, const F&, std::int64_t>
class MultiplicativeLR : public detail::LRScheduler<Opt, MultiplicativeLR<Opt, F>> {
  using base = detail::LRScheduler<Opt, MultiplicativeLR<Opt, F>>;

 public:
  MultiplicativeLR(Opt& opt, F lr_lambda) : base(opt), f_(std::move(lr_lambda)) { this->apply(); }
  /// Handed over to (detail::continues_from_the_lr_set), it multiplies the lr it finds.
  static constexpr bool continues_from_the_lr_set = true;
  double lr_at(std::int64_t epoch) const {
    const auto upto = static_cast<std::size_t>(epoch);
    if (upto >= products_.size()) {
      products_.reserve(upto + 1);
      for (std::size_t e = products_.size(); e <= upto; ++e)
        products_.push_back(products_[e - 1] * static_cast<double>(f_(static_cast<std::int64_t>(e))));
    }
    return this->base_lr() * products_[upto];
  }

 private:
  F f_;
  mutable std::vector<double> products_{1.0};  // products_[e] = lr_lambda(1) * ... * lr_lambda(e)
};

/// lr = base_lr * factor for epoch < total_iters, then base_lr, torch.optim.lr_scheduler.ConstantLR.
/// total_iters must be positive (torch's step() with 0 keeps the factor for ever, its closed form never
/// applies it; factor 1 is the schedule that changes nothing).
/// Example: `kiln::optim::ConstantLR sched(opt, /*factor=*/0.5, /*total_iters=*/4);`
template <lr_optimizer Opt>
class ConstantLR : public detail::LRScheduler<Opt, ConstantLR<Opt>> {
  using base = detail::LRScheduler<Opt, ConstantLR<Opt>>;

 public:
  explicit ConstantLR(Opt& opt, double factor = 1.0 / 3.0, std::int64_t total_iters = 5)
      : base(opt), factor_(factor), total_(total_iters) {
    if (factor > 1.0 || factor < 0.0)
      throw ValueError(
          "kiln::optim::ConstantLR: Constant multiplicative factor expected to be between 0 and 1.");
    detail::require_positive(total_iters, "ConstantLR", "total_iters");
    this->apply();
  }
  double lr_at(std::int64_t epoch) const {
    return epoch < total_ ? this->base_lr() * factor_ : this->base_lr();
  }
  double factor() const { return factor_; }
  std::int64_t total_iters() const { return total_; }

 private:
  double factor_;
  std::int64_t total_;
};

/// lr = base_lr (start_factor + (end_factor - start_factor) min(epoch, total_iters) / total_iters),
/// torch.optim.lr_scheduler.LinearLR: a line from start_factor to end_factor, then end_factor.
/// Example: `kiln::optim::LinearLR sched(opt, /*start_factor=*/0.1, /*end_factor=*/1.0, /*total_iters=*/5);`
template <lr_optimizer Opt>
class LinearLR : public detail::LRScheduler<Opt, LinearLR<Opt>> {
  using base = detail::LRScheduler<Opt, LinearLR<Opt>>;

 public:
  explicit LinearLR(Opt& opt, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
                    std::int64_t total_iters = 5)
      : base(opt), start_(start_factor), end_(end_factor), total_(total_iters) {
    if (start_factor > 1.0 || start_factor <= 0.0)
      throw ValueError(
          "kiln::optim::LinearLR: Starting multiplicative factor expected to be greater than 0 and less "
          "or equal to 1.");
    if (end_factor > 1.0 || end_factor < 0.0)
      throw ValueError("kiln::optim::LinearLR: Ending multiplicative factor expected to be between 0 and 1.");
    detail::require_positive(total_iters, "LinearLR", "total_iters");
    this->apply();
  }
  double lr_at(std::int64_t epoch) const {
    const double done = static_cast<double>(std::min(total_, epoch)) / static_cast<double>(total_);
    return this->base_lr() * (start_ + (end_ - start_) * done);
  }
  double start_factor() const { return start_; }
  double end_factor() const { return end_; }
  std::int64_t total_iters() const { return total_; }

 private:
  double start_, end_;
  std::int64_t total_;
};

/// lr = base_lr (1 - min(epoch, total_iters) / total_iters)^power, torch.optim.lr_scheduler.PolynomialLR:
/// 0 from total_iters on (for a positive power). A negative or NaN power is refused (torch's steps
/// divide by zero at total_iters).
/// Example: `kiln::optim::PolynomialLR sched(opt, /*total_iters=*/100, /*power=*/2.0);`
template <lr_optimizer Opt>
class PolynomialLR : public detail::LRScheduler<Opt, PolynomialLR<Opt>> {
  using base = detail::LRScheduler<Opt, PolynomialLR<Opt>>;

 public:
  explicit PolynomialLR(Opt& opt, std::int64_t total_iters = 5, double power = 1.0)
      : base(opt), total_(total_iters), power_(power) {
    detail::require_positive(total_iters, "PolynomialLR", "total_iters");
    if (!(power >= 0.0))  // torch's would divide by zero at total_iters (a NaN: every lr NaN)
      throw ValueError("kiln::optim::PolynomialLR: power must be >= 0, got " + std::to_string(power));
    this->apply();
  }
  double lr_at(std::int64_t epoch) const {
    const double done = static_cast<double>(std::min(total_, epoch)) / static_cast<double>(total_);
    return this->base_lr() * std::pow(1.0 - done, power_);
  }
  std::int64_t total_iters() const { return total_; }
  double power() const { return power_; }

 private:
  std::int64_t total_;
  double power_;
};

/// Linear warm-up: for epoch < warmup_steps, lr = base_lr (start_factor + (1 - start_factor) epoch /
/// warmup_steps); from epoch warmup_steps on, the wrapped schedule restarted at its epoch 0 (epoch -
/// warmup_steps), or base_lr when nothing is wrapped. Alone it is torch's LinearLR(start_factor,
/// total_iters = warmup_steps) (kiln's LinearLR with end_factor 1); wrapping S it is
/// SequentialLR([LinearLR(...), S], milestones=[warmup_steps]) (kiln's SequentialLR too, in one type).
/// Example:
///   kiln::optim::LinearWarmup sched(kiln::optim::CosineAnnealingLR(opt, 95), /*warmup_steps=*/5, 0.1);
///   kiln::optim::LinearWarmup warm(opt, /*warmup_steps=*/5);  // then constant
template <lr_optimizer Opt, class Then = void>
class LinearWarmup : public detail::LRScheduler<Opt, LinearWarmup<Opt, Then>> {
  using base = detail::LRScheduler<Opt, LinearWarmup<Opt, Then>>;
  static constexpr bool wraps = !std::is_void_v<Then>;
  struct Nothing {};
  using then_type = std::conditional_t<wraps, Then, Nothing>;
  // >>> Stopped here? OneCycleLR warms up by itself (pct_start, div_factor); it and CyclicLR set the momentum too. <<<
  static_assert(!requires(then_type& t) { t.apply_momentum(std::int64_t{}); },
                "kiln::optim::LinearWarmup: a schedule that sets the momentum (OneCycleLR, CyclicLR) cannot be "
                "wrapped; OneCycleLR's first phase is its warm-up, CyclicLR starts at its base_lr");

 public:
  /// Warm-up, then constant base_lr.
  LinearWarmup(Opt& opt, std::int64_t warmup_steps, double start_factor = 1.0 / 3.0)
    requires(!wraps)
      : base(opt), steps_(warmup_steps), start_(start_factor) {
    check();
    this->apply();
  }
  /// Warm-up from the wrapped schedule's base lr, then that schedule.
  LinearWarmup(then_type then, std::int64_t warmup_steps, double start_factor = 1.0 / 3.0)
    requires(wraps)
      : base(then.optimizer(), then.base_lr(), then.group_base_lrs()), then_(std::move(then)), steps_(warmup_steps),
        start_(start_factor) {
    check();
    rebase_held(this->base_lr());
    this->apply();
  }
  double lr_at(std::int64_t epoch) const {
    if (epoch < steps_)
      return this->base_lr() * (start_ + (1.0 - start_) * static_cast<double>(epoch) / static_cast<double>(steps_));
    if constexpr (wraps) return then_.lr_at(epoch - steps_);
    else return this->base_lr();
  }
  std::int64_t warmup_steps() const { return steps_; }
  double start_factor() const { return start_; }

 private:
  friend struct detail::Rebase;
  /// The wrapped schedule starts from `lr`, or one that goes on from the lr set (MultiplicativeLR) from
  /// the warm-up's last, as torch's SequentialLR([LinearLR, MultiplicativeLR]) hands over.
  void rebase_held(double lr) {
    if constexpr (wraps) {
      detail::Rebase::to(then_, lr);
      if constexpr (detail::continues_from_the_lr_set<Then>) detail::Rebase::to(then_, lr_at(steps_ - 1));
    }
  }
  void check() const {
    detail::require_positive(steps_, "LinearWarmup", "warmup_steps");
    if (!(start_ > 0.0 && start_ <= 1.0))
      throw ValueError("kiln::optim::LinearWarmup: start_factor must be in (0, 1], got " + std::to_string(start_));
  }
  [[no_unique_address]] then_type then_{};
  std::int64_t steps_;
  double start_;
};
template <lr_optimizer Opt>
LinearWarmup(Opt&, std::int64_t, double) -> LinearWarmup<Opt, void>;
template <lr_optimizer Opt>
LinearWarmup(Opt&, std::int64_t) -> LinearWarmup<Opt, void>;
template <lr_schedule S>
LinearWarmup(S, std::int64_t, double) -> LinearWarmup<typename S::optimizer_type, S>;
template <lr_schedule S>
LinearWarmup(S, std::int64_t) -> LinearWarmup<typename S::optimizer_type, S>;

/// How OneCycleLR moves between its phases' ends: along a half cosine (torch's 'cos') or a line.
enum class AnnealStrategy { cos, linear };

/// OneCycleLR's options: torch's keyword arguments after total_steps and their defaults, in its order.
struct OneCycleOptions {
  double pct_start = 0.3;  ///< the fraction of the steps spent raising the lr
  AnnealStrategy anneal_strategy = AnnealStrategy::cos;
  bool cycle_momentum = true;  ///< the momentum (Adam: beta1) moves against the lr, max -> base -> max
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;         ///< initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;    ///< min_lr = initial_lr / final_div_factor
  bool three_phase = false;         ///< up, back down to initial_lr, then down to min_lr
};

/// torch.optim.lr_scheduler.OneCycleLR (torch 1.13), stepped once per batch: the lr rises from
/// max_lr / div_factor to max_lr over the first pct_start of `total_steps` (torch's epochs *
/// steps_per_epoch), then falls to initial_lr / final_div_factor; with cycle_momentum the momentum
/// falls from max_momentum to base_momentum and back, against it (SGD's momentum, Adam's beta1). Each
/// phase anneals from start to end by its fraction of steps (a half cosine, or a line); the
/// constructor sets the optimizer's lr (the optimizer's own is not used) and momentum of step 0;
/// stepping past total_steps is a ValueError, as torch's (whose message counts one step more), and so
/// is a phase of no steps (pct_start * total_steps = 1, say), where torch divides by zero. A captured CUDA-graph step replays the
/// momentum it was captured with (the lr alone lives on the device).
/// Example:
///   kiln::optim::OneCycleLR sched(opt, /*max_lr=*/0.1, /*total_steps=*/epochs * batches_per_epoch);
///   for (auto& batch : loader) { train_step(batch); sched.step(); }
template <lr_optimizer Opt>
class OneCycleLR : public detail::LRScheduler<Opt, OneCycleLR<Opt>> {
  using base = detail::LRScheduler<Opt, OneCycleLR<Opt>>;

 public:
  /// A parameter group added after the scheduler was built keeps its lr (torch's base_lrs has no entry for it).
  static constexpr bool leaves_late_groups = true;
  OneCycleLR(Opt& opt, double max_lr, std::int64_t total_steps, OneCycleOptions options = {})
      : base(opt, max_lr / options.div_factor), max_lr_(max_lr), total_(total_steps), o_(options) {
    if (total_steps <= 0)
      throw ValueError("kiln::optim::OneCycleLR: Expected positive integer total_steps, but got " +
                       std::to_string(total_steps));
    if (!(o_.pct_start >= 0.0 && o_.pct_start <= 1.0)) {
      std::ostringstream text;
      text << "kiln::optim::OneCycleLR: Expected float between 0 and 1 pct_start, but got " << o_.pct_start;
      throw ValueError(text.str());
    }
    if (o_.cycle_momentum && !momentum_optimizer<Opt>)
      throw ValueError("kiln::optim::OneCycleLR: optimizer must support momentum with `cycle_momentum` option "
                       "enabled (SGD's momentum, Adam's betas); give {.cycle_momentum = false}");
    const double up = o_.pct_start * static_cast<double>(total_steps) - 1.0, last = static_cast<double>(total_steps) - 1.0;
    const double initial = this->base_lr(), min_lr = initial / o_.final_div_factor;
    const double lo = o_.base_momentum, hi = o_.max_momentum;
    if (o_.three_phase)
      phases_ = {Phase{up, initial, max_lr, hi, lo},
                 Phase{2.0 * o_.pct_start * static_cast<double>(total_steps) - 2.0, max_lr, initial, lo, hi},
                 Phase{last, initial, min_lr, hi, hi}};
    else
      phases_ = {Phase{up, initial, max_lr, hi, lo}, Phase{last, max_lr, min_lr, lo, hi}};
    this->apply();
  }
  double lr_at(std::int64_t step) const { return at(step).first; }
  /// The momentum (Adam: beta1) of a step: base_momentum at the lr's peak, max_momentum at its ends.
  double momentum_at(std::int64_t step) const { return at(step).second; }
  /// Sets the optimizer's momentum (or beta1) of `step` where cycle_momentum is on (the scheduler's
  /// steps call it).
  void apply_momentum(std::int64_t step) {
    if (o_.cycle_momentum) detail::set_momentum(this->optimizer(), momentum_at(step));
  }
  double max_lr() const { return max_lr_; }
  std::int64_t total_steps() const { return total_; }
  const OneCycleOptions& options() const { return o_; }

 private:
  /// A phase ends at step `end` (a float, as torch's: pct_start * total_steps - 1), going from lr a to
  /// b and momentum ma to mb.
  struct Phase {
    double end, a, b, ma, mb;
  };
  double anneal(double start, double end, double pct) const {
    if (o_.anneal_strategy == AnnealStrategy::linear) return (end - start) * pct + start;
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
  }
  /// The lr and momentum of a step: the first phase whose end it has not passed (or the last), at its
  /// fraction of that phase, as torch's get_lr.
  std::pair<double, double> at(std::int64_t step) const {
    if (step > total_)
      throw ValueError("kiln::optim::OneCycleLR: Tried to step " + std::to_string(step + 1) +
                       " times. The specified number of total steps is " + std::to_string(total_));
    const double t = static_cast<double>(step);
    double start = 0.0;
    for (std::size_t i = 0; i < phases_.size(); ++i) {
      const Phase& p = phases_[i];
      if (t <= p.end || i + 1 == phases_.size()) {
        if (p.end == start)
          throw ValueError("kiln::optim::OneCycleLR: step " + std::to_string(step) +
                           " falls in a phase of no steps (pct_start " + std::to_string(o_.pct_start) + " of " +
                           std::to_string(total_) + " steps); torch divides by zero there");
        const double pct = (t - start) / (p.end - start);
        return {anneal(p.a, p.b, pct), anneal(p.ma, p.mb, pct)};
      }
      start = p.end;
    }
    return {0.0, 0.0};  // not reached: the last phase always answers
  }

  double max_lr_;
  std::int64_t total_;
  OneCycleOptions o_;
  std::vector<Phase> phases_;
};

/// CyclicLR's built-in policies (torch's `mode`): the amplitude per cycle stays (triangular), halves each
/// cycle (triangular2), or is gamma^iterations (exp_range).
enum class CyclicMode { triangular, triangular2, exp_range };
/// What a scale function of CyclicLR is given: the cycle number (from 1) or the iterations so far.
enum class CyclicScaleMode { cycle, iterations };

/// CyclicLR's options: torch's keyword arguments after max_lr and their defaults, in its order (torch's
/// `step_size_down=None`: unset, the same as up). A `scale_fn` replaces `mode` (and `gamma`), with
/// `scale_mode` saying what it is given, as torch's.
struct CyclicOptions {
  double step_size_up = 2000;  ///< steps from base_lr up to max_lr
  std::optional<double> step_size_down = std::nullopt;  ///< steps back down (unset: step_size_up)
  CyclicMode mode = CyclicMode::triangular;
  double gamma = 1.0;  ///< exp_range's factor per iteration
  std::function<double(double)> scale_fn = {};
  CyclicScaleMode scale_mode = CyclicScaleMode::cycle;
  bool cycle_momentum = true;  ///< the momentum (Adam: beta1) moves against the lr, max -> base -> max
  double base_momentum = 0.8;
  double max_momentum = 0.9;
};

/// torch.optim.lr_scheduler.CyclicLR (torch 1.13; Smith's cyclical learning rates), stepped once per
/// batch: the lr goes from base_lr up to max_lr over step_size_up steps and back down over
/// step_size_down, again and again, its amplitude scaled by the mode (or scale_fn); with cycle_momentum
/// the momentum goes the other way, from max_momentum down to base_momentum and back. The constructor
/// sets the optimizer's lr to base_lr (the optimizer's own is not used) and the momentum of step 0. Every
/// parameter group gets the same lr (torch's with one base_lr and max_lr); a group added later keeps
/// its lr, as torch's. cycle_momentum cycles SGD's or RMSprop's momentum, or Adam's beta1 (AdamW's,
/// NAdam's, ...), as torch 2's does: torch 1.13's refuses optimizers without `momentum`.
/// Example:
///   kiln::optim::CyclicLR sched(opt, /*base_lr=*/1e-3, /*max_lr=*/0.1, {.step_size_up = 4 * batches_per_epoch});
///   for (auto& batch : loader) { train_step(batch); sched.step(); }
template <lr_optimizer Opt>
class CyclicLR : public detail::LRScheduler<Opt, CyclicLR<Opt>> {
  using base = detail::LRScheduler<Opt, CyclicLR<Opt>>;

 public:
  /// A parameter group added after the scheduler was built keeps its lr (torch's base_lrs has no entry for it).
  static constexpr bool leaves_late_groups = true;
  CyclicLR(Opt& opt, double base_lr, double max_lr, CyclicOptions options = {})
      : base(opt, base_lr), max_lr_(max_lr), o_(std::move(options)) {
    const double down = o_.step_size_down.value_or(o_.step_size_up);
    if (!(o_.step_size_up > 0.0) || !(down >= 0.0) || !std::isfinite(o_.step_size_up + down)) {
      std::ostringstream text;
      text << "kiln::optim::CyclicLR: step_size_up is " << o_.step_size_up << " and step_size_down " << down
           << "; expected step_size_up > 0 and step_size_down >= 0 (torch divides by zero at the cycle's "
              "start with step_size_up 0)";
      throw ValueError(text.str());
    }
    if (o_.cycle_momentum && !momentum_optimizer<Opt>)
      throw ValueError("kiln::optim::CyclicLR: optimizer must support momentum with `cycle_momentum` option "
                       "enabled (SGD's momentum, Adam's betas); give {.cycle_momentum = false}");
    total_ = o_.step_size_up + down;
    ratio_ = o_.step_size_up / total_;
    this->apply();
  }
  double lr_at(std::int64_t step) const {
    const auto [scale, height] = at(step);
    return this->base_lr() + (max_lr_ - this->base_lr()) * height * scale;
  }
  /// The momentum (Adam: beta1) of a step: max_momentum where the lr is base_lr, base_momentum at its peak.
  double momentum_at(std::int64_t step) const {
    const auto [scale, height] = at(step);
    return o_.max_momentum - (o_.max_momentum - o_.base_momentum) * height * scale;
  }
  /// Sets the optimizer's momentum (or beta1) of `step` where cycle_momentum is on (the scheduler's
  /// steps call it).
  void apply_momentum(std::int64_t step) {
    if (o_.cycle_momentum) detail::set_momentum(this->optimizer(), momentum_at(step));
  }
  double max_lr() const { return max_lr_; }
  const CyclicOptions& options() const { return o_; }

 private:
  /// A step's (scale, height): the mode's (or scale_fn's) factor, and where the step is on the cycle's
  /// triangle (0 at base_lr, 1 at max_lr), as torch's get_lr.
  std::pair<double, double> at(std::int64_t step) const {
    const double t = static_cast<double>(step);
    const double cycle = std::floor(1.0 + t / total_);
    const double x = 1.0 + t / total_ - cycle;
    const double height = x <= ratio_ ? x / ratio_ : (x - 1.0) / (ratio_ - 1.0);
    double scale = 1.0;
    if (o_.scale_fn) {
      scale = o_.scale_fn(o_.scale_mode == CyclicScaleMode::cycle ? cycle : t);
    } else if (o_.mode == CyclicMode::triangular2) {
      scale = 1.0 / std::pow(2.0, cycle - 1.0);
    } else if (o_.mode == CyclicMode::exp_range) {
      scale = std::pow(o_.gamma, t);
    }
    return {scale, height};
  }

  double max_lr_;
  CyclicOptions o_;
  double total_ = 0.0, ratio_ = 0.0;
};

/// Whether a ReduceLROnPlateau metric improves downwards (a loss) or upwards (an accuracy).
enum class PlateauMode { min, max };
/// How a metric must beat the best so far to count as better: by a fraction of it, or by an amount.
enum class ThresholdMode { rel, abs };

/// ReduceLROnPlateau's options: torch's keyword arguments and defaults, in torch's order.
struct PlateauOptions {
  PlateauMode mode = PlateauMode::min;
  double factor = 0.1;        ///< new lr = lr * factor (must be < 1)
  std::int64_t patience = 10;  ///< epochs without improvement tolerated before a reduction
  double threshold = 1e-4;     ///< what counts as better (rel: a fraction of the best, abs: an amount)
  ThresholdMode threshold_mode = ThresholdMode::rel;
  std::int64_t cooldown = 0;  ///< epochs after a reduction during which bad epochs are not counted
  double min_lr = 0.0;        ///< the lr never goes below it
  double eps = 1e-8;          ///< a reduction smaller than this is not made
};

/// What ReduceLROnPlateau keeps between epochs (torch's state_dict): to save with a checkpoint and give
/// back to load_state() when resuming.
struct PlateauState {
  double best = 0.0;
  std::int64_t num_bad_epochs = 0;
  std::int64_t cooldown_counter = 0;
  std::int64_t last_epoch = 0;
  double lr = 0.0;
  std::vector<double> group_lrs;  ///< parameter groups 1, 2, ...: their lrs
};

/// torch.optim.lr_scheduler.ReduceLROnPlateau (torch 1.13): `step(metric)` once per epoch with the
/// validation metric; after more than `patience` epochs in a row that do not beat the best (by
/// `threshold`, relative or absolute; a NaN metric never does), the lr is multiplied by `factor`,
/// floored at `min_lr` (a change below `eps` is not made), and `cooldown` epochs follow in which bad
/// epochs are not counted. The lr is kept in double, as torch's; an lr set on the optimizer by hand in
/// between is the one reduced next, as in torch.
/// Example:
///   kiln::optim::ReduceLROnPlateau sched(opt, {.factor = 0.5, .patience = 5});
///   for (int epoch = 0; epoch < 100; ++epoch) { train_one_epoch(); sched.step(validation_loss()); }
template <lr_optimizer Opt>
class ReduceLROnPlateau {
 public:
  using optimizer_type = Opt;

  explicit ReduceLROnPlateau(Opt& opt, PlateauOptions options = {})
      : opt_(&opt), o_(options), lr_(static_cast<double>(opt.lr())), last_group_lrs_(detail::lrs_of_later_groups(opt)) {
    if (!(o_.factor < 1.0)) throw ValueError("kiln::optim::ReduceLROnPlateau: Factor should be < 1.0. (got " +
                                             std::to_string(o_.factor) + ")");
    if (!(o_.threshold >= 0.0 && o_.min_lr >= 0.0 && o_.eps >= 0.0) || o_.patience < 0 || o_.cooldown < 0)
      throw ValueError("kiln::optim::ReduceLROnPlateau: threshold, min_lr, eps, patience and cooldown must be >= 0");
    best_ = worst();
  }

  /// One epoch's metric: counts it, and reduces the lr after more than `patience` bad epochs.
  void step(double metric) {
    // An lr set on the optimizer since (by hand, or by another schedule) is the one this one goes on
    // from, as torch reads the group's lr.
    if (detail::as_held(*opt_, lr_) != static_cast<double>(opt_->lr())) lr_ = static_cast<double>(opt_->lr());
    ++last_epoch_;
    if (better(metric, best_)) {
      best_ = metric;
      bad_ = 0;
    } else {
      ++bad_;
    }
    if (cooldown_counter_ > 0) {
      --cooldown_counter_;
      bad_ = 0;  // bad epochs in cooldown do not count
    }
    if (bad_ > o_.patience) {
      reduce();
      cooldown_counter_ = o_.cooldown;
      bad_ = 0;
    }
    last_group_lrs_ = detail::lrs_of_later_groups(*opt_);
  }
  /// The lr after the last step (double), torch's _last_lr[0].
  double get_last_lr() const { return lr_; }
  /// Parameter group k's lr after the last step (torch's _last_lr[k]; 0: get_last_lr()).
  double get_last_lr(std::size_t k) const {
    return detail::last_group_lr(k, lr_, last_group_lrs_, "kiln::optim::ReduceLROnPlateau");
  }
  /// Steps taken (torch's last_epoch).
  std::int64_t last_epoch() const { return last_epoch_; }
  /// The best metric so far (+inf for min, -inf for max before the first step).
  double best() const { return best_; }
  std::int64_t num_bad_epochs() const { return bad_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }
  const PlateauOptions& options() const { return o_; }
  Opt& optimizer() const { return *opt_; }

  /// What to save with a checkpoint; load_state() gives it back (and sets the optimizer's lr).
  PlateauState state() const {
    return {best_, bad_, cooldown_counter_, last_epoch_, lr_, detail::lrs_of_later_groups(*opt_)};
  }
  /// The same as strings for a checkpoint's metadata, as GradScaler::state(prefix) gives its own:
  /// `<prefix>best`, `num_bad_epochs`, `cooldown_counter`, `last_epoch`, `lr` and `group_lrs` (the lrs
  /// of groups 1, 2, ... joined by ','; empty without groups), every double as the shortest text that
  /// reads back to it (best is "inf" before the first step of a min mode). Example:
  ///   auto meta = sched.state("plateau.");  // merge into save_checkpoint's metadata
  std::map<std::string, std::string> state(std::string_view prefix) const {
    const std::string p(prefix);
    const PlateauState s = state();
    std::string groups;
    for (std::size_t k = 0; k < s.group_lrs.size(); ++k) groups += (k ? "," : "") + kiln::detail::shortest_text(s.group_lrs[k]);
    return {{p + "best", kiln::detail::shortest_text(s.best)},
            {p + "num_bad_epochs", std::to_string(s.num_bad_epochs)},
            {p + "cooldown_counter", std::to_string(s.cooldown_counter)},
            {p + "last_epoch", std::to_string(s.last_epoch)},
            {p + "lr", kiln::detail::shortest_text(s.lr)},
            {p + "group_lrs", groups}};
  }
  /// Restores what state(prefix) wrote (other keys are ignored), as load_state(PlateauState). Throws
  /// ValueError naming the key when one is missing or not a number in range (counts >= 0, lrs finite
  /// and >= 0, best not NaN), or for another number of parameter groups; nothing changes then.
  void load_state(const std::map<std::string, std::string>& state, std::string_view prefix) {
    load_state(parse_state(state, prefix));
  }
  /// load_state's checks without its writes (a resume checks every part of a checkpoint first).
  void check_state(const std::map<std::string, std::string>& state, std::string_view prefix) const {
    (void)parse_state(state, prefix);
  }
  /// Restores a state() (and every group's lr in the optimizer); a state of another number of
  /// parameter groups is a ValueError, and changes nothing.
  void load_state(const PlateauState& s) {
    check_group_count(s);
    if constexpr (grouped_optimizer<Opt>)
      for (std::size_t k = 0; k < s.group_lrs.size(); ++k) opt_->set_group_lr(k + 1, s.group_lrs[k]);
    last_group_lrs_ = s.group_lrs;
    best_ = s.best;
    bad_ = s.num_bad_epochs;
    cooldown_counter_ = s.cooldown_counter;
    last_epoch_ = s.last_epoch;
    lr_ = s.lr;
    opt_->set_lr(lr_);
  }

 private:
  void check_group_count(const PlateauState& s) const {
    const std::size_t groups = detail::lrs_of_later_groups(*opt_).size();
    if (s.group_lrs.size() != groups)
      throw ValueError("kiln::optim::ReduceLROnPlateau::load_state: the state has the lrs of " +
                       std::to_string(s.group_lrs.size() + 1) + " parameter groups, the optimizer " +
                       std::to_string(groups + 1) + "; add the same groups before loading");
  }
  /// What state(prefix) wrote, read back and checked (its group count too).
  PlateauState parse_state(const std::map<std::string, std::string>& state, std::string_view prefix) const {
    const std::string p(prefix);
    const auto get = [&](const char* key) -> const std::string& {
      const auto it = state.find(p + key);
      if (it == state.end())
        throw ValueError("kiln::optim::ReduceLROnPlateau::load_state: no '" + p + key +
                         "' in the state; give what state(\"" + p + "\") returned");
      return it->second;
    };
    const auto bad = [&](const char* key, const char* want) {
      return ValueError("kiln::optim::ReduceLROnPlateau::load_state: '" + p + key + "' is '" + get(key) +
                        "'; expected " + want);
    };
    const auto an_lr = [](double v) { return v >= 0.0 && !kiln::detail::is_inf_or_nan(v); };
    PlateauState s;
    if (!kiln::detail::parse_whole(get("best"), s.best) || kiln::detail::is_nan(s.best))
      throw bad("best", "a number (inf before the first step)");
    if (!kiln::detail::parse_whole(get("num_bad_epochs"), s.num_bad_epochs) || s.num_bad_epochs < 0)
      throw bad("num_bad_epochs", "an integer >= 0");
    if (!kiln::detail::parse_whole(get("cooldown_counter"), s.cooldown_counter) || s.cooldown_counter < 0)
      throw bad("cooldown_counter", "an integer >= 0");
    if (!kiln::detail::parse_whole(get("last_epoch"), s.last_epoch) || s.last_epoch < 0)
      throw bad("last_epoch", "an integer >= 0");
    if (!kiln::detail::parse_whole(get("lr"), s.lr) || !an_lr(s.lr)) throw bad("lr", "a finite lr >= 0");
    auto groups = detail::parse_lrs(get("group_lrs"), false);
    if (!groups) throw bad("group_lrs", "finite lrs >= 0 joined by ','");
    s.group_lrs = std::move(*groups);
    check_group_count(s);
    return s;
  }
  double worst() const {
    const double inf = std::numeric_limits<double>::infinity();
    return o_.mode == PlateauMode::min ? inf : -inf;
  }
  bool better(double a, double best) const {
    const bool rel = o_.threshold_mode == ThresholdMode::rel;
    if (o_.mode == PlateauMode::min) return rel ? a < best * (1.0 - o_.threshold) : a < best - o_.threshold;
    return rel ? a > best * (o_.threshold + 1.0) : a > best + o_.threshold;
  }
  /// Every group's lr times factor, floored at min_lr, where that changes it by more than eps (groups
  /// 1, 2, ... from the lr the optimizer holds, as torch's).
  void reduce() {
    const double new_lr = std::max(lr_ * o_.factor, o_.min_lr);
    if (lr_ - new_lr > o_.eps) {
      lr_ = new_lr;
      opt_->set_lr(lr_);
    }
    if constexpr (grouped_optimizer<Opt>)
      for (std::size_t k = 1; k < opt_->param_group_count(); ++k) {
        const double old = static_cast<double>(opt_->group_lr(k)), next = std::max(old * o_.factor, o_.min_lr);
        if (old - next > o_.eps) opt_->set_group_lr(k, next);
      }
  }

  Opt* opt_;
  PlateauOptions o_;
  double lr_;
  std::vector<double> last_group_lrs_;
  double best_ = 0.0;
  std::int64_t bad_ = 0;
  std::int64_t cooldown_counter_ = 0;
  std::int64_t last_epoch_ = 0;
};

namespace detail {

/// The epoch schedules whose torch form is chainable (each step multiplies the optimizer's current lr
/// by its own factor), so that torch's ChainedScheduler of them is the product of their schedules.
template <class S>
inline constexpr bool chainable_schedule = false;
template <class O>
inline constexpr bool chainable_schedule<StepLR<O>> = true;
template <class O>
inline constexpr bool chainable_schedule<MultiStepLR<O>> = true;
template <class O>
inline constexpr bool chainable_schedule<ExponentialLR<O>> = true;
template <class O, class F>
inline constexpr bool chainable_schedule<MultiplicativeLR<O, F>> = true;
template <class O>
inline constexpr bool chainable_schedule<CosineAnnealingLR<O>> = true;
template <class O>
inline constexpr bool chainable_schedule<ConstantLR<O>> = true;
template <class O>
inline constexpr bool chainable_schedule<LinearLR<O>> = true;
template <class O>
inline constexpr bool chainable_schedule<PolynomialLR<O>> = true;
template <class O>
inline constexpr bool chainable_schedule<LinearWarmup<O, void>> = true;
template <class First, class... Rest>
inline constexpr bool chainable_schedule<ChainedScheduler<First, Rest...>> = true;

template <class S>
inline constexpr bool is_lambda_lr = false;
template <class O, class F>
inline constexpr bool is_lambda_lr<LambdaLR<O, F>> = true;
template <class S>
inline constexpr bool is_warm_restarts = false;
template <class O>
inline constexpr bool is_warm_restarts<CosineAnnealingWarmRestarts<O>> = true;
template <class S>
inline constexpr bool is_one_cycle = false;
template <class O>
inline constexpr bool is_one_cycle<OneCycleLR<O>> = true;
template <class S>
inline constexpr bool is_cyclic = false;
template <class O>
inline constexpr bool is_cyclic<CyclicLR<O>> = true;
template <class S>
inline constexpr bool is_plateau = false;
template <class O>
inline constexpr bool is_plateau<ReduceLROnPlateau<O>> = true;
template <class S>
inline constexpr bool is_wrapping_warmup = false;
template <class O, class Then>
inline constexpr bool is_wrapping_warmup<LinearWarmup<O, Then>> = !std::is_void_v<Then>;
template <class S>
inline constexpr bool is_cosine = false;
template <class O>
inline constexpr bool is_cosine<CosineAnnealingLR<O>> = true;
template <class S>
inline constexpr bool is_sequential = false;
template <class First, class... Rest>
inline constexpr bool is_sequential<SequentialLR<First, Rest...>> = true;

/// Refused with a message of its own (the others, not schedules at all, get the general one).
template <class S>
inline constexpr bool named_refusal = is_lambda_lr<S> || is_warm_restarts<S> || is_one_cycle<S> || is_cyclic<S> ||
                                      is_plateau<S> || is_wrapping_warmup<S> || is_sequential<S>;

/// Stands in for the optimizer of an argument that is not a schedule, so that only the
/// static_assert reports it.
struct NotAnOptimizer {
  double lr() const { return 0.0; }
  void set_lr(double) {}
};
template <class S>
struct chained_optimizer {
  using type = NotAnOptimizer;
};
template <class S>
requires requires { typename S::optimizer_type; }
struct chained_optimizer<S> {
  using type = typename S::optimizer_type;
};

/// The optimizer a ChainedScheduler's or SequentialLR's first argument drives (a stand-in when it is not
/// a schedule: the static_asserts say so).
template <class Opt, class First>
Opt& optimizer_of(First& first) {
  if constexpr (requires {
                  { first.optimizer() } -> std::same_as<Opt&>;
                }) {
    return first.optimizer();
  } else {
    static NotAnOptimizer none;
    return none;
  }
}

/// The optimizer's lr before the first of the schedules was built (torch's initial_lr), and which of
/// them (its index among the arguments) was built first, for ChainedScheduler and SequentialLR (`who`,
/// in the messages). They must drive the same optimizer: otherwise a ValueError saying
/// `different(index)` (torch's message of `who`), index the first other one. Each schedule takes the
/// optimizer's lr as its base and sets the lr of its epoch 0, which the one built next takes as its
/// base: the bases follow from one another in the order they were built, which this finds (preferring
/// an order that ends at the optimizer's lr now, then the arguments' order).
template <class Different, class First, class... Rest>
std::pair<double, std::size_t> initial_lr_and_first(const char* who, const Different& different, const First& first,
                                                    const Rest&... rest) {
  constexpr std::size_t count = 1 + sizeof...(Rest);
  std::size_t index = 0;
  const auto same_optimizer = [&](const auto& s) {
    ++index;
    if (&s.optimizer() != &first.optimizer()) throw ValueError(different(index));
  };
  (same_optimizer(rest), ...);
  const std::array<double, count> bases{first.base_lr(), rest.base_lr()...};
  // The lr each one leaves on the optimizer when built: the next one's base.
  const std::array<double, count> after{as_held(first.optimizer(), first.lr_at(0)),
                                        as_held(rest.optimizer(), rest.lr_at(0))...};
  const double now = static_cast<double>(first.optimizer().lr());
  std::array<bool, count> used{};
  std::size_t start = 0;
  double found = std::numeric_limits<double>::quiet_NaN();  // the first of the first whole order found
  std::size_t found_start = 0;
  // Depth first over the orders: `last` was built last of `built` so far; true on a whole order
  // that ends at the optimizer's lr now.
  const auto extend = [&](const auto& self, std::size_t last, std::size_t built) -> bool {
    if (built == count) {
      if (kiln::detail::is_nan(found)) {
        found = bases[start];
        found_start = start;
      }
      return after[last] == now;
    }
    for (std::size_t j = 0; j < count; ++j) {
      if (used[j] || bases[j] != after[last]) continue;
      used[j] = true;
      const bool ends_now = self(self, j, built + 1);
      used[j] = false;
      if (ends_now) return true;
    }
    return false;
  };
  for (start = 0; start < count; ++start) {
    used[start] = true;
    if (extend(extend, start, 1)) return {bases[start], start};
    used[start] = false;
  }
  if (kiln::detail::is_nan(found))
    throw ValueError(
        std::string("kiln::optim::") + who +
        ": the schedules' base lrs do not follow from one another (each takes the optimizer's lr "
        "when built, which the one built before it set to its epoch 0's): build them on the "
        "optimizer one after another, as its arguments");
  return {found, found_start};
}
/// The group_base_lrs() of the schedule among `schedules` that was built first (initial_lr_and_first's
/// index): the groups' lrs before any of them was built.
template <class... S>
std::vector<double> group_base_lrs_of(std::size_t first_built, const S&... schedules) {
  std::vector<double> out;
  std::size_t i = 0;
  ((i++ == first_built ? (void)(out = schedules.group_base_lrs()) : (void)0), ...);
  return out;
}

}  // namespace detail

/// torch.optim.lr_scheduler.ChainedScheduler: the product of epoch schedules on one optimizer, lr =
/// base_lr * prod_i s_i.lr_at(epoch) / s_i.base_lr(), as torch's for StepLR, MultiStepLR, ExponentialLR,
/// CosineAnnealingLR (eta_min 0 and epochs up to T_max, a ValueError otherwise), ConstantLR, LinearLR,
/// PolynomialLR, LinearWarmup(opt, N) and ChainedScheduler; the others are compile errors (torch's do not
/// multiply them). The schedules, taken by
/// value, are built on the optimizer one after another, in any order; base_lr is its lr before the first
/// (torch's initial_lr). The constructor sets the lr of epoch 0; the chain counts epochs from there.
/// Example:
///   namespace ko = kiln::optim;
///   ko::ChainedScheduler sched(ko::ExponentialLR(opt, 0.9), ko::MultiStepLR(opt, {2}, 0.1));
///   for (int epoch = 0; epoch < 30; ++epoch) { train_one_epoch(); sched.step(); }  // lr 1, 0.9, 0.081, ...
template <class First, class... Rest>
class ChainedScheduler : public detail::LRScheduler<typename detail::chained_optimizer<First>::type,
                                                    ChainedScheduler<First, Rest...>> {
  using Opt = typename detail::chained_optimizer<First>::type;
  using base = detail::LRScheduler<Opt, ChainedScheduler<First, Rest...>>;
  static constexpr std::size_t count = 1 + sizeof...(Rest);

  // >>> Stopped here? A schedule that torch's ChainedScheduler does not multiply, or not a schedule. <<<
  static_assert(
      !(detail::is_lambda_lr<First> || ... || detail::is_lambda_lr<Rest>),
      "kiln::optim::ChainedScheduler: LambdaLR cannot be chained: torch's sets base_lr * lambda(epoch) "
      "at each step, overriding the other schedules (the last stepped wins, not a product); "
      "multiply the other schedules into its function instead");
  static_assert(
      !(detail::is_warm_restarts<First> || ... || detail::is_warm_restarts<Rest>),
      "kiln::optim::ChainedScheduler: CosineAnnealingWarmRestarts cannot be chained: torch's sets its "
      "lr from the base lr at each step, overriding the other schedules (not a product)");
  static_assert(
      !(detail::is_one_cycle<First> || ... || detail::is_one_cycle<Rest>),
      "kiln::optim::ChainedScheduler: OneCycleLR cannot be chained: torch's sets its lr from max_lr "
      "at each step (and the momentum), overriding the other schedules (not a product)");
  static_assert(
      !(detail::is_cyclic<First> || ... || detail::is_cyclic<Rest>),
      "kiln::optim::ChainedScheduler: CyclicLR cannot be chained: torch's sets its lr from base_lr and "
      "max_lr at each step (and the momentum), overriding the other schedules (not a product)");
  static_assert(
      !(detail::is_wrapping_warmup<First> || ... || detail::is_wrapping_warmup<Rest>),
      "kiln::optim::ChainedScheduler: LinearWarmup around a schedule (torch's SequentialLR) cannot be "
      "chained: torch's resets the lr to the base lr when built and at the hand-over (not a product); "
      "chain LinearWarmup(opt, N) alone, or wrap the ChainedScheduler in LinearWarmup");
  static_assert(!(detail::is_sequential<First> || ... || detail::is_sequential<Rest>),
                "kiln::optim::ChainedScheduler: SequentialLR cannot be chained: torch's resets the lr to the "
                "initial lr when built and at each milestone (not a product); put the ChainedScheduler in "
                "the SequentialLR instead");
  static_assert(!(detail::is_plateau<First> || ... || detail::is_plateau<Rest>),
                "kiln::optim::ChainedScheduler: ReduceLROnPlateau steps on a metric, not an epoch: step it "
                "beside the ChainedScheduler (torch's ChainedScheduler cannot hold it either)");
  static_assert(((detail::chainable_schedule<First> || detail::named_refusal<First>)&&... &&
                 (detail::chainable_schedule<Rest> || detail::named_refusal<Rest>)),
                "kiln::optim::ChainedScheduler: every argument must be a chainable epoch schedule: StepLR, "
                "MultiStepLR, ExponentialLR, MultiplicativeLR, CosineAnnealingLR, ConstantLR, LinearLR, "
                "PolynomialLR, LinearWarmup(opt, N) or ChainedScheduler");
  static constexpr bool chainable =
      (detail::chainable_schedule<First> && ... && detail::chainable_schedule<Rest>);
  static_assert(
      !chainable || (std::is_same_v<typename detail::chained_optimizer<Rest>::type, Opt> && ...),
      "kiln::optim::ChainedScheduler: the schedules must drive the same optimizer (they have different "
      "optimizer types)");
  static constexpr bool valid =
      chainable && (std::is_same_v<typename detail::chained_optimizer<Rest>::type, Opt> && ...);

 public:
  /// The schedules, each built on the optimizer (the same one: a ValueError otherwise, as torch's).
  explicit ChainedScheduler(First first, Rest... rest)
      : base(detail::optimizer_of<Opt>(first), initial_lr(first, rest...), group_base_lrs_of(first, rest...)),
        schedules_(std::move(first), std::move(rest)...) {
    if constexpr (valid) {
      // The copies kept give their factors: base_lr 1, lr_at(epoch) = the factor.
      std::apply([](auto&... s) { ((s.base_lr_ = 1.0), ...); }, schedules_);
      std::apply([](const auto&... s) { (check(s), ...); }, schedules_);
      this->apply();
    }
  }
  double lr_at(std::int64_t epoch) const {
    if constexpr (valid) {
      return std::apply(
          [&](const auto&... s) {
            (check_epoch(s, epoch), ...);
            return (this->base_lr() * ... * s.lr_at(epoch));
          },
          schedules_);
    } else {
      return 0.0;
    }
  }

 private:
  /// The groups' lrs before the first schedule was built (that schedule's group_base_lrs()).
  static std::vector<double> group_base_lrs_of(const First& first, const Rest&... rest) {
    if constexpr (valid) return detail::group_base_lrs_of(initial(first, rest...).second, first, rest...);
    else return {};
  }
  /// The optimizer's lr before the first schedule was built (detail::initial_lr_and_first).
  static double initial_lr(const First& first, const Rest&... rest) { return initial(first, rest...).first; }
  /// That lr, and which schedule was built first.
  static std::pair<double, std::size_t> initial(const First& first, const Rest&... rest) {
    if constexpr (valid) {
      const auto different = [](std::size_t index) {
        return "kiln::optim::ChainedScheduler: expects all schedulers to belong to the same optimizer, but "
               "got schedulers at index 0 and " +
               std::to_string(index) + " to be different";
      };
      return detail::initial_lr_and_first("ChainedScheduler", different, first, rest...);
    } else {
      return {0.0, 0};
    }
  }
  template <class S>
  static void check(const S& s) {
    if constexpr (detail::is_cosine<S>) {
      if (s.eta_min() != 0.0) {
        std::ostringstream text;
        text
            << "kiln::optim::ChainedScheduler: CosineAnnealingLR with eta_min " << s.eta_min()
            << " is not a factor (torch's chained form, eta_min + ratio (lr - eta_min), depends on the other "
               "schedules and their order): chain it with eta_min 0";
        throw ValueError(text.str());
      }
    }
  }
  template <class S>
  static void check_epoch(const S& s, std::int64_t epoch) {
    if constexpr (detail::is_cosine<S>) {
      if (epoch > s.T_max())
        throw ValueError("kiln::optim::ChainedScheduler: epoch " + std::to_string(epoch) +
                         " is past CosineAnnealingLR's T_max (" + std::to_string(s.T_max()) +
                         "), where torch's chained cosine restarts from the base lr, dropping the other "
                         "schedules' factors (not a product): give T_max the whole run");
    }
  }

  std::tuple<First, Rest...> schedules_;
};
template <class... S>
ChainedScheduler(S...) -> ChainedScheduler<S...>;

/// torch.optim.lr_scheduler.SequentialLR: the epoch schedules one after another, handing over at the
/// milestones: lr_at(epoch) = s_i.lr_at(epoch - milestones[i - 1]), i the number of milestones <= epoch
/// (s_0.lr_at(epoch) before the first), so each starts at its epoch 0. As in torch, every schedule starts
/// from the optimizer's lr before the first was built (torch's initial_lr, base_lr here), whatever order
/// they were built in. The schedules, taken by value, drive one optimizer (another is a ValueError with
/// torch's message, another optimizer type a compile error) and are one more than the milestones (torch's
/// ValueError); the milestones must be positive and non-decreasing (a ValueError; torch's applies the
/// first schedule at epoch 0 whatever they are). OneCycleLR and ReduceLROnPlateau are compile errors.
/// Example:
///   namespace ko = kiln::optim;
///   ko::SequentialLR sched({5, 10}, ko::LinearLR(opt, 0.1, 1.0, 5), ko::ExponentialLR(opt, 0.9),
///                          ko::StepLR(opt, 3));  // 5 epochs of warm-up, a decay, then steps
template <class First, class... Rest>
class SequentialLR : public detail::LRScheduler<typename detail::chained_optimizer<First>::type,
                                                SequentialLR<First, Rest...>> {
  using Opt = typename detail::chained_optimizer<First>::type;
  using base = detail::LRScheduler<Opt, SequentialLR<First, Rest...>>;
  static constexpr std::size_t count = 1 + sizeof...(Rest);

  // >>> Stopped here? A schedule SequentialLR cannot hand over to, or not a schedule. <<<
  static constexpr bool one_cycle = (detail::is_one_cycle<First> || ... || detail::is_one_cycle<Rest>);
  static_assert(
      !one_cycle,
      "kiln::optim::SequentialLR: OneCycleLR cannot be in a SequentialLR: it sets the momentum as well "
      "as the lr, and the momentum would stay where a hand-over leaves it; step OneCycleLR alone (its "
      "first phase is its warm-up)");
  static_assert(
      !(detail::is_cyclic<First> || ... || detail::is_cyclic<Rest>),
      "kiln::optim::SequentialLR: CyclicLR cannot be in a SequentialLR: it sets the momentum as well as "
      "the lr, and the momentum would stay where a hand-over leaves it; step CyclicLR alone");
  static_assert(
      !(detail::is_plateau<First> || ... || detail::is_plateau<Rest>),
      "kiln::optim::SequentialLR: ReduceLROnPlateau steps on a metric, not an epoch: step it beside "
      "the SequentialLR (torch's SequentialLR cannot step it either)");
  static_assert(
      ((lr_schedule<First> || detail::is_plateau<First>)&&... &&
       (lr_schedule<Rest> || detail::is_plateau<Rest>)),
      "kiln::optim::SequentialLR: every argument after the milestones must be an epoch schedule: "
      "StepLR, MultiStepLR, ExponentialLR, LambdaLR, MultiplicativeLR, CosineAnnealingLR, CosineAnnealingWarmRestarts, "
      "ConstantLR, LinearLR, PolynomialLR, LinearWarmup, ChainedScheduler or SequentialLR");
  static constexpr bool schedules = (lr_schedule<First> && ... && lr_schedule<Rest>);
  static_assert(!schedules || (std::is_same_v<typename detail::chained_optimizer<Rest>::type, Opt> && ...),
                "kiln::optim::SequentialLR: the schedules must drive the same optimizer (they have different "
                "optimizer types)");
  static constexpr bool valid =
      schedules && !one_cycle && (std::is_same_v<typename detail::chained_optimizer<Rest>::type, Opt> && ...);

 public:
  /// The milestones, then the schedules, each built on the optimizer (the same one).
  explicit SequentialLR(std::vector<std::int64_t> milestones, First first, Rest... rest)
      : base(detail::optimizer_of<Opt>(first), initial_lr(first, rest...), group_base_lrs_of(first, rest...)),
        milestones_(std::move(milestones)),
        schedules_(std::move(first), std::move(rest)...) {
    if constexpr (valid) {
      if (milestones_.size() + 1 != count)
        throw ValueError(
            "kiln::optim::SequentialLR: Sequential Schedulers expects number of schedulers provided to be "
            "one more than the number of milestone points, but got number of schedulers " +
            std::to_string(count) + " and the number of milestones to be equal to " +
            std::to_string(milestones_.size()));
      for (std::size_t i = 0; i < milestones_.size(); ++i) {
        detail::require_positive(milestones_[i], "SequentialLR", "a milestone");
        if (i > 0 && milestones_[i] < milestones_[i - 1])
          throw ValueError("kiln::optim::SequentialLR: milestones must be non-decreasing, got " +
                           std::to_string(milestones_[i - 1]) + " then " + std::to_string(milestones_[i]));
      }
      rebase_held(this->base_lr());
      this->apply();
    }
  }
  double lr_at(std::int64_t epoch) const {
    if constexpr (valid) {
      // The schedule of this epoch: the number of milestones <= epoch (torch's bisect_right).
      const auto i = static_cast<std::size_t>(
          std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
      return lr_of(i, epoch, std::make_index_sequence<count>{});
    } else {
      return 0.0;
    }
  }
  /// The epochs at which the next schedule takes over (at its epoch 0).
  const std::vector<std::int64_t>& milestones() const { return milestones_; }

 private:
  friend struct detail::Rebase;
  /// Every schedule starts from `lr` (torch's initial_lr), but one taking over at a milestone that goes on
  /// from the lr set (MultiplicativeLR) from the lr of the epoch before its milestone, as torch's step(0)
  /// leaves it; in order, so that each sees the one before it rebased.
  void rebase_held(double lr) {
    if constexpr (valid) {
      std::apply([&](auto&... s) { (detail::Rebase::to(s, lr), ...); }, schedules_);
      continue_where_handed_over(std::make_index_sequence<count>{});
    }
  }
  template <std::size_t... I>
  void continue_where_handed_over(std::index_sequence<I...>) {
    (continue_from_milestone<I>(), ...);
  }
  template <std::size_t I>
  void continue_from_milestone() {
    if constexpr (I > 0 && detail::continues_from_the_lr_set<std::tuple_element_t<I, std::tuple<First, Rest...>>>)
      detail::Rebase::to(std::get<I>(schedules_), lr_at(milestones_[I - 1] - 1));
  }
  /// The groups' lrs before the first schedule was built (that schedule's group_base_lrs()).
  static std::vector<double> group_base_lrs_of(const First& first, const Rest&... rest) {
    if constexpr (valid) return detail::group_base_lrs_of(initial(first, rest...).second, first, rest...);
    else return {};
  }
  /// The optimizer's lr before the first schedule was built (detail::initial_lr_and_first).
  static double initial_lr(const First& first, const Rest&... rest) { return initial(first, rest...).first; }
  /// That lr, and which schedule was built first.
  static std::pair<double, std::size_t> initial(const First& first, const Rest&... rest) {
    if constexpr (valid) {
      const auto different = [](std::size_t index) {
        return "kiln::optim::SequentialLR: Sequential Schedulers expects all schedulers to belong to the "
               "same optimizer, but got schedulers at index 0 and " +
               std::to_string(index) + " to be different.";
      };
      return detail::initial_lr_and_first("SequentialLR", different, first, rest...);
    } else {
      return {0.0, 0};
    }
  }
  /// Schedule i's lr at `epoch`, counted from its milestone.
  template <std::size_t... I>
  double lr_of(std::size_t i, std::int64_t epoch, std::index_sequence<I...>) const {
    double lr = 0.0;
    (void)((I == i &&
            ((lr = std::get<I>(schedules_).lr_at(I == 0 ? epoch : epoch - milestones_[I - 1])), true)) ||
           ...);
    return lr;
  }

  std::vector<std::int64_t> milestones_;
  std::tuple<First, Rest...> schedules_;
};
template <class First, class... Rest>
SequentialLR(std::vector<std::int64_t>, First, Rest...) -> SequentialLR<First, Rest...>;

}  // namespace kiln::optim
