// check_model_gradients: a whole model's backward (input and every parameter) against float64 central
// finite differences; check_fused_matches_unfused: a model with fusion on and off.
#pragma once
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <kiln/nn/nn.hpp>
#include <optional>
#include <span>
#include <vector>

#include "support/gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace kiln::test {
namespace knn = kiln::nn;
using kiln::Extents;
using kiln::Tensor;
namespace kt = kiln::test;

/// Tight for float64: the central difference's error is ~eps^2 |f'''| + 1e-16 |f| / eps ≈ 1e-10.
inline constexpr kt::GradcheckOptions tight{.eps = 1e-6, .atol = 1e-8, .rtol = 1e-6};

/// L = Σ r ⊙ model(x) for a fixed random r (so dL/dy = r): checks dL/dx from backward and, when the
/// model has parameters, dL/dθ accumulated in its gradient arena, against finite differences.
/// Inputs are uniform in [lo, hi) and at least `gap` away from 0 (ReLU's kink). `drawn_parameters`:
/// every parameter uniform in [-1.5, 1.5) instead of the layers' initialisation (whose normalisation
/// weights of 1 and biases of 0 would hide a backward that forgets them).
template <class Net, class In, class D>
void check_model_gradients(const Extents<In>& ext, double lo, double hi, double gap, std::uint32_t stream,
                           bool drawn_parameters = false) {
  using Model = knn::Model<Net, In, kiln::Policy<kt::Fp64, D>>;
  Model model(/*seed=*/stream);
  if constexpr (Model::parameter_count > 0)
    if (drawn_parameters)
      model.parameters().copy_from(
          std::span<const double>(kt::random_values<double>(Model::parameter_count, -1.5, 1.5, stream + 2)));
  const auto n = static_cast<std::size_t>(ext.numel());
  const auto x = kt::make_tensor<D>(gap > 0 ? kt::random_nonzero<double>(n, lo, hi, gap, stream)
                                            : kt::random_values<double>(n, lo, hi, stream),
                                    ext);
  const auto y = model.forward(x);
  const auto r = kt::make_tensor<D>(kt::random_values<double>(static_cast<std::size_t>(y.numel()), -1, 1, stream + 1),
                                    y.extents());
  model.zero_grad();
  const auto dx = model.backward_input(r);
  const auto wrt_input = [&](const Tensor<double, In, D>& in) { return kiln::sum(model.forward(in) * r).item(); };
  BOOST_TEST_CONTEXT("w.r.t. the input") { BOOST_TEST(kt::gradcheck(wrt_input, x, dx, tight)); }

  if constexpr (Model::parameter_count > 0) {
    const auto theta = model.parameters().clone();  // [P]
    const auto grads = model.gradients().clone();   // [P]
    const auto wrt_parameters = [&](const typename Model::arena_type& p) {
      model.parameters() = p;  // the perturbed copy, written back into the arena
      return kiln::sum(model.forward(x) * r).item();
    };
    BOOST_TEST_CONTEXT("w.r.t. the parameters") { BOOST_TEST(kt::gradcheck(wrt_parameters, theta, grads, tight)); }
    model.parameters() = theta;
  }
}

/// Net on `rows` random inputs in [lo, hi), in double, with fusion on and off (kiln::Unfused): the same
/// outputs, input gradients and parameter gradients within tol (fused epilogues do the same arithmetic).
template <class Net, class In, class D>
void check_fused_matches_unfused(const Extents<In>& ext, double lo, double hi, std::uint32_t stream,
                                 double tol = 1e-13) {
  knn::Model<Net, In, kiln::Policy<kt::Fp64, D>> model(stream);
  const auto x = kt::make_tensor<D>(
      kt::random_values<double>(static_cast<std::size_t>(ext.numel()), lo, hi, stream), ext);
  std::vector<double> y[2], dx[2], grads[2];
  for (int unfused = 0; unfused < 2; ++unfused) {
    std::optional<kiln::Unfused> off;
    if (unfused) off.emplace();
    const auto out = model.forward(x);
    const auto r = kt::make_tensor<D>(
        kt::random_values<double>(static_cast<std::size_t>(out.numel()), -1, 1, stream + 1), out.extents());
    y[unfused] = out.to_vector();
    model.zero_grad();
    dx[unfused] = model.backward_input(r).to_vector();
    grads[unfused] = model.gradients().to_vector();
  }
  const auto t = boost::test_tools::tolerance(tol);
  BOOST_TEST(y[0] == y[1], t << boost::test_tools::per_element());
  BOOST_TEST(dx[0] == dx[1], t << boost::test_tools::per_element());
  BOOST_TEST(grads[0] == grads[1], t << boost::test_tools::per_element());
}

}  // namespace kiln::test
