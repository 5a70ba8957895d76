/// Gradient checking: central finite differences in float64 against an analytic gradient (like
/// torch.autograd.gradcheck and dlib's test_layer). Every layer's backward is checked with it.
///
/// Example:
///   auto f = [](const auto& x) { return kiln::sum(x * x * x).item(); };   // R^n -> R
///   auto g = kiln::eval(3.0 * x * x);                                      // its gradient
///   BOOST_TEST(kiln::test::gradcheck(f, x, g));
#pragma once
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstddef>
#include <kiln/kiln.hpp>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

namespace kiln::test {

/// Step and acceptance of a gradient check (torch.autograd.gradcheck's defaults).
struct GradcheckOptions {
  double eps = 1e-6;   ///< finite-difference step (absolute)
  double atol = 1e-5;  ///< |numeric - analytic| <= atol + rtol |numeric|
  double rtol = 1e-3;
};

namespace detail {
/// f's value as a double: a number, or a one-element tensor (read with item()).
template <class R>
double scalar_of(const R& r) {
  if constexpr (std::is_arithmetic_v<R>)
    return static_cast<double>(r);
  else
    return static_cast<double>(r.item());
}
}  // namespace detail

/// d f / d x[i] for every i by central differences (f(x + eps e_i) - f(x - eps e_i)) / 2 eps, flat
/// row-major order. f takes a `const Tensor<double, S, D>&` and returns a number or a one-element tensor;
/// each evaluation gets a fresh tensor on D, so f may keep or modify it.
template <class S, class D, class F>
std::vector<double> numeric_gradient(F&& f, const Tensor<double, S, D>& x,
                                     double eps = GradcheckOptions{}.eps) {
  std::vector<double> host = x.to_vector();
  std::vector<double> grad(host.size());
  const auto at = [&] {
    auto t = Tensor<double, S, Cpu>::from(std::span<const double>(host.data(), host.size()), x.extents());
    if constexpr (std::is_same_v<D, Cpu>)
      return t;
    else
      return t.template to<D>(x.device_index());
  };
  for (std::size_t i = 0; i < host.size(); ++i) {
    const double x0 = host[i];
    host[i] = x0 + eps;
    const double up = detail::scalar_of(f(at()));
    host[i] = x0 - eps;
    const double down = detail::scalar_of(f(at()));
    host[i] = x0;
    grad[i] = (up - down) / (2 * eps);
  }
  return grad;
}

/// Passes when `analytic` (dF/dx, the shape of x) matches the central-difference gradient of f at x
/// elementwise within opt; the failure message names the worst element and how many are off.
template <class S, class D, class F>
boost::test_tools::assertion_result gradcheck(F&& f, const Tensor<double, S, D>& x,
                                              const Tensor<double, S, D>& analytic,
                                              GradcheckOptions opt = {}) {
  boost::test_tools::assertion_result res(true);
  if (!(x.extents() == analytic.extents())) {
    res = false;
    res.message() << "gradcheck: the analytic gradient has extents " << to_string(analytic.extents())
                  << " but x has " << to_string(x.extents());
    return res;
  }
  const std::vector<double> numeric = numeric_gradient(f, x, opt.eps);
  const std::vector<double> exact = analytic.to_vector();
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < numeric.size(); ++i) {
    const double err = std::abs(numeric[i] - exact[i]), allowed = opt.atol + opt.rtol * std::abs(numeric[i]);
    if (!(err <= allowed)) {  // also catches NaN
      const double ratio = std::isfinite(err) ? err / allowed : std::numeric_limits<double>::infinity();
      if (bad++ == 0 || ratio > worst_ratio) worst = i, worst_ratio = ratio;
    }
  }
  if (bad) {
    res = false;
    res.message().stream().precision(10);
    res.message() << "gradcheck: " << bad << " of " << numeric.size()
                  << " partial derivatives differ; worst at flat index " << worst << ": analytic "
                  << exact[worst] << ", numeric " << numeric[worst] << " (eps " << opt.eps << ", atol "
                  << opt.atol << ", rtol " << opt.rtol << ")";
  }
  return res;
}

}  // namespace kiln::test
