// Optimizer steps with fusion off (kiln::Unfused): SGD (weight decay, momentum, dampening, Nesterov),
// Adam (L2, amsgrad) and AdamW, and with maximize (-g first) those and RMSprop, run one pass per operation,
// torch's single-tensor order, and land where the one-pass step does (within float rounding) over several
// steps; under mixed precision the working copy is rewritten too.
#include <boost/test/unit_test.hpp>
#include <kiln/core/fusion.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using Net = knn::Sequential<knn::Linear<7, 5>, knn::Tanh, knn::Linear<5, 3>>;
using In = Shape<dyn, 7>;

/// `steps` steps of two identical models, one fused and one unfused, from the same gradients each step.
/// Checks the unfused model's parameters against the fused one's, the passes of one step each, and that
/// neither step writes the gradients (torch's step leaves p.grad as it is).
template <class P, class Make>
void check_steps(Make make, int steps, std::uint64_t min_extra_passes) {
  knn::Model<Net, In, P> a(3), b(3);
  auto fa = make(a);
  auto fb = make(b);
  const auto n = static_cast<std::size_t>(a.parameter_count);
  std::uint64_t fused_passes = 0, unfused_passes = 0;
  for (int s = 0; s < steps; ++s) {
    const auto g = kt::random_values<float>(n, -1, 1, 90 + static_cast<std::uint32_t>(s));
    a.gradients().copy_from(std::span<const float>(g));
    b.gradients().copy_from(std::span<const float>(g));
    auto before = kiln::passes();
    fa.step();
    fused_passes = kiln::passes() - before;
    kiln::Unfused off;
    before = kiln::passes();
    fb.step();
    unfused_passes = kiln::passes() - before;
    BOOST_TEST(a.gradients().to_vector() == g, boost::test_tools::per_element());
    BOOST_TEST(b.gradients().to_vector() == g, boost::test_tools::per_element());
  }
  BOOST_TEST_MESSAGE("one step: fused " << fused_passes << " pass(es), unfused " << unfused_passes);
  BOOST_TEST(fused_passes == 1u);
  BOOST_TEST(unfused_passes >= fused_passes + min_extra_passes);
  BOOST_TEST(kt::all_close(b.parameters().to_vector(), kt::to_doubles(a.parameters().to_vector()), 1e-5, 1e-6));
  if constexpr (knn::Model<Net, In, P>::has_working_copy)
    BOOST_TEST(kt::to_doubles(b.working_parameters().to_vector()) == kt::to_doubles(a.working_parameters().to_vector()),
               boost::test_tools::per_element());
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(unfused_steps)

BOOST_AUTO_TEST_CASE_TEMPLATE(sgd_unfused_follows_the_fused_step, D, kiln::test::devices) {
  using P = kiln::Policy<kiln::Fp32, D>;
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05}); }, 4, 1);
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}); },
                 4, 4);
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}); },
                 4, 4);
  // Without weight decay the unfused step's g shares the gradients until momentum rebinds it.
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .momentum = 0.9}); }, 4, 2);
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .momentum = 0.9, .nesterov = true}); }, 4, 3);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_and_adamw_unfused_follow_the_fused_step, D, kiln::test::devices) {
  using P = kiln::Policy<kiln::Fp32, D>;
  check_steps<P>([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2}); }, 5, 8);
  check_steps<P>([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true}); }, 5, 8);
  check_steps<P>([](auto& m) { return kiln::optim::AdamW(m, {.lr = 1e-2}); }, 5, 8);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(maximize_unfused_follows_the_fused_step, D, kiln::test::devices) {
  // -g into a new tensor first (torch's `grad = -grad`): one pass more than without maximize.
  using P = kiln::Policy<kiln::Fp32, D>;
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .maximize = true}); }, 4, 2);
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .weight_decay = 0.01, .maximize = true}); },
                 4, 3);
  check_steps<P>(
      [](auto& m) {
        return kiln::optim::SGD(m, {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .maximize = true});
      },
      4, 5);
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .momentum = 0.9, .maximize = true}); }, 4, 3);
  check_steps<P>(
      [](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true, .maximize = true}); },
      5, 9);
  check_steps<P>([](auto& m) { return kiln::optim::AdamW(m, {.lr = 1e-2, .maximize = true}); }, 5, 9);
  check_steps<P>([](auto& m) { return kiln::optim::RMSprop(m, {.lr = 1e-3, .maximize = true}); }, 4, 5);
  check_steps<P>(
      [](auto& m) {
        return kiln::optim::RMSprop(
            m, {.lr = 1e-3, .weight_decay = 0.01, .momentum = 0.5, .centered = true, .maximize = true});
      },
      4, 10);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_working_copy_is_rewritten_unfused, D, kiln::test::devices) {
  using P = kiln::Policy<kiln::MixedBf16, D>;
  check_steps<P>([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-2}); }, 3, 8);
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .momentum = 0.9}); }, 3, 2);
  check_steps<P>([](auto& m) { return kiln::optim::SGD(m, {.lr = 0.05, .momentum = 0.9, .maximize = true}); }, 3, 3);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
