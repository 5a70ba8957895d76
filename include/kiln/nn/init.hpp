/// kiln::nn::init: torch.nn.init's initialisers, each filling one parameter of a model (named as in its
/// state_dict, "0.weight") in place: uniform_, normal_, constant_, zeros_, ones_, xavier_uniform_,
/// xavier_normal_, kaiming_uniform_, kaiming_normal_, with torch's calculate_gain and fans.
#pragma once
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/number_fits.hpp"
#include "kiln/core/number_text.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::nn::init {

/// torch's nonlinearity names for calculate_gain.
enum class Nonlinearity { linear, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d,
                          sigmoid, tanh, relu, leaky_relu, selu };
/// Which fan kaiming_* preserve the variance of: the forward pass's (fan_in) or the backward's (fan_out).
enum class FanMode { fan_in, fan_out };

/// torch.nn.init.calculate_gain(nonlinearity, param): 1 for the linear ones and sigmoid, 5/3 for tanh,
/// sqrt(2) for relu, sqrt(2 / (1 + slope²)) for leaky_relu (param the negative slope, 0.01 when not
/// given), 3/4 for selu.
inline double calculate_gain(Nonlinearity f, double param = 0.01) {
  switch (f) {
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::selu: return 3.0 / 4.0;
    default: return 1.0;
  }
}

/// torch's _calculate_fan_in_and_fan_out of a parameter of torch's shape [out, in, k...]: in · Π k and
/// out · Π k. Fewer than 2 dimensions (a bias) has none: a ValueError, as torch's.
inline std::pair<double, double> fans(const std::vector<index_t>& shape, const std::string& name = "the tensor") {
  if (shape.size() < 2)
    throw ValueError("kiln::nn::init: fan in and fan out can not be computed for " + name + " with fewer than 2 "
                     "dimensions (torch's rule: a bias has none; use zeros_, constant_ or uniform_ there)");
  double receptive = 1.0;
  for (std::size_t d = 2; d < shape.size(); ++d) receptive *= static_cast<double>(shape[d]);
  return {static_cast<double>(shape[1]) * receptive, static_cast<double>(shape[0]) * receptive};
}

namespace detail {
/// The parameter `name` of model m (its named_parameters()), or a ValueError listing the names it has.
template <class Model>
ParameterInfo find(const Model& m, const std::string& name, const char* who) {
  std::string names;
  for (const auto& p : m.named_parameters()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  throw ValueError(std::string("kiln::nn::init::") + who + ": the model has no parameter \"" + name +
                   "\"; it has " + (names.empty() ? std::string("none") : names));
}
/// The element type of m's parameters (float, or double).
template <class Model>
using parameter_element_t = typename std::remove_cvref_t<decltype(std::declval<Model&>().parameters())>::element_type;

/// A draw v as parameter type M, rounded as the hardware rounds (a float past float's range is ±inf, as
/// torch's normal_ of a huge mean gives, not the undefined conversion).
template <class M>
M to_parameter(double v) {
  if constexpr (std::is_same_v<M, float>) {
    constexpr double past = 3.4028235677973366e38;  // FLT_MAX + half an ulp: from here on, inf
    if (v >= past || v <= -past) return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
  return static_cast<M>(v);
}

/// Writes `count` values from draw() into parameter p of m (its working copy refreshed at the next forward).
template <class Model, class Draw>
void fill(Model& m, const ParameterInfo& p, Draw draw) {
  using M = parameter_element_t<Model>;
  std::vector<M> v(static_cast<std::size_t>(p.count));
  for (auto& x : v) x = to_parameter<M>(draw());
  m.parameters().slice(p.offset, p.offset + p.count).copy_from(std::span<const M>(v));
}

/// Fills parameter p with U(a, b) draws from g, as torch's uniform_ checks its range: a and b finite in
/// the parameters' type, a <= b, b - a within that type's range (a == b: every element a, -0.0 as +0.0);
/// a ValueError naming `who` otherwise.
template <class Model>
void fill_uniform(Model& m, const ParameterInfo& p, Generator& g, double a, double b, const char* who) {
  using M = parameter_element_t<Model>;
  const std::string name = std::string("kiln::nn::init::") + who;
  const char* type = std::is_same_v<M, float> ? "float" : "double";
  for (const auto& [what, v] : {std::pair{"from", a}, std::pair{"to", b}})
    if (!std::isfinite(v) || !kiln::detail::number_fits<M>(v))
      throw ValueError(name + ": " + what + " is out of bounds for " + type + " (" + kiln::detail::shortest_text(v) +
                       ")");
  if (a > b)
    throw ValueError(name + ": expects a [from, to) range, but found from=" + kiln::detail::shortest_text(a) +
                     " > to=" + kiln::detail::shortest_text(b) + " (a negative gain gives one)");
  if (!(b - a <= kiln::detail::largest_finite<M>()))
    throw ValueError(name + ": expects to - from <= the largest " + type + ", but found to=" +
                     kiln::detail::shortest_text(b) + " and from=" + kiln::detail::shortest_text(a));
  std::uniform_real_distribution<double> u(a, b);
  fill(m, p, [&] { return a == b ? a + 0.0 : u(g); });
}
/// Fills parameter p with N(mean, std²) draws from g, as torch's normal_ checks them: std >= 0 (0: every
/// element the mean); a ValueError naming `who` otherwise (a negative or NaN std).
template <class Model>
void fill_normal(Model& m, const ParameterInfo& p, Generator& g, double mean, double std, const char* who) {
  if (!(std >= 0.0))
    throw ValueError(std::string("kiln::nn::init::") + who + ": expects std >= 0.0, but found std " +
                     kiln::detail::shortest_text(std) + " (a negative gain gives one)");
  std::normal_distribution<double> n(mean, std > 0.0 ? std : 1.0);  // (std::normal_distribution needs std > 0)
  fill(m, p, [&] { return std > 0.0 ? n(g) : mean; });
}
}  // namespace detail

/// U(a, b) (torch.nn.init.uniform_); a > b or a bound not finite is a ValueError, as torch's.
template <class Model>
void uniform_(Model& m, const std::string& name, Generator& g, double a = 0.0, double b = 1.0) {
  detail::fill_uniform(m, detail::find(m, name, "uniform_"), g, a, b, "uniform_");
}
/// N(mean, std²) (torch.nn.init.normal_): std 0 gives the mean everywhere; a negative std is a ValueError.
template <class Model>
void normal_(Model& m, const std::string& name, Generator& g, double mean = 0.0, double std = 1.0) {
  detail::fill_normal(m, detail::find(m, name, "normal_"), g, mean, std, "normal_");
}
/// Every element `value` (torch.nn.init.constant_); zeros_ and ones_.
template <class Model>
void constant_(Model& m, const std::string& name, double value) {
  const auto p = detail::find(m, name, "constant_");
  kiln::detail::check_number_fits<detail::parameter_element_t<Model>>(value, "kiln::nn::init::constant_");
  detail::fill(m, p, [&] { return value; });
}
template <class Model>
void zeros_(Model& m, const std::string& name) {
  detail::fill(m, detail::find(m, name, "zeros_"), [] { return 0.0; });
}
template <class Model>
void ones_(Model& m, const std::string& name) {
  detail::fill(m, detail::find(m, name, "ones_"), [] { return 1.0; });
}

/// Glorot's U(-bound, bound), bound = gain sqrt(6 / (fan_in + fan_out)) (torch.nn.init.xavier_uniform_).
template <class Model>
void xavier_uniform_(Model& m, const std::string& name, Generator& g, double gain = 1.0) {
  const auto p = detail::find(m, name, "xavier_uniform_");
  const auto [in, out] = fans(p.shape, "parameter \"" + name + "\"");
  const double bound = gain * std::sqrt(6.0 / (in + out));
  detail::fill_uniform(m, p, g, -bound, bound, "xavier_uniform_");
}
/// Glorot's N(0, std²), std = gain sqrt(2 / (fan_in + fan_out)) (torch.nn.init.xavier_normal_).
template <class Model>
void xavier_normal_(Model& m, const std::string& name, Generator& g, double gain = 1.0) {
  const auto p = detail::find(m, name, "xavier_normal_");
  const auto [in, out] = fans(p.shape, "parameter \"" + name + "\"");
  detail::fill_normal(m, p, g, 0.0, gain * std::sqrt(2.0 / (in + out)), "xavier_normal_");
}

/// kaiming_*'s arguments in torch's order and with its defaults: a (the negative slope for leaky_relu),
/// mode, nonlinearity.
struct KaimingOptions {
  double a = 0.0;
  FanMode mode = FanMode::fan_in;
  Nonlinearity nonlinearity = Nonlinearity::leaky_relu;
};
namespace detail {
inline double kaiming_std(const ParameterInfo& p, const KaimingOptions& o, const std::string& name) {
  const auto [in, out] = fans(p.shape, "parameter \"" + name + "\"");
  const double fan = o.mode == FanMode::fan_in ? in : out;
  return calculate_gain(o.nonlinearity, o.a) / std::sqrt(fan);
}
}  // namespace detail
/// He's U(-bound, bound), bound = sqrt(3) gain / sqrt(fan) (torch.nn.init.kaiming_uniform_; its
/// defaults: a = 0, fan_in, leaky_relu, so gain sqrt(2)). Layers initialise themselves with a = sqrt(5).
template <class Model>
void kaiming_uniform_(Model& m, const std::string& name, Generator& g, const KaimingOptions& o = {}) {
  const auto p = detail::find(m, name, "kaiming_uniform_");
  const double bound = std::sqrt(3.0) * detail::kaiming_std(p, o, name);
  detail::fill_uniform(m, p, g, -bound, bound, "kaiming_uniform_");
}
/// He's N(0, std²), std = gain / sqrt(fan) (torch.nn.init.kaiming_normal_): for ReLU networks,
/// `{.mode = FanMode::fan_out, .nonlinearity = Nonlinearity::relu}` as torchvision's ResNets.
template <class Model>
void kaiming_normal_(Model& m, const std::string& name, Generator& g, const KaimingOptions& o = {}) {
  const auto p = detail::find(m, name, "kaiming_normal_");
  detail::fill_normal(m, p, g, 0.0, detail::kaiming_std(p, o, name), "kaiming_normal_");
}

}  // namespace kiln::nn::init
