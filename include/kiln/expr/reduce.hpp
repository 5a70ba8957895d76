/// Reductions: sum, mean, max, min, argmax, prod, over one axis or everything. Each is one pass that also
/// evaluates its (fused) argument expression; the result is a tensor. Over an axis, `keepdim` keeps it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include "kiln/expr/assign.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/detail/operand_device.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

/// The tag of an axis reduction that keeps its axis as extent 1, torch's keepdim=True: the result
/// broadcasts against its operand, `x / sum<1>(x, keepdim)` (x.sum(1, keepdim=True)).
inline constexpr struct KeepDim {
} keepdim{};

namespace detail {
template <class S, std::size_t Axis, std::size_t... I>
auto remove_axis(std::index_sequence<I...>) -> Shape<S::extents[I < Axis ? I : I + 1]...>;
/// S without dimension Axis.
template <class S, std::size_t Axis>
using remove_axis_t = decltype(remove_axis<S, Axis>(std::make_index_sequence<S::rank - 1>{}));
template <class S, std::size_t Axis, std::size_t... I>
auto keep_axis(std::index_sequence<I...>) -> Shape<(I == Axis ? index_t{1} : S::extents[I])...>;
/// S with dimension Axis of extent 1 (a reduction with keepdim).
template <class S, std::size_t Axis>
using keep_axis_t = decltype(keep_axis<S, Axis>(std::make_index_sequence<S::rank>{}));

/// The element type of a reduction of values V: int64 for argmax (an index) and for a sum or product of
/// integers or bools (as torch: a count does not overflow int32), float for a mean of bools (a fraction:
/// accuracy), else V. A mean of integers does not compile (see mean).
template <ReduceKind K, class V>
using reduce_result_t = std::conditional_t<
    K == ReduceKind::argmax || ((K == ReduceKind::sum || K == ReduceKind::prod) && std::is_integral_v<V>),
    std::int64_t,
    std::conditional_t<K == ReduceKind::mean && std::is_same_v<V, bool>, float, V>>;

/// Whether mean is defined over values V: floating values, and bools (the fraction that are true).
template <class X>
inline constexpr bool mean_defined =
    !std::is_integral_v<typename node_t<X>::value_type> || std::is_same_v<typename node_t<X>::value_type, bool>;

template <class X>
using device_of_t = std::conditional_t<std::is_void_v<typename node_t<X>::device>, Cpu, typename node_t<X>::device>;

/// The GPU a reduction of x runs on (and makes its result on): x's, whichever is current (a tensor's
/// own index; for an expression, operand_device's answer); -1 (the current one) on the CPU or before
/// any GPU is used. Operands on different GPUs are refused.
template <ReduceKind K, class X, class E>
int reduction_device(const X& x, const E& e) {
  // One name per ReduceKind, in its order (prod last): the size check keeps them in step.
  constexpr const char* names[] = {"kiln::sum", "kiln::mean", "kiln::max", "kiln::min", "kiln::argmax", "kiln::prod"};
  static_assert(static_cast<std::size_t>(ReduceKind::prod) + 1 == std::size(names));
  if constexpr (tensor<X>) return pass_device(x);
  else return operand_device<device_of_t<X>>(e, names[static_cast<int>(K)]);
}

template <ReduceKind K, class X>
auto reduce_all(const X& x) {
  auto e = as_expr(x);
  using E = decltype(e);
  using Out = reduce_result_t<K, typename E::value_type>;
  const index_t n = e.extents().numel();
  if ((K == ReduceKind::max || K == ReduceKind::min || K == ReduceKind::argmax) && n == 0)
    throw ValueError("kiln::max/min/argmax: the input is empty; a maximum needs at least one element");
  const device_scope<device_of_t<X>> on(reduction_device<K>(x, e));
  Tensor<Out, Shape<>, device_of_t<X>> out(Extents<Shape<>>{});
  executor<device_of_t<X>>::template reduce<K>(out.data(), e, 1, n, 1);
  return out;
}

/// Fails to compile, naming the operand's shape and the axis, unless Axis is one of its dimensions.
template <class S, int Axis>
struct reduction_axis_must_be_in_range {
  // >>> Stopped here? The axis is outside [-rank, rank) for this operand's shape. <<<
  static_assert(Axis >= -static_cast<int>(S::rank) && Axis < static_cast<int>(S::rank),
                "kiln: reduction axis out of range for the operand's rank: expected 0 .. rank-1 (or -rank .. -1 "
                "as in torch); see the operand's Shape<...> (-1 in it is dyn) and the axis in "
                "kiln::detail::reduction_axis_must_be_in_range<Shape, Axis> in this message");
  static constexpr bool value = true;
};

/// Over Axis, which the result drops, or with Keep holds as extent 1 (the same layout).
template <ReduceKind K, int Axis, bool Keep = false, class X>
auto reduce_axis(const X& x) {
  auto e = as_expr(x);
  using E = decltype(e);
  using S = typename E::shape_type;
  constexpr int rank = static_cast<int>(S::rank);
  static_assert(reduction_axis_must_be_in_range<S, Axis>::value);
  constexpr std::size_t axis = static_cast<std::size_t>(Axis < 0 ? Axis + rank : Axis);
  using R = std::conditional_t<Keep, keep_axis_t<S, axis>, remove_axis_t<S, axis>>;
  using Out = reduce_result_t<K, typename E::value_type>;
  const auto ext = e.extents();
  index_t outer = 1, inner = 1;
  for (std::size_t d = 0; d != axis; ++d) outer *= ext[d];
  for (std::size_t d = axis + 1; d < S::rank; ++d) inner *= ext[d];
  const index_t len = ext[axis];
  if ((K == ReduceKind::max || K == ReduceKind::min || K == ReduceKind::argmax) && len == 0)
    throw ValueError("kiln::max/min/argmax: the reduced axis is empty in " + to_string(ext));
  Extents<R> re;
  for (std::size_t d = 0, k = 0; d != S::rank; ++d)
    if (d != axis) re[k++] = ext[d];
    else if constexpr (Keep) re[k++] = 1;
  const device_scope<device_of_t<X>> on(reduction_device<K>(x, e));
  Tensor<Out, R, device_of_t<X>> out(re);
  if (out.numel() > 0) executor<device_of_t<X>>::template reduce<K>(out.data(), e, outer, len, inner);
  return out;
}
}  // namespace detail

/// Sum of all elements: a rank-0 tensor (`.item()` reads it). Floats accumulate in double; integers
/// and bools in int64, which the result holds.
template <operand X>
auto sum(const X& x) {
  return detail::reduce_all<ReduceKind::sum>(x);
}
/// Sum over one axis (negative counts from the end), which disappears: [N, F] --sum<0>--> [F].
template <int Axis, operand X>
auto sum(const X& x) {
  return detail::reduce_axis<ReduceKind::sum, Axis>(x);
}
/// Sum over one axis, kept as extent 1: [N, F] --sum<1>(x, keepdim)--> [N, 1] (x.sum(1, keepdim=True)).
/// So for every axis reduction: `mean<Axis>(x, keepdim)`, `max`, `min`, `argmax`.
template <int Axis, operand X>
auto sum(const X& x, KeepDim) {
  return detail::reduce_axis<ReduceKind::sum, Axis, true>(x);
}
/// Mean of all elements (or over one axis); floating operands, or bools (the fraction true, as float).
template <operand X>
auto mean(const X& x) {
  // >>> Stopped here? The operand holds integers.
  static_assert(detail::mean_defined<X>, "kiln::mean: the operand holds integers (torch refuses them too); "
                                         "take mean(cast<float>(x))");
  return detail::reduce_all<ReduceKind::mean>(x);
}
template <int Axis, operand X>
auto mean(const X& x) {
  // >>> Stopped here? The operand holds integers.
  static_assert(detail::mean_defined<X>, "kiln::mean: the operand holds integers (torch refuses them too); "
                                         "take mean<Axis>(cast<float>(x))");
  return detail::reduce_axis<ReduceKind::mean, Axis>(x);
}
template <int Axis, operand X>
auto mean(const X& x, KeepDim) {
  // >>> Stopped here? The operand holds integers.
  static_assert(detail::mean_defined<X>, "kiln::mean: the operand holds integers (torch refuses them too); "
                                         "take mean<Axis>(cast<float>(x), keepdim)");
  return detail::reduce_axis<ReduceKind::mean, Axis, true>(x);
}
/// Largest element (NaN propagates); throws ValueError on an empty input.
template <operand X>
auto max(const X& x) {
  return detail::reduce_all<ReduceKind::max>(x);
}
template <int Axis, operand X>
auto max(const X& x) {
  return detail::reduce_axis<ReduceKind::max, Axis>(x);
}
template <int Axis, operand X>
auto max(const X& x, KeepDim) {
  return detail::reduce_axis<ReduceKind::max, Axis, true>(x);
}
template <operand X>
auto min(const X& x) {
  return detail::reduce_all<ReduceKind::min>(x);
}
template <int Axis, operand X>
auto min(const X& x) {
  return detail::reduce_axis<ReduceKind::min, Axis>(x);
}
template <int Axis, operand X>
auto min(const X& x, KeepDim) {
  return detail::reduce_axis<ReduceKind::min, Axis, true>(x);
}
/// Product of all elements (torch.prod): floats multiply in double, integers and bools in int64 (wrapping,
/// as torch's), which the result holds; 1 for an empty input.
template <operand X>
auto prod(const X& x) {
  return detail::reduce_all<ReduceKind::prod>(x);
}
template <int Axis, operand X>
auto prod(const X& x) {
  return detail::reduce_axis<ReduceKind::prod, Axis>(x);
}
template <int Axis, operand X>
auto prod(const X& x, KeepDim) {
  return detail::reduce_axis<ReduceKind::prod, Axis, true>(x);
}
/// Flat index of the largest element (the first one on ties; the first NaN if any), as int64.
template <operand X>
auto argmax(const X& x) {
  return detail::reduce_all<ReduceKind::argmax>(x);
}
/// Index along Axis of the largest element: logits [N, 10] --argmax<1>--> labels [N].
template <int Axis, operand X>
auto argmax(const X& x) {
  return detail::reduce_axis<ReduceKind::argmax, Axis>(x);
}
/// logits [N, 10] --argmax<1>(x, keepdim)--> [N, 1], as int64.
template <int Axis, operand X>
auto argmax(const X& x, KeepDim) {
  return detail::reduce_axis<ReduceKind::argmax, Axis, true>(x);
}

}  // namespace kiln
