// Capturable optimizers (state on the device, for kiln::cuda::Graph): Adam, AdamW and SGD with
// {.capturable = true} step as their plain forms do (with maximize too), bit for bit, through a
// learning-rate change, a restored step count, an unfused step and a step skipped on the device
// (step_unless); a fused step is the one-thread prepare pass plus the update pass.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <kiln/core/fusion.hpp>
#include <kiln/optim/optim.hpp>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Shape;
using kiln::Tensor;

template <class D>
Tensor<float, Shape<dyn>, D> arena(const std::vector<float>& v) {
  return Tensor<float, Shape<dyn>, D>::from(std::span<const float>(v),
                                            kiln::Extents<Shape<dyn>>(static_cast<kiln::index_t>(v.size())));
}

/// Steps a plain and a capturable optimizer from the same gradients and compares everything they keep.
template <class Opt, class D, class Options>
void capturable_follows_plain(Options o) {
  constexpr kiln::index_t n = 4099;
  const auto pv = kt::random_values<float>(n, -1, 1, 411);
  auto p1 = arena<D>(pv), p2 = arena<D>(pv);
  Tensor<float, Shape<dyn>, D> g1(n), g2(n);
  Opt plain(p1, g1, o);
  o.capturable = true;
  Opt captured(p2, g2, o);
  Tensor<std::int32_t, Shape<dyn>, D> flag(1);
  for (std::uint32_t s = 0; s < 7; ++s) {
    BOOST_TEST_CONTEXT("step " << s) {
      const auto gv = kt::random_values<float>(n, -1, 1, 412 + s);
      g1.copy_from(std::span<const float>(gv));
      g2.copy_from(std::span<const float>(gv));
      if (s == 2) {
        plain.set_lr(0.05);
        captured.set_lr(0.05);
      }
      if constexpr (requires { plain.set_step_count(100); })
        if (s == 3) {
          plain.set_step_count(100);
          captured.set_step_count(100);
        }
      std::optional<kiln::Unfused> off;
      if (s == 4) off.emplace();  // unfused: the capturable one reads its flags back from the device
      flag.fill(s == 1 || s == 5 ? 1 : 0);  // an inf/NaN found by a capturable GradScaler: skipped
      if (s != 1 && s != 5) plain.step();
      const auto before = kiln::passes();
      captured.step_unless(flag.data());
      if (s != 4) BOOST_TEST(kiln::passes() - before == 2u);
    }
  }
  BOOST_TEST(p1.to_vector() == p2.to_vector(), boost::test_tools::per_element());
  if constexpr (requires { plain.step_count(); }) {
    BOOST_TEST(plain.step_count() == 103);
    BOOST_TEST(captured.step_count() == 103);
    BOOST_TEST(plain.exp_avg().to_vector() == captured.exp_avg().to_vector(), boost::test_tools::per_element());
    BOOST_TEST(plain.exp_avg_sq().to_vector() == captured.exp_avg_sq().to_vector(), boost::test_tools::per_element());
  } else {
    BOOST_TEST(plain.momentum_buffer().to_vector() == captured.momentum_buffer().to_vector(),
               boost::test_tools::per_element());
  }
  BOOST_CHECK_THROW(plain.step_unless(flag.data()), kiln::ValueError);  // only a capturable one can skip there
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(capturable)

BOOST_AUTO_TEST_CASE_TEMPLATE(capturable_adam_steps_as_the_plain_one_bit_for_bit, D, kt::devices) {
  BOOST_TEST(!kiln::optim::AdamOptions{}.capturable);  // torch's default
  capturable_follows_plain<kiln::optim::Adam<float, D>, D>(kiln::optim::AdamOptions{.lr = 1e-2});
  capturable_follows_plain<kiln::optim::Adam<float, D>, D>(
      kiln::optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
  capturable_follows_plain<kiln::optim::AdamW<float, D>, D>(kiln::optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.3});
  capturable_follows_plain<kiln::optim::Adam<float, D>, D>(
      kiln::optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true, .maximize = true});
  capturable_follows_plain<kiln::optim::AdamW<float, D>, D>(
      kiln::optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.3, .maximize = true});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(capturable_sgd_steps_as_the_plain_one_bit_for_bit, D, kt::devices) {
  BOOST_TEST(!kiln::optim::SGDOptions{}.capturable);
  using Sgd = kiln::optim::SGD<float, D>;
  capturable_follows_plain<Sgd, D>(kiln::optim::SGDOptions{.lr = 0.1});
  capturable_follows_plain<Sgd, D>(kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  capturable_follows_plain<Sgd, D>(kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
  capturable_follows_plain<Sgd, D>(kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
  capturable_follows_plain<Sgd, D>(
      kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .maximize = true});
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
