/// The step counts of an optimizer's parameters (torch's per-parameter state["step"]) when some steps
/// skipped some of them: layers frozen (Model::freeze) for a while and then unfrozen.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/index.hpp"
#include "kiln/core/number_text.hpp"

namespace kiln::optim {

/// A run of the parameter arena whose parameters have all stepped `steps` times: from `begin` to the
/// next run's begin (the arena's end for the last). `mu_product` is NAdam's product of its momentum
/// schedule over those steps (1 for the other optimizers).
struct StepRun {
  index_t begin = 0;
  std::int64_t steps = 0;
  double mu_product = 1.0;
  friend bool operator==(const StepRun&, const StepRun&) = default;
};

/// torch keeps state["step"] per parameter, and a step leaves a parameter without a gradient alone
/// (no state, no count), so a layer unfrozen after k steps starts its bias corrections from step 1
/// while the others are at k + 1. kiln's frozen parameters are a prefix of the arena, so the counts
/// are runs, ascending in begin: one run until a step skips a prefix, a new run where it ends. Runs
/// that come to count alike merge again.
class StepCounts {
 public:
  /// Every parameter at or past `from` steps once (a run that straddles `from` splits there); returns
  /// the runs that stepped, for an optimizer to update what it keeps per run (NAdam's mu_product).
  std::span<StepRun> advance(index_t from) {
    merge();
    std::size_t k = 0;
    while (k + 1 < runs_.size() && runs_[k + 1].begin <= from) ++k;
    if (runs_[k].begin < from) {
      StepRun tail = runs_[k];
      tail.begin = from;
      runs_.insert(runs_.begin() + static_cast<std::ptrdiff_t>(++k), tail);
    }
    for (std::size_t j = k; j < runs_.size(); ++j) ++runs_[j].steps;
    return std::span<StepRun>(runs_).subspan(k);
  }
  /// The count of the arena's last parameter: the steps taken over every parameter that was never
  /// frozen (what step_count() reports).
  std::int64_t last() const { return runs_.back().steps; }
  /// Whether every parameter at or past `from` has the same count (and NAdam product).
  bool uniform_from(index_t from) const {
    for (std::size_t k = 1; k < runs_.size(); ++k)
      if (runs_[k].begin > from && (runs_[k].steps != runs_[k - 1].steps ||
                                    runs_[k].mu_product != runs_[k - 1].mu_product))
        return false;
    return true;
  }
  /// Every parameter at `steps` (a checkpoint from before per-run counts, set_step_count).
  void set(std::int64_t steps, double mu_product = 1.0) { runs_.assign(1, StepRun{0, steps, mu_product}); }
  /// The runs, merged where neighbours count alike.
  const std::vector<StepRun>& runs() const {
    merge();
    return runs_;
  }
  /// Replaces the runs (a checkpoint's); `runs` must be what valid() accepts.
  void set_runs(std::vector<StepRun> runs) {
    runs_ = std::move(runs);
    merge();
  }
  /// Calls f(offset, count, run) for each part of [offset, offset + n) that one run covers.
  template <class F>
  void for_each_part(index_t offset, index_t n, F&& f) const {
    merge();
    const index_t end = offset + n;
    for (std::size_t k = 0; k < runs_.size(); ++k) {
      const index_t run_end = k + 1 < runs_.size() ? runs_[k + 1].begin : end;
      const index_t b = std::max(offset, runs_[k].begin), e = std::min(end, run_end);
      if (b < e) f(b, e - b, runs_[k]);
    }
  }

  /// The runs as checkpoint metadata: "begin:steps" joined by commas ("0:2,1184:5"), and
  /// ":mu_product" after each where `products` (NAdam; the text that reads back exactly).
  std::string text(bool products) const {
    std::string t;
    for (const StepRun& r : runs()) {
      t += (t.empty() ? "" : ",") + std::to_string(r.begin) + ":" + std::to_string(r.steps);
      if (products) t += ":" + kiln::detail::shortest_text(r.mu_product);
    }
    return t;
  }
  /// Reads text() back for an arena of `numel` parameters: the runs, or "" and `why` says what is wrong
  /// (begins from 0, ascending, below numel; counts from 0 to 2^53, never fewer than the run before:
  /// frozen layers are a prefix; products in [0, 1] where `products`).
  static std::vector<StepRun> parse(const std::string& text, index_t numel, bool products, std::string& why) {
    std::vector<StepRun> runs;
    std::size_t at = 0;
    while (at <= text.size()) {
      const std::size_t comma = std::min(text.find(',', at), text.size());
      const std::string item = text.substr(at, comma - at);
      const std::size_t c1 = item.find(':'), c2 = c1 == std::string::npos ? c1 : item.find(':', c1 + 1);
      StepRun r;
      bool ok = c1 != std::string::npos && (products ? c2 != std::string::npos : c2 == std::string::npos) &&
                kiln::detail::parse_whole(item.substr(0, c1), r.begin) &&
                kiln::detail::parse_whole(item.substr(c1 + 1, c2 == std::string::npos ? c2 : c2 - c1 - 1), r.steps);
      if (ok && products) ok = kiln::detail::parse_whole(item.substr(c2 + 1), r.mu_product);
      const std::string expected = products ? "begin:steps:mu_product" : "begin:steps";
      if (!ok) {
        why = "run " + std::to_string(runs.size()) + " is '" + item + "'; expected " + expected;
        return {};
      }
      constexpr std::int64_t most = std::int64_t(1) << 53;
      if (r.steps < 0 || r.steps > most || (!runs.empty() && r.steps < runs.back().steps) || r.begin < 0 ||
          r.begin >= std::max<index_t>(numel, 1) || (runs.empty() ? r.begin != 0 : r.begin <= runs.back().begin) ||
          (products && !(r.mu_product >= 0.0 && r.mu_product <= 1.0))) {
        why = "run " + std::to_string(runs.size()) + " is '" + item + "'; expected begins ascending from 0 below " +
              std::to_string(numel) + " (the parameters), steps from 0 to 2^53 and never fewer than the run " +
              "before" + (products ? ", mu_product in [0, 1]" : "");
        return {};
      }
      runs.push_back(r);
      at = comma + 1;
    }
    return runs;
  }

 private:
  /// Merges neighbours that count alike (a split undone by the steps after it, or a checkpoint's).
  void merge() const {
    std::size_t out = 0;
    for (std::size_t k = 1; k < runs_.size(); ++k) {
      if (runs_[k].steps == runs_[out].steps && runs_[k].mu_product == runs_[out].mu_product) continue;
      runs_[++out] = runs_[k];
    }
    runs_.resize(out + 1);
  }

  mutable std::vector<StepRun> runs_ = {StepRun{}};  // never empty; merge() keeps it minimal
};

}  // namespace kiln::optim
