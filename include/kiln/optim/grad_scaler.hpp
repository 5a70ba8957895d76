/// GradScaler: dynamic loss scaling (torch.cuda.amp.GradScaler), inf/NaN check fused into the unscale pass.
#pragma once
#include <bit>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/core/number_text.hpp"
#include "kiln/core/type_list.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/nn/loss.hpp"
#include "kiln/optim/device_scalars.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim {

/// torch.cuda.amp.GradScaler's options and defaults. The scale starts at init_scale, is multiplied by
/// backoff_factor after a step with an inf/NaN gradient, and by growth_factor after growth_interval
/// consecutive finite steps. `enabled = false` makes the scaler a pass-through (scale 1, every step runs).
/// Example: `kiln::optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 500});`
struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;
  /// The scale, growth tracker, skip count and inf/NaN flag live on the device and update() runs there
  /// (one one-thread pass), so no step reads anything back and a kiln::cuda::Graph can capture the whole
  /// iteration (torch's capturable optimizers with GradScaler). Pass `loss_scale()` to the loss's
  /// backward; the optimizer must skip on the device: SGD / Adam / AdamW with `capturable`. Reading scale(),
  /// growth_tracker(), skipped_steps() or found_inf() then copies a value back (a wait).
  bool capturable = false;
};

namespace detail {

/// Whether x (float or double) is inf or NaN: a bit test that -ffast-math cannot fold (kiln/core/nan.hpp).
using kiln::detail::is_inf_or_nan;

/// One element of the unscale pass: g *= inv_scale, and a shared flag set to 1 when g (still scaled) is
/// inf or NaN, as torch's _amp_foreach_non_finite_check_and_unscale_ (capturable: the optimizer's own
/// flag and `any`, every optimizer's). Every writer stores the same 1, so a relaxed atomic store on the
/// host and a plain store on the GPU suffice; the flag is read back once, after the pass.
template <class M>
struct UnscaleAndCheck {
  M* grad;
  M inv_scale;
  std::int32_t* found_inf;
  const double* inv_scale_device = nullptr;  // capturable: ScalerState::inv_scale
  std::int32_t* any = nullptr;               // capturable: the flag of every optimizer
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    const M inv = inv_scale_device ? static_cast<M>(*inv_scale_device) : inv_scale;
    const M g = grad[i];
    // Capturable: a scale so small that 1 / scale is inf (after ~150 backoffs) skips the step too, as
    // g * inf would write inf/NaN (the host's unscale throws instead).
    if (is_inf_or_nan(g) || (inv_scale_device && is_inf_or_nan(inv))) {
#if KILN_DEVICE_PASS
      *static_cast<volatile std::int32_t*>(found_inf) = 1;
      if (any) *static_cast<volatile std::int32_t*>(any) = 1;
#else
      __atomic_store_n(found_inf, 1, __ATOMIC_RELAXED);
      if (any) __atomic_store_n(any, 1, __ATOMIC_RELAXED);
#endif
    }
    grad[i] = g * inv;
  }
  /// The gradients read and written; a check and a multiply each.
  Traffic traffic(index_t n) const { return {2 * kiln::detail::bytes_of<M>(n), 2 * static_cast<std::uint64_t>(n)}; }
};

/// A capturable scaler's state on the device (doubles holding float32 values where torch keeps float32).
struct ScalerState {
  enum : int { scale, inv_scale, tracker, skipped, count };
};

/// A capturable scaler's update() (one thread), torch's rule as GradScaler::update() runs it on the
/// host: after an inf/NaN, scale *= backoff and the tracker restarts; otherwise the tracker counts, and
/// at the interval the scale grows unless that overflows float32 (update(new_scale): `new_scale` > 0,
/// the tracker kept). Each optimizer whose flag is set and that reached step() (bit k - 1 of `stepped`
/// for flag k: the host knows which did) counts a skipped step, as the host's step() counts them; one
/// only unscaled does not. Then inv_scale = float(1 / scale) and the flags (found_inf[0], any
/// optimizer's, then each optimizer's) are cleared for the next iteration.
struct ScaleUpdate {
  double* s;
  std::int32_t* found_inf;
  double growth_factor, backoff_factor, growth_interval;
  index_t flags = 1;
  float new_scale = 0.0f;
  std::uint32_t stepped = ~0u;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t) const {
    float scale = static_cast<float>(s[ScalerState::scale]);
    for (index_t k = 1; k < flags; ++k)
      s[ScalerState::skipped] += found_inf[k] != 0 && ((stepped >> (k - 1)) & 1u) != 0 ? 1 : 0;
    if (new_scale > 0.0f) {
      scale = new_scale;
    } else if (*found_inf != 0) {
      scale = static_cast<float>(static_cast<double>(scale) * backoff_factor);
      s[ScalerState::tracker] = 0;
    } else if ((s[ScalerState::tracker] += 1) >= growth_interval) {
      const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor);
      if (!is_inf_or_nan(grown)) scale = grown;
      s[ScalerState::tracker] = 0;
    }
    s[ScalerState::scale] = scale;
    s[ScalerState::inv_scale] = static_cast<float>(1.0 / static_cast<double>(scale));
    for (index_t k = 0; k < flags; ++k) found_inf[k] = 0;
  }
  Traffic traffic(index_t) const {
    return {7 * sizeof(double) + static_cast<std::uint64_t>(2 * flags) * sizeof(std::int32_t),
            static_cast<std::uint64_t>(5 + flags)};
  }
};

template <class T>
struct is_gradient_arena : std::false_type {};
template <class M, class D>
struct is_gradient_arena<Tensor<M, Shape<dyn>, D>&> : std::true_type {};

/// An optimizer GradScaler can drive: `gradients()` returns its gradient arena (`Tensor<M, Shape<dyn>, D>&`).
template <class O>
concept has_gradient_arena =
    requires(O& o) { o.gradients(); } && is_gradient_arena<decltype(std::declval<O&>().gradients())>::value;

/// ... and `step()`.
template <class O>
concept has_step = requires(O& o) { o.step(); };

/// The device and element type of an optimizer's gradient arena (placeholders when it has none:
/// has_gradient_arena's message reports that).
template <class O>
struct gradient_arena_of {
  using device = void;
  using element_type = float;
};
template <has_gradient_arena O>
struct gradient_arena_of<O> {
  using arena = std::remove_reference_t<decltype(std::declval<O&>().gradients())>;
  using device = typename arena::device;
  using element_type = typename arena::element_type;
};

/// A bundle of optimizers stepped together, one per replica (kiln::parallel::DataParallel's
/// make_optimizers): size(), replica(r) and step(). The replicas' gradients are equal after the
/// all-reduce, so GradScaler unscales every replica's arena and steps all of them or none.
template <class O>
concept optimizer_bundle = requires(O& o) {
  { o.size() } -> std::convertible_to<int>;
  o.replica(0);
  o.step();
};
/// The optimizer whose gradient arena GradScaler checks: a bundle's replica, else O itself.
template <class O>
struct scaled_optimizer {
  using type = O;
};
template <optimizer_bundle O>
struct scaled_optimizer<O> {
  using type = std::remove_reference_t<decltype(std::declval<O&>().replica(0))>;
};

/// What GradScaler<D> asks of an optimizer, checked where unscale_() or step() is called (a class, so
/// that these messages come before any other error).
template <class O, class D>
struct grad_scaler_accepts {
  // >>> Stopped here? The optimizer does not give GradScaler what it needs. <<<
  static_assert(
      has_gradient_arena<O>,
      "kiln::optim::GradScaler: the optimizer needs gradients() returning its gradient arena "
      "(Tensor<M, Shape<dyn>, D>&); kiln's optimizers (SGD, Adam, "
      "AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, Adadelta) have it: add one to your optimizer");
  static_assert(has_step<O>, "kiln::optim::GradScaler: the optimizer needs step()");
  using arena = gradient_arena_of<O>;
  static constexpr bool same_device = !has_gradient_arena<O> || std::is_same_v<typename arena::device, D>;
  // >>> Stopped here? The scaler and the gradients are on different devices. <<<
  static_assert(same_device,
                "kiln::optim::GradScaler<D>: the optimizer's gradients live on another device; declare "
                "the scaler for theirs: kiln::optim::GradScaler<kiln::Cuda> for a model on the GPU");
  static_assert(std::is_floating_point_v<typename arena::element_type>,
                "kiln::optim::GradScaler: the gradient arena must hold float or double (the master type)");
  static constexpr bool value = has_gradient_arena<O> && has_step<O> && same_device &&
                                std::is_floating_point_v<typename arena::element_type>;
};

}  // namespace detail

/// Dynamic loss scaling for the gradients of one device, with torch.cuda.amp.GradScaler's semantics:
/// multiply the loss gradient by `scale()`, then `step(opt)` unscales the optimizer's gradient arena
/// (one pass that also looks for inf/NaN), runs `opt.step()` only when every gradient is finite, and
/// `update()` adjusts the scale. To clip, unscale first:
///   opt.zero_grad();
///   model.backward(ce.backward(model.forward(x), y, scaler.scale()));
///   scaler.unscale_(opt);                            // optional: only to look at true gradients
///   kiln::optim::clip_grad_norm(model, 1.0);
///   scaler.step(opt);                                // skipped when a gradient is inf/NaN
///   scaler.update();
/// Several optimizers may share one scaler (as in torch): each is unscaled and stepped on its own, and
/// update() backs off when any of them had an inf/NaN. A DataParallel optimizer bundle counts as one:
/// every replica's gradients are unscaled, all replicas step or none, and a skip counts once.
template <class D = Cpu>
class GradScaler {
  // >>> Stopped here? The template argument is the device of the gradients, not an element type. <<<
  static_assert(device_policy<D>,
                "kiln::optim::GradScaler<D>: D is the device of the gradients it unscales; "
                "give kiln::Cpu or kiln::Cuda");
  // The members' device: a stand-in where D is not one, so that the static_assert is the only error.
  using Dev = std::conditional_t<device_policy<D>, D, Cpu>;

 public:
  using device_type = D;

  explicit GradScaler(GradScalerOptions o = {}) : o_(o) {
    check_factors(o);
    const float init = static_cast<float>(o.init_scale);
    // unscale_ multiplies by 1 / scale in float32 (torch's inv_scale): below ~2.9e-39 that is inf.
    if (!(o.init_scale > 0.0) || detail::is_inf_or_nan(o.init_scale) || detail::is_inf_or_nan(init) ||
        init == 0.0f || detail::is_inf_or_nan(static_cast<float>(1.0 / static_cast<double>(init))))
      throw bad("invalid init_scale " + format(o.init_scale) +
                "; give a positive, finite float32 whose inverse is one too (from 3e-39; default 65536)");
    scale_ = init;
    if (capturable()) {  // on the current device
      const double initial[detail::ScalerState::count] = {init, static_cast<float>(1.0 / static_cast<double>(init)),
                                                          0.0, 0.0};
      state_ = detail::DeviceScalars<D>(initial, -1);
      (void)capturable_flag(-1);
    }
  }

  /// torch's set_growth_factor, set_backoff_factor, set_growth_interval: from the next update() on, checked
  /// as the constructor checks them (ValueError, nothing changed). A captured update() keeps the values
  /// it was captured with, as torch's does.
  void set_growth_factor(double f) { set_option(&GradScalerOptions::growth_factor, f); }
  void set_backoff_factor(double f) { set_option(&GradScalerOptions::backoff_factor, f); }
  void set_growth_interval(std::int64_t n) { set_option(&GradScalerOptions::growth_interval, n); }

 private:
  static ValueError bad(const std::string& what) { return ValueError("kiln::optim::GradScaler: " + what); }
  template <class Field>
  void set_option(Field GradScalerOptions::*field, Field v) {
    GradScalerOptions o = o_;
    o.*field = v;
    check_factors(o);
    o_ = o;
  }
  /// The growth and backoff factors and the interval of o (the constructor's checks, and the setters').
  static void check_factors(const GradScalerOptions& o) {
    if (!(o.growth_factor > 1.0) || detail::is_inf_or_nan(o.growth_factor))
      throw bad("invalid growth_factor " + format(o.growth_factor) +
                "; give a finite factor > 1 (default 2)");
    if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0) || detail::is_inf_or_nan(o.backoff_factor))
      throw bad("invalid backoff_factor " + format(o.backoff_factor) +
                "; give 0 < backoff_factor < 1 (default 0.5)");
    if (o.growth_interval < 1)
      throw bad("invalid growth_interval " + std::to_string(o.growth_interval) +
                "; give at least 1 step (default 2000)");
  }

 public:
  /// The factor to multiply the loss gradient by: `ce.backward(logits, y, scaler.scale())`. 1 when disabled.
  /// Kept as a float32 value, as torch keeps its scale tensor. Capturable: read from the device.
  double scale() const {
    if (!o_.enabled) return 1.0;
    return capturable() ? state_.get(detail::ScalerState::scale) : static_cast<double>(scale_);
  }
  /// torch's `scaler.scale(loss).backward()`, refused with the way kiln writes it: kiln's losses take
  /// the scale in their backward (there is no graph behind a loss value to call backward on).
  template <class X>
  double scale(const X&) const {
    static_assert(kiln::detail::dependent_false<X>,
                  "kiln::optim::GradScaler::scale() takes no argument: kiln's losses take the scale in their "
                  "backward, model.backward(ce.backward(logits, y, scaler.loss_scale())), where torch writes "
                  "scaler.scale(loss).backward(); then scaler.step(opt) and scaler.update()");
    return 0.0;
  }
  /// The scale as the loss's backward takes it: `ce.backward(logits, y, scaler.loss_scale())`. The host
  /// number scale() gives, or, capturable, the scale's place on the device, read by the gradient's pass.
  nn::LossScale loss_scale() const {
    if (capturable()) return nn::LossScale::on_device(state_.data() + detail::ScalerState::scale);
    return nn::LossScale(scale());
  }

  /// Divides the optimizer's gradient arena by scale() in place and records whether any gradient is inf
  /// or NaN, in one pass (one loop, or one kernel) plus one read-back of a flag. Call it before clipping
  /// or reading the gradients; step() then does not unscale again. Returns true when every gradient is
  /// finite (step() will run), false when one is not (step() will skip). Throws kiln::Error when called
  /// twice for one optimizer before update(), or after step(). Disabled: does nothing, returns true.
  /// Capturable: the flag stays on the device and this returns true without looking.
  template <class Opt>
  bool unscale_(Opt& opt) {
    if constexpr (!detail::grad_scaler_accepts<typename detail::scaled_optimizer<Opt>::type, D>::value) {
      return false;  // its static_assert said what is missing
    } else {
      if (!o_.enabled) return true;
      if (capturable()) check_steps_on_device(opt);  // as step() would, before the gradients change
      if (const PerOptimizer* known = find_state(&opt)) {
        if (known->stepped)
          throw Error(
              "kiln::optim::GradScaler::unscale_: called after step(); unscale before step(), and call "
              "update() to end the iteration");
        if (known->unscaled)
          throw Error(
              "kiln::optim::GradScaler::unscale_: already called for this optimizer since the last "
              "update(); call it once per iteration (step() uses its result)");
      }
      return !record_unscale(opt).found_inf;
    }
  }

  /// Unscales the gradients unless unscale_(opt) did already, then runs opt.step() only if every gradient
  /// is finite. Returns whether the optimizer stepped; a skipped step counts in skipped_steps(). Throws
  /// kiln::Error when called twice for one optimizer before update(). Disabled: opt.step(), returns true.
  /// Capturable: `opt.step_unless(flag)` decides on the device (skips count in update()); returns true.
  template <class Opt>
  bool step(Opt& opt) {
    if constexpr (!detail::grad_scaler_accepts<typename detail::scaled_optimizer<Opt>::type, D>::value) {
      return false;  // its static_assert said what is missing
    } else {
      if (!o_.enabled) {
        opt.step();
        return true;
      }
      if (capturable()) check_steps_on_device(opt);  // before the gradients change
      const PerOptimizer* known = find_state(&opt);
      if (known && known->stepped)
        throw Error(
            "kiln::optim::GradScaler::step: already called for this optimizer since the last update(); "
            "call update() once per iteration, after step()");
      const bool found_inf = known && known->unscaled ? known->found_inf : record_unscale(opt).found_inf;
      // Marked stepped once the step (or the skip) is done: a step that throws can be called again, as
      // torch's stage turns STEPPED only after optimizer.step() returns.
      if (capturable()) {
        step_on_device(opt);
        state_of(&opt).stepped = true;
        return true;
      }
      if (found_inf) {
        state_of(&opt).stepped = true;
        ++skipped_;
        if constexpr (requires { opt.count_skipped_step(); }) opt.count_skipped_step();  // a scheduler may follow
        return false;
      }
      opt.step();
      state_of(&opt).stepped = true;
      return true;
    }
  }

  /// Ends the iteration, torch's rule: after an inf/NaN, scale *= backoff_factor and the growth tracker
  /// restarts at 0; otherwise the tracker counts one more finite step, and at growth_interval the scale
  /// is multiplied by growth_factor (unless that overflows float32) and the tracker restarts. (A tracker
  /// loaded past the interval, from a scaler with a longer one, grows at the next finite step; torch's
  /// `==` leaves it growing past the interval, the scale fixed until an inf/NaN resets it.) Throws
  /// kiln::Error when no step() or unscale_() ran since the last update(). Disabled: does nothing.
  void update() {
    if (!o_.enabled) return;
    if (per_optimizer_.empty())
      throw Error(
          "kiln::optim::GradScaler::update: no inf/NaN check since the last update(); call scaler.step(opt) "
          "before update()");
    if (capturable()) {
      const kiln::detail::device_scope<D> on(state_.device());
      kiln::detail::executor<D>::for_each(
          1, detail::ScaleUpdate{state_.data(), flag_.tensor.data(), o_.growth_factor, o_.backoff_factor,
                                 static_cast<double>(o_.growth_interval), flag_.tensor.numel(), 0.0f,
                                 stepped_slots()});
      per_optimizer_.clear();
      return;
    }
    bool found = false;
    for (const PerOptimizer& s : per_optimizer_) found = found || s.found_inf;
    if (found) {
      scale_ = static_cast<float>(static_cast<double>(scale_) * o_.backoff_factor);
      tracker_ = 0;
    } else if (++tracker_ >= o_.growth_interval) {
      const float grown = static_cast<float>(static_cast<double>(scale_) * o_.growth_factor);
      if (!detail::is_inf_or_nan(grown)) scale_ = grown;
      tracker_ = 0;
    }
    per_optimizer_.clear();
  }
  /// Ends the iteration with a scale of your choice (torch's update(new_scale)); the tracker is kept.
  void update(double new_scale) {
    if (!o_.enabled) return;
    const float s = static_cast<float>(new_scale);
    if (!(new_scale > 0.0) || detail::is_inf_or_nan(s) || s == 0.0f)
      throw ValueError("kiln::optim::GradScaler::update: invalid new_scale " + format(new_scale) +
                       "; give a positive, finite float32");
    scale_ = s;
    if (capturable()) {  // the skips of this iteration's flags count, as the host's step() counted them
      const kiln::detail::device_scope<D> on(state_.device());
      kiln::detail::executor<D>::for_each(
          1, detail::ScaleUpdate{state_.data(), flag_.tensor.data(), o_.growth_factor, o_.backoff_factor,
                                 static_cast<double>(o_.growth_interval), flag_.tensor.numel(), s,
                                 stepped_slots()});
    }
    per_optimizer_.clear();
  }

  bool is_enabled() const { return o_.enabled; }
  const GradScalerOptions& options() const { return o_; }
  /// Consecutive finite steps since the scale last changed (torch's _growth_tracker).
  std::int64_t growth_tracker() const {
    return capturable() ? static_cast<std::int64_t>(state_.get(detail::ScalerState::tracker)) : tracker_;
  }
  /// Optimizer steps skipped because of an inf/NaN gradient, since construction (or as loaded).
  /// Capturable: counted by update(), once per optimizer that reached step() in an iteration with an
  /// inf/NaN (as without capturable).
  std::int64_t skipped_steps() const {
    return capturable() ? static_cast<std::int64_t>(state_.get(detail::ScalerState::skipped)) : skipped_;
  }
  /// Whether an inf/NaN was found since the last update().
  bool found_inf() const {
    if (capturable()) return !flag_.tensor.empty() && flag_.tensor.slice(0, 1).item() != 0;
    for (const PerOptimizer& s : per_optimizer_)
      if (s.found_inf) return true;
    return false;
  }

  /// The state a checkpoint keeps, as strings for safetensors metadata: `<prefix>scale`,
  /// `<prefix>growth_tracker`, `<prefix>skipped_steps` and, as torch's state_dict(), the options
  /// `<prefix>growth_factor`, `<prefix>backoff_factor` and `<prefix>growth_interval` (every number
  /// round-trips exactly). Empty when disabled, as torch's state_dict(). Example:
  ///   auto meta = scaler.state("grad_scaler.");  // merge into save_checkpoint's metadata
  std::map<std::string, std::string> state(std::string_view prefix = {}) const {
    if (!o_.enabled) return {};
    const std::string p(prefix);
    return {{p + "scale", format(scale())},
            {p + "growth_tracker", std::to_string(growth_tracker())},
            {p + "skipped_steps", std::to_string(skipped_steps())},
            {p + "growth_factor", format(o_.growth_factor)},
            {p + "backoff_factor", format(o_.backoff_factor)},
            {p + "growth_interval", std::to_string(o_.growth_interval)}};
  }
  /// Restores what state(prefix) wrote, the options too, as torch's load_state_dict (a scaler built
  /// with the defaults resumes a run of other options as it ran; a state saved without them, before
  /// kiln saved them, keeps this scaler's); other keys are ignored. Throws kiln::ValueError naming the
  /// key when one is missing or its value is not a number in range; nothing changes then. Disabled:
  /// does nothing (torch's load_state_dict).
  void load_state(const std::map<std::string, std::string>& state, std::string_view prefix = {}) {
    if (!o_.enabled) return;
    const Saved s = parse_state(state, prefix);
    o_ = s.options;
    scale_ = s.scale;
    tracker_ = s.tracker;
    skipped_ = s.skipped;
    if (capturable()) {
      write_state(scale_);
      state_.set(detail::ScalerState::tracker, static_cast<double>(s.tracker));
      state_.set(detail::ScalerState::skipped, static_cast<double>(s.skipped));
    }
  }
  /// load_state's checks without its writes: throws what it would throw, changes nothing (a resume
  /// checks every part of a checkpoint before it writes any).
  void check_state(const std::map<std::string, std::string>& state, std::string_view prefix = {}) const {
    if (o_.enabled) (void)parse_state(state, prefix);
  }

 private:
  /// A state as load_state reads it.
  struct Saved {
    float scale;
    std::int64_t tracker, skipped;
    GradScalerOptions options;  // this scaler's, with the state's growth and backoff factors and interval
  };
  Saved parse_state(const std::map<std::string, std::string>& state, std::string_view prefix) const {
    const std::string p(prefix);
    const auto get = [&](const std::string& key) -> const std::string& {
      const auto it = state.find(p + key);
      if (it == state.end())
        throw ValueError("kiln::optim::GradScaler::load_state: no '" + p + key +
                         "' in the state; give what state(\"" + p +
                         "\") returned (a disabled scaler saves nothing)");
      return it->second;
    };
    const auto bad = [&](const std::string& key, const std::string& want) {
      return ValueError("kiln::optim::GradScaler::load_state: '" + p + key + "' is '" + get(key) +
                        "'; expected " + want);
    };
    double scale = 0.0;
    // (bit tests, not std::isfinite: -ffast-math folds that to true, and "inf" would load)
    if (!parse(get("scale"), scale) || !(scale > 0.0) || detail::is_inf_or_nan(scale) ||
        detail::is_inf_or_nan(static_cast<float>(scale)) || static_cast<float>(scale) == 0.0f)
      throw bad("scale", "a positive, finite float32");
    std::int64_t tracker = 0, skipped = 0;
    if (!parse(get("growth_tracker"), tracker) || tracker < 0) throw bad("growth_tracker", "an integer >= 0");
    if (!parse(get("skipped_steps"), skipped) || skipped < 0) throw bad("skipped_steps", "an integer >= 0");
    GradScalerOptions options = o_;
    const auto option = [&](const char* key, auto& field, const char* want) {
      if (state.count(p + key) && !parse(get(key), field)) throw bad(key, want);
    };
    option("growth_factor", options.growth_factor, "a number");
    option("backoff_factor", options.backoff_factor, "a number");
    option("growth_interval", options.growth_interval, "an integer");
    try {
      check_factors(options);
    } catch (const ValueError& e) {
      throw ValueError(std::string("kiln::optim::GradScaler::load_state: the state's options: ") + e.what());
    }
    return {static_cast<float>(scale), tracker, skipped, options};
  }
  bool capturable() const { return o_.capturable && o_.enabled; }
  /// Capturable: a new scale on the device, with inv_scale = float(1 / scale) as unscale computes it.
  void write_state(float scale) {
    state_.set(detail::ScalerState::scale, scale);
    state_.set(detail::ScalerState::inv_scale, static_cast<float>(1.0 / static_cast<double>(scale)));
  }
  /// Capturable: the inf/NaN flags on `device`: any optimizer's, then one per optimizer (torch keeps a
  /// found_inf per optimizer, so one optimizer's overflow does not skip another's step). Zeroed by a
  /// kernel when new (a copy of the scaler makes its own; the kernel, unlike a host copy, may be
  /// captured); update() clears them after that.
  std::int32_t* capturable_flag(int device) {
    auto& flag = flag_.tensor;
    if (flag.empty() || (device >= 0 && flag.device_index() != device)) {
      flag = Tensor<std::int32_t, Shape<dyn>, D>(Extents<Shape<dyn>>(1 + max_capturable_optimizers), device);
      flag.fill(0);
      flag_.slots.clear();
    }
    return flag.data();
  }
  /// Capturable: optimizer opt's own flag, in a slot it keeps across iterations (a captured graph keeps
  /// its address).
  std::int32_t* optimizer_flag(const void* opt) {
    std::int32_t* flags = capturable_flag(state_.device());
    auto& slots = flag_.slots;
    std::size_t k = 0;
    while (k < slots.size() && slots[k] != opt) ++k;
    if (k == slots.size()) {
      if (k == static_cast<std::size_t>(max_capturable_optimizers))
        throw ValueError("kiln::optim::GradScaler: a capturable scaler serves at most " +
                         std::to_string(max_capturable_optimizers) +
                         " optimizers (distinct objects over its life: a slot stays with its optimizer's address); "
                         "use another scaler for more");
      slots.push_back(opt);
    }
    return flags + 1 + k;
  }
  /// Capturable: bit k set for each optimizer in slot k that reached step() this iteration (ScaleUpdate
  /// counts only their skips).
  std::uint32_t stepped_slots() const {
    static_assert(max_capturable_optimizers <= 32, "one bit per slot");
    std::uint32_t mask = 0;
    for (const PerOptimizer& p : per_optimizer_)
      for (std::size_t k = 0; k < flag_.slots.size(); ++k)
        if (p.stepped && flag_.slots[k] == p.optimizer) mask |= 1u << k;
    return mask;
  }
  /// Capturable: the optimizer steps or skips on the device, by its flag, which the unscale pass set.
  template <class Opt>
  void step_on_device(Opt& opt) {
    if constexpr (requires(const std::int32_t* f) { opt.step_unless(f); }) opt.step_unless(optimizer_flag(&opt));
  }
  /// Capturable: refuses an optimizer that cannot skip on the device (a type without step_unless, or
  /// one built without capturable), before anything is unscaled.
  template <class Opt>
  static void check_steps_on_device(const Opt& opt) {
    bool can = false;
    if constexpr (requires(Opt& o, const std::int32_t* f) { o.step_unless(f); }) can = opt.options().capturable;
    if (!can)
      throw ValueError(
          "kiln::optim::GradScaler: a capturable scaler needs an optimizer that skips on the device: "
          "SGD, Adam or AdamW with {.capturable = true} (DataParallel bundles are not capturable)");
  }

  /// Where one optimizer is in the current iteration (torch's per-optimizer stage and found_inf).
  struct PerOptimizer {
    const void* optimizer;
    bool unscaled = false;
    bool stepped = false;
    bool found_inf = false;
  };
  /// The inf/NaN flag on the device (capturable: any optimizer's, then each optimizer's, in the slots
  /// `slots` gives them), and whether it is known to hold 0. A copy of the scaler gets its own flag
  /// (allocated at its first pass): a shared one could hold another copy's 1.
  struct Flag {
    Tensor<std::int32_t, Shape<dyn>, Dev> tensor;
    bool clear = false;
    std::vector<const void*> slots;
    Flag() = default;
    Flag(const Flag&) {}
    Flag& operator=(const Flag&) {
      tensor = {};
      clear = false;
      slots.clear();
      return *this;
    }
    Flag(Flag&&) = default;
    Flag& operator=(Flag&&) = default;
  };
  PerOptimizer& state_of(const void* opt) {
    if (PerOptimizer* s = find_state(opt)) return *s;
    return per_optimizer_.emplace_back(PerOptimizer{opt});
  }
  PerOptimizer* find_state(const void* opt) {
    for (PerOptimizer& s : per_optimizer_)
      if (s.optimizer == opt) return &s;
    return nullptr;
  }
  /// Unscales and checks opt's gradients, then records the result: an unscale that throws (a scale whose
  /// inverse is no float32) records nothing, so update() does not count it as a finite step.
  template <class Opt>
  PerOptimizer& record_unscale(Opt& opt) {
    const bool found = unscale_and_check_all(opt);
    PerOptimizer& s = state_of(&opt);
    s.found_inf = found;
    s.unscaled = true;
    return s;
  }

  /// unscale_and_check over the optimizer's arena, or over every replica's of a bundle (whether any had
  /// an inf/NaN: they hold the same gradients, so all do or none).
  template <class Opt>
  bool unscale_and_check_all(Opt& opt) {
    if constexpr (detail::optimizer_bundle<Opt>) {
      bool found = false;
      for (int r = 0; r < static_cast<int>(opt.size()); ++r)
        found = unscale_and_check(opt.replica(r).gradients(), &opt) || found;
      return found;
    } else {
      return unscale_and_check(opt.gradients(), &opt);
    }
  }
  /// The fused pass: grads *= 1 / scale, and whether a gradient was inf/NaN. The flag is 0 whenever no
  /// pass is running (it is cleared only after a pass found something), so the usual iteration costs one
  /// pass and one 4-byte read-back.
  template <class M>
  bool unscale_and_check(Tensor<M, Shape<dyn>, D>& grads, const void* opt) {
    const kiln::detail::device_scope<D> on(grads.device_index());  // a replica's arena on another GPU
    if (capturable()) {
      if (grads.device_index() != state_.device())
        throw ValueError("kiln::optim::GradScaler: a capturable scaler keeps its state on device " +
                         std::to_string(state_.device()) + ", but these gradients are on device " +
                         std::to_string(grads.device_index()) + "; create the scaler with their device current");  // the flag stays on the device: update() reads and clears it
      std::int32_t* any = capturable_flag(grads.device_index());
      kiln::detail::executor<D>::for_each(
          grads.numel(), detail::UnscaleAndCheck<M>{grads.data(), M(1), optimizer_flag(opt),
                                                    state_.data() + detail::ScalerState::inv_scale, any});
      return false;
    }
    auto& flag = flag_.tensor;
    const int device = grads.device_index();
    if (flag.empty() || flag.device_index() != device) {
      flag = Tensor<std::int32_t, Shape<dyn>, D>(Extents<Shape<dyn>>(1), device);
      flag_.clear = false;
    }
    if (!flag_.clear) {
      const std::int32_t zero = 0;
      flag.copy_from(std::span<const std::int32_t>(&zero, 1));
    }
    flag_.clear = false;  // until the read-back says so
    // torch: inv_scale = scale.double().reciprocal().float()
    const float inv = static_cast<float>(1.0 / static_cast<double>(scale_));
    if (detail::is_inf_or_nan(inv))  // torch would multiply by inf and write inf/NaN into the weights
      throw Error("kiln::optim::GradScaler: the scale fell to " + format(scale_) +
                  ", whose inverse is not a float32, after " + std::to_string(skipped_) +
                  " skipped steps: the gradients are inf/NaN at every scale; check the data, the loss and "
                  "the learning rate. A loss that is inf or NaN itself points to the forward: an fp16 "
                  "activation or input past 65504 is inf whatever the scale (bf16 holds float's range; or "
                  "scale the inputs down)");
    const M inv_scale = static_cast<M>(inv);
    kiln::detail::executor<D>::for_each(grads.numel(),
                                        detail::UnscaleAndCheck<M>{grads.data(), inv_scale, flag.data()});
    const bool found = flag.item() != 0;
    flag_.clear = !found;
    return found;
  }

  static std::string format(double v) { return kiln::detail::shortest_text(v); }  // reads back exactly
  template <class T>
  static bool parse(const std::string& s, T& v) {
    return kiln::detail::parse_whole(s, v);
  }

  static constexpr int max_capturable_optimizers = 16;
  GradScalerOptions o_;
  float scale_ = 0.0f;
  std::int64_t tracker_ = 0;
  std::int64_t skipped_ = 0;
  std::vector<PerOptimizer> per_optimizer_;
  Flag flag_;
  detail::DeviceScalars<Dev> state_;  // capturable only: detail::ScalerState (the flag is flag_'s tensor)
};

}  // namespace kiln::optim
