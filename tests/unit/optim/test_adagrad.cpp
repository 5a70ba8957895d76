// Adagrad (kiln/optim/adagrad.hpp): torch's defaults; four steps against a float64 transcription of torch
// 1.13's single-tensor step (defaults; lr_decay, weight decay and a starting accumulator; also with
// maximize); one pass per step, and with fusion off one pass per operation landing where the fused step
// does; the working copy under mixed precision; a GradScaler drives it; StepLR moves its learning rate;
// its state through a checkpoint (a resumed run steps as an unbroken one; another optimizer's state or
// other hyperparameters refused); bad options refused with torch's words. (Parity with torch itself:
// tests/unit/optim/test_parity_mlp.cpp.)
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/io/optimizer_state.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "support/optimizer_checks.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using Net = knn::Sequential<knn::Linear<7, 5>, knn::Tanh, knn::Linear<5, 3>>;
using In = Shape<dyn, 7>;

/// torch 1.13's _single_tensor_adagrad for one element, in double.
struct Reference {
  kiln::optim::AdagradOptions o;
  double p, sum = o.initial_accumulator_value;
  int step = 0;
  void take(double g) {
    ++step;
    if (o.maximize) g = -g;
    if (o.weight_decay != 0) g += o.weight_decay * p;
    const double clr = o.lr / (1 + (step - 1) * o.lr_decay);
    sum += g * g;
    p -= clr * g / (std::sqrt(sum) + o.eps);
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(adagrad)

BOOST_AUTO_TEST_CASE(options_default_to_torch) {
  const kiln::optim::AdagradOptions o;
  BOOST_TEST(o.lr == 1e-2f);
  BOOST_TEST(o.lr_decay == 0.0);
  BOOST_TEST(o.weight_decay == 0.0f);
  BOOST_TEST(o.initial_accumulator_value == 0.0f);
  BOOST_TEST(o.eps == 1e-10f);
  BOOST_TEST(!o.maximize);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(four_steps_match_a_float64_transcription_of_torch, D, kiln::test::devices) {
  const std::vector<double> p0 = kt::random_values<double>(64, -1, 1, 1);
  using O = kiln::optim::AdagradOptions;
  for (const O o : {O{},
                    O{.lr = 0.1f,
                    .lr_decay = 0.5,
                    .weight_decay = 1e-2f,
                    .initial_accumulator_value = 0.25f,
                    .eps = 1e-6f},
                    O{.lr = 0.1f, .lr_decay = 0.5, .weight_decay = 1e-2f, .eps = 1e-6f, .maximize = true}}) {
    BOOST_TEST_CONTEXT("lr_decay " << o.lr_decay << ", maximize " << o.maximize) {
      auto p = kt::make_tensor<D>(p0, Extents<Shape<dyn>>(64));
      Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(64));
      kiln::optim::Adagrad opt(p, g, o);
      BOOST_TEST(opt.sum().to_vector() == std::vector<double>(64, o.initial_accumulator_value),
                 boost::test_tools::per_element());
      std::vector<Reference> ref;
      for (double x : p0) ref.push_back({o, x});
      for (std::uint32_t s = 0; s < 4; ++s) {
        const auto gv = kt::random_values<double>(64, -1, 1, 10 + s);
        g.copy_from(std::span<const double>(gv));
        opt.step();
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i].take(gv[i]);
      }
      std::vector<double> want, sums;
      for (const auto& r : ref) want.push_back(r.p), sums.push_back(r.sum);
      BOOST_TEST(kt::all_close(p.to_vector(), want, 1e-12, 1e-12));
      BOOST_TEST(kt::all_close(opt.sum().to_vector(), sums, 1e-12, 1e-12));
      BOOST_TEST(opt.step_count() == 4);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_fused_and_torchs_order_unfused, D, kiln::test::devices) {
  using O = kiln::optim::AdagradOptions;
  kt::fused_and_unfused_steps_agree<kiln::optim::Adagrad, D>(O{}, 4);  // sum, sqrt, + eps, p
  kt::fused_and_unfused_steps_agree<kiln::optim::Adagrad, D>(
      O{.lr_decay = 0.1, .weight_decay = 1e-2f, .maximize = true}, 6);  // and maximize, L2
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_working_copy_is_rewritten_under_mixed_precision, D, kiln::test::devices) {
  kt::the_working_copy_follows_the_masters<kiln::optim::Adagrad, D>(kiln::optim::AdagradOptions{.lr = 0.1f});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_grad_scaler_drives_adagrad, D, kiln::test::devices) {
  kt::a_grad_scaler_drives_it<kiln::optim::Adagrad, D>(kiln::optim::AdagradOptions{.lr_decay = 0.1});
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_scheduler_moves_its_learning_rate, D, kiln::test::devices) {
  // StepLR halves the lr every 2 epochs; the step after 4 takes 0.025, as the transcription does.
  const std::vector<double> p0 = kt::random_values<double>(16, -1, 1, 2);
  auto p = kt::make_tensor<D>(p0, Extents<Shape<dyn>>(16));
  Tensor<double, Shape<dyn>, D> g(Extents<Shape<dyn>>(16));
  kiln::optim::Adagrad opt(p, g, {.lr = 0.1f});
  kiln::optim::StepLR sched(opt, 2, 0.5);
  for (int epoch = 0; epoch < 4; ++epoch) sched.step();
  BOOST_TEST(opt.lr() == 0.025f);
  const auto gv = kt::random_values<double>(16, -1, 1, 3);
  g.copy_from(std::span<const double>(gv));
  opt.step();
  std::vector<double> want;
  for (std::size_t i = 0; i < p0.size(); ++i) {
    Reference r{{.lr = 0.025f}, p0[i]};
    r.take(gv[i]);
    want.push_back(r.p);
  }
  BOOST_TEST(kt::all_close(p.to_vector(), want, 1e-12, 1e-12));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(its_state_goes_through_a_checkpoint, D, kiln::test::devices) {
  // Two steps, the state saved and loaded into a fresh Adagrad, two more: as four steps of one (lr_decay
  // reads the restored step count, the sums go on). Another optimizer's state, or other hyperparameters
  // that shape the steps, are refused and leave the optimizer as it was.
  using P = kiln::Policy<kiln::Fp32, D>;
  const kiln::optim::AdagradOptions o{.lr = 0.1f, .lr_decay = 0.5, .initial_accumulator_value = 0.1f};
  knn::Model<Net, In, P> whole(3), resumed(3);
  kiln::optim::Adagrad a(whole, o);
  std::optional<kiln::optim::Adagrad<float, D>> b(std::in_place, resumed, o);
  const auto n = static_cast<std::size_t>(whole.parameter_count);
  const auto grads = [&](std::uint32_t s) { return kt::random_values<float>(n, -1, 1, 60 + s); };
  for (std::uint32_t s = 0; s < 2; ++s) {
    whole.gradients().copy_from(std::span<const float>(grads(s)));
    resumed.gradients().copy_from(std::span<const float>(grads(s)));
    a.step();
    b->step();
  }
  const kiln::OptimizerState saved = kiln::optimizer_state(*b);
  BOOST_TEST(saved.metadata.at("optimizer.type") == "Adagrad");
  BOOST_TEST(saved.metadata.at("optimizer.step") == "2");
  BOOST_TEST(saved.entries.contains("optimizer.sum"));
  b.emplace(resumed, o);  // a fresh optimizer: sums of 0.1, no steps
  b->set_lr(0.5f);        // the checkpoint's lr is restored, as torch's load_state_dict does
  kiln::check_optimizer_state(*b, saved.entries, saved.metadata, "ckpt");
  BOOST_TEST(b->step_count() == 0);  // a check writes nothing
  kiln::load_optimizer_state(*b, saved.entries, saved.metadata, "ckpt");
  BOOST_TEST(b->step_count() == 2);
  BOOST_TEST(b->lr() == 0.1f);
  for (std::uint32_t s = 2; s < 4; ++s) {
    whole.gradients().copy_from(std::span<const float>(grads(s)));
    resumed.gradients().copy_from(std::span<const float>(grads(s)));
    a.step();
    b->step();
  }
  BOOST_TEST(resumed.parameters().to_vector() == whole.parameters().to_vector(),
             boost::test_tools::per_element());

  const auto says = [](const std::string& text) {
    return [text](const kiln::CheckpointError& e) {
      return std::string(e.what()).find(text) != std::string::npos;
    };
  };
  kiln::optim::Adagrad other(resumed, {.lr = 0.1f, .lr_decay = 0.25, .initial_accumulator_value = 0.1f});
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(other, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError,
                        says("the checkpoint's Adagrad has lr_decay = 0.5, this one 0.25"));
  BOOST_TEST(other.step_count() == 0);
  kiln::optim::Adam adam(resumed);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adam, saved.entries, saved.metadata, "ckpt"),
                        kiln::CheckpointError, says("the optimizer state is Adagrad's; expected Adam's"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_options_are_refused_with_torchs_words, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> p(Extents<Shape<dyn>>(3)), g(Extents<Shape<dyn>>(3)),
      short_g(Extents<Shape<dyn>>(2));
  const auto says = [](const std::string& text) {
    return [text](const kiln::Error& e) { return std::string(e.what()).find(text) != std::string::npos; };
  };
  using O = kiln::optim::AdagradOptions;
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.lr = -1.0f}), kiln::ValueError,
                        says("Invalid learning rate: -1"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.lr_decay = -0.5}), kiln::ValueError,
                        says("Invalid lr_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.weight_decay = -1.0f}), kiln::ValueError,
                        says("Invalid weight_decay value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.initial_accumulator_value = -1.0f}), kiln::ValueError,
                        says("Invalid initial_accumulator_value value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, g, O{.eps = NAN}), kiln::ValueError,
                        says("Invalid epsilon value"));
  BOOST_CHECK_EXCEPTION(kiln::optim::Adagrad(p, short_g, O{}), kiln::ShapeError,
                        says("3 parameters but 2 gradients"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
