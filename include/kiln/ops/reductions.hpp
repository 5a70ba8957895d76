/// Reductions built from the one-pass ones of expr/reduce.hpp: sum and mean over several axes
/// (x.sum((0, 2))), amax and amin, argmin, and torch's var, std, logsumexp and vector_norm (all but argmin
/// over one axis or several), softmax and log_softmax, any, all and count_nonzero. Each pass still fuses its argument.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>

#include "kiln/core/number_text.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/functors.hpp"

namespace kiln {

namespace ops {
/// An order-reversing map, exact for every element type (-x for floats, ~x for integers, !x for bools):
/// argmax of it is argmin, with argmax's rules (the first of equal values, the first NaN).
struct OrderReversed {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A a) const {
    if constexpr (std::is_same_v<A, bool>)
      return !a;
    else if constexpr (std::is_integral_v<A>)
      return static_cast<A>(~a);
    else
      return static_cast<A>(-a);
  }
};
}  // namespace ops

namespace detail {
/// Fails to compile unless the axes of a reduction over several differ (as torch's "dim appears
/// multiple times"), naming the shape and the axes.
template <class S, int... Axes>
struct reduction_axes_must_differ {
  static constexpr bool value = [] {
    constexpr int rank = static_cast<int>(S::rank);
    const std::array<int, sizeof...(Axes)> a{(Axes < 0 ? Axes + rank : Axes)...};
    for (std::size_t i = 0; i < a.size(); ++i)
      for (std::size_t j = i + 1; j < a.size(); ++j)
        if (a[i] == a[j]) return false;
    return true;
  }();
  // >>> Stopped here? An axis is named twice (perhaps once from the end: 1 and -1 of a rank-2 shape). <<<
  static_assert(value, "kiln: the axes of a reduction over several must differ, as torch's; see the shape and the "
                       "axes in kiln::detail::reduction_axes_must_differ<Shape, Axes...>");
};

/// The axes from the last to the first, as indices in [0, rank): reduced one at a time in this order,
/// each still names its dimension.
template <std::size_t Rank, int... Axes>
struct axes_from_the_last {
  static constexpr std::array<int, sizeof...(Axes)> value = [] {
    std::array<int, sizeof...(Axes)> a{(Axes < 0 ? Axes + static_cast<int>(Rank) : Axes)...};
    std::sort(a.begin(), a.end(), std::greater<>{});
    return a;
  }();
};

template <ReduceKind K, bool Keep, class Order, std::size_t I = 0>
struct reduce_in_order {
  template <class X>
  static auto run(const X& x) {
    auto r = reduce_axis<K, Order::value[I], Keep>(x);
    if constexpr (I + 1 == Order::value.size())
      return r;
    else
      return reduce_in_order<K, Keep, Order, I + 1>::run(r);
  }
};

/// Over the axes Axes (two or more; negative count from the end), one pass per axis, the last first.
template <ReduceKind K, bool Keep, int... Axes, class X>
auto reduce_axes(const X& x) {
  using S = typename decltype(as_expr(x))::shape_type;
  static_assert((reduction_axis_must_be_in_range<S, Axes>::value && ...));
  static_assert(reduction_axes_must_differ<S, Axes...>::value);
  return reduce_in_order<K, Keep, axes_from_the_last<S::rank, Axes...>>::run(x);
}

template <class X>
using operand_value_t = typename decltype(as_expr(std::declval<const X&>()))::value_type;

// >>> Stopped here? var, std, logsumexp, softmax, log_softmax and vector_norm take floating operands, as
// torch's. <<<
template <class X>
constexpr bool floating_operand() {
  static_assert(std::is_floating_point_v<compute_t<operand_value_t<X>>>,
                "kiln::var / std / logsumexp / softmax / log_softmax / vector_norm: the operand holds integers or "
                "bools; take it as floats: var<1>(cast<float>(x))");
  return true;
}

/// torch's divisor of a variance, max(0, n - correction): 0 makes the quotient NaN (no spread, or no
/// element: an empty input is NaN, not -0) or inf.
inline double degrees_of_freedom(double n, double correction) { return std::max(0.0, n - correction); }

/// How many elements of x a reduction over Axes takes together: the product of their extents (no axes:
/// every element).
template <int... Axes, class X>
index_t reduced_count(const X& x) {
  const auto ext = as_expr(x).extents();
  if constexpr (sizeof...(Axes) == 0) {
    return ext.numel();
  } else {
    constexpr int rank = static_cast<int>(decltype(as_expr(x))::shape_type::rank);
    return (index_t{1} * ... * ext[static_cast<std::size_t>(Axes < 0 ? Axes + rank : Axes)]);
  }
}

/// Sum (K = sum) or mean over Axes, one or several (Keep: kept as extent 1).
template <ReduceKind K, bool Keep, int... Axes, class X>
auto reduce_over(const X& x) {
  static_assert(sizeof...(Axes) >= 1);
  if constexpr (sizeof...(Axes) == 1)
    return reduce_axis<K, Axes..., Keep>(x);
  else
    return reduce_axes<K, Keep, Axes...>(x);
}

/// Σ (x - mean)² / (n - correction) over Axes, one or several (Keep: kept as extent 1; n: the product of
/// their extents).
template <bool Keep, int... Axes, class X>
auto variance_along(const X& x, double correction) {
  static_assert(floating_operand<X>());
  using S = typename decltype(as_expr(x))::shape_type;
  static_assert((reduction_axis_must_be_in_range<S, Axes>::value && ...));
  const double n = static_cast<double>(reduced_count<Axes...>(x));
  const auto m = reduce_over<ReduceKind::mean, true, Axes...>(x);  // a pass per axis; then Σ (x - m)², fused
  return std::pair{reduce_over<ReduceKind::sum, Keep, Axes...>(kiln::pow(x - m, 2)),
                   degrees_of_freedom(n, correction)};
}
template <class X>
auto variance_all(const X& x, double correction) {
  static_assert(floating_operand<X>());
  const double n = static_cast<double>(reduced_count<>(x));
  const auto m = kiln::mean(x);
  return std::pair{kiln::sum(kiln::pow(x - m, 2)), degrees_of_freedom(n, correction)};
}
}  // namespace detail

/// Sum over two or more axes (torch's x.sum((0, 2))): sum<0, 2>(x), one pass per axis.
template <int A0, int A1, int... Axes, operand X>
auto sum(const X& x) {
  return detail::reduce_axes<ReduceKind::sum, false, A0, A1, Axes...>(x);
}
template <int A0, int A1, int... Axes, operand X>
auto sum(const X& x, KeepDim) {
  return detail::reduce_axes<ReduceKind::sum, true, A0, A1, Axes...>(x);
}
/// Mean over two or more axes (torch's x.mean((2, 3)): a global average over H and W).
template <int A0, int A1, int... Axes, operand X>
auto mean(const X& x) {
  static_assert(detail::mean_defined<X>, "kiln::mean: the operand holds integers (torch refuses them too); "
                                         "take mean<Axes...>(cast<float>(x))");
  return detail::reduce_axes<ReduceKind::mean, false, A0, A1, Axes...>(x);
}
template <int A0, int A1, int... Axes, operand X>
auto mean(const X& x, KeepDim) {
  static_assert(detail::mean_defined<X>, "kiln::mean: the operand holds integers (torch refuses them too); "
                                         "take mean<Axes...>(cast<float>(x), keepdim)");
  return detail::reduce_axes<ReduceKind::mean, true, A0, A1, Axes...>(x);
}

/// torch.amax / amin: max and min over everything, one axis or several (amax<0, 2>(x), one pass per
/// axis), keepdim as theirs. A NaN in what is reduced gives NaN; an empty axis a ValueError.
template <operand X>
auto amax(const X& x) {
  return kiln::max(x);
}
template <int Axis, int... Axes, operand X>
auto amax(const X& x) {
  return detail::reduce_over<ReduceKind::max, false, Axis, Axes...>(x);
}
template <int Axis, int... Axes, operand X>
auto amax(const X& x, KeepDim) {
  return detail::reduce_over<ReduceKind::max, true, Axis, Axes...>(x);
}
template <operand X>
auto amin(const X& x) {
  return kiln::min(x);
}
template <int Axis, int... Axes, operand X>
auto amin(const X& x) {
  return detail::reduce_over<ReduceKind::min, false, Axis, Axes...>(x);
}
template <int Axis, int... Axes, operand X>
auto amin(const X& x, KeepDim) {
  return detail::reduce_over<ReduceKind::min, true, Axis, Axes...>(x);
}

/// Flat index of the smallest element (the first one on ties; the first NaN if any), as int64
/// (torch.argmin).
template <operand X>
auto argmin(const X& x) {
  return kiln::argmax(detail::make_unary<ops::OrderReversed>(x));
}
/// Index along Axis of the smallest element, as int64.
template <int Axis, operand X>
auto argmin(const X& x) {
  return kiln::argmax<Axis>(detail::make_unary<ops::OrderReversed>(x));
}
template <int Axis, operand X>
auto argmin(const X& x, KeepDim) {
  return kiln::argmax<Axis>(detail::make_unary<ops::OrderReversed>(x), keepdim);
}

/// torch.var: Σ (x - mean)² / (n - correction), correction 1 (Bessel's, torch's unbiased default) or 0;
/// over everything, or one axis or several (`var<1>(x)`, `var<0, 2>(x, keepdim)`: one variance over their
/// elements, n the product of their extents). Two passes (the mean, then the squares, in double).
/// n - correction <= 0 gives inf or NaN (an empty input NaN), as torch's max(0, n - correction).
template <operand X>
auto var(const X& x, double correction = 1.0) {
  const auto [ss, dof] = detail::variance_all(x, correction);
  return kiln::eval(ss / dof);
}
template <int Axis, int... Axes, operand X>
auto var(const X& x, double correction = 1.0) {
  const auto [ss, dof] = detail::variance_along<false, Axis, Axes...>(x, correction);
  return kiln::eval(ss / dof);
}
template <int Axis, int... Axes, operand X>
auto var(const X& x, KeepDim, double correction = 1.0) {
  const auto [ss, dof] = detail::variance_along<true, Axis, Axes...>(x, correction);
  return kiln::eval(ss / dof);
}
/// torch.std: the square root of var, with var's arguments.
template <operand X>
auto std(const X& x, double correction = 1.0) {
  const auto [ss, dof] = detail::variance_all(x, correction);
  return kiln::eval(kiln::sqrt(ss / dof));
}
template <int Axis, int... Axes, operand X>
auto std(const X& x, double correction = 1.0) {
  const auto [ss, dof] = detail::variance_along<false, Axis, Axes...>(x, correction);
  return kiln::eval(kiln::sqrt(ss / dof));
}
template <int Axis, int... Axes, operand X>
auto std(const X& x, KeepDim, double correction = 1.0) {
  const auto [ss, dof] = detail::variance_along<true, Axis, Axes...>(x, correction);
  return kiln::eval(kiln::sqrt(ss / dof));
}

namespace detail {
/// logsumexp over Axes (one or several), kept as extent 1 or dropped.
template <bool Keep, int... Axes, class X>
auto logsumexp_over(const X& x) {
  static_assert(floating_operand<X>());
  using S = typename decltype(as_expr(x))::shape_type;
  constexpr int rank = static_cast<int>(S::rank);
  const index_t count = reduced_count<Axes...>(x);
  // Over no element the max would throw; torch gives log 0 = -inf: a max of 0 (the empty sum) makes it.
  const auto top = count == 0 ? reduce_over<ReduceKind::sum, true, Axes...>(x)
                              : reduce_over<ReduceKind::max, true, Axes...>(x);
  const auto m = kiln::eval(kiln::where(kiln::eq(kiln::abs(top), std::numeric_limits<float>::infinity()), 0, top));
  const auto s = reduce_over<ReduceKind::sum, true, Axes...>(kiln::exp(x - m));
  auto kept = kiln::eval(kiln::log(s) + m);
  if constexpr (Keep) {
    return kept;
  } else {  // the same layout without the axes of extent 1
    using R = typename decltype(reduce_over<ReduceKind::sum, false, Axes...>(x))::shape_type;
    constexpr std::array<int, sizeof...(Axes)> axes{(Axes < 0 ? Axes + rank : Axes)...};
    Extents<R> re;
    for (std::size_t d = 0, k = 0; d != S::rank; ++d)
      if (std::find(axes.begin(), axes.end(), static_cast<int>(d)) == axes.end()) re[k++] = kept.extents()[d];
    return kept.template reshape<R>(re);
  }
}
}  // namespace detail

/// torch.logsumexp over Axis, or over several (logsumexp<1, 2>(x)): log Σ e^x without overflow, as torch
/// computes it: m = max (0 where it is infinite), log(Σ e^(x - m)) + m. A row of -inf gives -inf, one
/// +inf +inf, a NaN NaN, no element -inf. Floating operands.
template <int Axis, int... Axes, operand X>
auto logsumexp(const X& x, KeepDim) {
  return detail::logsumexp_over<true, Axis, Axes...>(x);
}
template <int Axis, int... Axes, operand X>
auto logsumexp(const X& x) {
  return detail::logsumexp_over<false, Axis, Axes...>(x);
}

namespace detail {
/// Over everything (no Axes) or over Axes, one or several, kept as extent 1 or dropped.
template <ReduceKind K, bool Keep, int... Axes, class X>
auto reduce_all_or_over(const X& x) {
  if constexpr (sizeof...(Axes) == 0)
    return reduce_all<K>(x);
  else
    return reduce_over<K, Keep, Axes...>(x);
}

/// torch.linalg.vector_norm(x, ord, Axes, keepdim) as a tensor of result_element_t<X>.
template <bool Keep, int... Axes, class X>
auto vector_norm_over(const X& x, double ord) {
  static_assert(floating_operand<X>());
  using E = result_element_t<X>;
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (ord < 0 && reduced_count<Axes...>(x) == 0)
    throw ValueError("kiln::vector_norm: the " + shortest_text(ord) + " norm of no element (the reduced " +
                     std::string(sizeof...(Axes) == 0 ? "tensor" : "dimensions") +
                     " are empty) has no identity, as torch says; a norm of order >= 0 over nothing is 0");
  const auto a = kiln::abs(x);
  if (ord == inf) return kiln::eval(kiln::cast<E>(reduce_all_or_over<ReduceKind::max, Keep, Axes...>(a)));
  if (ord == -inf) return kiln::eval(kiln::cast<E>(reduce_all_or_over<ReduceKind::min, Keep, Axes...>(a)));
  if (ord == 0) return kiln::eval(kiln::cast<E>(reduce_all_or_over<ReduceKind::sum, Keep, Axes...>(kiln::ne(x, 0))));
  if (ord == 1) return kiln::eval(kiln::cast<E>(reduce_all_or_over<ReduceKind::sum, Keep, Axes...>(a)));
  if (ord == 2) return kiln::eval(kiln::cast<E>(kiln::sqrt(reduce_all_or_over<ReduceKind::sum, Keep, Axes...>(a * a))));
  return kiln::eval(
      kiln::cast<E>(kiln::pow(reduce_all_or_over<ReduceKind::sum, Keep, Axes...>(kiln::pow(a, ord)), 1.0 / ord)));
}
}  // namespace detail

/// torch.linalg.vector_norm(x, ord): (Σ |x|^ord)^(1/ord) over everything, over Axis or several
/// (vector_norm<1>(x), vector_norm<0, 2>(x, keepdim, 1.0)), keepdim as theirs. ord 2 (the default) is
/// sqrt(Σ x²), 1 Σ |x|, inf max |x|, -inf min |x|, 0 the count of nonzeros (NaN counts); a negative ord
/// or inf over no element is a ValueError, as torch's (0 for the other ord >= 0). The result has x's element type for a
/// tensor (half stays half: computed in float, so [300, 300] is 424.3 where torch's CPU gives inf);
/// floating operands.
template <operand X>
auto vector_norm(const X& x, double ord = 2.0) {
  return detail::vector_norm_over<false>(x, ord);
}
template <int Axis, int... Axes, operand X>
auto vector_norm(const X& x, double ord = 2.0) {
  return detail::vector_norm_over<false, Axis, Axes...>(x, ord);
}
template <int Axis, int... Axes, operand X>
auto vector_norm(const X& x, KeepDim, double ord = 2.0) {
  return detail::vector_norm_over<true, Axis, Axes...>(x, ord);
}

/// torch.any / torch.all: whether any (every) element is nonzero (NaN counts as nonzero), over everything
/// or along Axis (keepdim as theirs), as bools; over no element any is false and all true.
/// torch.count_nonzero: how many are, as int64: one pass (a count of x != 0); any and all compare the
/// counts in a second, over the (reduced) result only.
template <operand X>
auto count_nonzero(const X& x) {
  return kiln::sum(kiln::ne(x, 0));
}
template <int Axis, operand X>
auto count_nonzero(const X& x) {
  return kiln::sum<Axis>(kiln::ne(x, 0));
}
template <operand X>
auto any(const X& x) {
  return kiln::eval(kiln::sum(kiln::ne(x, 0)) > 0);
}
template <int Axis, operand X>
auto any(const X& x) {
  return kiln::eval(kiln::sum<Axis>(kiln::ne(x, 0)) > 0);
}
template <int Axis, operand X>
auto any(const X& x, KeepDim) {
  return kiln::eval(kiln::sum<Axis>(kiln::ne(x, 0), keepdim) > 0);
}
template <operand X>
auto all(const X& x) {
  return kiln::eval(kiln::eq(kiln::sum(kiln::eq(x, 0)), 0));
}
template <int Axis, operand X>
auto all(const X& x) {
  return kiln::eval(kiln::eq(kiln::sum<Axis>(kiln::eq(x, 0)), 0));
}
template <int Axis, operand X>
auto all(const X& x, KeepDim) {
  return kiln::eval(kiln::eq(kiln::sum<Axis>(kiln::eq(x, 0), keepdim), 0));
}

namespace detail {
/// Softmax (Log: log_softmax) of rows of c floats or doubles on the CPU, a row a call: its max
/// (lane_extreme) and Σ exp(x - max) (lane_sum, in double for float) as kiln::max and kiln::sum take them,
/// then the row, so the same bits as the three passes of softmax_into, with the row in the cache between
/// its steps; softmax keeps each exp(x - max) in y and divides it there (one exp an element, not two).
template <bool Log, class T>
struct SoftmaxRows {
  const T* x;
  T* y;
  index_t c;
  void operator()(index_t r) const {
    using A = backend::cpu::accumulator_t<T>;
    const T* xr = x + r * c;
    T* yr = y + r * c;
    const T m = lane_extreme<false, T>(xr, 0, c);
    if constexpr (Log) {
      const A s = lane_sum<A, KILN_VECTOR_EXP>(ops::detail::ShiftedExp<T>{xr, m}, 0, c);
      const T ls = ops::detail::log_(static_cast<T>(s));
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < c; ++j) yr[j] = xr[j] - m - ls;
    } else {
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < c; ++j) yr[j] = ops::detail::exp_(xr[j] - m);
      const T s = static_cast<T>(lane_sum<A>(static_cast<const T*>(yr), 0, c));
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < c; ++j) yr[j] = yr[j] / s;
    }
  }
  /// x read, y written (and, for softmax, read and written again); a max, a subtract, an exp and an add
  /// per element, then a subtract or a divide.
  Traffic traffic(index_t rows) const {
    return {static_cast<std::uint64_t>(rows * c) * sizeof(T) * (Log ? 2 : 4),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(5 * c + 1)};
  }
};
/// Their gradients, a row a call, as the Softmax and LogSoftmax layers' two passes compute them (the same
/// bits): softmax dx = y (dy - Σ dy y), log_softmax dx = dy - exp(y) Σ dy.
template <bool Log, class T>
struct SoftmaxGradRows {
  const T* y;
  const T* dy;
  T* dx;
  index_t c;
  struct Product {
    const T* a;
    const T* b;
    KILN_HOST_DEVICE KILN_FORCEINLINE T operator[](index_t j) const { return a[j] * b[j]; }
  };
  void operator()(index_t r) const {
    using A = backend::cpu::accumulator_t<T>;
    const T* yr = y + r * c;
    const T* dyr = dy + r * c;
    T* dxr = dx + r * c;
    if constexpr (Log) {
      const T g = static_cast<T>(lane_sum<A>(dyr, 0, c));
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < c; ++j) dxr[j] = dyr[j] - ops::detail::exp_(yr[j]) * g;
    } else {
      const T g = static_cast<T>(lane_sum<A>(Product{dyr, yr}, 0, c));
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < c; ++j) dxr[j] = yr[j] * (dyr[j] - g);
    }
  }
  /// y and dy read twice, dx written; a multiply and an add, then a subtract and a multiply (an exp) per
  /// element.
  Traffic traffic(index_t rows) const {
    return {static_cast<std::uint64_t>(rows * c) * sizeof(T) * 5,
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(4 * c + 1)};
  }
};
/// Whether softmax along Dim of X into Dst runs as SoftmaxRows: a CPU tensor of float or double into one
/// of its type, along its last axis.
template <int Dim, class Dst, class X>
constexpr bool rows_of_softmax() {
  if constexpr (tensor<X>) {
    using T = typename X::element_type;  // (value_type is the compute type: float for half)
    constexpr int rank = static_cast<int>(X::shape_type::rank);
    return std::is_same_v<device_of_t<X>, Cpu> && std::is_floating_point_v<T> &&
           std::is_same_v<typename Dst::element_type, T> && (Dim == rank - 1 || Dim == -1);
  } else {
    return false;
  }
}

/// dst (x's extents, on its device) = softmax (Log: log_softmax) of x along Dim, x not empty: the max
/// and the exponentials' sum kept as extent 1, then one pass into dst; a CPU tensor of float or double
/// along its last axis a row at a time instead (SoftmaxRows, the same bits). The Softmax<Dim> and
/// LogSoftmax<Dim> layers write their output with it.
template <bool Log, int Dim, class Dst, class X>
void softmax_into(Dst& dst, const X& x) {
  static_assert(floating_operand<X>());
  if constexpr (rows_of_softmax<Dim, Dst, X>()) {
    using T = typename X::element_type;
    const index_t c = x.extents()[X::shape_type::rank - 1], rows = x.numel() / c;
    executor<Cpu>::for_each(rows, SoftmaxRows<Log, T>{x.data(), dst.data(), c}, c);
    return;
  }
  const auto m = kiln::max<Dim>(x, keepdim);
  const auto s = kiln::sum<Dim>(kiln::exp(x - m), keepdim);
  if constexpr (Log)
    dst = x - m - kiln::log(s);
  else
    dst = kiln::exp(x - m) / s;
}

/// softmax (Log: log_softmax) of x along Dim as a new tensor of x's element type, on x's device (as eval
/// makes one); empty for an empty x.
template <bool Log, int Dim, class X>
auto softmax_along(const X& x) {
  const auto e = as_expr(x);
  using D = device_of_t<X>;
  Tensor<result_element_t<X>, typename decltype(e)::shape_type, D> y(e.extents(),
                                                                      operand_device<D>(e, "kiln::softmax"));
  if (y.numel() != 0) softmax_into<Log, Dim>(y, x);
  return y;
}
}  // namespace detail

/// torch.softmax(x, Dim) and torch.log_softmax(x, Dim) of a tensor or an expression, as the Softmax<Dim>
/// and LogSoftmax<Dim> layers compute them: m = max along Dim, e^(x - m) / Σ e^(x - m), or
/// x - m - log Σ e^(x - m) (three passes; one, a row at a time, for a CPU tensor of float or double along
/// its last axis: the same bits). The result has x's element type for a tensor (half stays half,
/// as torch's; an expression's as eval gives it); an empty x gives an empty result. Floating operands.
template <int Dim, operand X>
auto softmax(const X& x) {
  return detail::softmax_along<false, Dim>(x);
}
template <int Dim, operand X>
auto log_softmax(const X& x) {
  return detail::softmax_along<true, Dim>(x);
}

}  // namespace kiln
