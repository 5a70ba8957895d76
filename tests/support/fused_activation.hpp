// check_fused_with_activation: a layer that runs the activation after it (a normalisation's
// forward_fused / backward_fused) against the two layers, bit for bit.
#pragma once
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstring>
#include <kiln/core/counters.hpp>
#include <kiln/core/fusion.hpp>
#include <kiln/nn/nn.hpp>
#include <span>
#include <string>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace kiln::test {

/// The bytes of a tensor's values (bf16 and half compare bit for bit).
template <class X>
std::vector<unsigned char> bits_of(const X& x) {
  const auto v = x.to_vector();
  std::vector<unsigned char> b(v.size() * sizeof(v[0]));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// Net's layer 0 runs the activation after it (layer 1) in its own passes: against the same model with
/// fusion off (kiln::Unfused: two layers), from the same drawn parameters, the same bits for the output,
/// dL/dx, the parameter gradients and the buffers (BatchNorm's running statistics), over two training
/// steps and an evaluation forward and backward. The fused step runs the activation's forward pass fewer,
/// and its backward pass too where `derivative_in_passes` (BatchNorm: a derivative of the output, taken
/// where its passes read dy; one of the input, GELU's and SiLU's, runs once into dz, as the activation's
/// own backward). `count_passes` false: layer 0 holds layers whose own passes change with fusion off (an
/// Add's or a Residual's branches), the passes not compared.
template <class Net, class In, class Prec, class D>
void check_fused_with_activation(const Extents<In>& ext, std::uint32_t seed, bool derivative_in_passes,
                                 bool count_passes = true) {
  namespace knn = kiln::nn;
  using H = typename Prec::storage;
  using Model = knn::Model<Net, In, kiln::Policy<Prec, D>>;
  static_assert(Model::network::template fused_with_next<0>);
  using Activation = typename Model::network::template epilogue_at<1>;
  Model fused(seed), plain(seed);
  const std::string name = fused.net().template layer<0>().name();
  const auto params = random_values<float>(static_cast<std::size_t>(Model::parameter_count), -1.5, 1.5, seed);
  fused.parameters().copy_from(std::span<const float>(params));
  plain.parameters().copy_from(std::span<const float>(params));
  const auto n = static_cast<std::size_t>(ext.numel());
  for (int step = 0; step < 3; ++step) {
    const bool training = step < 2;
    fused.train(training), plain.train(training);
    const auto drawn = [&](double lo, double hi, std::uint32_t at) {
      return make_tensor<D>(rounded_to<H>(random_values<float>(n, lo, hi, at)).second, ext);
    };
    const auto x = drawn(-2, 2, seed + step), dy = drawn(-1, 1, seed + 9 + step);
    fused.zero_grad(), plain.zero_grad();
    auto before = kiln::passes();
    const auto y = fused.forward(x);
    const auto dx = fused.backward_input(dy);
    const auto fused_passes = kiln::passes() - before;
    std::uint64_t plain_passes = 0;
    {
      kiln::Unfused off;
      before = kiln::passes();
      const auto y_plain = plain.forward(x);
      const auto dx_plain = plain.backward_input(dy);
      plain_passes = kiln::passes() - before;
      BOOST_TEST_CONTEXT(name << ", step " << step) {
        BOOST_TEST((bits_of(y) == bits_of(y_plain)));
        BOOST_TEST((bits_of(dx) == bits_of(dx_plain)));
      }
    }
    BOOST_TEST_CONTEXT(name << ", step " << step) {
      BOOST_TEST(fused.gradients().to_vector() == plain.gradients().to_vector(), boost::test_tools::per_element());
      BOOST_TEST(fused.buffers().to_vector() == plain.buffers().to_vector(), boost::test_tools::per_element());
      const std::uint64_t saved_passes = derivative_in_passes && Activation::saves_output ? 2 : 1;
      if (count_passes) BOOST_TEST(plain_passes == fused_passes + saved_passes);
    }
  }
}

/// Block (an Add or a Residual) followed by Activation, which runs in the block's sum: the pair's training
/// forward runs as many passes as the block alone, its backward one more (the activation's derivative).
template <class Block, class Activation, class In, class D>
void check_activation_runs_in_the_sum(const Extents<In>& ext) {
  namespace knn = kiln::nn;
  const auto x = make_tensor<D>(random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 5), ext);
  const auto passes_of = [&](auto&& model) {
    auto before = kiln::passes();
    const auto y = model.forward(x);
    const std::uint64_t forward = kiln::passes() - before;
    const auto dy = make_tensor<D>(random_values<float>(static_cast<std::size_t>(y.numel()), -1, 1, 6), y.extents());
    before = kiln::passes();
    (void)model.backward_input(dy);
    return std::vector<std::uint64_t>{forward, kiln::passes() - before};
  };
  const auto pair = passes_of(knn::Model<knn::Sequential<Block, Activation>, In, kiln::Policy<kiln::Fp32, D>>(1));
  const auto alone = passes_of(knn::Model<knn::Sequential<Block>, In, kiln::Policy<kiln::Fp32, D>>(1));
  BOOST_TEST(pair[0] == alone[0]);
  BOOST_TEST(pair[1] == alone[1] + 1);
}

}  // namespace kiln::test
