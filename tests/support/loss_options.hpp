/// check_loss_options: a loss fixture case's torch settings ("options", written by
/// tests/parity/make_fixtures.py's loss_options) are those of the kiln loss a test built for it, so a case
/// changed in the generator without the test fails here instead of comparing two different losses.
#pragma once
#include <kiln/nn/elementwise_loss.hpp>
#include <kiln/nn/loss.hpp>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

namespace kiln::test {

/// torch's name of a kiln reduction.
inline std::string reduction_name(kiln::nn::Reduction r) { return r == kiln::nn::Reduction::sum ? "sum" : "mean"; }
inline std::string reduction_name(kiln::nn::KLDivReduction r) {
  switch (r) {
    case kiln::nn::KLDivReduction::sum: return "sum";
    case kiln::nn::KLDivReduction::batchmean: return "batchmean";
    default: return "mean";
  }
}

/// Checks case `c`'s "options" against `loss`: the reduction ("none" where the test calls unreduced(),
/// whatever the loss's own), and every other setting torch recorded, which the kiln loss must have with
/// the same value (weight and pos_weight: whether given; their values are the case's own fields).
template <class Loss>
void check_loss_options(const nlohmann::json& c, const Loss& loss, bool unreduced, const std::string& what) {
  const nlohmann::json& o = c.at("options");
  BOOST_TEST(o.at("reduction").get<std::string>() == (unreduced ? std::string("none") : reduction_name(loss.reduction)),
             what << ": reduction");
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string key = it.key();
    const nlohmann::json& value = it.value();
    if (key == "reduction") continue;
    bool known = true;
    if (key == "label_smoothing") {
      if constexpr (requires { loss.label_smoothing; }) BOOST_TEST(value.get<double>() == loss.label_smoothing, what << ": " << key);
      else known = false;
    } else if (key == "ignore_index") {
      if constexpr (requires { loss.ignore_index; }) BOOST_TEST(value.get<std::int64_t>() == loss.ignore_index, what << ": " << key);
      else known = false;
    } else if (key == "beta") {
      if constexpr (requires { loss.beta; }) BOOST_TEST(value.get<double>() == loss.beta, what << ": " << key);
      else known = false;
    } else if (key == "delta") {
      if constexpr (requires { loss.delta; }) BOOST_TEST(value.get<double>() == loss.delta, what << ": " << key);
      else known = false;
    } else if (key == "log_target") {
      if constexpr (requires { loss.log_target; }) BOOST_TEST(value.get<bool>() == loss.log_target, what << ": " << key);
      else known = false;
    } else if (key == "weight") {
      if constexpr (requires { loss.weight.empty(); }) BOOST_TEST(value.get<bool>() == !loss.weight.empty(), what << ": " << key);
      else BOOST_TEST(!value.get<bool>(), what << ": torch's loss has a weight, kiln's has none");
    } else if (key == "pos_weight") {
      if constexpr (requires { loss.pos_weight.empty(); })
        BOOST_TEST(value.get<bool>() == !loss.pos_weight.empty(), what << ": " << key);
      else BOOST_TEST(!value.get<bool>(), what << ": torch's loss has a pos_weight, kiln's has none");
    } else {
      known = false;
    }
    BOOST_TEST(known, what << ": the fixture's option " << key << " is not one this check knows for this loss");
  }
}

}  // namespace kiln::test
