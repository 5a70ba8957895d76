/// Scans: torch.cumsum and torch.cumprod along one dimension, one pass that also evaluates its (fused)
/// argument. Each line along the dimension is one sequential running sum (product), lines in parallel:
/// OpenMP threads on the CPU, one GPU thread per line (a scan over one long line runs on one thread).
#pragma once
#include <cstdint>
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/half.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/expr/detail/traffic.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {
/// The element type of a scan of x: int64 for integers and bools (as torch's), else result_element_t's.
template <class X>
using scan_element_t =
    std::conditional_t<std::is_integral_v<typename decltype(as_expr(std::declval<const X&>()))::value_type>,
                       std::int64_t, result_element_t<X>>;

/// out = the running sums (Product: products) of e along lines of `len` elements `inner` apart, one line
/// per call (line = o * inner + j). Floats accumulate in double and round each prefix once (torch's CPU
/// cumsum does the same: the results are its bits); integers in int64, wrapping.
template <bool Product, class Out, class E>
struct ScanLines {
  Out* out;
  E e;
  index_t len, inner;
  KILN_HOST_DEVICE void operator()(index_t line) const {
    using V = typename E::value_type;
    using A = std::conditional_t<std::is_integral_v<V>, std::int64_t, double>;
    const index_t o = line / inner, j = line % inner;
    A acc = Product ? A(1) : A(0);
    for (index_t k = 0; k < len; ++k) {
      const index_t i = (o * len + k) * inner + j;
      const A v = static_cast<A>(e[i]);
      if constexpr (std::is_integral_v<A>)
        acc = Product ? ops::detail::wrap_mul(acc, v) : ops::detail::wrap_add(acc, v);
      else
        acc = Product ? acc * v : acc + v;
      if constexpr (std::is_integral_v<Out>) out[i] = static_cast<Out>(acc);
      else out[i] = from_compute<Out>(acc);  // once: half from the double, not through float
    }
  }
  Traffic traffic(index_t lines) const { return reduction_traffic<Out>(e, lines * len, lines * len); }
};

template <bool Product, int Dim, class X>
auto scan_along(const X& x, const char* who) {
  auto e = as_expr(x);
  using E = decltype(e);
  using S = typename E::shape_type;
  using D = device_of_t<X>;
  static_assert(reduction_axis_must_be_in_range<S, Dim>::value);
  constexpr std::size_t axis = static_cast<std::size_t>(Dim < 0 ? Dim + static_cast<int>(S::rank) : Dim);
  using Out = scan_element_t<X>;
  const auto ext = e.extents();
  index_t outer = 1, inner = 1;
  for (std::size_t d = 0; d != axis; ++d) outer *= ext[d];
  for (std::size_t d = axis + 1; d < S::rank; ++d) inner *= ext[d];
  const index_t len = ext[axis];
  const int device = operand_device<D>(e, who);
  const device_scope<D> on(device);
  Tensor<Out, S, D> y(ext, device);
  if (y.numel() != 0)
    executor<D>::for_each(outer * inner, ScanLines<Product, Out, E>{y.data(), e, len, inner}, len);
  return y;
}
}  // namespace detail

/// torch.cumsum(x, Dim): y[..., k, ...] = Σ_{i <= k} x[..., i, ...] along Dim (negative counts from the
/// last), x's shape. Integers and bools give int64 (wrapping, as torch's); floats keep a tensor's element
/// type (half stays half), accumulated in double and each prefix rounded once, as torch's CPU. A NaN
/// makes the rest of its line NaN.
template <int Dim, operand X>
auto cumsum(const X& x) {
  return detail::scan_along<false, Dim>(x, "kiln::cumsum");
}
/// torch.cumprod(x, Dim): the running products along Dim, with cumsum's types and accumulation.
template <int Dim, operand X>
auto cumprod(const X& x) {
  return detail::scan_along<true, Dim>(x, "kiln::cumprod");
}

}  // namespace kiln
