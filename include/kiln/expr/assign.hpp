/// Assignment: the one boundary where shapes and devices are checked and an expression runs.
#pragma once
#include <string>
#include <type_traits>

#include "kiln/backend/cpu/executor.hpp"
#include "kiln/core/fusion.hpp"
#include "kiln/core/number_fits.hpp"
#include "kiln/expr/broadcast.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/detail/operand_device.hpp"
#include "kiln/expr/overlap.hpp"
#include "kiln/expr/unfused.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {
template <class T, class S, class D, class E>
void assign_expr(Tensor<T, S, D>& dst, const E& e, bool allocate = true);

/// The body of assign(), instantiated only for a valid right-hand side (no error cascade). With fusion
/// off (kiln::Unfused), an expression of several operations runs one pass per operation. allocate: an
/// empty dst without storage takes the expression's extents (false for a temporary view).
template <class T, class S, class D, class Src>
void assign_valid(Tensor<T, S, D>& dst, const Src& src, bool allocate = true) {
  auto e = [&] {
    if constexpr (std::is_arithmetic_v<Src>) {  // a fill: checked as torch's fill_, stored as a cast stores it
      check_number_fits<T>(src, "kiln::assign");
      return Scalar<compute_t<T>>{to_compute(from_compute<T>(src))};
    }
    else return as_expr(src);
  }();
  check_no_partial_overlap(dst.view(), e);  // before any pass, fused or not
  (void)sizeof(executor<D>);  // its message first when a Cuda expression is in a file nvcc does not compile
  const int operands = operand_device<D>(e, "kiln::assign");  // the GPU in use, or asked when several are
  const int mine = pass_device(dst);
  check_same_device("kiln::assign", mine, operands);
  const int device = mine >= 0 ? mine : operands;  // an empty dst is made on its operands' GPU
  const device_scope<D> on(device);  // that GPU, whichever is current
  if constexpr (op_count<decltype(e)>::value > 1) {
    if (!fusion_enabled()) {
      Temporaries keep;
      assign_expr(dst, split_below_root<D>(e, keep, device), allocate);
      return;
    }
  }
  assign_expr(dst, e, allocate);
}

/// Whether Src can be assigned (a kiln tensor, expression or number); one compile error if not.
template <class Src>
constexpr bool assignable_source() {
  constexpr bool valid = tensor<Src> || expression<Src> || std::is_arithmetic_v<Src>;
  // >>> Stopped here? The right-hand side is not a kiln tensor, expression or number. <<<
  static_assert(valid,
                "kiln::assign: right-hand side must be a kiln tensor or expression (value_type, shape(), "
                "operator[]) or a number; wrap raw buffers with kiln::Tensor<...>::from_blob()");
  return valid;
}

/// Whether an expression of shape SE is broadcast along dimension d into a destination of shape S of the
/// same rank: its static shape has a 1 there and S's has not (decided by the static shapes, as an
/// operator's broadcasting is: design.md).
template <class S, class SE>
constexpr bool broadcast_along(std::size_t d) {
  return SE::extents[d] == 1 && S::extents[d] != 1;
}
/// Whether it is broadcast along any dimension.
template <class S, class SE>
constexpr bool broadcasts_by_shape() {
  for (std::size_t d = 0; d != S::rank; ++d)
    if (broadcast_along<S, SE>(d)) return true;
  return false;
}

/// Checks e against dst (device, shape, broadcasting) and runs it: one pass.
template <class T, class S, class D, class E>
void assign_expr(Tensor<T, S, D>& dst, const E& e, bool allocate) {
  using SE = typename E::shape_type;
  // >>> Stopped here? The expression lives on another device than the destination tensor. <<<
  static_assert(std::is_void_v<typename E::device> || std::is_same_v<typename E::device, D>,
                "kiln::assign: wrong device: the expression's tensors live on another device than the "
                "destination; move them with .to<kiln::Cuda>() / .to<kiln::Cpu>() first");
  if constexpr (detail::is_scalar_node<E>::value) {
    detail::executor<D>::run(dst.view(), e);
  } else if constexpr (SE::rank < S::rank) {
    static_assert(shapes_must_broadcast<S, SE>::value);
    const auto out = detail::broadcast_extents<S>(dst.extents(), e.extents(), "kiln::assign");
    if (!(out == dst.extents()))
      throw ShapeError("kiln::assign: shape mismatch: cannot broadcast " + to_string(e.extents()) +
                       " to the destination's " + to_string(dst.extents()));
    detail::executor<D>::run(dst.view(), Broadcast<E, S>(e, dst.extents()));
  } else {
    static_assert(shapes_must_match<S, SE>::value);
    if (allocate && dst.storage() == nullptr && dst.numel() == 0)
      dst = Tensor<T, S, D>(extents_cast<S>(e.extents()));
    // The expression's extents: the destination's, or 1 where it is broadcast (as torch's copy_).
    const auto ee = e.extents();
    bool fits = true;
    for (std::size_t d = 0; d != S::rank; ++d)
      fits = fits && (ee[d] == dst.extents()[d] || broadcast_along<S, SE>(d));
    if (!fits)
      throw ShapeError("kiln::assign: shape mismatch: destination " + to_string(dst.extents()) + " (" +
                       shape_name<S>() + ") but expression " + to_string(ee) + " (" + shape_name<SE>() + ")");
    if constexpr (broadcasts_by_shape<S, SE>())
      detail::executor<D>::run(dst.view(), Broadcast<E, S>(e, dst.extents()));
    else
      detail::executor<D>::run(dst.view(), e);
  }
}

}  // namespace detail

/// dst[i] = src[i] for every element, in one pass on dst's device (one OpenMP loop or one CUDA
/// kernel). src is a tensor, an expression, or a number (a fill). A lower-rank src broadcasts to dst.
/// An empty dst (dynamic shape, no storage yet) is first allocated with src's extents when src has
/// dst's rank; a number or a lower-rank src broadcasts into dst's extents as they are (into an empty
/// dst: no elements, as torch's fill_ of an empty tensor).
template <class T, class S, class D, class Src>
void assign(Tensor<T, S, D>& dst, const Src& src) {
  if constexpr (detail::assignable_source<Src>()) detail::assign_valid(dst, src);
}

namespace detail {
/// assign() into a temporary view (Tensor's operator= &&): never allocates, as a view of a tensor with
/// no storage yet would hold the values nowhere (another shape than its own is a ShapeError).
template <class T, class S, class D, class Src>
void assign_into_view(Tensor<T, S, D>& dst, const Src& src) {
  if constexpr (assignable_source<Src>()) assign_valid(dst, src, false);
}
}  // namespace detail

/// Evaluates an expression into a new tensor of its element type (float for half operands; a cast's
/// type where the expression is a cast, as x.half() is a half tensor) and shape.
template <class X>
auto eval(const X& x) {
  auto e = as_expr(x);
  using E = decltype(e);
  using Stored = typename detail::stored_type<E>::type;
  using V = std::conditional_t<element<Stored>, Stored, typename E::value_type>;
  using D = std::conditional_t<std::is_void_v<typename E::device>, Cpu, typename E::device>;
  Tensor<V, typename E::shape_type, D> t(e.extents(), detail::operand_device<D>(e, "kiln::eval"));  // its operands' GPU
  assign(t, e);
  return t;
}

namespace detail {
/// The element type of a result computed from x, as torch keeps a tensor's dtype: a tensor's own (half
/// stays half), an expression's as eval gives it (softmax, vector_norm, cumsum, nan_to_num's limits).
template <class X>
using result_element_t =
    typename std::conditional_t<tensor<X>, std::type_identity<X>,
                                std::type_identity<decltype(kiln::eval(std::declval<const X&>()))>>::type::element_type;
}  // namespace detail

}  // namespace kiln
