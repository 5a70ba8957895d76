// GradScaler (torch.cuda.amp.GradScaler's semantics): torch's defaults; scaled training equals unscaled
// training bit for bit (a power-of-two scale is exact in fp32); an inf or NaN gradient skips the step
// and backs off; growth after growth_interval finite steps; unscale_ before clipping; the unscale pass
// is one pass; misuse throws; state through checkpoint metadata; a copy has its own inf flag; the
// disabled scaler; option checks.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <kiln/io/safetensors.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/temp_dir.hpp"
#include "support/throws.hpp"

namespace {
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
using kiln::optim::GradScaler;
using kiln::optim::GradScalerOptions;

constexpr float infinity = std::numeric_limits<float>::infinity();
constexpr float not_a_number = std::numeric_limits<float>::quiet_NaN();

using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 8>, kiln::nn::ReLU, kiln::nn::Linear<8, 3>>;
template <class D>
using Mlp = kiln::nn::Model<Net, Shape<dyn, 4>, kiln::Policy<kiln::Fp32, D>>;

template <class D>
Tensor<float, Shape<dyn>, D> arena(const std::vector<float>& v) {
  return Tensor<float, Shape<dyn>, D>::from(std::span<const float>(v),
                                            Extents<Shape<dyn>>(static_cast<kiln::index_t>(v.size())));
}

/// A batch of 6 inputs [6, 4] and class labels [6] for Mlp.
template <class D>
struct Batch {
  Tensor<float, Shape<dyn, 4>, D> x =
      kt::make_tensor<D>(kt::random_values<float>(24, -1.0, 1.0, 11), Extents<Shape<dyn, 4>>(6));
  Tensor<std::int64_t, Shape<dyn>, D> y =
      kt::make_tensor<D>(std::vector<std::int64_t>{0, 2, 1, 1, 0, 2}, Extents<Shape<dyn>>(6));
};

/// Forward and backward with the loss gradient multiplied by `scale`.
template <class D>
void backward(Mlp<D>& model, const Batch<D>& b, kiln::nn::LossScale scale) {
  kiln::nn::CrossEntropyLoss ce;
  model.zero_grad();
  const auto logits = model.forward(b.x);  // [6, 3]
  model.backward(ce.backward(logits, b.y, scale));
}

/// Overwrites gradient i with v (an injected overflow).
template <class D>
void poison(Tensor<float, Shape<dyn>, D>& grads, std::size_t i, float v) {
  auto g = grads.to_vector();
  g[i] = v;
  grads.copy_from(std::span<const float>(g));
}

using kiln::test::throws_with;
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(grad_scaler)

BOOST_AUTO_TEST_CASE(options_default_to_torch) {
  constexpr GradScalerOptions o{};
  static_assert(o.init_scale == 65536.0 && o.growth_factor == 2.0 && o.backoff_factor == 0.5 &&
                o.growth_interval == 2000 && o.enabled);
  GradScaler scaler;  // GradScaler<kiln::Cpu>
  static_assert(std::is_same_v<decltype(scaler), GradScaler<kiln::Cpu>>);
  BOOST_TEST(scaler.scale() == 65536.0);
  BOOST_TEST(scaler.growth_tracker() == 0);
  BOOST_TEST(scaler.skipped_steps() == 0);
  BOOST_TEST(scaler.is_enabled());
  BOOST_TEST(!scaler.found_inf());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(scaled_training_equals_unscaled_training_bit_for_bit, D, kt::devices) {
  // Scaling the loss gradient by 2^16 scales every gradient by exactly 2^16 (products and sums of
  // fp32 values times a power of two round the same way), and unscaling undoes it exactly.
  Mlp<D> plain(/*seed=*/7), scaled(/*seed=*/7);
  const Batch<D> b;
  kiln::optim::Adam opt_plain(plain, {.lr = 1e-2}), opt_scaled(scaled, {.lr = 1e-2});
  GradScaler<D> scaler;
  const auto initial = plain.parameters().to_vector();
  for (int step = 0; step < 4; ++step) {
    backward(plain, b, 1.0);
    opt_plain.step();
    backward(scaled, b, scaler.scale());
    BOOST_TEST(scaler.step(opt_scaled));
    scaler.update();
    BOOST_TEST(scaled.gradients().to_vector() == plain.gradients().to_vector(),
               boost::test_tools::per_element());
  }
  BOOST_TEST(scaler.scale() == 65536.0);
  BOOST_TEST(scaler.growth_tracker() == 4);
  BOOST_TEST(scaled.parameters().to_vector() == plain.parameters().to_vector(),
             boost::test_tools::per_element());
  BOOST_TEST(opt_scaled.exp_avg_sq().to_vector() == opt_plain.exp_avg_sq().to_vector(),
             boost::test_tools::per_element());
  const bool trained = plain.parameters().to_vector() != initial;
  BOOST_TEST(trained);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_inf_or_nan_gradient_skips_the_step_and_backs_off, D, kt::devices) {
  for (const float bad : {infinity, -infinity, not_a_number}) {
    BOOST_TEST_CONTEXT("injected " << bad) {
      Mlp<D> model(/*seed=*/3);
      const Batch<D> b;
      kiln::optim::Adam opt(model, {.lr = 1e-2});
      GradScaler<D> scaler;
      for (int step = 0; step < 2; ++step) {  // two finite steps: moments are nonzero, the tracker is 2
        backward(model, b, scaler.scale());
        BOOST_TEST(scaler.step(opt));
        scaler.update();
      }
      BOOST_TEST(scaler.growth_tracker() == 2);
      const auto params = model.parameters().to_vector();
      const auto m = opt.exp_avg().to_vector(), v = opt.exp_avg_sq().to_vector();

      backward(model, b, scaler.scale());
      poison(model.gradients(), 17, bad);  // one element of the first layer's weight
      BOOST_TEST(!scaler.step(opt));
      BOOST_TEST(scaler.found_inf());
      BOOST_TEST(model.parameters().to_vector() == params, boost::test_tools::per_element());
      BOOST_TEST(opt.exp_avg().to_vector() == m, boost::test_tools::per_element());
      BOOST_TEST(opt.exp_avg_sq().to_vector() == v, boost::test_tools::per_element());
      BOOST_TEST(opt.step_count() == 2);
      scaler.update();
      BOOST_TEST(scaler.scale() == 32768.0);
      BOOST_TEST(scaler.growth_tracker() == 0);
      BOOST_TEST(scaler.skipped_steps() == 1);
      BOOST_TEST(!scaler.found_inf());

      backward(model, b, scaler.scale());  // the next finite step runs at the new scale
      BOOST_TEST(scaler.step(opt));
      scaler.update();
      BOOST_TEST(opt.step_count() == 3);
      BOOST_TEST(scaler.growth_tracker() == 1);
      BOOST_TEST(scaler.skipped_steps() == 1);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_scale_grows_after_growth_interval_finite_steps_and_not_before, D,
                              kt::devices) {
  auto p = arena<D>(std::vector<float>(5, 1.0f)), g = arena<D>(std::vector<float>(5, 0.0f));
  kiln::optim::SGD<float, D> opt(p, g, {.lr = 0.1});
  GradScaler<D> scaler({.init_scale = 8.0, .growth_interval = 3});
  const auto iteration = [&](float value) {
    g.fill(value);
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  BOOST_TEST(iteration(1.0f));
  BOOST_TEST(iteration(1.0f));
  BOOST_TEST(scaler.scale() == 8.0);  // 2 of 3
  BOOST_TEST(scaler.growth_tracker() == 2);
  BOOST_TEST(iteration(1.0f));
  BOOST_TEST(scaler.scale() == 16.0);
  BOOST_TEST(scaler.growth_tracker() == 0);
  BOOST_TEST(iteration(1.0f));
  BOOST_TEST(!iteration(not_a_number));  // resets the count
  BOOST_TEST(scaler.scale() == 8.0);
  BOOST_TEST(iteration(1.0f));
  BOOST_TEST(iteration(1.0f));
  BOOST_TEST(scaler.scale() == 8.0);
  BOOST_TEST(iteration(1.0f));
  BOOST_TEST(scaler.scale() == 16.0);
  BOOST_TEST(scaler.skipped_steps() == 1);

  // A scale that would overflow float32 stays where it is (torch), and the count restarts.
  GradScaler<D> top({.init_scale = 0x1p127, .growth_interval = 1});
  g.fill(1.0f);
  BOOST_TEST(top.step(opt));
  top.update();
  BOOST_TEST(top.scale() == 0x1p127);
  BOOST_TEST(top.growth_tracker() == 0);
  // Other factors, and update(new_scale).
  GradScaler<D> other(
      {.init_scale = 100.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 1});
  other.step(opt);
  other.update();
  BOOST_TEST(other.scale() == 300.0);
  g.fill(infinity);
  other.step(opt);
  other.update();
  BOOST_TEST(other.scale() == 75.0);
  g.fill(1.0f);
  other.step(opt);
  other.update(4096.0);
  BOOST_TEST(other.scale() == 4096.0);
  BOOST_TEST(other.growth_tracker() == 0);
  // torch's setters, from the next update() on; a bad value is refused and changes nothing.
  other.set_growth_factor(4.0);
  other.set_backoff_factor(0.5);
  other.set_growth_interval(2);
  BOOST_TEST(other.options().growth_interval == 2);
  BOOST_TEST(throws_with<kiln::ValueError>([&] { other.set_growth_factor(0.5); }, "invalid growth_factor"));
  BOOST_TEST(throws_with<kiln::ValueError>([&] { other.set_backoff_factor(1.5); }, "invalid backoff_factor"));
  BOOST_TEST(throws_with<kiln::ValueError>([&] { other.set_growth_interval(0); }, "invalid growth_interval"));
  BOOST_TEST(other.options().growth_factor == 4.0);
  for (int k = 0; k < 2; ++k) {
    other.step(opt);
    other.update();
  }
  BOOST_TEST(other.scale() == 16384.0);  // grown by 4 after 2 finite steps
  g.fill(infinity);
  other.step(opt);
  other.update();
  BOOST_TEST(other.scale() == 8192.0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unscale_before_clipping_shows_the_true_gradients, D, kt::devices) {
  const auto truth = kt::random_values<float>(1000, -1.0, 1.0, 21);  // norm about 18
  auto p = arena<D>(std::vector<float>(truth.size(), 0.5f));
  auto g = arena<D>(truth);
  auto p_ref = arena<D>(std::vector<float>(truth.size(), 0.5f));
  auto g_ref = arena<D>(truth);
  kiln::optim::SGD<float, D> opt(p, g, {.lr = 0.1, .momentum = 0.9}),
      opt_ref(p_ref, g_ref, {.lr = 0.1, .momentum = 0.9});
  GradScaler<D> scaler;
  g *= static_cast<float>(scaler.scale());  // what a scaled backward leaves (exact: a power of two)

  BOOST_TEST(scaler.unscale_(opt));
  BOOST_TEST(g.to_vector() == truth, boost::test_tools::per_element());
  const double norm = kiln::optim::clip_grad_norm(g, 1.0);
  BOOST_TEST(norm == kiln::optim::clip_grad_norm(g_ref, 1.0));
  BOOST_TEST(norm > 10.0);
  BOOST_TEST(throws_with<kiln::Error>([&] { scaler.unscale_(opt); }, "already called"));

  const auto before = kiln::passes();
  BOOST_TEST(scaler.step(opt));  // no second unscale: only the optimizer's pass
  BOOST_TEST(kiln::passes() - before == 1u);
  opt_ref.step();
  BOOST_TEST(p.to_vector() == p_ref.to_vector(), boost::test_tools::per_element());
  BOOST_TEST(throws_with<kiln::Error>([&] { scaler.unscale_(opt); }, "after step()"));
  BOOST_TEST(throws_with<kiln::Error>([&] { scaler.step(opt); }, "already called"));
  scaler.update();
  BOOST_TEST(throws_with<kiln::Error>([&] { scaler.update(); }, "call scaler.step(opt)"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_training_loop_clips_between_unscale_and_step, D, kt::devices) {
  Mlp<D> model(/*seed=*/5), reference(/*seed=*/5);
  const Batch<D> b;
  kiln::optim::AdamW opt(model, {.lr = 1e-2}), opt_ref(reference, {.lr = 1e-2});
  GradScaler<D> scaler;
  const auto& x = b.x;  // [N, 4]
  const auto& y = b.y;  // [N]
  for (int step = 0; step < 3; ++step) {
    // [doc:grad_scaler_loop]
    kiln::nn::CrossEntropyLoss ce;
    opt.zero_grad();
    auto logits = model.forward(x);                          // [N, 3]
    model.backward(ce.backward(logits, y, scaler.scale()));  // gradients times the scale
    scaler.unscale_(opt);                                    // true gradients, and an inf/NaN check
    kiln::optim::clip_grad_norm(model, 0.1);                 // clips the true norm
    scaler.step(opt);                                        // skipped if a gradient was inf/NaN
    scaler.update();                                         // back off, or grow every 2000 steps
    // [doc:grad_scaler_loop]
    backward(reference, b, 1.0);
    kiln::optim::clip_grad_norm(reference, 0.1);
    opt_ref.step();
  }
  BOOST_TEST(model.parameters().to_vector() == reference.parameters().to_vector(),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unscale_is_one_pass_that_finds_an_inf_anywhere, D, kt::devices) {
  constexpr std::size_t n = 100003;  // above the CPU's parallel threshold; many GPU blocks
  const auto values = kt::random_values<float>(n, -1.0, 1.0, 31);
  for (const std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
    BOOST_TEST_CONTEXT("inf at " << at) {
      auto p = arena<D>(std::vector<float>(n, 0.0f)), g = arena<D>(values);
      kiln::optim::SGD<float, D> opt(p, g, {.lr = 0.01});
      GradScaler<D> scaler({.init_scale = 4.0});
      auto before = kiln::passes();
      BOOST_TEST(scaler.unscale_(opt));  // all finite
      BOOST_TEST(kiln::passes() - before == 1u);
      const auto got = g.to_vector();
      bool exact = true;
      for (std::size_t i = 0; i < n; ++i) exact = exact && got[i] == values[i] * 0.25f;
      BOOST_TEST(exact);
      scaler.step(opt);
      scaler.update();

      poison(g, at, infinity);
      before = kiln::passes();
      BOOST_TEST(!scaler.step(opt));  // unscale (one pass), no optimizer pass
      BOOST_TEST(kiln::passes() - before == 1u);
      scaler.update();
      // The flag is cleared for the next iteration.
      g.fill(1.0f);
      before = kiln::passes();
      BOOST_TEST(scaler.step(opt));  // unscale + the optimizer
      BOOST_TEST(kiln::passes() - before == 2u);
      scaler.update();
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(several_optimizers_share_one_scaler, D, kt::devices) {
  auto p1 = arena<D>({1.0f, 2.0f}), g1 = arena<D>({4.0f, 8.0f});
  auto p2 = arena<D>({1.0f, 2.0f}), g2 = arena<D>({4.0f, infinity});
  kiln::optim::SGD<float, D> a(p1, g1, {.lr = 1.0}), b(p2, g2, {.lr = 1.0});
  GradScaler<D> scaler({.init_scale = 4.0});
  BOOST_TEST(scaler.step(a));
  BOOST_TEST(!scaler.step(b));
  scaler.update();  // one of them overflowed: back off
  BOOST_TEST(p1.to_vector() == (std::vector<float>{0.0f, 0.0f}), boost::test_tools::per_element());
  BOOST_TEST(p2.to_vector() == (std::vector<float>{1.0f, 2.0f}), boost::test_tools::per_element());
  BOOST_TEST(scaler.scale() == 2.0);
  BOOST_TEST(scaler.skipped_steps() == 1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(several_optimizers_share_one_capturable_scaler, D, kt::devices) {
  // Each optimizer skips on its own flag (torch's found_inf per optimizer): b's overflow, found first,
  // does not skip a's step; update() backs off once and clears every flag.
  auto p1 = arena<D>({1.0f, 2.0f}), g1 = arena<D>({4.0f, 8.0f});
  auto p2 = arena<D>({1.0f, 2.0f}), g2 = arena<D>({4.0f, infinity});
  kiln::optim::SGD<float, D> a(p1, g1, {.lr = 1.0, .capturable = true}), b(p2, g2, {.lr = 1.0, .capturable = true});
  GradScaler<D> scaler({.init_scale = 4.0, .capturable = true});
  scaler.unscale_(b);
  BOOST_TEST(scaler.found_inf());
  scaler.step(a);
  scaler.step(b);
  scaler.update();
  BOOST_TEST(p1.to_vector() == (std::vector<float>{0.0f, 0.0f}), boost::test_tools::per_element());
  BOOST_TEST(p2.to_vector() == (std::vector<float>{1.0f, 2.0f}), boost::test_tools::per_element());
  BOOST_TEST(scaler.scale() == 2.0);
  BOOST_TEST(scaler.skipped_steps() == 1);
  BOOST_TEST(!scaler.found_inf());
  // The next iteration: b's flag was cleared, so both step.
  g1.copy_from(std::vector<float>{2.0f, 2.0f});
  g2.copy_from(std::vector<float>{2.0f, 2.0f});
  scaler.step(b);
  scaler.step(a);
  scaler.update();
  BOOST_TEST(p1.to_vector() == (std::vector<float>{-1.0f, -1.0f}), boost::test_tools::per_element());
  BOOST_TEST(p2.to_vector() == (std::vector<float>{0.0f, 1.0f}), boost::test_tools::per_element());
  BOOST_TEST(scaler.skipped_steps() == 1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(state_round_trips_through_checkpoint_metadata, D, kt::devices) {
  auto p = arena<D>({1.0f}), g = arena<D>({1.0f});
  kiln::optim::SGD<float, D> opt(p, g, {.lr = 0.01});
  GradScaler<D> scaler({.init_scale = 3.0, .growth_interval = 10});
  for (const float v : {1.0f, infinity, 1.0f, 1.0f, not_a_number, 1.0f, 1.0f, 1.0f}) {
    g.fill(v);
    scaler.step(opt);
    scaler.update();
  }
  BOOST_TEST(scaler.scale() == 0.75);
  BOOST_TEST(scaler.growth_tracker() == 3);
  BOOST_TEST(scaler.skipped_steps() == 2);
  const auto plain = scaler.state();
  BOOST_TEST(plain.size() == 6u);
  BOOST_TEST(plain.at("scale") == "0.75");
  BOOST_TEST(plain.at("growth_tracker") == "3");
  BOOST_TEST(plain.at("skipped_steps") == "2");
  BOOST_TEST(plain.at("growth_factor") == "2");  // the options, as torch's state_dict()
  BOOST_TEST(plain.at("backoff_factor") == "0.5");
  BOOST_TEST(plain.at("growth_interval") == "10");

  // Through a checkpoint file, next to other metadata.
  kt::TempDir dir;
  Mlp<D> model(/*seed=*/1);
  auto meta = scaler.state("grad_scaler.");
  meta["epoch"] = "4";
  kiln::save_checkpoint(dir.file("state.safetensors"), model, {}, meta);
  std::map<std::string, std::string> read;
  kiln::load_checkpoint(dir.file("state.safetensors"), model, &read);
  GradScaler<D> resumed;  // the defaults: the options come back from the state, as torch's load_state_dict
  resumed.load_state(read, "grad_scaler.");
  BOOST_TEST(resumed.scale() == 0.75);
  BOOST_TEST(resumed.growth_tracker() == 3);
  BOOST_TEST(resumed.skipped_steps() == 2);
  BOOST_TEST(resumed.options().growth_interval == 10);
  BOOST_TEST((resumed.state() == plain));
  // ... and it goes on as the saved run: seven more finite steps grow the scale at the tenth.
  for (int k = 0; k < 7; ++k) {
    g.fill(1.0f);
    scaler.step(opt);
    scaler.update();
    resumed.step(opt);
    resumed.update();
  }
  BOOST_TEST(resumed.scale() == 1.5);
  BOOST_TEST((resumed.state() == scaler.state()));
  GradScaler<D> odd_options({.growth_factor = 3.0, .backoff_factor = 0.125});
  GradScaler<D> takes_them;
  takes_them.load_state(odd_options.state());
  BOOST_TEST(takes_them.options().growth_factor == 3.0);
  BOOST_TEST(takes_them.options().backoff_factor == 0.125);
  BOOST_TEST(takes_them.options().growth_interval == 2000);
  // A state saved before kiln saved the options keeps the scaler's own.
  auto old_state = plain;
  for (const char* key : {"growth_factor", "backoff_factor", "growth_interval"}) old_state.erase(key);
  GradScaler<D> keeps({.growth_interval = 7});
  keeps.load_state(old_state);
  BOOST_TEST(keeps.options().growth_interval == 7);
  BOOST_TEST(keeps.scale() == 0.75);

  // A scale that is no short decimal reads back exactly.
  GradScaler<D> odd({.init_scale = 1.0 / 3.0});
  GradScaler<D> copy;
  copy.load_state(odd.state());
  BOOST_TEST(copy.scale() == static_cast<double>(1.0f / 3.0f));

  // Bad states name the key and change nothing.
  const auto kept = resumed.state();
  auto broken = plain;
  broken.erase("growth_tracker");
  BOOST_TEST(throws_with<kiln::ValueError>([&] { resumed.load_state(broken); }, "no 'growth_tracker'"));
  broken = plain;
  broken["scale"] = "big";
  BOOST_TEST(throws_with<kiln::ValueError>([&] { resumed.load_state(broken); }, "'scale' is 'big'"));
  for (const char* bad_scale : {"-1", "0", "inf", "1e39"}) {
    broken = plain;
    broken["scale"] = bad_scale;
    BOOST_TEST(throws_with<kiln::ValueError>([&] { resumed.load_state(broken); },
                                             "'scale' is '" + std::string(bad_scale) + "'; expected a positive"));
  }
  broken = plain;
  broken["skipped_steps"] = "2.5";
  BOOST_TEST(throws_with<kiln::ValueError>([&] { resumed.load_state(broken); }, "'skipped_steps' is '2.5'"));
  broken = plain;
  broken["growth_interval"] = "0";  // an option the constructor refuses
  BOOST_TEST(throws_with<kiln::ValueError>([&] { resumed.load_state(broken); }, "invalid growth_interval 0"));
  broken = plain;
  broken["backoff_factor"] = "half";
  BOOST_TEST(
      throws_with<kiln::ValueError>([&] { resumed.load_state(broken); }, "'backoff_factor' is 'half'"));
  BOOST_TEST(
      throws_with<kiln::ValueError>([&] { resumed.load_state(plain, "missing."); }, "no 'missing.scale'"));
  BOOST_TEST((resumed.state() == kept));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_copied_scaler_has_its_own_inf_flag, D, kt::devices) {
  auto p = arena<D>({1.0f}), g = arena<D>({1.0f});
  kiln::optim::SGD<float, D> opt(p, g, {.lr = 0.01});
  GradScaler<D> a;
  BOOST_TEST(a.step(opt));
  a.update();
  GradScaler<D> b = a;
  BOOST_TEST(b.scale() == a.scale());
  g.fill(infinity);
  BOOST_TEST(!a.step(opt));  // a's flag now holds 1
  a.update();
  g.fill(1.0f);
  BOOST_TEST(b.step(opt));  // b must not read a's flag
  b.update();
  a = b;
  g.fill(1.0f);
  BOOST_TEST(a.step(opt));
  a.update();
  BOOST_TEST(a.growth_tracker() == 3);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_disabled_scaler_is_a_pass_through, D, kt::devices) {
  auto p = arena<D>({1.0f, 1.0f}), g = arena<D>({2.0f, infinity});
  kiln::optim::SGD<float, D> opt(p, g, {.lr = 0.5});
  GradScaler<D> scaler({.enabled = false});
  BOOST_TEST(!scaler.is_enabled());
  BOOST_TEST(scaler.scale() == 1.0);
  const auto before = kiln::passes();
  BOOST_TEST(scaler.unscale_(opt));
  BOOST_TEST(scaler.unscale_(opt));  // no stages either
  BOOST_TEST(kiln::passes() - before == 0u);
  BOOST_TEST(g.to_vector() == (std::vector<float>{2.0f, infinity}), boost::test_tools::per_element());
  BOOST_TEST(scaler.step(opt));  // steps whatever the gradients hold, as torch's disabled scaler
  scaler.update();
  scaler.update();
  const auto after = p.to_vector();
  BOOST_TEST(after[0] == 0.0f);
  BOOST_TEST(std::isinf(after[1]));
  BOOST_TEST(scaler.scale() == 1.0);
  BOOST_TEST(scaler.skipped_steps() == 0);
  BOOST_TEST(scaler.state().empty());
  scaler.load_state({});  // ignored
}

BOOST_AUTO_TEST_CASE(invalid_options_are_rejected) {
  using kiln::ValueError;
  const auto make = [](GradScalerOptions o) { return [o] { GradScaler<kiln::Cpu> s(o); }; };
  BOOST_TEST(throws_with<ValueError>(make({.init_scale = 0.0}), "invalid init_scale"));
  BOOST_TEST(throws_with<ValueError>(make({.init_scale = -2.0}), "invalid init_scale"));
  BOOST_TEST(throws_with<ValueError>(make({.init_scale = std::nan("")}), "invalid init_scale"));
  BOOST_TEST(throws_with<ValueError>(make({.init_scale = 1e300}), "positive, finite float32"));
  BOOST_TEST(throws_with<ValueError>(make({.init_scale = 1e-300}), "positive, finite float32"));
  // A float32 whose inverse is not one (1 / 1e-39 > 3.4e38): unscale_ could not use it.
  BOOST_TEST(throws_with<ValueError>(make({.init_scale = 1e-39}), "whose inverse is one too"));
  BOOST_CHECK_NO_THROW(make({.init_scale = 3e-39})());
  BOOST_TEST(throws_with<ValueError>(make({.growth_factor = 1.0}), "invalid growth_factor"));
  BOOST_TEST(throws_with<ValueError>(make({.growth_factor = 0.5}), "> 1"));
  BOOST_TEST(throws_with<ValueError>(make({.growth_factor = -2.0}), "invalid growth_factor"));
  BOOST_TEST(throws_with<ValueError>(make({.growth_factor = std::numeric_limits<double>::infinity()}),
                                     "invalid growth_factor"));
  BOOST_TEST(throws_with<ValueError>(make({.backoff_factor = 0.0}), "invalid backoff_factor"));
  BOOST_TEST(throws_with<ValueError>(make({.backoff_factor = 1.0}), "0 < backoff_factor < 1"));
  BOOST_TEST(throws_with<ValueError>(make({.backoff_factor = -0.5}), "invalid backoff_factor"));
  BOOST_TEST(throws_with<ValueError>(make({.backoff_factor = std::nan("")}), "invalid backoff_factor"));
  BOOST_TEST(throws_with<ValueError>(make({.growth_interval = 0}), "invalid growth_interval"));
  BOOST_TEST(throws_with<ValueError>(make({.growth_interval = -5}), "at least 1"));
  BOOST_TEST(
      throws_with<ValueError>(make({.growth_interval = 0, .enabled = false}), "invalid growth_interval"));
  BOOST_CHECK_NO_THROW(
      make({.init_scale = 1.0, .growth_factor = 1.5, .backoff_factor = 0.9, .growth_interval = 1})());

  GradScaler<kiln::Cpu> scaler;
  BOOST_TEST(throws_with<ValueError>([&] { scaler.update(0.0); }, "invalid new_scale"));
  BOOST_TEST(throws_with<ValueError>([&] { scaler.update(-1.0); }, "invalid new_scale"));
  BOOST_TEST(scaler.scale() == 65536.0);
}

// Capturable (kiln::cuda::Graph): the scale, tracker, skip count and flag on the device, Adam skipping
// there; the same training as the host's state machine, bit for bit, through skips and growth.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_capturable_scaler_trains_as_the_host_one_through_skips_and_growth, D, kt::devices) {
  Mlp<D> plain_model(/*seed=*/5), captured_model(/*seed=*/5);
  const Batch<D> b;
  kiln::optim::Adam plain_opt(plain_model, {.lr = 1e-2});
  kiln::optim::Adam captured_opt(captured_model, {.lr = 1e-2, .capturable = true});
  GradScaler<D> plain({.init_scale = 1024.0, .growth_interval = 3});
  GradScaler<D> captured({.init_scale = 1024.0, .growth_interval = 3, .capturable = true});
  BOOST_TEST(!GradScalerOptions{}.capturable);
  BOOST_TEST(captured.scale() == 1024.0);
  for (int step = 0; step < 10; ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      backward(plain_model, b, plain.scale());
      backward(captured_model, b, captured.loss_scale());  // read on the device by the loss's pass
      BOOST_TEST(plain_model.gradients().to_vector() == captured_model.gradients().to_vector(),
                 boost::test_tools::per_element());
      if (step == 2 || step == 6 || step == 7) {  // an overflow: both skip and back off
        poison(plain_model.gradients(), 9, infinity);
        poison(captured_model.gradients(), 9, infinity);
      }
      plain.step(plain_opt);
      const auto before = kiln::passes();
      BOOST_TEST(captured.step(captured_opt));  // decided on the device: reports true
      BOOST_TEST(kiln::passes() - before == 3u, "unscale, Adam's prepare and update passes, also when skipped");
      BOOST_TEST(captured.found_inf() == plain.found_inf());
      plain.update();
      captured.update();
      BOOST_TEST(captured.scale() == plain.scale());
      BOOST_TEST(captured.growth_tracker() == plain.growth_tracker());
      BOOST_TEST(captured.skipped_steps() == plain.skipped_steps());
    }
  }
  BOOST_TEST(plain.skipped_steps() == 3);
  BOOST_TEST(plain.scale() != 1024.0);
  BOOST_TEST(captured_opt.step_count() == plain_opt.step_count());
  BOOST_TEST(plain_model.parameters().to_vector() == captured_model.parameters().to_vector(),
             boost::test_tools::per_element());
  BOOST_TEST(plain_opt.exp_avg_sq().to_vector() == captured_opt.exp_avg_sq().to_vector(),
             boost::test_tools::per_element());

  const auto meta = captured.state("s.");  // a checkpoint reads the device's state
  BOOST_TEST(meta == plain.state("s."));
  GradScaler<D> restored({.capturable = true});
  restored.load_state(meta, "s.");
  BOOST_TEST(restored.scale() == plain.scale());
  BOOST_TEST(restored.skipped_steps() == 3);
  restored.update(8.0);
  BOOST_TEST(restored.scale() == 8.0);

  kiln::optim::SGD sgd(captured_model, {.lr = 0.1});  // not capturable: it cannot skip on the device
  backward(captured_model, b, captured.loss_scale());
  const auto scaled = captured_model.gradients().to_vector();
  BOOST_TEST(throws_with<kiln::ValueError>([&] { captured.step(sgd); }, "skips on the device"));
  BOOST_TEST(captured_model.gradients().to_vector() == scaled, boost::test_tools::per_element());  // untouched
  BOOST_TEST(throws_with<kiln::ValueError>([&] { captured.step(sgd); }, "skips on the device"));  // not "already"
  BOOST_CHECK_THROW(plain_opt.step_unless(nullptr), kiln::ValueError);  // not capturable
}

/// Two models with an SGD each (capturable or not) and one scaler at 1024, after one scaled backward
/// each: the skip-counting tests' start.
template <class D>
struct TwoOptimizers {
  Mlp<D> m1{/*seed=*/1}, m2{/*seed=*/2};
  kiln::optim::SGD<float, D> o1, o2;
  GradScaler<D> scaler;
  TwoOptimizers(const Batch<D>& b, bool capturable)
      : o1(m1, {.lr = 0.1, .capturable = capturable}),
        o2(m2, {.lr = 0.1, .capturable = capturable}),
        scaler({.init_scale = 1024.0, .capturable = capturable}) {
    backward(m1, b, scaler.loss_scale());
    backward(m2, b, scaler.loss_scale());
  }
};

// skipped_steps() counts each optimizer that skipped, on the host and on the device alike, also in an
// iteration ended by update(new_scale).
BOOST_AUTO_TEST_CASE_TEMPLATE(host_and_capturable_scalers_count_skips_alike, D, kt::devices) {
  const Batch<D> b;
  for (const bool capturable : {false, true}) {
    BOOST_TEST_CONTEXT("capturable " << capturable) {
      TwoOptimizers<D> t(b, capturable);
      auto &m1 = t.m1, &m2 = t.m2;
      auto &o1 = t.o1, &o2 = t.o2;
      auto& scaler = t.scaler;
      poison(m1.gradients(), 3, infinity);
      poison(m2.gradients(), 5, std::numeric_limits<float>::quiet_NaN());
      scaler.step(o1);
      scaler.step(o2);
      scaler.update();
      BOOST_TEST(scaler.skipped_steps() == 2);  // both optimizers skipped
      BOOST_TEST(scaler.scale() == 512.0);      // one backoff
      backward(m1, b, scaler.loss_scale());
      poison(m1.gradients(), 0, infinity);
      scaler.step(o1);
      scaler.update(8.0);
      BOOST_TEST(scaler.skipped_steps() == 3);
      BOOST_TEST(scaler.scale() == 8.0);
      BOOST_TEST(scaler.growth_tracker() == 0);
    }
  }
}

// An optimizer only unscaled (its gradients read, say, for a norm) and not stepped skips no step: the
// host counts skips in step(), the capturable scaler's update counts only the optimizers that reached it.
BOOST_AUTO_TEST_CASE_TEMPLATE(an_optimizer_only_unscaled_counts_no_skip, D, kt::devices) {
  const Batch<D> b;
  for (const bool capturable : {false, true}) {
    BOOST_TEST_CONTEXT("capturable " << capturable) {
      TwoOptimizers<D> t(b, capturable);
      auto &m1 = t.m1, &m2 = t.m2;
      auto &o1 = t.o1, &o2 = t.o2;
      auto& scaler = t.scaler;
      poison(m1.gradients(), 3, infinity);
      poison(m2.gradients(), 5, infinity);
      scaler.unscale_(o1);  // not stepped
      scaler.step(o2);
      scaler.update();
      BOOST_TEST(scaler.skipped_steps() == 1);  // o2's only
      BOOST_TEST(scaler.scale() == 512.0);      // the inf still backs off
    }
  }
}

// A capturable scaler refuses an optimizer that cannot skip on the device in unscale_() as in step(),
// before the gradients change (unscale_ went ahead, then step() refused: half an iteration).
BOOST_AUTO_TEST_CASE_TEMPLATE(a_capturable_unscale_refuses_an_optimizer_that_cannot_skip_on_the_device, D,
                              kt::devices) {
  const Batch<D> b;
  Mlp<D> model(/*seed=*/4);
  kiln::optim::SGD opt(model, {.lr = 0.1});  // not capturable
  GradScaler<D> scaler({.init_scale = 1024.0, .capturable = true});
  backward(model, b, scaler.loss_scale());
  const auto grads = model.gradients().to_vector();
  BOOST_TEST(throws_with<kiln::ValueError>([&] { scaler.unscale_(opt); }, "skips on the device"));
  BOOST_TEST(model.gradients().to_vector() == grads, boost::test_tools::per_element());
}

// A scale so small that 1 / scale is not a float32 (torch would multiply the gradients by inf): the
// host's unscale says so and changes nothing; a capturable scaler, which cannot throw from the device,
// skips the step.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_scale_without_a_float_inverse_is_refused_or_skipped, D, kt::devices) {
  const Batch<D> b;
  Mlp<D> model(/*seed=*/3);
  kiln::optim::SGD opt(model, {.lr = 0.1, .capturable = true});
  const auto weights = model.parameters().to_vector();
  // A scale fallen to a float32 subnormal (loaded: no scaler starts there): 1 / 2e-39 = 5e38 > FLT_MAX.
  const std::map<std::string, std::string> fallen{{"scale", "2e-39"}, {"growth_tracker", "0"}, {"skipped_steps", "0"}};
  GradScaler<D> host;
  host.load_state(fallen);
  backward(model, b, host.scale());
  const auto grads = model.gradients().to_vector();
  BOOST_TEST(throws_with<kiln::Error>([&] { host.step(opt); }, "whose inverse is not a float32"));
  BOOST_TEST(model.gradients().to_vector() == grads, boost::test_tools::per_element());
  GradScaler<D> captured({.capturable = true});
  captured.load_state(fallen);
  BOOST_TEST(captured.step(opt));  // decided on the device
  captured.update();
  BOOST_TEST(captured.skipped_steps() == 1);
  BOOST_TEST(model.parameters().to_vector() == weights, boost::test_tools::per_element());
}

/// An optimizer whose first step() throws (out of memory, say), then steps as `inner`.
template <class Opt>
struct FailsOnce {
  Opt& inner;
  int failures = 1;
  auto& gradients() { return inner.gradients(); }
  void step() {
    if (failures-- > 0) throw std::runtime_error("out of memory");
    inner.step();
  }
};

// A step that throws is no step: the scaler's step() may be called again (torch marks the optimizer
// stepped only after its step() returns), the gradients unscaled once. An unscale that throws records
// nothing: update() then refuses as after no check (it counted a finite step and could grow the scale).
BOOST_AUTO_TEST_CASE_TEMPLATE(a_step_or_an_unscale_that_throws_records_no_step, D, kt::devices) {
  const Batch<D> b;
  Mlp<D> model(/*seed=*/5), twin(/*seed=*/5);
  kiln::optim::SGD sgd(model, {.lr = 0.1}), twin_sgd(twin, {.lr = 0.1});
  FailsOnce<decltype(sgd)> opt{sgd};
  GradScaler<D> scaler({.init_scale = 4.0, .growth_interval = 1});
  backward(model, b, scaler.scale());
  BOOST_TEST(throws_with<std::runtime_error>([&] { scaler.step(opt); }, "out of memory"));
  BOOST_TEST(scaler.step(opt));  // called again, it steps
  backward(twin, b, kiln::nn::LossScale(1.0));
  twin_sgd.step();
  BOOST_TEST(model.parameters().to_vector() == twin.parameters().to_vector(), boost::test_tools::per_element());
  scaler.update();
  BOOST_TEST(scaler.scale() == 8.0);  // one finite step at growth_interval 1

  GradScaler<D> tiny({.growth_interval = 1});  // fallen to 2e-39, whose inverse is no float32
  tiny.load_state({{"scale", "2e-39"}, {"growth_tracker", "0"}, {"skipped_steps", "0"}});
  BOOST_TEST(throws_with<kiln::Error>([&] { tiny.unscale_(sgd); }, "whose inverse is not a float32"));
  BOOST_TEST(throws_with<kiln::Error>([&] { tiny.unscale_(sgd); }, "an fp16 activation or input past 65504"));
  BOOST_TEST(throws_with<kiln::Error>([&] { tiny.update(); }, "no inf/NaN check since the last update()"));
  BOOST_TEST(tiny.scale() == static_cast<double>(2e-39f));
  BOOST_TEST(tiny.growth_tracker() == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_loss_gradient_scaled_on_the_device_equals_the_host_scaled_one, D, kt::devices) {
  const Batch<D> b;
  Mlp<D> model(/*seed=*/2);
  const auto logits = model.forward(b.x);
  Tensor<double, Shape<dyn>, D> s(Extents<Shape<dyn>>(1));
  const double value = 3072.0 / 7.0;  // not a power of two: the rounding of scale / N shows
  s.copy_from(std::span<const double>(&value, 1));
  const auto on_device = kiln::nn::LossScale::on_device(s.data());
  kiln::nn::CrossEntropyLoss ce;
  kiln::nn::MSELoss mse;
  const auto target = kt::make_tensor<D>(kt::random_values<float>(18, -1.0, 1.0, 5), Extents<Shape<dyn, 3>>(6));
  // Two rows ignored: the mean divides by 4 (counted on the device on the GPU).
  const auto some_ignored = kt::make_tensor<D>(std::vector<std::int64_t>{0, -100, 1, 1, -100, 2}, Extents<Shape<dyn>>(6));
  for (const bool fused : {true, false}) {
    std::optional<kiln::Unfused> off;
    if (!fused) off.emplace();
    BOOST_TEST(ce.backward(logits, b.y, value).to_vector() == ce.backward(logits, b.y, on_device).to_vector(),
               boost::test_tools::per_element());
    BOOST_TEST(ce.backward(logits, some_ignored, value).to_vector() ==
                   ce.backward(logits, some_ignored, on_device).to_vector(),
               boost::test_tools::per_element());
    BOOST_TEST(mse.backward(logits, target, value).to_vector() == mse.backward(logits, target, on_device).to_vector(),
               boost::test_tools::per_element());
    // Through the unreduced terms: the upstream gradient times the scale, from the host or the device.
    const auto rows = kt::make_tensor<D>(kt::random_values<float>(6, 0.5, 1.5, 6), Extents<Shape<dyn>>(6));
    const auto terms = kt::make_tensor<D>(kt::random_values<float>(18, 0.5, 1.5, 7), Extents<Shape<dyn, 3>>(6));
    BOOST_TEST(ce.backward(logits, some_ignored, rows, value).to_vector() ==
                   ce.backward(logits, some_ignored, rows, on_device).to_vector(),
               boost::test_tools::per_element());
    BOOST_TEST(kiln::nn::NLLLoss{}.backward(logits, some_ignored, rows, value).to_vector() ==
                   kiln::nn::NLLLoss{}.backward(logits, some_ignored, rows, on_device).to_vector(),
               boost::test_tools::per_element());
    BOOST_TEST(mse.backward(logits, target, terms, value).to_vector() ==
                   mse.backward(logits, target, terms, on_device).to_vector(),
               boost::test_tools::per_element());
    const auto times_value = [&](const auto& g) { return kt::to_doubles(kiln::eval(g * static_cast<float>(value)).to_vector()); };
    BOOST_TEST(kt::all_close(mse.backward(logits, target, terms, value).to_vector(),
                             times_value(mse.backward(logits, target, terms))));
    BOOST_TEST(kt::all_close(ce.backward(logits, some_ignored, rows, value).to_vector(),
                             times_value(ce.backward(logits, some_ignored, rows))));
    const kiln::nn::NLLLoss nll;
    BOOST_TEST(kt::all_close(nll.backward(logits, some_ignored, rows, value).to_vector(),
                             times_value(nll.backward(logits, some_ignored, rows))));
    // NLLLoss's mean: the count (on the GPU, a device scalar) and the scale read by one pass.
    BOOST_TEST(nll.backward(logits, some_ignored, value).to_vector() == nll.backward(logits, some_ignored, on_device).to_vector(),
               boost::test_tools::per_element());
    BOOST_TEST(kt::all_close(nll.backward(logits, some_ignored, value).to_vector(),
                             times_value(nll.backward(logits, some_ignored))));
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
