// Optimizer state in checkpoints (kiln/io/optimizer_state.hpp): SGD (momentum, Nesterov, capturable),
// Adam (amsgrad, capturable), AdamW, RMSprop (plain; centered with momentum), Adagrad (lr_decay, a
// starting accumulator), NAdam (mu_product in the metadata), RAdam, Adamax and Adadelta stopped after 3
// steps, saved to a safetensors file and restored into a fresh optimizer continue bit for bit as if they had
// never stopped, as torch's optimizer.load_state_dict does. A restored SGD momentum buffer is used, not
// restarted from the gradient; one turned on after construction (OneCycleLR) goes through too. maximize is
// saved and must match.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <kiln/io/optimizer_state.hpp>
#include <kiln/optim/optim.hpp>

#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/temp_dir.hpp"

namespace {
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Shape;
using kiln::Tensor;
constexpr kiln::index_t n = 1031;

template <class D>
Tensor<float, Shape<dyn>, D> arena(const std::vector<float>& v) {
  return Tensor<float, Shape<dyn>, D>::from(std::span<const float>(v),
                                            kiln::Extents<Shape<dyn>>(static_cast<kiln::index_t>(v.size())));
}
std::vector<float> gradient(std::uint32_t step) { return kt::random_values<float>(n, -1, 1, 700 + step); }

/// Steps [first, last) of the run, each from its own gradient.
template <class Opt, class G>
void steps(Opt& opt, G& g, std::uint32_t first, std::uint32_t last) {
  for (std::uint32_t s = first; s < last; ++s) {
    g.copy_from(std::span<const float>(gradient(s)));
    opt.step();
  }
}

/// 5 steps in one go against 3 steps, a checkpoint (the parameters and optimizer_state in one file), a
/// fresh optimizer restored from it, and 2 more steps: the same parameters, bit for bit.
template <class Opt, class D, class Options>
void resumes_as_if_never_stopped(Options o, const std::string& name) {
  const auto start = kt::random_values<float>(n, -1, 1, 699);
  auto pa = arena<D>(start);
  Tensor<float, Shape<dyn>, D> ga(n);
  Opt a(pa, ga, o);
  steps(a, ga, 0, 5);

  const kt::TempDir dir;
  const auto file = dir.path() / (name + ".safetensors");
  {
    auto pb = arena<D>(start);
    Tensor<float, Shape<dyn>, D> gb(n);
    Opt b(pb, gb, o);
    steps(b, gb, 0, 3);
    kiln::OptimizerState state = kiln::optimizer_state(b);
    const auto p = pb.to_vector();
    state.entries["params"] = kiln::make_entry<float>(std::span<const float>(p), {n});
    kiln::write_safetensors(file, state.entries, state.metadata);
  }

  std::map<std::string, std::string> meta;
  const auto entries = kiln::read_safetensors(file, &meta);
  const auto& saved = entries.at("params").bytes;
  std::vector<float> p(static_cast<std::size_t>(n));
  std::memcpy(p.data(), saved.data(), saved.size());
  auto pc = arena<D>(p);
  Tensor<float, Shape<dyn>, D> gc(n);
  Opt c(pc, gc, o);
  kiln::load_optimizer_state(c, entries, meta, file.string());
  steps(c, gc, 3, 5);
  BOOST_TEST(pc.to_vector() == pa.to_vector(), boost::test_tools::per_element());
}

/// An optimizer with o and maximize, one without: each one's state says its maximize, and the other
/// refuses it with both values (check and load), writing nothing; without the key (a checkpoint written
/// before kiln saved it) each loads the other's and keeps its own; a value other than 0 or 1 is refused.
template <class Opt, class D, class Options>
void maximize_must_match(Options o) {
  auto p = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 0.5f));
  Tensor<float, Shape<dyn>, D> g(n);
  o.maximize = true;
  Opt up(p, g, o);
  o.maximize = false;
  Opt down(p, g, o);
  const auto up_state = kiln::optimizer_state(up), down_state = kiln::optimizer_state(down);
  BOOST_TEST(up_state.metadata.at("optimizer.maximize") == "1");
  BOOST_TEST(down_state.metadata.at("optimizer.maximize") == "0");
  const std::string type = up_state.metadata.at("optimizer.type");
  const auto names_both = [&](const char* saved, const char* here) {
    const std::string want = "kiln: ckpt.safetensors: the checkpoint's " + type + " has maximize = " + saved +
                             ", this one " + here + "; build the optimizer with the checkpoint's maximize";
    return [want](const kiln::CheckpointError& e) { return std::string(e.what()) == want; };
  };
  down.set_lr(0.125);
  BOOST_CHECK_EXCEPTION(kiln::check_optimizer_state(down, up_state.entries, up_state.metadata, "ckpt.safetensors"),
                        kiln::CheckpointError, names_both("1", "0"));
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(down, up_state.entries, up_state.metadata, "ckpt.safetensors"),
                        kiln::CheckpointError, names_both("1", "0"));
  BOOST_TEST(down.lr() == 0.125);  // nothing written
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(up, down_state.entries, down_state.metadata, "ckpt.safetensors"),
                        kiln::CheckpointError, names_both("0", "1"));
  auto old_up = up_state.metadata, old_down = down_state.metadata;
  old_up.erase("optimizer.maximize");
  old_down.erase("optimizer.maximize");
  // Without the key the checkpoint was written before maximize existed: by an optimizer that minimised.
  BOOST_CHECK_NO_THROW(kiln::load_optimizer_state(down, up_state.entries, old_up, "ckpt.safetensors"));
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(up, down_state.entries, old_down, "ckpt.safetensors"),
                        kiln::CheckpointError, names_both("0", "1"));
  BOOST_TEST(up.options().maximize);
  BOOST_TEST(!down.options().maximize);
  old_up["optimizer.maximize"] = "true";
  BOOST_CHECK_THROW(kiln::check_optimizer_state(up, up_state.entries, old_up, "ckpt.safetensors"), kiln::CheckpointError);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(optimizer_state)

BOOST_AUTO_TEST_CASE_TEMPLATE(sgd_momentum_resumes_from_a_checkpoint_as_if_never_stopped, D, kiln::test::devices) {
  using Sgd = kiln::optim::SGD<float, D>;
  resumes_as_if_never_stopped<Sgd, D>(
      kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3}, "sgd");
  resumes_as_if_never_stopped<Sgd, D>(kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true},
                                      "nesterov");
  resumes_as_if_never_stopped<Sgd, D>(kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .capturable = true},
                                      "sgd_capturable");
  resumes_as_if_never_stopped<Sgd, D>(kiln::optim::SGDOptions{.lr = 0.1}, "sgd_plain");  // no state at all
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_and_adamw_resume_from_a_checkpoint_as_if_never_stopped, D, kiln::test::devices) {
  resumes_as_if_never_stopped<kiln::optim::Adam<float, D>, D>(
      kiln::optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-3, .amsgrad = true}, "adam");
  resumes_as_if_never_stopped<kiln::optim::Adam<float, D>, D>(kiln::optim::AdamOptions{.lr = 1e-2, .capturable = true},
                                                              "adam_capturable");
  resumes_as_if_never_stopped<kiln::optim::AdamW<float, D>, D>(kiln::optim::AdamWOptions{.lr = 1e-2}, "adamw");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rmsprop_resumes_from_a_checkpoint_as_if_never_stopped, D, kiln::test::devices) {
  using Rms = kiln::optim::RMSprop<float, D>;
  resumes_as_if_never_stopped<Rms, D>(kiln::optim::RMSpropOptions{}, "rmsprop");
  resumes_as_if_never_stopped<Rms, D>(
      kiln::optim::RMSpropOptions{.weight_decay = 1e-2, .momentum = 0.9, .centered = true}, "rmsprop_centered");
  auto p = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 0.0f));
  Tensor<float, Shape<dyn>, D> g(n);
  Rms plain(p, g, {});
  const auto state = kiln::optimizer_state(plain);
  BOOST_TEST(state.metadata.at("optimizer.type") == "RMSprop");
  BOOST_TEST(!state.entries.contains("optimizer.grad_avg"));
  // A state without buffers into an RMSprop with a momentum: zeros (torch would fail), the step count kept.
  plain.step();
  const auto stepped = kiln::optimizer_state(plain);
  Rms with_momentum(p, g, {.momentum = 0.9});
  with_momentum.momentum_buffer().fill(5.0f);
  kiln::load_optimizer_state(with_momentum, stepped.entries, stepped.metadata, "r.safetensors");
  BOOST_TEST(with_momentum.step_count() == 1);
  for (float v : with_momentum.momentum_buffer().to_vector()) BOOST_TEST(v == 0.0f);
  BOOST_TEST(with_momentum.square_avg().to_vector() == plain.square_avg().to_vector(), boost::test_tools::per_element());
  Rms centered(p, g, {.centered = true});  // a centred RMSprop needs the gradient average
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(centered, state.entries, state.metadata, "r.safetensors"),
                        kiln::CheckpointError, [](const kiln::CheckpointError& e) {
                          return std::string(e.what()).find("has centered = 0, this one 1") != std::string::npos;
                        });
  auto unlabelled = state.metadata;  // without the hyperparameters, the missing average is what is seen
  unlabelled.erase("optimizer.centered");
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(centered, state.entries, unlabelled, "r.safetensors"),
                        kiln::CheckpointError, [](const kiln::CheckpointError& e) {
                          return std::string(e.what()).find("optimizer.grad_avg") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adagrad_resumes_from_a_checkpoint_as_if_never_stopped, D, kiln::test::devices) {
  using Ada = kiln::optim::Adagrad<float, D>;
  resumes_as_if_never_stopped<Ada, D>(kiln::optim::AdagradOptions{}, "adagrad");
  resumes_as_if_never_stopped<Ada, D>(
      kiln::optim::AdagradOptions{
          .lr = 0.05, .lr_decay = 0.2, .weight_decay = 1e-2, .initial_accumulator_value = 0.5},
      "adagrad_decay");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nadam_and_radam_resume_from_a_checkpoint_as_if_never_stopped, D,
                              kiln::test::devices) {
  using NAdam = kiln::optim::NAdam<float, D>;
  using RAdam = kiln::optim::RAdam<float, D>;
  resumes_as_if_never_stopped<NAdam, D>(kiln::optim::NAdamOptions{}, "nadam");
  resumes_as_if_never_stopped<NAdam, D>(
      kiln::optim::NAdamOptions{
          .lr = 0.05, .betas = {0.8f, 0.99f}, .eps = 1e-6, .weight_decay = 1e-2, .momentum_decay = 0.1},
      "nadam_decay");
  resumes_as_if_never_stopped<RAdam, D>(kiln::optim::RAdamOptions{}, "radam");
  // (beta2 0.999: the rectified steps start at the sixth; 5 here, the last 2 after the restore)
  resumes_as_if_never_stopped<RAdam, D>(
      kiln::optim::RAdamOptions{.lr = 0.05, .betas = {0.8f, 0.999f}, .eps = 1e-6, .weight_decay = 1e-2},
      "radam_l2");
  // Each type is told apart from the others, so a checkpoint names the right one.
  static_assert(kiln::detail::nadam_like<NAdam> && !kiln::detail::radam_like<NAdam> &&
                !kiln::detail::adam_like<NAdam>);
  static_assert(kiln::detail::radam_like<RAdam> && !kiln::detail::nadam_like<RAdam> &&
                !kiln::detail::adam_like<RAdam>);
  static_assert(!kiln::detail::nadam_like<kiln::optim::Adam<float, D>> &&
                !kiln::detail::radam_like<kiln::optim::Adam<float, D>> &&
                !kiln::detail::radam_like<kiln::optim::AdamW<float, D>>);
  BOOST_TEST(kiln::detail::optimizer_type<NAdam>() == "NAdam");
  BOOST_TEST(kiln::detail::optimizer_type<RAdam>() == "RAdam");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adamax_and_adadelta_resume_from_a_checkpoint_as_if_never_stopped, D,
                              kiln::test::devices) {
  using Adamax = kiln::optim::Adamax<float, D>;
  using Adadelta = kiln::optim::Adadelta<float, D>;
  resumes_as_if_never_stopped<Adamax, D>(kiln::optim::AdamaxOptions{}, "adamax");
  resumes_as_if_never_stopped<Adamax, D>(
      kiln::optim::AdamaxOptions{.lr = 0.05, .betas = {0.8f, 0.99f}, .eps = 1e-6, .weight_decay = 1e-2},
      "adamax_l2");
  resumes_as_if_never_stopped<Adadelta, D>(kiln::optim::AdadeltaOptions{}, "adadelta");
  resumes_as_if_never_stopped<Adadelta, D>(
      kiln::optim::AdadeltaOptions{.lr = 0.5, .rho = 0.8, .eps = 1e-5, .weight_decay = 1e-2},
      "adadelta_l2");
  // Each type is told apart from the others, so a checkpoint names the right one.
  static_assert(kiln::detail::adamax_like<Adamax> && !kiln::detail::adam_like<Adamax> &&
                !kiln::detail::radam_like<Adamax> && !kiln::detail::nadam_like<Adamax>);
  static_assert(kiln::detail::adadelta_like<Adadelta> && !kiln::detail::rmsprop_like<Adadelta> &&
                !kiln::detail::adagrad_like<Adadelta>);
  static_assert(!kiln::detail::adamax_like<kiln::optim::Adam<float, D>> &&
                !kiln::detail::adadelta_like<kiln::optim::RMSprop<float, D>>);
  BOOST_TEST(kiln::detail::optimizer_type<Adamax>() == "Adamax");
  BOOST_TEST(kiln::detail::optimizer_type<Adadelta>() == "Adadelta");
}

// torch's maximize is a param_groups entry; kiln fixes it at construction, as amsgrad and nesterov: a run
// that maximizes resumes as if never stopped, and a checkpoint of the other kind is refused with both.
BOOST_AUTO_TEST_CASE_TEMPLATE(maximize_goes_through_a_checkpoint_and_must_match, D, kiln::test::devices) {
  using Sgd = kiln::optim::SGD<float, D>;
  using Adam = kiln::optim::Adam<float, D>;
  using AdamW = kiln::optim::AdamW<float, D>;
  using Rms = kiln::optim::RMSprop<float, D>;
  using Ada = kiln::optim::Adagrad<float, D>;
  using NAdam = kiln::optim::NAdam<float, D>;
  using RAdam = kiln::optim::RAdam<float, D>;
  using Adamax = kiln::optim::Adamax<float, D>;
  using Adadelta = kiln::optim::Adadelta<float, D>;
  resumes_as_if_never_stopped<Sgd, D>(
      kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true, .maximize = true},
      "sgd_maximize");
  resumes_as_if_never_stopped<Adam, D>(
      kiln::optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-3, .amsgrad = true, .maximize = true}, "adam_maximize");
  resumes_as_if_never_stopped<AdamW, D>(kiln::optim::AdamWOptions{.lr = 1e-2, .maximize = true, .capturable = true},
                                        "adamw_maximize");
  resumes_as_if_never_stopped<Rms, D>(
      kiln::optim::RMSpropOptions{.weight_decay = 1e-2, .momentum = 0.9, .centered = true, .maximize = true},
      "rmsprop_maximize");
  resumes_as_if_never_stopped<Ada, D>(kiln::optim::AdagradOptions{.lr_decay = 0.1, .maximize = true},
                                      "adagrad_maximize");
  resumes_as_if_never_stopped<NAdam, D>(kiln::optim::NAdamOptions{.weight_decay = 1e-2, .maximize = true},
                                        "nadam_maximize");
  resumes_as_if_never_stopped<RAdam, D>(kiln::optim::RAdamOptions{.lr = 1e-2, .maximize = true},
                                        "radam_maximize");
  resumes_as_if_never_stopped<Adamax, D>(kiln::optim::AdamaxOptions{.lr = 1e-2, .maximize = true},
                                         "adamax_maximize");
  resumes_as_if_never_stopped<Adadelta, D>(
      kiln::optim::AdadeltaOptions{.weight_decay = 1e-2, .maximize = true}, "adadelta_maximize");
  maximize_must_match<Sgd, D>(kiln::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  maximize_must_match<Adam, D>(kiln::optim::AdamOptions{.amsgrad = true});
  maximize_must_match<AdamW, D>(kiln::optim::AdamWOptions{});
  maximize_must_match<Rms, D>(kiln::optim::RMSpropOptions{.momentum = 0.9, .centered = true});
  maximize_must_match<Ada, D>(kiln::optim::AdagradOptions{.lr_decay = 0.1});
  maximize_must_match<NAdam, D>(kiln::optim::NAdamOptions{.momentum_decay = 0.1});
  maximize_must_match<RAdam, D>(kiln::optim::RAdamOptions{});
  maximize_must_match<Adamax, D>(kiln::optim::AdamaxOptions{});
  maximize_must_match<Adadelta, D>(kiln::optim::AdadeltaOptions{});
}

BOOST_AUTO_TEST_CASE(a_momentum_flag_other_than_0_or_1_or_a_state_not_flat_is_refused) {
  using D = kiln::Cpu;
  auto p = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 0.5f));
  Tensor<float, Shape<dyn>, D> g(n);
  kiln::optim::SGD sgd(p, g, {.lr = 0.1, .momentum = 0.9});
  g.fill(1.0f);
  sgd.step();
  const auto says = [](const std::string& text) {
    return [text](const kiln::CheckpointError& e) {
      return std::string(e.what()).find(text) != std::string::npos;
    };
  };
  kiln::OptimizerState state = kiln::optimizer_state(sgd);
  state.metadata["optimizer.momentum_initialized"] = "7";
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(sgd, state.entries, state.metadata, "ckpt"),
                        kiln::CheckpointError,
                        says("metadata 'optimizer.momentum_initialized' is 7; expected 0 or 1"));
  state = kiln::optimizer_state(sgd);
  state.entries.at("optimizer.momentum_buffer").shape = {1, n};  // the right bytes, another shape
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(sgd, state.entries, state.metadata, "ckpt"),
                        kiln::CheckpointError,
                        says("optimizer state 'optimizer.momentum_buffer' is F32 of shape [1, " + std::to_string(n) +
                             "]; expected " + std::to_string(n) + " values of F32"));
  state = kiln::optimizer_state(sgd);
  const std::vector<double> wide(static_cast<std::size_t>(n), 0.0);
  state.entries.at("optimizer.momentum_buffer") = kiln::make_entry<double>(wide, {n});  // another dtype
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(sgd, state.entries, state.metadata, "ckpt"),
                        kiln::CheckpointError,
                        says("optimizer state 'optimizer.momentum_buffer' is F64 of shape [" + std::to_string(n) +
                             "]; expected " + std::to_string(n) + " values of F32"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_restored_sgd_momentum_buffer_is_used_by_the_next_step, D, kiln::test::devices) {
  // momentum_initialized: until a step fills them, the next step starts the buffers from the gradient
  // (torch: no momentum_buffer in the state yet); restored, the next step uses them.
  auto p = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 0.0f));
  auto g = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 1.0f));
  kiln::optim::SGD<float, D> opt(p, g, {.lr = 1.0, .momentum = 0.5});
  BOOST_TEST(!opt.momentum_initialized());
  opt.momentum_buffer().fill(4.0f);
  opt.set_momentum_initialized(true);
  opt.step();  // buf = 0.5 * 4 + 1 = 3; p = 0 - 1 * 3
  BOOST_TEST(p.to_vector()[0] == -3.0f);
  opt.momentum_buffer().fill(4.0f);
  opt.set_momentum_initialized(false);
  opt.step();  // buf = g = 1; p = -3 - 1
  BOOST_TEST(p.to_vector()[0] == -4.0f);
  BOOST_TEST(opt.momentum_initialized());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_momentum_turned_on_later_goes_through_a_checkpoint, D, kiln::test::devices) {
  // An SGD built without a momentum, which OneCycleLR turns on (set_momentum): 3 steps, a checkpoint,
  // a fresh SGD without a momentum restored from it (before or after its momentum is set again: loading
  // restores the checkpoint's momentum, 0, as torch's param_groups), 2 more steps: as 5 in one go. A
  // state without buffers makes the next step start them afresh.
  using Sgd = kiln::optim::SGD<float, D>;
  const kiln::optim::SGDOptions o{.lr = 0.1, .dampening = 0.5};
  const auto start = kt::random_values<float>(n, -1, 1, 698);
  auto pa = arena<D>(start);
  Tensor<float, Shape<dyn>, D> ga(n);
  Sgd a(pa, ga, o);
  a.set_momentum(0.9);
  steps(a, ga, 0, 5);
  for (const bool load_first : {true, false}) {
    BOOST_TEST_CONTEXT((load_first ? "loaded, then the momentum set" : "the momentum set, then loaded")) {
      auto pb = arena<D>(start);
      Tensor<float, Shape<dyn>, D> gb(n);
      Sgd b(pb, gb, o);
      b.set_momentum(0.9);
      steps(b, gb, 0, 3);
      b.set_momentum(0.0);  // a checkpoint taken where the schedule's momentum is 0 keeps the buffers
      const auto state = kiln::optimizer_state(b);
      BOOST_TEST(state.entries.contains("optimizer.momentum_buffer"));
      auto pc = arena<D>(pb.to_vector());
      Tensor<float, Shape<dyn>, D> gc(n);
      Sgd c(pc, gc, o);
      if (!load_first) c.set_momentum(0.9);
      kiln::load_optimizer_state(c, state.entries, state.metadata, "ckpt.safetensors");
      BOOST_TEST(c.momentum() == 0.0);  // the checkpoint's
      c.set_momentum(0.9);               // the schedule's next value
      BOOST_TEST(c.momentum_initialized());
      steps(c, gc, 3, 5);
      BOOST_TEST(pc.to_vector() == pa.to_vector(), boost::test_tools::per_element());
    }
  }
  // No buffers in the state: the next step starts them from its gradient (buf = g = 1, where the
  // buffer the first step left, 3, would give 0.5 * 3 + 0.5 * 1 = 2).
  auto p = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 0.0f));
  auto g = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 3.0f));
  Sgd plain(p, g, {.lr = 1.0, .dampening = 0.5});
  const auto none = kiln::optimizer_state(plain);
  BOOST_TEST(!none.entries.contains("optimizer.momentum_buffer"));
  Sgd later(p, g, {.lr = 1.0, .momentum = 0.5, .dampening = 0.5});
  later.step();  // buf = 3
  kiln::load_optimizer_state(later, none.entries, none.metadata, "ckpt.safetensors");
  BOOST_TEST(later.momentum() == 0.0);  // the checkpoint's
  later.set_momentum(0.5);
  BOOST_TEST(!later.momentum_initialized());
  g.fill(1.0f);
  const float before = p.to_vector()[0];
  later.step();
  BOOST_TEST(p.to_vector()[0] == before - 1.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(another_optimizers_state_is_refused_with_what_it_is, D, kiln::test::devices) {
  auto p = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 0.0f));
  Tensor<float, Shape<dyn>, D> g(n);
  kiln::optim::SGD<float, D> sgd(p, g, {.lr = 0.01, .momentum = 0.9});
  kiln::optim::Adam<float, D> adam(p, g);
  const auto state = kiln::optimizer_state(sgd);
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adam, state.entries, state.metadata, "ckpt.safetensors"),
                        kiln::CheckpointError, [](const kiln::CheckpointError& e) {
                          return std::string(e.what()) ==
                                 "kiln: ckpt.safetensors: the optimizer state is SGD's; expected Adam's";
                        });
  auto adam_state = kiln::optimizer_state(adam);
  adam_state.entries.erase("optimizer.exp_avg_sq");
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adam, adam_state.entries, adam_state.metadata, "f"),
                        kiln::CheckpointError, [](const kiln::CheckpointError& e) {
                          return std::string(e.what()).find("no optimizer state 'optimizer.exp_avg_sq'; expected 1031 "
                                                            "values of F32") != std::string::npos;
                        });
  // Nothing is restored from a bad state: exp_avg was valid but stays as it was.
  adam.exp_avg().fill(0.0f);
  auto changed = kiln::optimizer_state(adam);
  std::vector<float> ones(static_cast<std::size_t>(n), 1.0f);
  changed.entries["optimizer.exp_avg"] = kiln::make_entry<float>(std::span<const float>(ones), {n});
  changed.entries.erase("optimizer.exp_avg_sq");
  BOOST_CHECK_THROW(kiln::load_optimizer_state(adam, changed.entries, changed.metadata, "f"), kiln::CheckpointError);
  BOOST_TEST(adam.exp_avg().to_vector()[0] == 0.0f);
  adam_state = kiln::optimizer_state(adam);
  adam_state.metadata["optimizer.step"] = "-1";
  BOOST_CHECK_THROW(kiln::load_optimizer_state(adam, adam_state.entries, adam_state.metadata, "f"), kiln::CheckpointError);
  // INT64_MAX would overflow at the next step (t < 0: infinite step sizes); no count passes 2^53.
  adam_state.metadata["optimizer.step"] = "9223372036854775807";
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(adam, adam_state.entries, adam_state.metadata, "f"),
                        kiln::CheckpointError, [](const kiln::CheckpointError& e) {
                          return std::string(e.what()).find("expected a whole number in [0, 2^53]") !=
                                 std::string::npos;
                        });
  adam_state.metadata["optimizer.step"] = "9007199254740992";  // 2^53 itself is a count
  BOOST_CHECK_NO_THROW(kiln::load_optimizer_state(adam, adam_state.entries, adam_state.metadata, "f"));
  BOOST_TEST(adam.step_count() == 9007199254740992);
}

// As torch's load_state_dict restores param_groups: the learning rate, betas and momentum come from the
// checkpoint (a resumed run goes on with what a scheduler had reached); a hyperparameter kiln fixes at
// construction must match, else a CheckpointError naming both, before anything is written; a checkpoint
// without them keeps the optimizer's.
BOOST_AUTO_TEST_CASE_TEMPLATE(hyperparameters_come_back_as_torchs_param_groups, D, kiln::test::devices) {
  auto p = arena<D>(std::vector<float>(static_cast<std::size_t>(n), 0.5f));
  Tensor<float, Shape<dyn>, D> g(n);
  kiln::optim::Adam<float, D> saved(p, g, {.lr = 0.01, .betas = {0.8f, 0.9f}, .weight_decay = 0.1});
  saved.set_lr(0.0025);  // where a scheduler had taken it
  const auto state = kiln::optimizer_state(saved);
  BOOST_TEST(state.metadata.at("optimizer.lr") == "0.0025");
  kiln::optim::Adam<float, D> resumed(p, g, {.lr = 0.5, .weight_decay = 0.1});
  kiln::load_optimizer_state(resumed, state.entries, state.metadata, "f");
  BOOST_TEST(resumed.lr() == 0.0025);
  BOOST_TEST(resumed.betas().beta1 == 0.8f);
  BOOST_TEST(resumed.betas().beta2 == 0.9f);

  kiln::optim::Adam<float, D> other(p, g, {.lr = 0.5});  // weight_decay 0
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(other, state.entries, state.metadata, "f"), kiln::CheckpointError,
                        [](const kiln::CheckpointError& e) {
                          return std::string(e.what()) ==
                                 "kiln: f: the checkpoint's Adam has weight_decay = 0.1, this one 0; build the "
                                 "optimizer with the checkpoint's weight_decay";
                        });
  BOOST_TEST(other.lr() == 0.5);
  auto old = state.metadata;  // written before the hyperparameters were saved
  for (const char* k : {"optimizer.lr", "optimizer.beta1", "optimizer.beta2", "optimizer.eps",
                        "optimizer.weight_decay", "optimizer.amsgrad", "optimizer.maximize"})
    old.erase(k);
  kiln::load_optimizer_state(other, state.entries, old, "f");
  BOOST_TEST(other.lr() == 0.5);
  old["optimizer.lr"] = "fast";
  BOOST_CHECK_THROW(kiln::load_optimizer_state(other, state.entries, old, "f"), kiln::CheckpointError);
  // Written while kiln held eps and weight_decay as floats ("1e-08", "0.1"): loads into an optimizer
  // built from the float literals those came from, and from the decimals; another value is refused.
  auto floats = state.metadata;
  floats["optimizer.eps"] = "1e-08";
  kiln::optim::Adam<float, D> from_floats(p, g, {.eps = 1e-8f, .weight_decay = 0.1f});
  BOOST_CHECK_NO_THROW(kiln::load_optimizer_state(from_floats, state.entries, floats, "f"));
  floats["optimizer.weight_decay"] = "0.10000000149011612";  // 0.1f, as a double writes it
  BOOST_CHECK_NO_THROW(kiln::load_optimizer_state(from_floats, state.entries, floats, "f"));
  kiln::optim::Adam<float, D> from_decimals(p, g, {.eps = 1e-8, .weight_decay = 0.1});
  BOOST_CHECK_NO_THROW(kiln::load_optimizer_state(from_decimals, state.entries, floats, "f"));
  floats["optimizer.eps"] = "1.0000001e-08";  // another float
  BOOST_CHECK_THROW(kiln::load_optimizer_state(from_decimals, state.entries, floats, "f"), kiln::CheckpointError);

  kiln::optim::SGD<float, D> sgd(p, g, {.lr = 0.1, .momentum = 0.9});
  kiln::optim::SGD<float, D> plain(p, g, {.lr = 0.3});
  kiln::load_optimizer_state(plain, kiln::optimizer_state(sgd).entries, kiln::optimizer_state(sgd).metadata, "f");
  BOOST_TEST(plain.lr() == 0.1);
  BOOST_TEST(plain.momentum() == 0.9);
  BOOST_TEST(!plain.momentum_buffer().empty());
  kiln::optim::SGD<float, D> nesterov(p, g, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  const auto sgd_state = kiln::optimizer_state(sgd);
  BOOST_CHECK_THROW(kiln::check_optimizer_state(nesterov, sgd_state.entries, sgd_state.metadata, "f"),
                    kiln::CheckpointError);
  BOOST_CHECK_THROW(kiln::load_optimizer_state(nesterov, sgd_state.entries, sgd_state.metadata, "f"),
                    kiln::CheckpointError);
  BOOST_CHECK_NO_THROW(kiln::check_optimizer_state(plain, sgd_state.entries, sgd_state.metadata, "f"));
  kiln::optim::RMSprop<float, D> rms(p, g, {.lr = 0.02, .momentum = 0.5});
  kiln::optim::RMSprop<float, D> rms2(p, g, {.lr = 0.3});
  const auto rms_state = kiln::optimizer_state(rms);
  kiln::optim::RMSprop<float, D> centered(p, g, {.lr = 0.02, .momentum = 0.5, .centered = true});
  BOOST_CHECK_THROW(kiln::check_optimizer_state(centered, rms_state.entries, rms_state.metadata, "f"),
                    kiln::CheckpointError);
  BOOST_CHECK_NO_THROW(kiln::check_optimizer_state(rms2, rms_state.entries, rms_state.metadata, "f"));
  BOOST_TEST(rms2.lr() == 0.3);  // a check writes nothing
  kiln::load_optimizer_state(rms2, rms_state.entries, rms_state.metadata, "f");
  BOOST_TEST(rms2.lr() == 0.02);
  BOOST_TEST(rms2.momentum() == 0.5);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
