/// Checks every optimizer must pass, shared by their tests (RMSprop, Adagrad, NAdam, RAdam, Adamax, ...): the
/// fused step against torch's unfused order, the working copy under mixed precision, a GradScaler driving it,
/// StepLR moving its learning rate, a resume through a checkpoint; state_of(), an optimizer's state arenas
/// as host vectors; says(), a predicate on an exception's message.
#pragma once
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <exception>
#include <kiln/core/fusion.hpp>
#include <kiln/io/optimizer_state.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
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
/// land exactly where the unscaled ones do (1 / 2^k is exact), parameters and state alike (the state
/// shows an unscale skipped where a step without weight decay, Adagrad's or RMSprop's, is scale
/// invariant); a step on a gradient holding an inf is
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
  {
    const auto want = state_of(a), got = state_of(b);
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    for (std::size_t k = 0; k < want.size(); ++k)
      BOOST_TEST(got[k] == want[k], boost::test_tools::per_element());
  }
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

/// A predicate for BOOST_CHECK_EXCEPTION: the exception's message holds `text`.
inline auto says(std::string text) {
  return [text = std::move(text)](const std::exception& e) {
    return std::string(e.what()).find(text) != std::string::npos;
  };
}

/// StepLR(opt, 2, 0.5) drives Opt(p, g, o) over double parameters: after four epochs its lr is o.lr / 4,
/// and the next step lands where `first_step(p, g, lr)` (a float64 transcription of torch's first step
/// at that lr) puts each parameter.
template <template <class, class, class> class Opt, class D, class Options, class FirstStep>
void a_step_lr_moves_it(Options o, const FirstStep& first_step) {
  const std::vector<double> p0 = random_values<double>(16, -1, 1, 2);
  auto p = make_tensor<D>(p0, Extents<Shape<dyn>>(16));
  Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(16));
  Opt<double, D, double> opt(p, g, o);
  optim::StepLR sched(opt, 2, 0.5);
  for (int epoch = 0; epoch < 4; ++epoch) sched.step();
  const double lr = o.lr * 0.25;
  BOOST_TEST(opt.lr() == lr);
  const auto gv = random_values<double>(16, -1, 1, 3);
  g.copy_from(std::span<const double>(gv));
  opt.step();
  std::vector<double> want;
  for (std::size_t i = 0; i < p0.size(); ++i) want.push_back(first_step(p0[i], gv[i], lr));
  BOOST_TEST(all_close(p.to_vector(), want, 1e-12, 1e-12));
}

/// The resume every optimizer must pass: Opt(model, o) and a twin step `steps` times on the same
/// gradients; the twin's state (kiln::optimizer_state) goes into a fresh Opt(model, o) whose lr (and
/// betas) were moved since, after a check that writes nothing; `steps` more steps of both land on the same
/// parameters, bit for bit. The step count, the lr and betas (as torch's load_state_dict restores its
/// param_groups) and NAdam's mu_product are the checkpoint's. Returns the saved state, for the checks of
/// its keys and of what another optimizer refuses (on a model of OptimizerNet's size).
template <template <class, class, class> class Opt, class D, class Options>
OptimizerState resumes_through_a_checkpoint(const Options& o, int steps = 2) {
  using P = Policy<Fp32, D>;
  nn::Model<OptimizerNet, OptimizerIn, P> whole(3), resumed(3);
  Opt<float, D, float> a(whole, o);
  std::optional<Opt<float, D, float>> b(std::in_place, resumed, o);
  const auto n = static_cast<std::size_t>(whole.parameter_count);
  const auto both_step = [&](int s) {
    const auto g = random_values<float>(n, -1, 1, 60 + static_cast<std::uint32_t>(s));
    whole.gradients().copy_from(std::span<const float>(g));
    resumed.gradients().copy_from(std::span<const float>(g));
    a.step();
    b->step();
  };
  for (int s = 0; s < steps; ++s) both_step(s);
  const OptimizerState saved = optimizer_state(*b);
  BOOST_TEST(saved.metadata.at("optimizer.step") == std::to_string(steps));
  [[maybe_unused]] double product = 0.0;
  if constexpr (requires { b->mu_product(); }) product = b->mu_product();
  b.emplace(resumed, o);  // a fresh optimizer: no steps
  b->set_lr(o.lr + 0.25f);
  if constexpr (requires { b->set_betas({}); }) b->set_betas({0.5f, 0.5f});
  check_optimizer_state(*b, saved.entries, saved.metadata, "ckpt");
  BOOST_TEST(b->step_count() == 0);  // a check writes nothing
  load_optimizer_state(*b, saved.entries, saved.metadata, "ckpt");
  BOOST_TEST(b->step_count() == steps);
  BOOST_TEST(b->lr() == o.lr);
  if constexpr (requires { b->betas(); }) {
    BOOST_TEST(b->betas().beta1 == o.betas.beta1);
    BOOST_TEST(b->betas().beta2 == o.betas.beta2);
  }
  if constexpr (requires { b->mu_product(); }) BOOST_TEST(b->mu_product() == product);
  for (int s = steps; s < 2 * steps; ++s) both_step(s);
  BOOST_TEST(resumed.parameters().to_vector() == whole.parameters().to_vector(),
             boost::test_tools::per_element());
  return saved;
}

}  // namespace kiln::test
