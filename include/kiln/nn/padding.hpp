/// Padding the last two dimensions of [N, C, H, W]: ZeroPad2d, ConstantPad2d, ReflectionPad2d,
/// ReplicationPad2d and CircularPad2d, as torch.nn's; their modes are also Conv2d's padding_mode.
#pragma once
#include <concepts>
#include <cstdint>
#include <string>

#include "kiln/core/config.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// What a padded position reads, as torch's padding_mode: zeros (a constant), reflect (the input
/// mirrored about its edge, the edge itself once: d c b | a b c d | c b a), replicate (the edge repeated:
/// a a a | a b c d | d d d) or circular (the other end: b c d | a b c d | a b c).
enum class PaddingMode { zeros, reflect, replicate, circular };

namespace detail {
/// The padding PaddingMode allows on an axis of n inputs (before and after it), as torch's: any for
/// zeros and replicate, less than n for reflect (the edge is not repeated), at most n for circular.
template <PaddingMode Mode>
constexpr bool padding_fits(index_t before, index_t after, index_t n) {
  if constexpr (Mode == PaddingMode::reflect)
    return before < n && after < n;
  else if constexpr (Mode == PaddingMode::circular)
    return before <= n && after <= n;
  else if constexpr (Mode == PaddingMode::replicate)
    return n > 0;
  else
    return true;
}

/// The input that position p of a padded axis reads (n inputs, `before` positions of padding ahead of
/// them), or -1 for the constant (zeros). The padding fits (padding_fits).
template <PaddingMode Mode>
KILN_HOST_DEVICE inline index_t padding_source(index_t p, index_t n, index_t before) {
  const index_t i = p - before;
  if constexpr (Mode == PaddingMode::zeros)
    return i < 0 || i >= n ? -1 : i;
  else if constexpr (Mode == PaddingMode::reflect)
    return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
  else if constexpr (Mode == PaddingMode::replicate)
    return i < 0 ? 0 : i >= n ? n - 1 : i;
  else
    return i < 0 ? i + n : i >= n ? i - n : i;
}

/// Calls f(p) for every position p of a padded axis that reads input i (padding_source(p) == i): the
/// adjoint of padding_source, for the backward pass.
template <PaddingMode Mode, class F>
KILN_HOST_DEVICE inline void for_each_reader(index_t i, index_t n, index_t before, index_t after, F&& f) {
  f(before + i);
  if constexpr (Mode == PaddingMode::reflect) {
    if (i >= 1 && i <= before) f(before - i);
    if (i <= n - 2 && i >= n - 1 - after) f(before + 2 * (n - 1) - i);
  } else if constexpr (Mode == PaddingMode::replicate) {
    if (i == 0)
      for (index_t p = 0; p < before; ++p) f(p);
    if (i == n - 1)
      for (index_t p = before + n; p < before + n + after; ++p) f(p);
  } else if constexpr (Mode == PaddingMode::circular) {
    if (i >= n - before) f(i + before - n);
    if (i < after) f(before + n + i);
  }
}

/// The planes (N C) of [N, C, H, W] and [N, C, Ho, Wo] with Ho = top + H + bottom, Wo = left + W + right.
struct PaddingGeometry {
  index_t planes, h, w, top, bottom, left, right;
  index_t ho() const { return top + h + bottom; }
  index_t wo() const { return left + w + right; }
};

/// y = x padded: one call per output element.
template <class T, PaddingMode Mode>
struct PadForward {
  const T* x;
  T* y;
  PaddingGeometry g;
  T value;  // zeros: the constant (ConstantPad2d's value)
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t wo = g.left + g.w + g.right, ho = g.top + g.h + g.bottom;
    const index_t pw = i % wo, ph = (i / wo) % ho, plane = i / (wo * ho);
    const index_t ih = padding_source<Mode>(ph, g.h, g.top), iw = padding_source<Mode>(pw, g.w, g.left);
    y[i] = ih < 0 || iw < 0 ? value : x[(plane * g.h + ih) * g.w + iw];
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<T>(g.planes * g.h * g.w) + kiln::detail::bytes_of<T>(n), 0};
  }
};

/// dx[i] = Σ dy over the padded positions that read input i (a gather: one write per input, no atomics).
template <class T, PaddingMode Mode>
struct PadBackward {
  const T* dy;
  T* dx;
  PaddingGeometry g;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t wo = g.left + g.w + g.right, ho = g.top + g.h + g.bottom;
    const index_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const T* d = dy + plane * ho * wo;
    compute_t<T> acc = 0;
    for_each_reader<Mode>(ih, g.h, g.top, g.bottom, [&](index_t ph) {
      for_each_reader<Mode>(iw, g.w, g.left, g.right,
                            [&](index_t pw) { acc += to_compute(d[ph * wo + pw]); });
    });
    dx[i] = from_compute<T>(acc);
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<T>(g.planes * g.ho() * g.wo()) + kiln::detail::bytes_of<T>(n),
            static_cast<std::uint64_t>(g.planes * g.ho() * g.wo())};
  }
};

/// [N, C, H, W] -> [N, C, Top + H + Bottom, Left + W + Right].
template <class S, index_t Top, index_t Bottom, index_t Left, index_t Right>
using padded_shape =
    Shape<S::extents[0], S::extents[1], S::extents[2] + Top + Bottom, S::extents[3] + Left + Right>;

/// x padded in Mode (zeros: with `value`).
template <PaddingMode Mode, index_t Top, index_t Bottom, index_t Left, index_t Right, class T, class S,
          class D>
Tensor<T, padded_shape<S, Top, Bottom, Left, Right>, D> pad2d(const Tensor<T, S, D>& x, float value = 0) {
  using Out = padded_shape<S, Top, Bottom, Left, Right>;
  Extents<Out> e = {};
  e[0] = x.size(0);
  Tensor<T, Out, D> y(e, x.device_index());
  const PaddingGeometry g{x.size(0) * S::extents[1], S::extents[2], S::extents[3], Top, Bottom, Left, Right};
  kiln::detail::executor<D>::for_each(y.numel(),
                                      PadForward<T, Mode>{x.data(), y.data(), g, from_compute<T>(value)});
  return y;
}
/// dL/dx of pad2d from dL/dy.
template <PaddingMode Mode, index_t Top, index_t Bottom, index_t Left, index_t Right, class T, class S,
          class D>
Tensor<T, S, D> pad2d_backward(const Tensor<T, padded_shape<S, Top, Bottom, Left, Right>, D>& dy) {
  Extents<S> e = {};
  e[0] = dy.size(0);
  Tensor<T, S, D> dx(e, dy.device_index());
  const PaddingGeometry g{dy.size(0) * S::extents[1], S::extents[2], S::extents[3], Top, Bottom, Left, Right};
  kiln::detail::executor<D>::for_each(dx.numel(), PadBackward<T, Mode>{dy.data(), dx.data(), g});
  return dx;
}

/// The padding layers' names, as torch's reprs.
enum class PadLayer { zero, constant, reflection, replication, circular };

/// One padding layer; Right, Top and Bottom are -1 where only Left was given (all four the same).
template <PadLayer Kind, index_t Left, index_t Right, index_t Top, index_t Bottom, float Value = 0.0f>
struct Pad2d {
  static constexpr PaddingMode mode = Kind == PadLayer::reflection    ? PaddingMode::reflect
                                      : Kind == PadLayer::replication ? PaddingMode::replicate
                                      : Kind == PadLayer::circular    ? PaddingMode::circular
                                                                      : PaddingMode::zeros;
  static_assert(Left >= 0 &&
                    ((Right == -1 && Top == -1 && Bottom == -1) || (Right >= 0 && Top >= 0 && Bottom >= 0)),
                "kiln::nn padding layers <Left, Right, Top, Bottom> (torch's (left, right, top, bottom)), or "
                "<Padding> for the same on every side: not negative, and one value or all four");
  static constexpr index_t left = Left, right = Right < 0 ? Left : Right;
  static constexpr index_t top = Top < 0 ? Left : Top, bottom = Bottom < 0 ? Left : Bottom;
  template <class S>
  static constexpr bool fits() {
    if constexpr (S::rank != 4)
      return false;
    else
      return S::extents[1] != dyn && S::extents[2] != dyn && S::extents[3] != dyn &&
             padding_fits<mode>(top, bottom, S::extents[2]) && padding_fits<mode>(left, right, S::extents[3]);
  }
  // >>> Stopped here? Padding layers take [N, C, H, W] with static C, H and W; reflect needs each padding
  //     smaller than its dimension (the edge is not repeated), circular at most as large. <<<
  template <class S>
  static constexpr bool accepts = fits<S>();
  template <class S>
  using output = padded_shape<S, top, bottom, left, right>;
  /// The least extent that `before` and `after` of padding fit in the mode.
  static constexpr index_t least_extent(index_t before, index_t after) {
    index_t n = 0;
    while (!padding_fits<mode>(before, after, n)) ++n;
    return n;
  }
  /// What it takes where it is given S (for the error): S with H and W raised to what the padding fits,
  /// or static_shape_of_rank<4> where S is not [N, C, H, W] with static C, H and W.
  template <class S>
  using expects = static_image_at_least<S, least_extent(top, bottom), least_extent(left, right)>;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
   public:
    using typename detail::parameter_free<S, output<S>, P>::T;
    using typename detail::parameter_free<S, output<S>, P>::D;
    using typename detail::parameter_free<S, output<S>, P>::output_shape;
    /// torch's repr: "ReflectionPad2d((1, 1, 2, 0))", "ConstantPad2d(padding=(2, 2, 2, 2), value=3.5)".
    std::string name() const {
      const std::string sides = "(" + std::to_string(left) + ", " + std::to_string(right) + ", " +
                                std::to_string(top) + ", " + std::to_string(bottom) + ")";
      if (Kind == PadLayer::constant)
        return layer() + "(padding=" + sides + ", value=" + python_float(Value) + ")";
      return layer() + "(" + sides + ")";
    }
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context) {
      rows_ = x.size(0);
      return pad2d<mode, top, bottom, left, right>(x, Value);
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) {
      detail::check_backward_rows(layer(), dy.size(0), rows_);
      return pad2d_backward<mode, top, bottom, left, right, T, S>(dy);
    }

   private:
    static std::string layer() {
      switch (Kind) {
        case PadLayer::zero:
          return "ZeroPad2d";
        case PadLayer::constant:
          return "ConstantPad2d";
        case PadLayer::reflection:
          return "ReflectionPad2d";
        case PadLayer::replication:
          return "ReplicationPad2d";
        case PadLayer::circular:
          break;
      }
      return "CircularPad2d";
    }
    index_t rows_ = 0;
  };
};
}  // namespace detail

/// Zeros around each plane, as torch.nn.ZeroPad2d: `ZeroPad2d<P>` pads P on every side, `ZeroPad2d<Left,
/// Right, Top, Bottom>` as torch's (left, right, top, bottom).
/// Shapes: [N, C, H, W] -> [N, C, Top + H + Bottom, Left + W + Right].
template <index_t Left, index_t Right = -1, index_t Top = -1, index_t Bottom = -1>
struct ZeroPad2d : detail::Pad2d<detail::PadLayer::zero, Left, Right, Top, Bottom> {};
/// ConstantPad2d's value: a floating-point number (`3.5`, `0.0`, `-1.0f`), so that torch's order written
/// as is, `ConstantPad2d<2, 3.5>` (padding first), does not compile (2 is not a PadValue, 3.5 not a
/// padding) rather than padding 3 with the value 2.
struct PadValue {
  float value;
  template <std::floating_point F>
  constexpr PadValue(F v) : value(static_cast<float>(v)) {}  // NOLINT(google-explicit-constructor)
};

/// The constant Value around each plane, as torch.nn.ConstantPad2d(padding, value), the value first and
/// written as a floating-point number: `ConstantPad2d<3.5, 2>` is ConstantPad2d(2, 3.5),
/// `ConstantPad2d<0.0, 1, 2, 0, 0>` ConstantPad2d((1, 2, 0, 0), 0.0).
/// Shapes: as ZeroPad2d's.
template <PadValue Value, index_t Left, index_t Right = -1, index_t Top = -1, index_t Bottom = -1>
struct ConstantPad2d : detail::Pad2d<detail::PadLayer::constant, Left, Right, Top, Bottom, Value.value> {};
/// Each plane mirrored about its edges, as torch.nn.ReflectionPad2d: each padding less than its dimension.
/// Shapes: as ZeroPad2d's.
template <index_t Left, index_t Right = -1, index_t Top = -1, index_t Bottom = -1>
struct ReflectionPad2d : detail::Pad2d<detail::PadLayer::reflection, Left, Right, Top, Bottom> {};
/// Each plane's edge rows and columns repeated, as torch.nn.ReplicationPad2d.
/// Shapes: as ZeroPad2d's.
template <index_t Left, index_t Right = -1, index_t Top = -1, index_t Bottom = -1>
struct ReplicationPad2d : detail::Pad2d<detail::PadLayer::replication, Left, Right, Top, Bottom> {};
/// Each plane wrapped around (the rows after the last are the first ones), as torch.nn.CircularPad2d
/// (torch 2.1; F.pad(x, padding, mode='circular') before): each padding at most its dimension.
/// Shapes: as ZeroPad2d's.
template <index_t Left, index_t Right = -1, index_t Top = -1, index_t Bottom = -1>
struct CircularPad2d : detail::Pad2d<detail::PadLayer::circular, Left, Right, Top, Bottom> {};

}  // namespace kiln::nn
