// PyTorch-parity fixtures: JSON files written by tests/parity/make_fixtures.py (schema at its top),
// read from KILN_PARITY_DIR (a compile definition: tests/parity/fixtures), compared within a relative
// tolerance. Needs nlohmann_json.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef KILN_PARITY_DIR
#error "support/parity.hpp: define KILN_PARITY_DIR (tests/CMakeLists.txt does it for the targets that use it)"
#endif

namespace kiln::test::parity {

/// The path of a fixture file (any format), looked up like load() below; throws when none exists.
inline std::string fixture_path(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KILN_PARITY_DIR"); env && *env) dirs.emplace_back(env);
  dirs.emplace_back(KILN_PARITY_DIR);
  dirs.emplace_back("tests/parity/fixtures");
  std::string tried;
  for (const auto& dir : dirs) {
    const std::string path = dir + "/" + name;
    if (std::ifstream in(path); in) return path;
    tried += (tried.empty() ? "" : ", ") + path;
  }
  throw std::runtime_error("kiln parity: cannot open " + name + " (tried " + tried + "); set KILN_PARITY_DIR");
}

/// A fixture file, parsed. Looked up in $KILN_PARITY_DIR when set, then in the source tree the test was
/// built from (the KILN_PARITY_DIR definition), then in tests/parity/fixtures under the working directory
/// (a prebuilt executable run from a repository checkout elsewhere, e.g. on a GPU machine).
inline nlohmann::json load(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KILN_PARITY_DIR"); env && *env) dirs.emplace_back(env);
  dirs.emplace_back(KILN_PARITY_DIR);
  dirs.emplace_back("tests/parity/fixtures");
  std::string tried;
  for (const auto& dir : dirs) {
    const std::string path = dir + "/" + name;
    if (std::ifstream in(path); in) return nlohmann::json::parse(in);
    tried += (tried.empty() ? "" : ", ") + path;
  }
  throw std::runtime_error("kiln parity: cannot open " + name + " (tried " + tried +
                           "); set KILN_PARITY_DIR, or regenerate the fixtures with /usr/bin/python3 "
                           "tests/parity/make_fixtures.py");
}

/// A fixture tensor {"shape": [...], "values": [...]}: its values.
template <class T = float>
std::vector<T> values(const nlohmann::json& tensor) {
  std::vector<T> v;
  v.reserve(tensor.at("values").size());
  for (const auto& x : tensor.at("values")) v.push_back(static_cast<T>(x.get<double>()));
  return v;
}
/// A fixture tensor's shape.
inline std::vector<long long> shape(const nlohmann::json& tensor) { return tensor.at("shape").get<std::vector<long long>>(); }

/// How far `got` is from `want`: the largest |got - want| / max(|want|, floor) over the elements, and
/// where. floor = 0 gives the pure relative error (exact zeros must then match exactly); see
/// scale_floor() for values that cancel to nearly zero.
struct Difference {
  double max_rel = 0.0;
  std::size_t at = 0;
  double got = 0.0, want = 0.0;
  std::size_t count_mismatch = 0;  // sizes differ
};
template <class A, class B>
Difference compare(std::span<const A> got, std::span<const B> want, double floor = 0.0) {
  Difference d;
  if (got.size() != want.size()) {
    d.count_mismatch = 1;
    d.max_rel = INFINITY;
    return d;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const double err = std::abs(g - w);
    double rel = err == 0.0 ? 0.0 : err / std::max(std::abs(w), floor);
    if (std::isnan(g) != std::isnan(w)) rel = INFINITY;
    if (rel > d.max_rel || (std::isnan(rel) && !std::isnan(d.max_rel))) d = {rel, i, g, w, 0};
  }
  return d;
}

/// The floor of a relative comparison of a tensor: 1% of its largest magnitude. An element that cancels
/// to far below its tensor's scale (a weight that three optimizer steps of ~lr carry through zero) keeps
/// the fp32 rounding error of the values it was computed from (~1e-9 for a scale of ~0.03), which
/// divided by the tiny result says nothing; torch's own fp32 result differs from its fp64 result by up
/// to 8e-6 relative on such elements of the parity MLP. `fraction`: another share of the largest
/// magnitude (optimizer runs take 10%: tests/parity/blas_spread.py).
template <class B>
double scale_floor(std::span<const B> want, double fraction = 1e-2) {
  double m = 0.0;
  for (const auto& w : want) m = std::max(m, std::abs(static_cast<double>(w)));
  return fraction * m;
}

/// A model's parameter arena (host values, in named_parameters() order) from a PyTorch state_dict
/// fixture ({name: tensor}); throws std::runtime_error naming the parameter when a name is missing or a
/// shape or size differs, or the state_dict has names the model does not.
template <class Model>
std::vector<float> arena_from_state_dict(const Model& m, const nlohmann::json& state_dict) {
  std::vector<float> host(static_cast<std::size_t>(m.parameters().numel()));
  const auto params = m.named_parameters();
  if (params.size() != state_dict.size())
    throw std::runtime_error("kiln parity: the model has " + std::to_string(params.size()) + " parameters, the " +
                             "state_dict " + std::to_string(state_dict.size()));
  for (const auto& p : params) {
    if (!state_dict.contains(p.name)) throw std::runtime_error("kiln parity: no '" + p.name + "' in the state_dict");
    const auto& t = state_dict.at(p.name);
    const auto v = values(t);
    if (std::vector<long long>(p.shape.begin(), p.shape.end()) != shape(t) || static_cast<long long>(v.size()) != p.count)
      throw std::runtime_error("kiln parity: '" + p.name + "' has another shape in the state_dict");
    std::copy(v.begin(), v.end(), host.begin() + p.offset);
  }
  return host;
}

inline std::string describe(const Difference& d) {
  std::ostringstream os;
  os.precision(9);
  if (d.count_mismatch) return "element counts differ";
  os << "max relative error " << d.max_rel << " at element " << d.at << " (got " << d.got << ", want " << d.want << ")";
  return os.str();
}

}  // namespace kiln::test::parity
