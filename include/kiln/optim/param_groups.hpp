/// Parameter groups (torch's optimizer.param_groups): parameters that step with a learning rate or a
/// weight decay of their own, and the spans of the parameter arena each group covers.
#pragma once
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/warning.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::optim {

/// One parameter of a group: an entry of the model's named_parameters(), or its name ("0.bias"), which
/// the optimizer looks up among the parameters of the model it was built from.
class ParamRef {
 public:
  ParamRef(nn::ParameterInfo p) : info_(std::move(p)) {}  // NOLINT: implicit, as torch takes a tensor
  ParamRef(std::string name) : name_(std::move(name)) {}  // NOLINT
  ParamRef(std::string_view name) : name_(name) {}        // NOLINT
  ParamRef(const char* name) : name_(name) {}             // NOLINT
  /// The named_parameters() entry, or null for a name.
  const nn::ParameterInfo* info() const { return info_ ? &*info_ : nullptr; }
  const std::string& name() const { return info_ ? info_->name : name_; }

 private:
  std::optional<nn::ParameterInfo> info_;
  std::string name_;
};

namespace detail {
template <class T>
inline constexpr bool dependent_false = false;
template <class R>
concept param_range = std::ranges::input_range<R> && std::is_convertible_v<std::ranges::range_reference_t<R>, ParamRef>;
}  // namespace detail

/// A group's parameters: `{p1, p2}` or `{"0.bias", "2.bias"}`, or any range of named_parameters()
/// entries or names (a std::vector<kiln::nn::ParameterInfo> you filtered, a std::vector<std::string>).
class ParamList {
 public:
  ParamList() = default;
  ParamList(std::initializer_list<ParamRef> refs) : refs_(refs) {}
  template <detail::param_range R>
  ParamList(const R& refs) {  // NOLINT: implicit, `.params = no_decay`
    for (auto&& r : refs) refs_.emplace_back(r);
  }
  /// Anything else (the parameter arena, a tensor, a number): a compile error that says what to give.
  template <class T>
    requires(!detail::param_range<T>)
  ParamList(const T&) {  // NOLINT
    // >>> Stopped here? ParamGroup's params are parameters by entry or by name. <<<
    static_assert(detail::dependent_false<T>,
                  "kiln::optim::ParamGroup::params: give entries of model.named_parameters() (filtered into a "
                  "std::vector<kiln::nn::ParameterInfo>), or their names ({\"0.bias\", \"2.bias\"}); not the "
                  "parameter arena or a tensor");
  }
  /// One more parameter (`g.params.push_back(p)` or `push_back("0.bias")`).
  void push_back(ParamRef r) { refs_.push_back(std::move(r)); }
  std::size_t size() const { return refs_.size(); }
  bool empty() const { return refs_.empty(); }
  const std::vector<ParamRef>& refs() const { return refs_; }

 private:
  std::vector<ParamRef> refs_;
};

/// A parameter group, as an entry of torch's param_groups: some of the model's parameters and the
/// learning rate and weight decay they step with; an option left unset is the one the optimizer was
/// built with (torch: its defaults). Every parameter no group names stays in group 0, which steps with
/// the optimizer's own options. The fields in this order (designated initializers keep it). Example
/// (no weight decay on biases and norms, torch's usual AdamW recipe):
///   std::vector<kiln::nn::ParameterInfo> no_decay;
///   for (const auto& p : model.named_parameters()) if (p.shape.size() == 1) no_decay.push_back(p);
///   kiln::optim::AdamW opt(model, {.lr = 1e-3, .weight_decay = 0.05});
///   opt.add_param_group({.params = no_decay, .weight_decay = 0.0});
///   opt.add_param_group({.params = {"2.weight"}, .lr = 1e-2});   // by name
/// Other per-group options (betas, momentum, eps) are not provided: they are the optimizer's.
struct ParamGroup {
  // (initialised here, so that g++'s -Wextra does not warn of the fields a designated initializer leaves out)
  ParamList params{};
  std::optional<double> lr{};
  std::optional<double> weight_decay{};
};

namespace detail {

/// The groups after group 0 and the spans of the arena each covers. Empty (one group) until
/// add_param_group; an optimizer then runs its fused pass once per span with that span's options.
class GroupTable {
 public:
  struct Group {
    double lr = 0.0;
    double weight_decay = 0.0;
    double initial_lr = 0.0;  ///< the lr it was added with (a scheduler built before it starts it from there)
    std::vector<std::string> names;  ///< in arena order
  };
  /// Elements [offset, offset + count) of the arena, stepping with group `group` (0: the optimizer's options).
  struct Span {
    index_t offset = 0;
    index_t count = 0;
    std::size_t group = 0;
  };

  bool empty() const { return groups_.empty(); }
  std::size_t count() const { return 1 + groups_.size(); }
  Group& group(std::size_t k, const char* who) { return groups_.at(checked(k, who) - 1); }
  const Group& group(std::size_t k, const char* who) const { return groups_.at(checked(k, who) - 1); }
  const std::vector<Span>& spans() const { return spans_; }

  /// Adds group `g` over an arena of `numel` parameters whose first element is `arena`; `known`: the
  /// model's named_parameters() (empty for an optimizer built from arenas), for names. Unset options
  /// become `lr` and `weight_decay` (the optimizer's defaults). Checks before changing anything: the
  /// options (torch's words); every parameter this model's and inside the arena, a name one of the
  /// model's; none already in a group added before (torch: "some parameters appear in more than one
  /// parameter group"). A parameter named twice in `g` counts once, with torch's warning; a group of no
  /// parameters is added, with a warning (a filter that matched nothing shifts the later groups' numbers).
  void add(const ParamGroup& g, double lr, double weight_decay, index_t numel, const void* arena,
           const std::vector<nn::ParameterInfo>& known, const char* who) {
    const std::string name = std::string("kiln::optim::") + who + "::add_param_group";
    Group added{g.lr.value_or(lr), g.weight_decay.value_or(weight_decay), 0.0, {}};
    added.initial_lr = added.lr;
    if (!(added.lr >= 0.0)) throw ValueError(name + ": Invalid learning rate: " + std::to_string(added.lr));
    if (!(added.weight_decay >= 0.0))
      throw ValueError(name + ": Invalid weight_decay value: " + std::to_string(added.weight_decay));
    std::vector<Span> ranges;  // this group's parameters (group: index into names)
    std::vector<std::string> names;
    for (const auto& ref : g.params.refs()) {
      const nn::ParameterInfo p = resolve(ref, known, name);
      if (p.arena != nullptr && arena != nullptr && p.arena != arena)
        throw ValueError(name + ": parameter '" + p.name + "' is another model's (its named_parameters() entry "
                         "points at another parameter arena); give the entries of the model this optimizer steps");
      if (p.offset < 0 || p.count < 0 || p.offset > numel || p.count > numel - p.offset)
        throw ValueError(name + ": parameter '" + p.name + "' (offset " + std::to_string(p.offset) + ", " +
                         std::to_string(p.count) + " elements) is not in the optimizer's " +
                         std::to_string(numel) + " parameters; give entries of its model's named_parameters()");
      if (p.count == 0)
        throw ValueError(name + ": parameter '" + p.name + "' has no elements; give entries of the model's "
                         "named_parameters() (whose offsets and counts say where each is), or their names");
      const Span r{p.offset, p.count, names.size()};
      const auto same = std::find_if(ranges.begin(), ranges.end(),
                                     [&](const Span& q) { return q.offset == r.offset && q.count == r.count; });
      if (same != ranges.end()) {
        kiln::warn(name + ": optimizer contains a parameter group with duplicate parameters ('" + p.name +
                   "'); it steps once (torch: in future, this will cause an error)");
        continue;
      }
      for (const auto& q : ranges)
        if (q.offset < r.offset + r.count && r.offset < q.offset + q.count)
          throw ValueError(name + ": parameter '" + p.name + "' overlaps '" + names[q.group] + "' of the same group");
      for (const auto& s : spans_)
        if (s.group != 0 && s.offset < r.offset + r.count && r.offset < s.offset + s.count)
          throw ValueError(name + ": some parameters appear in more than one parameter group ('" + p.name +
                           "' is in group " + std::to_string(s.group) + ")");
      ranges.push_back(r);
      names.push_back(p.name);
    }
    if (ranges.empty())
      kiln::warn(name + ": group " + std::to_string(count()) + " has no parameters (a filter that matched "
                 "none?); it is added, and the groups after it are numbered from it");
    std::sort(ranges.begin(), ranges.end(), [](const Span& a, const Span& b) { return a.offset < b.offset; });
    for (const auto& r : ranges) added.names.push_back(names[r.group]);
    groups_.push_back(std::move(added));
    rebuild(std::move(ranges), numel);
  }

  /// The names of group 0's parameters: those of `known` (in arena order) no later group covers.
  std::vector<std::string> rest(const std::vector<nn::ParameterInfo>& known, const char* who) const {
    if (known.empty())
      throw ValueError(std::string("kiln::optim::") + who + ": group 0 holds every parameter no other group "
                       "names; this optimizer was built from arenas, not a model, so it has no names for them");
    std::vector<std::string> out;
    for (const auto& p : known) {
      const bool grouped = std::any_of(spans_.begin(), spans_.end(), [&](const Span& s) {
        return s.group != 0 && s.offset <= p.offset && p.offset < s.offset + s.count;
      });
      if (!grouped) out.push_back(p.name);
    }
    return out;
  }

 private:
  std::size_t checked(std::size_t k, const char* who) const {
    if (k == 0 || k >= count())
      throw ValueError(std::string("kiln::optim::") + who + ": parameter group " + std::to_string(k) +
                       " does not exist; the optimizer has " + std::to_string(count()) +
                       " (0 to " + std::to_string(count() - 1) + ")");
    return k;
  }
  /// The named_parameters() entry of `ref`: itself, or the model's parameter of that name (a
  /// ValueError naming some of the model's names where there is none).
  static nn::ParameterInfo resolve(const ParamRef& ref, const std::vector<nn::ParameterInfo>& known,
                                   const std::string& name) {
    if (ref.info() != nullptr) return *ref.info();
    if (known.empty())
      throw ValueError(name + ": parameter '" + ref.name() + "' by name needs an optimizer built from a model "
                       "(this one was built from arenas); give entries of the model's named_parameters()");
    const auto it = std::find_if(known.begin(), known.end(), [&](const auto& p) { return p.name == ref.name(); });
    if (it != known.end()) return *it;
    std::string some;
    for (std::size_t i = 0; i < known.size() && i < 8; ++i) some += (i ? ", " : "") + known[i].name;
    if (known.size() > 8) some += ", ... (" + std::to_string(known.size()) + " in all)";
    throw ValueError(name + ": the model has no parameter '" + ref.name() + "'; its parameters are " + some +
                     " (named_parameters(), torch's state_dict names)");
  }
  /// Spans covering [0, numel): the earlier groups' and the new group's ranges, group 0 between them;
  /// neighbours of one group merged (one pass over them).
  void rebuild(std::vector<Span> added, index_t numel) {
    std::vector<Span> named;
    for (const auto& s : spans_)
      if (s.group != 0) named.push_back(s);
    for (auto r : added) {
      r.group = groups_.size();
      named.push_back(r);
    }
    std::sort(named.begin(), named.end(), [](const Span& a, const Span& b) { return a.offset < b.offset; });
    std::vector<Span> out;
    const auto push = [&](Span s) {
      if (s.count == 0) return;
      if (!out.empty() && out.back().group == s.group && out.back().offset + out.back().count == s.offset)
        out.back().count += s.count;
      else
        out.push_back(s);
    };
    index_t at = 0;
    for (const auto& s : named) {
      push({at, s.offset - at, 0});
      push(s);
      at = s.offset + s.count;
    }
    push({at, numel - at, 0});
    spans_ = std::move(out);
  }

  std::vector<Group> groups_;
  std::vector<Span> spans_;
};

}  // namespace detail
}  // namespace kiln::optim
