// Frozen layers (Model::freeze, torch's model[:k].requires_grad_(False)): backward stops before them
// (no pass of theirs runs, their gradients stay 0) and leaves every other gradient as it was, bit for
// bit, whether k splits a Linear from the activation fused into it or not; backward_input still goes back
// through them; every optimizer steps the layers after them as an optimizer of their own would and
// leaves them (weight decay and moments included) as they were; the bookkeeping (offsets,
// named_parameters' requires_grad, the summary, the errors). PyTorch parity of every optimizer with
// frozen layers: test_parity_mlp.cpp (mlp_frozen.json).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <kiln/io/optimizer_state.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include "support/optimizer_checks.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace freeze_test {
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

// The ReLU runs fused into layer 0, the Tanh into layer 2 (Linear + activation epilogues).
using Net = kiln::nn::Sequential<kiln::nn::Linear<6, 5>, kiln::nn::ReLU, kiln::nn::Linear<5, 4>, kiln::nn::Tanh,
                                 kiln::nn::Linear<4, 3>>;
template <class D>
using Mlp = kiln::nn::Model<Net, Shape<dyn, 6>, kiln::Policy<kiln::Fp32, D>>;

template <class D>
Tensor<float, Shape<dyn, 6>, D> input(std::uint32_t stream) {
  return kt::make_tensor<D>(kt::random_values<float>(8 * 6, -1, 1, stream), Extents<Shape<dyn, 6>>(8));
}
template <class D>
Tensor<float, Shape<dyn, 3>, D> output_grad(std::uint32_t stream) {
  return kt::make_tensor<D>(kt::random_values<float>(8 * 3, -1, 1, stream), Extents<Shape<dyn, 3>>(8));
}
std::vector<float> slice(const std::vector<float>& v, std::size_t begin, std::size_t end) {
  return {v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end)};
}

using Dev = std::tuple_element_t<0, kt::devices>;
using all_optimizers = std::tuple<kiln::optim::SGD<float, Dev>, kiln::optim::Adam<float, Dev>,
                                  kiln::optim::AdamW<float, Dev>, kiln::optim::RMSprop<float, Dev>,
                                  kiln::optim::Adagrad<float, Dev>, kiln::optim::NAdam<float, Dev>,
                                  kiln::optim::RAdam<float, Dev>, kiln::optim::Adamax<float, Dev>,
                                  kiln::optim::Adadelta<float, Dev>>;
/// The optimizers that count steps (torch's state["step"]): all but SGD.
using counting_optimizers =
    std::tuple<kiln::optim::Adam<float, Dev>, kiln::optim::AdamW<float, Dev>, kiln::optim::RMSprop<float, Dev>,
               kiln::optim::Adagrad<float, Dev>, kiln::optim::NAdam<float, Dev>, kiln::optim::RAdam<float, Dev>,
               kiln::optim::Adamax<float, Dev>, kiln::optim::Adadelta<float, Dev>>;
}  // namespace freeze_test
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(freeze)

using namespace freeze_test;

BOOST_AUTO_TEST_CASE(layer_offsets_count_each_layers_parameters) {
  // Linear<6, 5>: 35, Linear<5, 4>: 24, Linear<4, 3>: 15; activations none.
  using M = Mlp<kiln::Cpu>;
  BOOST_TEST(M::layer_count == 5u);
  const kiln::index_t want[6] = {0, 35, 35, 59, 59, 74};
  for (std::size_t k = 0; k <= 5; ++k) BOOST_TEST(M::layer_offset(k) == want[k], "layer " << k);
  BOOST_CHECK_EXCEPTION(M::layer_offset(6), kiln::ValueError,
                        kt::says("layer_offset: layer 6 of a network of 5 layers; give 0 to 5"));
  static_assert(M::layer_offset(3) == 59);
  // Where backward stops: the first layer from the frozen ones on that has parameters.
  static_assert(M::first_trainable(0) == 0 && M::first_trainable(1) == 2 && M::first_trainable(2) == 2);
  static_assert(M::first_trainable(3) == 4 && M::first_trainable(4) == 4 && M::first_trainable(5) == 5);
  static_assert(kiln::nn::Model<kiln::nn::Linear<4, 2>, Shape<dyn, 4>>::layer_count == 1);
}

// For every k: the gradients of the layers after the first k are those of the model without frozen
// layers, bit for bit; the first k layers' stay 0; the backward runs fewer passes, none at all with
// every layer frozen.
BOOST_AUTO_TEST_CASE_TEMPLATE(backward_stops_before_the_frozen_layers, D, kt::devices) {
  Mlp<D> whole(/*seed=*/7);
  whole.forward(input<D>(1));
  const auto before_whole = kiln::counters();
  whole.backward(output_grad<D>(2));
  const auto passes_whole = (kiln::counters() - before_whole).passes;
  const auto want = whole.gradients().to_vector();
  std::uint64_t passes_at[6] = {};
  for (std::size_t k = 0; k <= 5; ++k) {
    BOOST_TEST_CONTEXT(k << " layers frozen") {
      Mlp<D> m(/*seed=*/7);
      m.freeze(k);
      BOOST_TEST(m.frozen_layers() == k);
      m.forward(input<D>(1));
      const auto before = kiln::counters();
      m.backward(output_grad<D>(2));
      const auto passes = (kiln::counters() - before).passes;
      const auto got = m.gradients().to_vector();
      const auto off = static_cast<std::size_t>(Mlp<D>::layer_offset(k));
      BOOST_TEST((slice(got, 0, off) == std::vector<float>(off, 0.0f)));
      BOOST_TEST((slice(got, off, got.size()) == slice(want, off, want.size())));
      if (k == 0) BOOST_TEST(passes == passes_whole);
      else BOOST_TEST(passes < passes_whole);
      if (k == 5) BOOST_TEST(passes == 0u);
      passes_at[k] = passes;
    }
  }
  // A frozen Linear's activation (layers 1 and 3) has nothing to go back for: freezing it too is free.
  BOOST_TEST(passes_at[1] == passes_at[2]);
  BOOST_TEST(passes_at[3] == passes_at[4]);
}

// A training forward keeps nothing for backward in the frozen layers (torch builds no graph through
// them): fewer bytes held after it; with set_input_requires_grad(true), as many as the whole model's.
BOOST_AUTO_TEST_CASE(a_forward_keeps_nothing_in_the_frozen_layers) {
  using Conv = kiln::nn::Sequential<kiln::nn::Conv2d<1, 4, 3, 1, 1>, kiln::nn::ReLU, kiln::nn::MaxPool2d<2>,
                                    kiln::nn::Flatten, kiln::nn::Linear<64, 10>>;
  using Image = Shape<dyn, 1, 8, 8>;
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(16 * 64, -1, 1, 3), Extents<Image>(16));
  const auto kept = [&](std::size_t frozen, bool input_grad) {
    kiln::nn::Model<Conv, Image> m(/*seed=*/1);
    m.freeze(frozen);
    m.set_input_requires_grad(input_grad);
    auto& alloc = kiln::caching_allocator<kiln::Cpu>();
    const auto before = alloc.stats().allocated_bytes;
    const auto y = m.forward(x);
    return alloc.stats().allocated_bytes - before;
  };
  const auto whole = kept(0, false), frozen = kept(4, false);
  BOOST_TEST_MESSAGE("bytes a training forward keeps: " << whole << " whole, " << frozen << " with layers 0-3 frozen");
  BOOST_TEST(frozen < whole);
  BOOST_TEST(kept(4, true) == whole);
}

// A backward that also returns dL/dx needs the frozen layers' activations: refused (before anything
// changes) after a forward that kept none, as torch's input that does not require grad has no grad;
// with set_input_requires_grad(true) (torch's x.requires_grad_()) it goes back through them: the same
// dx, and the frozen layers' gradients still 0.
BOOST_AUTO_TEST_CASE_TEMPLATE(backward_input_goes_back_through_the_frozen_layers, D, kt::devices) {
  Mlp<D> whole(/*seed=*/3), m(/*seed=*/3);
  m.freeze(3);
  m.forward(input<D>(4));
  BOOST_CHECK_EXCEPTION(m.backward_input(output_grad<D>(5)), kiln::ValueError,
                        kt::says("layers 0 to 3 kept nothing to go back through in the forward (layers 0 to 2 are "
                                 "frozen; torch: an input that does not require grad); call "
                                 "model.set_input_requires_grad(true) before the forward"));
  m.backward(output_grad<D>(5));  // the activations are still there for a backward
  m.zero_grad();
  m.set_input_requires_grad(true);
  BOOST_TEST(m.input_requires_grad());
  whole.forward(input<D>(4));
  m.forward(input<D>(4));
  const auto dx_whole = whole.backward_input(output_grad<D>(5)).to_vector();
  const auto dx = m.backward_input(output_grad<D>(5)).to_vector();
  BOOST_TEST(dx == dx_whole);
  const auto got = m.gradients().to_vector(), want = whole.gradients().to_vector();
  BOOST_TEST((slice(got, 0, 59) == std::vector<float>(59, 0.0f)));
  BOOST_TEST((slice(got, 59, 74) == slice(want, 59, 74)));
}

// Any optimizer built on a model with its first two layers frozen steps the rest as the same optimizer
// built on the rest's arenas alone, bit for bit (weight decay on), and leaves the frozen parameters as
// they were; with a parameter group over a frozen and a trainable parameter too. Unfrozen again, it
// steps them.
BOOST_AUTO_TEST_CASE_TEMPLATE(optimizers_leave_the_frozen_layers_as_they_are, Opt, all_optimizers) {
  typename Opt::options_type o{};
  o.lr = 0.01;
  o.weight_decay = 0.02;
  for (const bool grouped : {false, true}) {
    BOOST_TEST_CONTEXT((grouped ? "with" : "without") << " a parameter group") {
      Mlp<Dev> m(/*seed=*/5), r(/*seed=*/5);
      m.freeze(2);
      r.freeze(2);
      const auto start = m.parameters().to_vector();
      constexpr kiln::index_t off = 35;
      using Arena = Tensor<float, Shape<dyn>, Dev>;
      Opt opt(m, o);
      if (grouped) {
        // "0.bias" (frozen) and "2.bias" (elements 55 .. 58) at lr 0.05 without decay.
        opt.add_param_group({.params = {"0.bias", "2.bias"}, .lr = 0.05, .weight_decay = 0.0});
        BOOST_TEST((opt.group_parameter_names(1) == std::vector<std::string>{"0.bias", "2.bias"}));
      }
      // The reference: one optimizer over r's elements 35 .. 74, or with the group three, over
      // 35 .. 55, 55 .. 59 (the group's options) and 59 .. 74.
      const auto view = [](Arena& of, kiln::index_t a, kiln::index_t b) {
        return Arena::from_blob(of.data() + a, Extents<Shape<dyn>>(b - a), of.device_index());
      };
      auto rp = view(r.parameters(), off, 74), rg = view(r.gradients(), off, 74);
      auto p1 = view(r.parameters(), off, 55), g1 = view(r.gradients(), off, 55);
      auto p2 = view(r.parameters(), 55, 59), g2 = view(r.gradients(), 55, 59);
      auto p3 = view(r.parameters(), 59, 74), g3 = view(r.gradients(), 59, 74);
      typename Opt::options_type group_options = o;
      group_options.lr = 0.05;
      group_options.weight_decay = 0.0;
      Opt rest(rp, rg, o), part1(p1, g1, o), part2(p2, g2, group_options), part3(p3, g3, o);
      for (std::uint32_t s = 0; s < 3; ++s) {
        for (auto* model : {&m, &r}) {
          model->zero_grad();
          model->forward(input<Dev>(10 + s));
          model->backward(output_grad<Dev>(20 + s));
        }
        opt.step();
        if (grouped) {
          part1.step();
          part2.step();
          part3.step();
        } else {
          rest.step();
        }
      }
      const auto got = m.parameters().to_vector();
      BOOST_TEST((slice(got, 0, off) == slice(start, 0, off)));
      BOOST_TEST((got == r.parameters().to_vector()));
      BOOST_TEST((slice(got, off, 74) != slice(start, off, 74)));
      // Unfrozen, the next step moves the first layer too.
      m.unfreeze();
      m.zero_grad();
      m.forward(input<Dev>(30));
      m.backward(output_grad<Dev>(31));
      opt.step();
      BOOST_TEST((slice(m.parameters().to_vector(), 0, 30) != slice(start, 0, 30)));
    }
  }
}

// Unfrozen between a forward and its backward: the backward stops where the forward kept activations
// from, and the step leaves the layers it gave no gradient (torch's grad stays None for them until a
// backward reaches them): no weight decay on them either. The next forward and backward reach them.
BOOST_AUTO_TEST_CASE(layers_unfrozen_after_the_forward_wait_for_the_next_backward) {
  Mlp<kiln::Cpu> m(/*seed=*/6);
  kiln::optim::AdamW opt(m, {.lr = 0.1, .weight_decay = 0.5});
  const auto start = m.parameters().to_vector();
  m.freeze(2);
  m.forward(input<kiln::Cpu>(1));
  m.unfreeze();
  BOOST_TEST(m.frozen_parameter_count() == 0);
  m.backward(output_grad<kiln::Cpu>(2));
  BOOST_TEST(m.parameters_without_gradient() == 35);
  opt.step();
  auto p = m.parameters().to_vector();
  BOOST_TEST((slice(p, 0, 35) == slice(start, 0, 35)));
  BOOST_TEST((slice(p, 35, 74) != slice(start, 35, 74)));
  opt.zero_grad();
  m.forward(input<kiln::Cpu>(3));
  m.backward(output_grad<kiln::Cpu>(4));
  BOOST_TEST(m.parameters_without_gradient() == 0);
  opt.step();
  p = m.parameters().to_vector();
  BOOST_TEST((slice(p, 0, 35) != slice(start, 0, 35)));
}

BOOST_AUTO_TEST_CASE(freeze_checks_its_count_and_says_what_is_frozen) {
  Mlp<kiln::Cpu> m(/*seed=*/1);
  BOOST_CHECK_EXCEPTION(m.freeze(6), kiln::ValueError,
                        kt::says("kiln::nn::Model::freeze: 6 layers, but the network has 5; give 0 to 5"));
  BOOST_TEST(m.frozen_layers() == 0u);
  BOOST_TEST(m.summary().find("trainable") == std::string::npos);
  // freeze sets the frozen layers' gradients to 0 (torch's would be None) and leaves the others.
  m.gradients().fill(1.0f);
  m.freeze(2);
  const auto g = m.gradients().to_vector();
  BOOST_TEST((slice(g, 0, 35) == std::vector<float>(35, 0.0f)));
  BOOST_TEST((slice(g, 35, 74) == std::vector<float>(39, 1.0f)));
  BOOST_TEST(m.frozen_parameter_count() == 35);
  for (const auto& p : m.named_parameters())
    BOOST_TEST(p.requires_grad == (p.name[0] != '0'), p.name);
  BOOST_TEST(m.summary().find("trainable parameters: 39 (frozen: 35, in layers 0 to 1)") != std::string::npos,
             m.summary());
  BOOST_TEST(m.summary().find("ReLU() [fused into 0] [frozen]") != std::string::npos, m.summary());
  BOOST_TEST(m.summary().find("Tanh() [fused into 2]          ") != std::string::npos, m.summary());
  // Negative counts from the end, as torch's model[:-1]: all but the last layer.
  m.freeze(-1);
  BOOST_TEST(m.frozen_layers() == 4u);
  BOOST_CHECK_EXCEPTION(m.freeze(-6), kiln::ValueError, kt::says("or -1 to -5 (all but the last ones"));
  BOOST_TEST(m.frozen_layers() == 4u);
  m.freeze(2);
  m.unfreeze();
  BOOST_TEST(m.frozen_parameter_count() == 0);
  for (const auto& p : m.named_parameters()) BOOST_TEST(p.requires_grad, p.name);
}

// An unfused step (kiln::Unfused: torch's passes over the whole arena) refuses frozen layers before it
// changes anything.
BOOST_AUTO_TEST_CASE(an_unfused_step_refuses_frozen_layers) {
  Mlp<kiln::Cpu> m(/*seed=*/2);
  m.freeze(2);
  kiln::optim::Adam opt(m, {.lr = 0.01});
  m.forward(input<kiln::Cpu>(1));
  m.backward(output_grad<kiln::Cpu>(2));
  const auto start = m.parameters().to_vector();
  {
    kiln::Unfused off;
    BOOST_CHECK_EXCEPTION(opt.step(), kiln::ValueError, kt::says("with layers frozen (Model::freeze), step fused"));
  }
  BOOST_TEST((m.parameters().to_vector() == start));
  BOOST_TEST(opt.step_count() == 0);
}

// A network that is one bare layer: freeze(1) freezes it, and backward and steps do nothing.
BOOST_AUTO_TEST_CASE(a_bare_layer_freezes_whole) {
  kiln::nn::Model<kiln::nn::Linear<6, 3>, Shape<dyn, 6>> m(/*seed=*/4);
  BOOST_CHECK_THROW(m.freeze(2), kiln::ValueError);
  m.freeze(1);
  kiln::optim::AdamW opt(m, {.lr = 0.1, .weight_decay = 0.5});
  const auto start = m.parameters().to_vector();
  m.forward(input<kiln::Cpu>(1));
  const auto before = kiln::counters();
  m.backward(output_grad<kiln::Cpu>(2));
  BOOST_TEST((kiln::counters() - before).passes == 0u);
  BOOST_TEST((m.gradients().to_vector() == std::vector<float>(21, 0.0f)));
  opt.step();
  BOOST_TEST((m.parameters().to_vector() == start));
}

// torch counts each parameter's steps (state["step"]): a layer unfrozen after k steps starts its bias
// corrections from step 1. With layers 0..k-1 frozen at step s for k = 3, 3, 1, 0 (offsets 59, 59, 35,
// 0), the counts are runs: 0.* 1 step, 2.* 2, 4.* 4. They go through a checkpoint
// ("optimizer.step_runs"), and the resumed optimizer steps on (k = 0, 2, 0) as the one never stopped,
// bit for bit. PyTorch parity of the counts and steps: test_parity_mlp.cpp (mlp_freeze_schedule.json).
BOOST_AUTO_TEST_CASE_TEMPLATE(step_counts_are_per_parameter_and_go_through_a_checkpoint, Opt, counting_optimizers) {
  typename Opt::options_type o{};
  o.lr = 0.01;
  o.weight_decay = 0.02;
  Mlp<Dev> m(/*seed=*/7), r(/*seed=*/7);
  Opt opt(m, o);
  const auto train = [](Mlp<Dev>& model, Opt& optimizer, std::ptrdiff_t k, std::uint32_t s) {
    model.unfreeze();
    model.freeze(k);
    optimizer.zero_grad();
    model.forward(input<Dev>(40 + s));
    model.backward(output_grad<Dev>(50 + s));
    optimizer.step();
  };
  const std::ptrdiff_t schedule[7] = {3, 3, 1, 0, 0, 2, 0};
  for (std::uint32_t s = 0; s < 4; ++s) train(m, opt, schedule[s], s);
  using Run = kiln::optim::StepRun;
  const auto runs = opt.step_runs();
  BOOST_TEST_REQUIRE(runs.size() == 3u);
  BOOST_TEST((runs[0].begin == 0 && runs[0].steps == 1));
  BOOST_TEST((runs[1].begin == 35 && runs[1].steps == 2));
  BOOST_TEST((runs[2].begin == 59 && runs[2].steps == 4));
  BOOST_TEST(opt.step_count() == 4);
  const kiln::OptimizerState state = kiln::optimizer_state(opt);
  const bool nadam = std::is_same_v<Opt, kiln::optim::NAdam<float, Dev>>;
  BOOST_TEST(state.metadata.at("optimizer.step") == "4");
  BOOST_TEST(state.metadata.at("optimizer.step_runs").starts_with(nadam ? "0:1:" : "0:1,35:2,59:4"),
             state.metadata.at("optimizer.step_runs"));
  // A fresh optimizer over a copy of the model, from the checkpoint's state.
  const auto trained = m.parameters().to_vector();
  r.parameters().copy_from(std::span<const float>(trained));
  Opt resumed(r, o);
  kiln::load_optimizer_state(resumed, state.entries, state.metadata, "state.safetensors");
  BOOST_TEST((resumed.step_runs() == std::vector<Run>(runs.begin(), runs.end())));
  for (std::uint32_t s = 4; s < 7; ++s) {
    train(m, opt, schedule[s], s);
    train(r, resumed, schedule[s], s);
  }
  BOOST_TEST((r.parameters().to_vector() == m.parameters().to_vector()));
  // Every parameter has stepped since the counts split (k = 0 at steps 3 and 6): still three runs,
  // 0.* at 3 steps, 2.* at 5, 4.* at 7.
  const auto after = opt.step_runs();
  BOOST_TEST_REQUIRE(after.size() == 3u);
  BOOST_TEST((after[0].steps == 3 && after[1].steps == 5 && after[2].steps == 7));
  // A checkpoint without the runs (one count for all, as before per-parameter counts) sets every
  // parameter at it; runs that do not fit the optimizer are refused before anything changes.
  kiln::OptimizerState uniform = state;
  uniform.metadata.erase("optimizer.step_runs");
  kiln::load_optimizer_state(resumed, uniform.entries, uniform.metadata, "uniform.safetensors");
  BOOST_TEST(resumed.step_runs().size() == 1u);
  BOOST_TEST(resumed.step_count() == 4);
  const auto refused = [&](const std::string& runs_text, const std::string& says) {
    kiln::OptimizerState bad = state;
    bad.metadata["optimizer.step_runs"] = runs_text;
    BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(resumed, bad.entries, bad.metadata, "bad.safetensors"),
                          kiln::CheckpointError, kt::says(says));
    BOOST_TEST(resumed.step_runs().size() == 1u);
  };
  const std::string tail = nadam ? ":1" : "";
  refused("0:1" + tail + ",35:2" + tail + ",59:5" + tail, "ends at 5 steps, 'optimizer.step' says 4");
  refused("0:1" + tail + ",74:4" + tail, "run 1 is '74:4" + tail + "'; expected begins ascending from 0 below 74");
  refused("35:4" + tail, "run 0 is '35:4" + tail + "'; expected begins ascending from 0");
  refused("0:x", nadam ? "run 0 is '0:x'; expected begin:steps:mu_product" : "run 0 is '0:x'; expected begin:steps");
}

// The runs themselves: a step past `from` splits the run there, neighbours that count alike merge (a
// checkpoint's "0:4,35:4" is one run), and text() reads back through parse().
BOOST_AUTO_TEST_CASE(step_counts_split_where_a_step_begins_and_merge_when_alike) {
  using kiln::optim::StepCounts;
  using Run = kiln::optim::StepRun;
  StepCounts c;
  c.advance(0);
  BOOST_TEST((c.runs() == std::vector<Run>{{0, 1, 1.0}}));
  c.advance(59);
  c.advance(35);
  BOOST_TEST((c.runs() == std::vector<Run>{{0, 1, 1.0}, {35, 2, 1.0}, {59, 3, 1.0}}));
  BOOST_TEST(c.last() == 3);
  BOOST_TEST(c.uniform_from(59));
  BOOST_TEST(!c.uniform_from(35));
  BOOST_TEST(c.text(false) == "0:1,35:2,59:3");
  std::string why;
  BOOST_TEST((StepCounts::parse(c.text(false), 74, false, why) == c.runs()));
  BOOST_TEST((StepCounts::parse(c.text(true), 74, true, why) == c.runs()));
  c.set_runs({{0, 4, 1.0}, {35, 4, 1.0}});
  BOOST_TEST((c.runs() == std::vector<Run>{{0, 4, 1.0}}));
  BOOST_TEST(c.uniform_from(0));
  // Parts of a span, one per run it crosses.
  c.set_runs({{0, 1, 1.0}, {35, 2, 1.0}});
  std::vector<std::tuple<kiln::index_t, kiln::index_t, std::int64_t>> parts;
  c.for_each_part(30, 44, [&](kiln::index_t o, kiln::index_t n, const Run& r) { parts.emplace_back(o, n, r.steps); });
  BOOST_TEST((parts == std::vector<std::tuple<kiln::index_t, kiln::index_t, std::int64_t>>{{30, 5, 1}, {35, 39, 2}}));
  BOOST_TEST(StepCounts::parse("0:1,0:2", 74, false, why).empty());
  BOOST_TEST(why.find("run 1 is '0:2'; expected begins ascending") != std::string::npos, why);
  BOOST_TEST(StepCounts::parse("0:1:1.5", 74, true, why).empty());
  BOOST_TEST(why.find("mu_product in [0, 1]") != std::string::npos, why);
  BOOST_TEST(StepCounts::parse("0:-1", 74, false, why).empty());
}

// SGD's momentum buffers start at each parameter's first step (buf = g, undampened, as torch's): with
// layers 0-1 frozen for two steps only the buffers from offset 35 on are filled, which a checkpoint
// records ("optimizer.momentum_filled_from") and a resumed SGD steps on from, as the one never stopped.
// An unfused step (one flag for all) and a capturable one (one flag on the device) refuse the mix.
BOOST_AUTO_TEST_CASE(sgd_momentum_buffers_start_at_each_layers_first_step) {
  const kiln::optim::SGDOptions o{.lr = 0.05, .momentum = 0.9, .dampening = 0.3};
  Mlp<kiln::Cpu> m(/*seed=*/9), r(/*seed=*/9);
  kiln::optim::SGD opt(m, o);
  BOOST_TEST(opt.momentum_filled_from() == 74);
  const auto train = [](Mlp<kiln::Cpu>& model, auto& optimizer, std::ptrdiff_t k, std::uint32_t s) {
    model.unfreeze();
    model.freeze(k);
    optimizer.zero_grad();
    model.forward(input<kiln::Cpu>(80 + s));
    model.backward(output_grad<kiln::Cpu>(90 + s));
    optimizer.step();
  };
  train(m, opt, 2, 0);
  train(m, opt, 2, 1);
  BOOST_TEST(opt.momentum_filled_from() == 35);
  BOOST_TEST(opt.momentum_initialized());
  const kiln::OptimizerState state = kiln::optimizer_state(opt);
  BOOST_TEST(state.metadata.at("optimizer.momentum_filled_from") == "35");
  const auto trained = m.parameters().to_vector();
  r.parameters().copy_from(std::span<const float>(trained));
  kiln::optim::SGD resumed(r, o);
  kiln::load_optimizer_state(resumed, state.entries, state.metadata, "sgd.safetensors");
  BOOST_TEST(resumed.momentum_filled_from() == 35);
  {
    // Unfrozen, layers 0-1 would start their buffers while the others go on: not in one unfused pass.
    r.unfreeze();
    r.forward(input<kiln::Cpu>(82));
    r.backward(output_grad<kiln::Cpu>(92));
    kiln::Unfused off;
    BOOST_CHECK_EXCEPTION(resumed.step(), kiln::ValueError, kt::says("starts every momentum buffer or none"));
    BOOST_TEST((r.parameters().to_vector() == trained));
  }
  for (std::uint32_t s = 2; s < 4; ++s) {
    train(m, opt, 0, s);
    train(r, resumed, 0, s);
  }
  BOOST_TEST((r.parameters().to_vector() == m.parameters().to_vector()));
  BOOST_TEST(opt.momentum_filled_from() == 0);
  BOOST_TEST(!kiln::optimizer_state(opt).metadata.contains("optimizer.momentum_filled_from"));
  // The reference: buffers of layers 0-1 started from their gradient at step 2 (a fresh SGD over them
  // from then on), the others' as one SGD over them throughout.
  Mlp<kiln::Cpu> f(/*seed=*/9);
  using Arena = Tensor<float, Shape<dyn>, kiln::Cpu>;
  auto p_front = Arena::from_blob(f.parameters().data(), Extents<Shape<dyn>>(35), 0);
  auto g_front = Arena::from_blob(f.gradients().data(), Extents<Shape<dyn>>(35), 0);
  auto p_back = Arena::from_blob(f.parameters().data() + 35, Extents<Shape<dyn>>(39), 0);
  auto g_back = Arena::from_blob(f.gradients().data() + 35, Extents<Shape<dyn>>(39), 0);
  kiln::optim::SGD front(p_front, g_front, o), back(p_back, g_back, o);
  for (std::uint32_t s = 0; s < 4; ++s) {
    f.zero_grad();
    f.forward(input<kiln::Cpu>(80 + s));
    f.backward(output_grad<kiln::Cpu>(90 + s));
    if (s >= 2) front.step();
    back.step();
  }
  BOOST_TEST((f.parameters().to_vector() == m.parameters().to_vector()));
  // A filled-from offset that does not fit is refused.
  kiln::OptimizerState bad = state;
  bad.metadata["optimizer.momentum_filled_from"] = "74";
  BOOST_CHECK_EXCEPTION(kiln::load_optimizer_state(resumed, bad.entries, bad.metadata, "bad.safetensors"),
                        kiln::CheckpointError, kt::says("'optimizer.momentum_filled_from' is 74"));
  // Capturable: one first-step flag on the device, so the mix is refused too.
  Mlp<kiln::Cpu> c(/*seed=*/9);
  kiln::optim::SGD captured(c, {.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .capturable = true});
  train(c, captured, 2, 0);
  BOOST_CHECK_EXCEPTION(train(c, captured, 0, 1), kiln::ValueError, kt::says("a capturable step keeps one first-step flag"));
}

// A step with every layer frozen steps nothing and counts nothing (torch: no parameter has a gradient):
// NAdam's product and Adam's count are those of the steps taken, capturable or not, and the state goes
// through a checkpoint.
BOOST_AUTO_TEST_CASE(a_step_with_every_layer_frozen_counts_nothing) {
  for (const bool capturable : {false, true}) {
    BOOST_TEST_CONTEXT((capturable ? "capturable" : "plain")) {
      Mlp<kiln::Cpu> m(/*seed=*/10), r(/*seed=*/10);
      kiln::optim::Adam adam(m, {.lr = 0.01, .capturable = capturable});
      kiln::optim::NAdam nadam(r, {.lr = 0.01});
      for (const std::ptrdiff_t k : {0, 5, 0}) {
        for (auto* model : {&m, &r}) {
          model->unfreeze();
          model->freeze(k);
          model->zero_grad();
          model->forward(input<kiln::Cpu>(100));
          model->backward(output_grad<kiln::Cpu>(101));
        }
        adam.step();
        nadam.step();
      }
      BOOST_TEST(adam.step_count() == 2);
      BOOST_TEST(adam.step_runs().size() == 1u);
      BOOST_TEST(nadam.step_count() == 2);
      const float mu1 = static_cast<float>(0.9 * (1.0 - 0.5 * std::pow(0.96, 1 * 4e-3)));
      const float mu2 = static_cast<float>(0.9 * (1.0 - 0.5 * std::pow(0.96, 2 * 4e-3)));
      BOOST_TEST(nadam.mu_product() == static_cast<double>(mu1 * mu2));
      const kiln::OptimizerState state = kiln::optimizer_state(adam);
      BOOST_TEST(!state.metadata.contains("optimizer.step_runs"));
      kiln::optim::Adam again(m, {.lr = 0.01, .capturable = capturable});
      kiln::load_optimizer_state(again, state.entries, state.metadata, "adam.safetensors");
      BOOST_TEST(again.step_count() == 2);
    }
  }
}

// An unfused step (torch's passes over the whole arena, one step count) and a capturable Adam (one
// count on the device) refuse parameters that have stepped unalike, before they change anything.
BOOST_AUTO_TEST_CASE(one_count_steps_refuse_layers_unfrozen_after_steps_that_skipped_them) {
  for (const bool capturable : {false, true}) {
    BOOST_TEST_CONTEXT((capturable ? "capturable" : "unfused")) {
      Mlp<kiln::Cpu> m(/*seed=*/8);
      kiln::optim::Adam opt(m, {.lr = 0.01, .capturable = capturable});
      m.freeze(2);
      for (std::uint32_t s = 0; s < 2; ++s) {
        opt.zero_grad();
        m.forward(input<kiln::Cpu>(60 + s));
        m.backward(output_grad<kiln::Cpu>(70 + s));
        opt.step();
      }
      BOOST_TEST(opt.step_count() == 2);
      // Capturable: steps past the same frozen layers are fine (one count for what steps).
      m.unfreeze();
      opt.zero_grad();
      m.forward(input<kiln::Cpu>(62));
      m.backward(output_grad<kiln::Cpu>(72));
      const auto start = m.parameters().to_vector();
      if (capturable) {
        BOOST_CHECK_EXCEPTION(opt.step(), kiln::ValueError,
                              kt::says("kiln::optim::Adam: a capturable step keeps one step count on the device"));
      } else {
        kiln::Unfused off;
        BOOST_CHECK_EXCEPTION(opt.step(), kiln::ValueError,
                              kt::says("has one step count, and layers unfrozen after steps that skipped them"));
      }
      BOOST_TEST((m.parameters().to_vector() == start));
      BOOST_TEST(opt.step_count() == 2);
      BOOST_TEST(opt.step_runs().size() == 2u);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
