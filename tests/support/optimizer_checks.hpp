/// Checks every optimizer must pass, shared by their tests (RMSprop, Adagrad, NAdam, RAdam, Adamax, ...): the
/// fused step against torch's unfused order, the working copy under mixed precision, a GradScaler driving it;
/// and state_of(), an optimizer's state arenas as host vectors.
#pragma once
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/core/fusion.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <optional>
#include <span>
#include <vector>

#include "support/reference.hpp"

namespace kiln::test {

/// The net the optimizer checks step: 7 -> 5, tanh, -> 3.
using OptimizerNet = nn::Sequential<nn::Linear<7, 5>, nn::Tanh, nn::Linear<5, 3>>;
using OptimizerIn = Shape<dyn, 7>;

/// Every state arena an optimizer keeps, as host vectors (empty ones included).
template <class Opt>
auto state_of(const Opt& opt) {
  using V = decltype(opt.gradients().to_vector());
  if constexpr (requires { opt.exp_inf(); })  // Adamax
    return std::vector<V>{opt.exp_avg().to_vector(), opt.exp_inf().to_vector()};
  else if constexpr (requires { opt.acc_delta(); })  // Adadelta
    return std::vector<V>{opt.square_avg().to_vector(), opt.acc_delta().to_vector()};
  else if constexpr (requires { opt.max_exp_avg_sq(); })
    return std::vector<V>{opt.exp_avg().to_vector(), opt.exp_avg_sq().to_vector(),
                          opt.max_exp_avg_sq().to_vector()};
  else if constexpr (requires { opt.exp_avg_sq(); })  // NAdam, RAdam
    return std::vector<V>{opt.exp_avg().to_vector(), opt.exp_avg_sq().to_vector()};
  else if constexpr (requires { opt.square_avg(); })
    return std::vector<V>{opt.square_avg().to_vector(), opt.grad_avg().to_vector(),
                          opt.momentum_buffer().to_vector()};
  else if constexpr (requires { opt.sum(); })
    return std::vector<V>{opt.sum().to_vector()};
  else
    return std::vector<V>{opt.momentum_buffer().to_vector()};
}

/// Four steps of two optimizers Opt(model, o) on the same gradients, one fused, one with fusion off
/// (torch's single-tensor operations one by one): the fused step is one pass, the unfused at least
/// `min_unfused` (alias temporaries may add more); neither writes the gradients; they land within float
/// rounding of each other.
template <template <class, class, class> class Opt, class D, class Options>
void fused_and_unfused_steps_agree(const Options& o, std::uint64_t min_unfused) {
  using P = Policy<Fp32, D>;
  nn::Model<OptimizerNet, OptimizerIn, P> a(3), b(3);
  Opt<float, D, float> fa(a, o), fb(b, o);
  const auto n = static_cast<std::size_t>(a.parameter_count);
  std::uint64_t fused = 0, unfused = 0;
  for (std::uint32_t s = 0; s < 4; ++s) {
    const auto g = random_values<float>(n, -1, 1, 90 + s);
    a.gradients().copy_from(std::span<const float>(g));
    b.gradients().copy_from(std::span<const float>(g));
    auto before = passes();
    fa.step();
    fused = passes() - before;
    Unfused off;
    before = passes();
    fb.step();
    unfused = passes() - before;
    BOOST_TEST(b.gradients().to_vector() == g, boost::test_tools::per_element());
  }
  BOOST_TEST(fused == 1u);
  BOOST_TEST(unfused >= min_unfused);
  BOOST_TEST(all_close(b.parameters().to_vector(), to_doubles(a.parameters().to_vector()), 1e-5, 1e-6));
}

/// Mixed bf16: after a fused step and after an unfused one, the model's working copy is its float
/// masters rounded to bf16, and the step moved the masters.
template <template <class, class, class> class Opt, class D, class Options>
void the_working_copy_follows_the_masters(const Options& o) {
  using P = Policy<MixedBf16, D>;
  for (const bool fused : {true, false}) {
    nn::Model<OptimizerNet, OptimizerIn, P> m(4);
    Opt<float, D, bfloat16> opt(m, o);
    const auto n = static_cast<std::size_t>(m.parameter_count);
    const auto before = m.parameters().to_vector();
    m.gradients().copy_from(std::span<const float>(random_values<float>(n, -1, 1, 5)));
    {
      std::optional<Unfused> off;
      if (!fused) off.emplace();
      opt.step();
    }
    const auto masters = m.parameters().to_vector();
    const auto work = m.working_parameters().to_vector();
    bool same = true;
    for (std::size_t i = 0; i < n; ++i)
      same = same && static_cast<float>(work[i]) == static_cast<float>(bfloat16(masters[i]));
    BOOST_TEST(same, (fused ? "fused" : "unfused"));
    BOOST_TEST(masters != before);
  }
}

/// GradScaler drives Opt(model, o) as it drives SGD and Adam: three steps on gradients scaled by 2^k
/// land exactly where the unscaled ones do (1 / 2^k is exact); a step on a gradient holding an inf is
/// skipped (parameters, state, step count and NAdam's mu_product untouched) and halves the scale.
template <template <class, class, class> class Opt, class D, class Options>
void a_grad_scaler_drives_it(const Options& o) {
  using P = Policy<Fp32, D>;
  nn::Model<OptimizerNet, OptimizerIn, P> plain(4), scaled(4);
  Opt<float, D, float> a(plain, o), b(scaled, o);
  optim::GradScaler<D> scaler({.init_scale = 1024.0});
  const auto n = static_cast<std::size_t>(plain.parameter_count);
  for (std::uint32_t step = 0; step < 3; ++step) {
    const auto g = random_values<float>(n, -1, 1, 40 + step);
    std::vector<float> big(g);
    for (float& v : big) v *= static_cast<float>(scaler.scale());
    plain.gradients().copy_from(std::span<const float>(g));
    scaled.gradients().copy_from(std::span<const float>(big));
    a.step();
    scaler.step(b);
    scaler.update();
  }
  BOOST_TEST(scaled.parameters().to_vector() == plain.parameters().to_vector(),
             boost::test_tools::per_element());
  std::vector<float> inf(n, 1.0f);
  inf[3] = INFINITY;
  scaled.gradients().copy_from(std::span<const float>(inf));
  const auto before = scaled.parameters().to_vector();
  const auto state = state_of(b);
  double mu_product = 0.0;
  if constexpr (requires { b.mu_product(); }) mu_product = b.mu_product();
  scaler.step(b);
  scaler.update();
  BOOST_TEST(scaled.parameters().to_vector() == before, boost::test_tools::per_element());
  const auto after = state_of(b);
  BOOST_REQUIRE_EQUAL(after.size(), state.size());
  for (std::size_t k = 0; k < state.size(); ++k)
    BOOST_TEST(after[k] == state[k], boost::test_tools::per_element());
  if constexpr (requires { b.step_count(); }) BOOST_TEST(b.step_count() == 3);
  if constexpr (requires { b.mu_product(); }) BOOST_TEST(b.mu_product() == mu_product);
  BOOST_TEST(scaler.scale() == 512.0);
}

}  // namespace kiln::test
