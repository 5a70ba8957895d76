/// Optimizer state in checkpoints: torch.optim's state_dict() as safetensors entries and metadata.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/nan.hpp"
#include "kiln/core/number_text.hpp"
#include "kiln/io/safetensors.hpp"
#include "kiln/optim/step_counts.hpp"

namespace kiln {

/// An optimizer's state, ready for save_checkpoint(path, model, state.entries, state.metadata). kiln's
/// optimizers keep each kind of state in one arena over all parameters (in the model's parameter order),
/// so each is one entry, and the scalars are metadata:
///   Adam, AdamW   "optimizer.exp_avg", "optimizer.exp_avg_sq" (+ "optimizer.max_exp_avg_sq" with amsgrad);
///                 metadata "optimizer.step" (torch's state["step"])
///   RMSprop       "optimizer.square_avg" (+ "optimizer.grad_avg" centered, "optimizer.momentum_buffer"
///                 where there is one); metadata "optimizer.step"
///   Adagrad       "optimizer.sum"; metadata "optimizer.step"
///   NAdam         "optimizer.exp_avg", "optimizer.exp_avg_sq"; metadata "optimizer.step" and
///                 "optimizer.mu_product" (torch's state["mu_product"], the text that reads back exactly)
///   RAdam         "optimizer.exp_avg", "optimizer.exp_avg_sq"; metadata "optimizer.step"
///   Adamax        "optimizer.exp_avg", "optimizer.exp_inf"; metadata "optimizer.step"
///   Adadelta      "optimizer.square_avg", "optimizer.acc_delta"; metadata "optimizer.step"
///   SGD           "optimizer.momentum_buffer" (with momentum, or where one was turned on since:
///                 OneCycleLR); metadata "optimizer.momentum_initialized" ("1" once a step has filled it;
///                 with layers frozen for the first steps, "optimizer.momentum_filled_from": the offset
///                 where the filled buffers begin).
///                 Loaded whatever the momentum is now; a state without it makes the next step start
///                 the buffers from its gradient (torch: no momentum_buffer in the state)
/// and "optimizer.type" (Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, Adadelta, SGD). Where the
/// parameters have stepped unalike (layers frozen for some steps, then unfrozen: torch counts each
/// parameter's steps), "optimizer.step_runs" too: "begin:steps" per run of the arena, comma-separated
/// (NAdam's "begin:steps:mu_product"); "optimizer.step" is then the last run's. The
/// hyperparameters are metadata too, as torch's param_groups are in its state_dict: "optimizer.lr",
/// "optimizer.weight_decay" and "optimizer.maximize"; Adam/AdamW "beta1", "beta2", "eps", "amsgrad"; RMSprop
/// "alpha", "eps", "momentum", "centered"; Adagrad "lr_decay", "eps", "initial_accumulator_value"; NAdam
/// "beta1", "beta2", "eps", "momentum_decay"; RAdam and Adamax "beta1", "beta2", "eps"; Adadelta "rho",
/// "eps"; SGD "momentum", "dampening", "nesterov". Loading restores the learning rate, the betas and the
/// momentum (what schedulers move during training: a resumed run goes on with the values the run had reached,
/// as torch's load_state_dict does); the others must equal the optimizer's (torch would take the
/// checkpoint's; kiln fixes them, and amsgrad, centered and nesterov shape the state, at construction), else
/// a CheckpointError names both. A checkpoint without them (written before kiln saved them) leaves the
/// optimizer's; its maximize, which kiln did not have then, counts as false.
/// Parameter groups (add_param_group), as torch's param_groups: "optimizer.param_groups" (their number,
/// where more than one) and for each group k >= 1 "optimizer.param_groups.k.params" (its parameters'
/// names, comma-separated), ".lr" and ".weight_decay". The optimizer being loaded must have the same
/// groups (add them before loading; torch: "loaded state dict has a different number of parameter
/// groups"), each with the same parameters and weight decay; their learning rates are restored.
struct OptimizerState {
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};

namespace detail {
template <class Opt>
concept adam_like = requires(const Opt& o) {
  o.exp_avg();
  o.exp_avg_sq();
  o.max_exp_avg_sq();
  o.step_count();
};
template <class Opt>
concept sgd_like = requires(const Opt& o) {
  o.momentum_buffer();
  o.momentum_initialized();
};
template <class Opt>
concept rmsprop_like = requires(const Opt& o) {
  o.square_avg();
  o.grad_avg();
  o.momentum_buffer();
  o.step_count();
};

template <class Opt>
concept adagrad_like = requires(const Opt& o) {
  o.sum();
  o.step_count();
  o.options().lr_decay;
};
/// NAdam: Adam's moments (no max_exp_avg_sq), the momentum schedule's product and its decay.
template <class Opt>
concept nadam_like = requires(const Opt& o) {
  o.exp_avg();
  o.exp_avg_sq();
  o.mu_product();
  o.step_count();
  o.options().momentum_decay;
};
/// Adam's moments, betas and step count (Adam, AdamW, NAdam, RAdam).
template <class Opt>
concept adam_moments = requires(const Opt& o) {
  o.exp_avg();
  o.exp_avg_sq();
  o.step_count();
  o.options().betas;
};
/// RAdam: Adam's moments, and neither Adam's max_exp_avg_sq nor NAdam's momentum schedule.
template <class Opt>
concept radam_like = adam_moments<Opt> && !adam_like<Opt> && !nadam_like<Opt>;
/// Adamax: the first moment and the decayed infinity norm.
template <class Opt>
concept adamax_like = requires(const Opt& o) {
  o.exp_avg();
  o.exp_inf();
  o.step_count();
};
/// Adadelta: the running averages of the squared gradients and of the squared steps.
template <class Opt>
concept adadelta_like = requires(const Opt& o) {
  o.square_avg();
  o.acc_delta();
  o.step_count();
};
/// The optimizers a checkpoint holds the state of.
template <class Opt>
concept checkpointed_optimizer = adam_like<Opt> || rmsprop_like<Opt> || adagrad_like<Opt> ||
    nadam_like<Opt> || radam_like<Opt> || adamax_like<Opt> || adadelta_like<Opt> || sgd_like<Opt>;

template <class Opt>
std::string optimizer_type() {
  if constexpr (adam_like<Opt>) return Opt::decoupled_weight_decay ? "AdamW" : "Adam";
  else if constexpr (rmsprop_like<Opt>) return "RMSprop";
  else if constexpr (adagrad_like<Opt>) return "Adagrad";
  else if constexpr (nadam_like<Opt>) return "NAdam";
  else if constexpr (radam_like<Opt>) return "RAdam";
  else if constexpr (adamax_like<Opt>) return "Adamax";
  else if constexpr (adadelta_like<Opt>) return "Adadelta";
  else return "SGD";
}

/// A hyperparameter as metadata: the shortest text that reads back to the same value (bool: 0 or 1).
template <class V>
std::string hyper_text(V v) {
  if constexpr (std::is_same_v<V, bool>) {
    return v ? "1" : "0";
  } else {
    return kiln::detail::shortest_text(v);
  }
}
/// The hyperparameter `optimizer.<name>` where the checkpoint has it (else `current`, as in checkpoints
/// written before kiln saved them); a CheckpointError when it is not a number of V's type.
template <class V>
V hyper_value(const std::map<std::string, std::string>& meta, const std::string& name, V current, const std::string& path) {
  const auto it = meta.find("optimizer." + name);
  if (it == meta.end()) return current;
  const std::string& t = it->second;
  V v{};
  bool ok = false;
  if constexpr (std::is_same_v<V, bool>) {
    ok = t == "0" || t == "1";
    v = t == "1";
  } else {
    ok = kiln::detail::parse_whole(t, v);
    if constexpr (std::is_floating_point_v<V>) ok = ok && !kiln::detail::is_inf_or_nan(v);  // (bits: -ffast-math)
  }
  if (!ok)
    throw CheckpointError("kiln: " + path + ": metadata 'optimizer." + name + "' is '" +
                          detail::name_shown(t.substr(0, 80)) + "'; expected " +
                          (std::is_same_v<V, bool> ? "0 or 1" : "a finite number"));
  return v;
}
/// A hyperparameter that shapes the optimizer's state (amsgrad, centered, nesterov, ...) or that kiln
/// cannot change after construction: the checkpoint's must be the optimizer's, else a CheckpointError
/// that names both (torch's load_state_dict would take the checkpoint's). A checkpoint without the key
/// matches, unless `absent` says what every optimizer that wrote such a checkpoint had. Numbers that
/// agree as float32 values match: kiln's optimizers held eps and weight_decay as floats until
/// 2026-12-04, so a checkpoint of theirs says "1e-08" where an optimizer built from `1e-8f` holds
/// 9.99999994e-09.
template <class V>
void hyper_must_match(const std::map<std::string, std::string>& meta, const std::string& name, V current,
                      const std::string& type, const std::string& path,
                      std::optional<V> absent = std::nullopt) {
  const V saved =
      absent && !meta.contains("optimizer." + name) ? *absent : hyper_value(meta, name, current, path);
  bool same = saved == current;
  if constexpr (std::is_floating_point_v<V>) same = same || static_cast<float>(saved) == static_cast<float>(current);
  if (!same)
    throw CheckpointError("kiln: " + path + ": the checkpoint's " + type + " has " + name + " = " + hyper_text(saved) +
                          ", this one " + hyper_text(current) + "; build the optimizer with the checkpoint's " + name);
}

/// The betas a checkpoint restores (`o`'s where it has none); a CheckpointError unless in [0, 1).
template <class Options>
auto restored_betas(const Options& o, const std::map<std::string, std::string>& meta,
                    const std::string& path) {
  const std::remove_cvref_t<decltype(o.betas)> betas{hyper_value(meta, "beta1", o.betas.beta1, path),
                                                     hyper_value(meta, "beta2", o.betas.beta2, path)};
  if (!(betas.beta1 >= 0.0 && betas.beta1 < 1.0 && betas.beta2 >= 0.0 && betas.beta2 < 1.0))
    throw CheckpointError("kiln: " + path + ": metadata betas (" + hyper_text(betas.beta1) + ", " +
                          hyper_text(betas.beta2) + ") are not in [0, 1)");
  return betas;
}

/// A group's parameter names as metadata: "0.bias,2.bias".
inline std::string joined_names(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ",") + n;
  return text;
}

/// The lrs of a checkpoint's groups 1, 2, ... after checking that its groups are the optimizer's: as
/// many, each with the same parameters and weight decay (a CheckpointError naming the difference).
template <class Opt>
std::vector<double> restored_group_lrs(const Opt& opt, const std::map<std::string, std::string>& meta,
                                       const std::string& type, const std::string& path) {
  // (a checkpoint of one group, or from before groups, has no count)
  const auto saved = static_cast<std::size_t>(
      meta.contains("optimizer.param_groups") ? metadata_count(meta, "optimizer.param_groups", path) : 1);
  if (saved != opt.param_group_count())
    throw CheckpointError("kiln: " + path + ": the checkpoint's " + type + " has " + std::to_string(saved) +
                          " parameter groups, this one " + std::to_string(opt.param_group_count()) +
                          " (torch: loaded state dict has a different number of parameter groups); add the "
                          "same groups with add_param_group before loading");
  std::vector<double> lrs;
  for (std::size_t k = 1; k < saved; ++k) {
    const std::string group = "param_groups." + std::to_string(k) + ".";
    const auto names = meta.find("optimizer." + group + "params");
    const std::string mine = joined_names(opt.group_parameter_names(k));
    if (names == meta.end() || names->second != mine)
      throw CheckpointError("kiln: " + path + ": the checkpoint's parameter group " + std::to_string(k) + " holds " +
                            (names == meta.end() ? std::string("no parameter names")
                                                 : "'" + detail::name_shown(names->second.substr(0, 200)) + "'") +
                            ", this one '" + mine + "'; add the checkpoint's groups in its order before loading");
    if (!meta.contains("optimizer." + group + "lr"))
      throw CheckpointError("kiln: " + path + ": no metadata 'optimizer." + group + "lr'");
    hyper_must_match(meta, group + "weight_decay", opt.group_weight_decay(k), type, path);
    const double lr = hyper_value(meta, group + "lr", 0.0, path);
    if (!(lr >= 0.0)) throw CheckpointError("kiln: " + path + ": metadata 'optimizer." + group + "lr' is negative");
    lrs.push_back(lr);
  }
  return lrs;
}

/// Whether Opt counts steps (torch's state["step"]): every optimizer but SGD.
template <class Opt>
concept counts_steps = requires(const Opt& o) { o.step_runs(); };

/// "optimizer.step_runs" where the parameters have stepped unalike (layers frozen for some steps and then
/// unfrozen): StepCounts::text, NAdam's with each run's mu_product. Nothing when they are alike.
template <class Opt>
void add_step_runs(OptimizerState& s, const Opt& opt) {
  optim::StepCounts counts;
  counts.set_runs(std::vector<optim::StepRun>(opt.step_runs()));
  if (counts.runs().size() > 1) s.metadata["optimizer.step_runs"] = counts.text(nadam_like<Opt>);
}
/// A checkpoint's "optimizer.step_runs" for `opt`, checked: runs over its parameters whose last has
/// "optimizer.step" (and NAdam's "optimizer.mu_product"); nullopt where there is none (every parameter
/// at optimizer.step). A CheckpointError names what is wrong.
template <class Opt>
std::optional<std::vector<optim::StepRun>> restored_step_runs(const Opt& opt,
                                                              const std::map<std::string, std::string>& meta,
                                                              const std::string& path) {
  const auto it = meta.find("optimizer.step_runs");
  if (it == meta.end()) return std::nullopt;
  std::string why;
  auto runs = optim::StepCounts::parse(it->second, opt.gradients().numel(), nadam_like<Opt>, why);
  if (runs.empty())
    throw CheckpointError("kiln: " + path + ": metadata 'optimizer.step_runs': " + detail::name_shown(why));
  const std::int64_t step = metadata_count(meta, "optimizer.step", path);
  if (runs.back().steps != step)
    throw CheckpointError("kiln: " + path + ": metadata 'optimizer.step_runs' ends at " +
                          std::to_string(runs.back().steps) + " steps, 'optimizer.step' says " +
                          std::to_string(step) + "; expected the same count");
  if constexpr (nadam_like<Opt>) {
    const double product = hyper_value(meta, "mu_product", 1.0, path);
    if (runs.back().mu_product != product)
      throw CheckpointError("kiln: " + path + ": metadata 'optimizer.step_runs' ends at mu_product " +
                            hyper_text(runs.back().mu_product) + ", 'optimizer.mu_product' says " +
                            hyper_text(product) + "; expected the same product");
  }
  return runs;
}

template <class Arena>
void add_arena(OptimizerState& s, const std::string& name, const Arena& a) {
  using M = typename Arena::element_type;
  const std::vector<M> host = a.to_vector();
  s.entries[name] = make_entry<M>(std::span<const M>(host), {static_cast<index_t>(host.size())});
}

/// The entry `name` for arena `a`: present, of a's dtype and length; else a CheckpointError.
template <class Arena>
const SafetensorsEntry& entry_for(const Arena& a, const std::map<std::string, SafetensorsEntry>& entries,
                                  const std::string& name, const std::string& path) {
  using M = typename Arena::element_type;
  const auto it = entries.find(name);
  const std::size_t n = static_cast<std::size_t>(a.numel());
  const std::string expected = "expected " + std::to_string(n) + " values of " + safetensors_dtype<M>() +
                               " (the optimizer's parameters)";
  if (it == entries.end())
    throw CheckpointError("kiln: " + path + ": no optimizer state '" + name + "'; " + expected);
  const SafetensorsEntry& e = it->second;
  if (e.dtype != safetensors_dtype<M>() || e.bytes.size() != n * sizeof(M) ||
      e.shape != std::vector<index_t>{static_cast<index_t>(n)})
    throw CheckpointError("kiln: " + path + ": optimizer state '" + name + "' is " + e.dtype + " of shape " +
                          shape_text(e.shape) + "; " + expected);
  return it->second;
}
template <class Arena>
void load_arena(Arena& a, const SafetensorsEntry& e) {
  using M = typename Arena::element_type;
  std::vector<M> host(static_cast<std::size_t>(a.numel()));
  if (!e.bytes.empty()) std::memcpy(host.data(), e.bytes.data(), e.bytes.size());
  a.copy_from(std::span<const M>(host));
}

}  // namespace detail

/// The state of `opt` (Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, Adadelta or SGD) as entries and
/// metadata (copies from the device).
template <class Opt>
OptimizerState optimizer_state(const Opt& opt) {
  static_assert(
      detail::checkpointed_optimizer<Opt>,
      "kiln::optimizer_state: Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, Adadelta or SGD");
  OptimizerState s;
  s.metadata["optimizer.type"] = detail::optimizer_type<Opt>();
  const auto hyper = [&](const std::string& name, auto v) { s.metadata["optimizer." + name] = detail::hyper_text(v); };
  const auto& o = opt.options();
  hyper("lr", opt.lr());
  hyper("weight_decay", o.weight_decay);
  if constexpr (detail::adam_like<Opt>) {
    hyper("beta1", o.betas.beta1);
    hyper("beta2", o.betas.beta2);
    hyper("eps", o.eps);
    hyper("amsgrad", o.amsgrad);
  } else if constexpr (detail::rmsprop_like<Opt>) {
    hyper("alpha", o.alpha);
    hyper("eps", o.eps);
    hyper("momentum", o.momentum);
    hyper("centered", o.centered);
  } else if constexpr (detail::adagrad_like<Opt>) {
    hyper("lr_decay", o.lr_decay);
    hyper("eps", o.eps);
    hyper("initial_accumulator_value", o.initial_accumulator_value);
  } else if constexpr (detail::nadam_like<Opt> || detail::radam_like<Opt> || detail::adamax_like<Opt>) {
    hyper("beta1", o.betas.beta1);
    hyper("beta2", o.betas.beta2);
    hyper("eps", o.eps);
    if constexpr (detail::nadam_like<Opt>) hyper("momentum_decay", o.momentum_decay);
  } else if constexpr (detail::adadelta_like<Opt>) {
    hyper("rho", o.rho);
    hyper("eps", o.eps);
  } else {
    hyper("momentum", o.momentum);
    hyper("dampening", o.dampening);
    hyper("nesterov", o.nesterov);
  }
  hyper("maximize", o.maximize);
  if (opt.param_group_count() > 1) {
    s.metadata["optimizer.param_groups"] = std::to_string(opt.param_group_count());
    for (std::size_t k = 1; k < opt.param_group_count(); ++k) {
      const std::string group = "param_groups." + std::to_string(k) + ".";
      hyper(group + "lr", opt.group_lr(k));
      hyper(group + "weight_decay", opt.group_weight_decay(k));
      s.metadata["optimizer." + group + "params"] = detail::joined_names(opt.group_parameter_names(k));
    }
  }
  if constexpr (detail::adam_like<Opt>) {
    detail::add_arena(s, "optimizer.exp_avg", opt.exp_avg());
    detail::add_arena(s, "optimizer.exp_avg_sq", opt.exp_avg_sq());
    if (opt.options().amsgrad) detail::add_arena(s, "optimizer.max_exp_avg_sq", opt.max_exp_avg_sq());
    s.metadata["optimizer.step"] = std::to_string(opt.step_count());
  } else if constexpr (detail::rmsprop_like<Opt>) {
    detail::add_arena(s, "optimizer.square_avg", opt.square_avg());
    if (!opt.grad_avg().empty()) detail::add_arena(s, "optimizer.grad_avg", opt.grad_avg());
    if (!opt.momentum_buffer().empty()) detail::add_arena(s, "optimizer.momentum_buffer", opt.momentum_buffer());
    s.metadata["optimizer.step"] = std::to_string(opt.step_count());
  } else if constexpr (detail::adagrad_like<Opt>) {
    detail::add_arena(s, "optimizer.sum", opt.sum());
    s.metadata["optimizer.step"] = std::to_string(opt.step_count());
  } else if constexpr (detail::nadam_like<Opt> || detail::radam_like<Opt>) {
    detail::add_arena(s, "optimizer.exp_avg", opt.exp_avg());
    detail::add_arena(s, "optimizer.exp_avg_sq", opt.exp_avg_sq());
    s.metadata["optimizer.step"] = std::to_string(opt.step_count());
    if constexpr (detail::nadam_like<Opt>)
      s.metadata["optimizer.mu_product"] = detail::hyper_text(opt.mu_product());
  } else if constexpr (detail::adamax_like<Opt>) {
    detail::add_arena(s, "optimizer.exp_avg", opt.exp_avg());
    detail::add_arena(s, "optimizer.exp_inf", opt.exp_inf());
    s.metadata["optimizer.step"] = std::to_string(opt.step_count());
  } else if constexpr (detail::adadelta_like<Opt>) {
    detail::add_arena(s, "optimizer.square_avg", opt.square_avg());
    detail::add_arena(s, "optimizer.acc_delta", opt.acc_delta());
    s.metadata["optimizer.step"] = std::to_string(opt.step_count());
  } else {
    if (!opt.momentum_buffer().empty()) {  // a momentum now, or one that was (OneCycleLR cycles it)
      detail::add_arena(s, "optimizer.momentum_buffer", opt.momentum_buffer());
      s.metadata["optimizer.momentum_initialized"] = opt.momentum_initialized() ? "1" : "0";
      if (opt.momentum_initialized() && opt.momentum_filled_from() > 0)  // layers frozen since (Model::freeze)
        s.metadata["optimizer.momentum_filled_from"] = std::to_string(opt.momentum_filled_from());
    }
  }
  if constexpr (detail::counts_steps<Opt>) detail::add_step_runs(s, opt);
  return s;
}

namespace detail {
/// load_optimizer_state's checks, then (where `write`) its writes; `Opt` is const where not.
template <bool write, class Opt>
void restore_optimizer_state(Opt& opt, const std::map<std::string, SafetensorsEntry>& entries,
                             const std::map<std::string, std::string>& metadata, const std::string& path) {
  const auto type = metadata.find("optimizer.type");
  const std::string expected = detail::optimizer_type<std::remove_const_t<Opt>>();
  if (type == metadata.end() || type->second != expected)
    throw CheckpointError("kiln: " + path + ": " +
                          (type == metadata.end() ? std::string("no optimizer state (metadata 'optimizer.type')")
                                                  : "the optimizer state is " + type->second + "'s") +
                          "; expected " + expected + "'s");
  // The hyperparameters, as torch's load_state_dict restores param_groups: the learning rate, betas and
  // momentum (which schedulers move during training) are the checkpoint's; the others must match.
  const auto& o = opt.options();
  const double lr = detail::hyper_value(metadata, "lr", opt.lr(), path);
  if (!(lr >= 0.0)) throw CheckpointError("kiln: " + path + ": metadata 'optimizer.lr' is negative");
  detail::hyper_must_match(metadata, "weight_decay", o.weight_decay, expected, path);
  const std::vector<double> group_lrs = detail::restored_group_lrs(opt, metadata, expected, path);
  if constexpr (detail::adam_like<Opt>) {
    detail::hyper_must_match(metadata, "eps", o.eps, expected, path);
    detail::hyper_must_match(metadata, "amsgrad", o.amsgrad, expected, path);
  } else if constexpr (detail::rmsprop_like<Opt>) {
    detail::hyper_must_match(metadata, "alpha", o.alpha, expected, path);
    detail::hyper_must_match(metadata, "eps", o.eps, expected, path);
    detail::hyper_must_match(metadata, "centered", o.centered, expected, path);
  } else if constexpr (detail::adagrad_like<Opt>) {
    detail::hyper_must_match(metadata, "lr_decay", o.lr_decay, expected, path);
    detail::hyper_must_match(metadata, "eps", o.eps, expected, path);
    detail::hyper_must_match(metadata, "initial_accumulator_value", o.initial_accumulator_value, expected,
                             path);
  } else if constexpr (detail::nadam_like<Opt> || detail::radam_like<Opt> || detail::adamax_like<Opt>) {
    detail::hyper_must_match(metadata, "eps", o.eps, expected, path);
    if constexpr (detail::nadam_like<Opt>)
      detail::hyper_must_match(metadata, "momentum_decay", o.momentum_decay, expected, path);
  } else if constexpr (detail::adadelta_like<Opt>) {
    detail::hyper_must_match(metadata, "rho", o.rho, expected, path);
    detail::hyper_must_match(metadata, "eps", o.eps, expected, path);
  } else {
    detail::hyper_must_match(metadata, "dampening", o.dampening, expected, path);
    detail::hyper_must_match(metadata, "nesterov", o.nesterov, expected, path);
  }
  // (a checkpoint from before maximize was saved comes from an optimizer that minimised)
  detail::hyper_must_match(metadata, "maximize", o.maximize, expected, path, std::optional<bool>(false));
  // Everything is checked before anything is written: a bad checkpoint leaves the optimizer as it was.
  [[maybe_unused]] std::optional<std::vector<optim::StepRun>> step_runs;
  if constexpr (detail::counts_steps<Opt>) step_runs = detail::restored_step_runs(opt, metadata, path);
  if constexpr (detail::adam_like<Opt>) {
    const auto betas = detail::restored_betas(o, metadata, path);
    const std::int64_t step = metadata_count(metadata, "optimizer.step", path);
    const auto& m = detail::entry_for(opt.exp_avg(), entries, "optimizer.exp_avg", path);
    const auto& v = detail::entry_for(opt.exp_avg_sq(), entries, "optimizer.exp_avg_sq", path);
    const SafetensorsEntry* vmax =
        opt.options().amsgrad ? &detail::entry_for(opt.max_exp_avg_sq(), entries, "optimizer.max_exp_avg_sq", path)
                              : nullptr;
    if constexpr (write) {
      detail::load_arena(opt.exp_avg(), m);
      detail::load_arena(opt.exp_avg_sq(), v);
      if (vmax) detail::load_arena(opt.max_exp_avg_sq(), *vmax);
      opt.set_step_count(step);
      opt.set_betas(betas);
    }
  } else if constexpr (detail::rmsprop_like<Opt>) {
    // As torch's: the centred average where the optimizer is centred; the momentum buffers where the
    // checkpoint has them, else zeros where this optimizer has a momentum (torch 1.13 would fail at its
    // next step with KeyError: 'momentum_buffer').
    const double momentum = detail::hyper_value(metadata, "momentum", o.momentum, path);
    if (!(momentum >= 0.0f)) throw CheckpointError("kiln: " + path + ": metadata 'optimizer.momentum' is negative");
    const std::int64_t step = metadata_count(metadata, "optimizer.step", path);
    const auto& v = detail::entry_for(opt.square_avg(), entries, "optimizer.square_avg", path);
    const SafetensorsEntry* m =
        opt.options().centered ? &detail::entry_for(opt.gradients(), entries, "optimizer.grad_avg", path) : nullptr;
    const SafetensorsEntry* b = entries.contains("optimizer.momentum_buffer")
                                    ? &detail::entry_for(opt.gradients(), entries, "optimizer.momentum_buffer", path)
                                    : nullptr;
    if constexpr (write) {
      detail::load_arena(opt.square_avg(), v);
      if (m) detail::load_arena(opt.grad_avg(), *m);
      if (b) {
        opt.make_momentum_buffer();
        detail::load_arena(opt.momentum_buffer(), *b);
      } else if (!opt.momentum_buffer().empty()) {
        opt.momentum_buffer().fill(0.0f);
      }
      opt.set_step_count(step);
      opt.set_momentum(momentum);
    }
  } else if constexpr (detail::adagrad_like<Opt>) {
    const std::int64_t step = metadata_count(metadata, "optimizer.step", path);
    const auto& sum = detail::entry_for(opt.sum(), entries, "optimizer.sum", path);
    if constexpr (write) {
      detail::load_arena(opt.sum(), sum);
      opt.set_step_count(step);
    }
  } else if constexpr (detail::nadam_like<Opt> || detail::radam_like<Opt>) {
    const auto betas = detail::restored_betas(o, metadata, path);
    const std::int64_t step = metadata_count(metadata, "optimizer.step", path);
    double mu_product = 1.0;
    if constexpr (detail::nadam_like<Opt>) {
      // (a product of the momentum schedule's factors, each in [0, 1))
      if (!metadata.contains("optimizer.mu_product"))
        throw CheckpointError("kiln: " + path + ": no metadata 'optimizer.mu_product' (NAdam's state)");
      mu_product = detail::hyper_value(metadata, "mu_product", 1.0, path);
      if (!(mu_product >= 0.0 && mu_product <= 1.0))
        throw CheckpointError("kiln: " + path + ": metadata 'optimizer.mu_product' is " +
                              detail::hyper_text(mu_product) + "; expected a number in [0, 1]");
    }
    const auto& m = detail::entry_for(opt.exp_avg(), entries, "optimizer.exp_avg", path);
    const auto& v = detail::entry_for(opt.exp_avg_sq(), entries, "optimizer.exp_avg_sq", path);
    if constexpr (write) {
      detail::load_arena(opt.exp_avg(), m);
      detail::load_arena(opt.exp_avg_sq(), v);
      opt.set_step_count(step);
      opt.set_betas(betas);
      if constexpr (detail::nadam_like<Opt>) opt.set_mu_product(mu_product);
    }
  } else if constexpr (detail::adamax_like<Opt>) {
    const auto betas = detail::restored_betas(o, metadata, path);
    const std::int64_t step = metadata_count(metadata, "optimizer.step", path);
    const auto& m = detail::entry_for(opt.exp_avg(), entries, "optimizer.exp_avg", path);
    const auto& u = detail::entry_for(opt.exp_inf(), entries, "optimizer.exp_inf", path);
    if constexpr (write) {
      detail::load_arena(opt.exp_avg(), m);
      detail::load_arena(opt.exp_inf(), u);
      opt.set_step_count(step);
      opt.set_betas(betas);
    }
  } else if constexpr (detail::adadelta_like<Opt>) {
    const std::int64_t step = metadata_count(metadata, "optimizer.step", path);
    const auto& v = detail::entry_for(opt.square_avg(), entries, "optimizer.square_avg", path);
    const auto& a = detail::entry_for(opt.acc_delta(), entries, "optimizer.acc_delta", path);
    if constexpr (write) {
      detail::load_arena(opt.square_avg(), v);
      detail::load_arena(opt.acc_delta(), a);
      opt.set_step_count(step);
    }
  } else {
    // Buffers where the checkpoint has them, whatever the momentum is now (a scheduler may set it after
    // loading); none (torch: no momentum_buffer in the state) and the next step starts them afresh.
    const double momentum = detail::hyper_value(metadata, "momentum", o.momentum, path);
    if (!(momentum >= 0.0f)) throw CheckpointError("kiln: " + path + ": metadata 'optimizer.momentum' is negative");
    if (metadata.contains("optimizer.momentum_filled_from") && !metadata.contains("optimizer.momentum_initialized"))
      throw CheckpointError("kiln: " + path + ": metadata 'optimizer.momentum_filled_from' without "
                            "'optimizer.momentum_initialized' and the buffers it describes");
    if (entries.contains("optimizer.momentum_buffer") || metadata.contains("optimizer.momentum_initialized")) {
      const std::int64_t on = metadata_count(metadata, "optimizer.momentum_initialized", path);
      if (on > 1)
        throw CheckpointError("kiln: " + path + ": metadata 'optimizer.momentum_initialized' is " +
                              std::to_string(on) + "; expected 0 or 1");
      // Where the filled buffers begin, with layers frozen for the first steps; else all or none.
      index_t filled_from = on != 0 ? 0 : opt.gradients().numel();
      if (metadata.contains("optimizer.momentum_filled_from")) {
        filled_from = static_cast<index_t>(metadata_count(metadata, "optimizer.momentum_filled_from", path));
        if (on != 1 || filled_from >= opt.gradients().numel())
          throw CheckpointError("kiln: " + path + ": metadata 'optimizer.momentum_filled_from' is " +
                                std::to_string(filled_from) + " with 'optimizer.momentum_initialized' " +
                                std::to_string(on) + "; expected an offset below " +
                                std::to_string(opt.gradients().numel()) +
                                " (the parameters) with momentum_initialized 1");
      }
      // (checked against the gradients, which the buffers match, before any buffer is made)
      const auto& buf = detail::entry_for(opt.gradients(), entries, "optimizer.momentum_buffer", path);
      if constexpr (write) {
        opt.make_momentum_buffer();
        detail::load_arena(opt.momentum_buffer(), buf);
        opt.set_momentum_filled_from(filled_from);
      }
    } else if constexpr (write) {
      if (!opt.momentum_buffer().empty()) opt.set_momentum_initialized(false);
    }
    if constexpr (write) opt.set_momentum(momentum);  // after the buffers: one turned on starts them afresh
  }
  if constexpr (write) {
    if constexpr (detail::counts_steps<Opt>)
      if (step_runs) opt.set_step_runs(std::move(*step_runs));  // after set_step_count (and set_mu_product)
    opt.set_lr(lr);
    for (std::size_t k = 0; k < group_lrs.size(); ++k) opt.set_group_lr(k + 1, group_lrs[k]);
  }
}
}  // namespace detail

/// Restores what optimizer_state wrote, from the entries and metadata load_checkpoint gave (`path` for
/// the messages). Throws CheckpointError when the checkpoint holds another optimizer's state, or a state
/// is missing or of another size or dtype (a checkpoint of another model, say); everything is checked
/// before anything is written, so a bad checkpoint leaves the optimizer as it was.
template <class Opt>
void load_optimizer_state(Opt& opt, const std::map<std::string, SafetensorsEntry>& entries,
                          const std::map<std::string, std::string>& metadata, const std::string& path) {
  static_assert(
      detail::checkpointed_optimizer<Opt>,
      "kiln::load_optimizer_state: Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, Adadelta or SGD");
  detail::restore_optimizer_state<true>(opt, entries, metadata, path);
}

/// load_optimizer_state's checks without its writes: throws what it would throw, changes nothing. For a
/// resume that checks every part of a checkpoint before it writes any (load_checkpoint's `check`).
template <class Opt>
void check_optimizer_state(const Opt& opt, const std::map<std::string, SafetensorsEntry>& entries,
                           const std::map<std::string, std::string>& metadata, const std::string& path) {
  static_assert(
      detail::checkpointed_optimizer<Opt>,
      "kiln::check_optimizer_state: Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, Adadelta or SGD");
  detail::restore_optimizer_state<false>(opt, entries, metadata, path);
}

}  // namespace kiln
