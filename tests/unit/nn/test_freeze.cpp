// Frozen layers (Model::freeze, torch's model[:k].requires_grad_(False)): backward stops before them
// (no pass of theirs runs, their gradients stay 0) and leaves every other gradient as it was, bit for
// bit, whether k splits a Linear from the activation fused into it or not; backward_input still goes back
// through them; every optimizer steps the layers after them as an optimizer of their own would and
// leaves them (weight decay and moments included) as they were; the bookkeeping (offsets,
// named_parameters' requires_grad, the summary, the errors). PyTorch parity of every optimizer with
// frozen layers: test_parity_mlp.cpp (mlp_frozen.json).
#include <boost/test/unit_test.hpp>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <vector>

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

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
