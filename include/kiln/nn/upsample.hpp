/// Upsample<Scale, Mode>: each plane enlarged Scale times, as torch.nn.Upsample(scale_factor=Scale, mode)
/// for an integer factor: nearest (UpsamplingNearest2d), bilinear (align_corners False, or True as
/// UpsamplingBilinear2d) or bicubic.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// How Upsample fills the new pixels, as torch's mode: nearest (each input pixel repeated Scale x Scale
/// times), bilinear (interpolated between the four nearest input pixels) or bicubic (Keys' cubic
/// convolution over the sixteen nearest, a = -0.75 as torch's).
enum class UpsampleMode { nearest, bilinear, bicubic };

namespace detail {
/// The planes (N C) of [N, C, H, W] and the factor: [N, C, H Scale, W Scale].
struct UpsampleGeometry {
  index_t planes, h, w, scale;
  bool align_corners = false;  // bilinear, bicubic: the corner pixels of input and output aligned
};

/// The input row (or column) that output o reads in nearest mode, as torch's CPU and CUDA kernels: o
/// times the float 1 / Scale, rounded down (bit for bit: the product in float), at most n - 1.
KILN_HOST_DEVICE inline index_t nearest_source(index_t o, index_t n, index_t scale) {
  const float inverse = static_cast<float>(1.0 / static_cast<double>(scale));
  const auto i = static_cast<index_t>(floorf(static_cast<float>(o) * inverse));
  return i < n - 1 ? i : n - 1;
}

/// Where output o of an axis of n inputs enlarged Scale times reads, as torch's
/// area_pixel_compute_source_index in C (float, or double for a double tensor): Scale⁻¹ (o + 0.5) - 0.5
/// (align_corners=False; bilinear clamps it at 0, bicubic does not), or o (n - 1) / (n Scale - 1) (True:
/// the first and last rows of input and output coincide).
template <class C>
KILN_HOST_DEVICE C source_position(index_t o, index_t n, index_t scale, bool align_corners) {
  if (align_corners) {
    const index_t out = n * scale;
    const C ratio = out > 1 ? static_cast<C>(n - 1) / static_cast<C>(out - 1) : C(0);
    return ratio * static_cast<C>(o);
  }
  const C inverse = static_cast<C>(1.0 / static_cast<double>(scale));
  return inverse * (static_cast<C>(o) + C(0.5)) - C(0.5);
}

/// Output o's two input rows in bilinear mode: its source (at least 0 without align_corners); `lo` its
/// row, `hi` the next (lo itself at the last row), weights 1 - λ and λ.
template <class C>
struct BilinearTaps {
  index_t lo, hi;
  C l0, l1;
  KILN_HOST_DEVICE BilinearTaps(index_t o, index_t n, index_t scale, bool align_corners) {
    C src = source_position<C>(o, n, scale, align_corners);
    if (src < C(0)) src = C(0);
    lo = static_cast<index_t>(src);
    hi = lo < n - 1 ? lo + 1 : lo;
    l1 = src - static_cast<C>(lo);
    l0 = C(1) - l1;
  }
};

/// Output o's four input rows in bicubic mode, as torch's compute_indices_weights_cubic: its source
/// (not clamped); its floor f (at most n - 1) and t = the rest (within [0, 1]); rows f - 1 .. f + 2
/// clamped into [0, n), weighted by Keys' cubic convolution at distances t + 1, t, 1 - t, (1 - t) + 1
/// (a = -0.75), each operation rounded as torch's.
template <class C>
struct CubicTaps {
  index_t at[4];
  C w[4];
  KILN_HOST_DEVICE CubicTaps(index_t o, index_t n, index_t scale, bool align_corners) {
    const C src = source_position<C>(o, n, scale, align_corners);
    index_t f;
    if constexpr (std::is_same_v<C, float>)
      f = static_cast<index_t>(floorf(src));
    else
      f = static_cast<index_t>(::floor(src));  // (kiln::floor is the expression)
    if (f > n - 1) f = n - 1;
    C t = src - static_cast<C>(f);
    t = t < C(0) ? C(0) : (t > C(1) ? C(1) : t);
    w[0] = keys_far(t + C(1));
    w[1] = keys_near(t);
    w[2] = keys_near(C(1) - t);
    w[3] = keys_far((C(1) - t) + C(1));  // two roundings, as torch's x2 + 1.0
    for (int k = 0; k < 4; ++k) {
      const index_t r = f - 1 + k;
      at[k] = r < 0 ? 0 : (r > n - 1 ? n - 1 : r);
    }
  }
  /// Keys' kernel with a = -0.75 at a distance x <= 1, and 1 < x < 2 (torch's cubic_convolution1, 2).
  KILN_HOST_DEVICE static C keys_near(C x) {
    const C a = C(-0.75);
    return ((a + C(2)) * x - (a + C(3))) * x * x + C(1);
  }
  KILN_HOST_DEVICE static C keys_far(C x) {
    const C a = C(-0.75);
    return ((a * x - C(5) * a) * x + C(8) * a) * x - C(4) * a;
  }
};

/// y = x enlarged: one call per output element.
template <class T, UpsampleMode Mode>
struct UpsampleForward {
  const T* x;
  T* y;
  UpsampleGeometry g;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t ho = g.h * g.scale, wo = g.w * g.scale;
    const index_t ow = i % wo, oh = (i / wo) % ho, plane = i / (wo * ho);
    const T* xp = x + plane * g.h * g.w;
    if constexpr (Mode == UpsampleMode::nearest) {
      y[i] = xp[nearest_source(oh, g.h, g.scale) * g.w + nearest_source(ow, g.w, g.scale)];
    } else if constexpr (Mode == UpsampleMode::bilinear) {
      using C = compute_t<T>;
      const BilinearTaps<C> r(oh, g.h, g.scale, g.align_corners), c(ow, g.w, g.scale, g.align_corners);
      const auto at = [&](index_t ih, index_t iw) { return to_compute(xp[ih * g.w + iw]); };
      y[i] = from_compute<T>(r.l0 * (c.l0 * at(r.lo, c.lo) + c.l1 * at(r.lo, c.hi)) +
                             r.l1 * (c.l0 * at(r.hi, c.lo) + c.l1 * at(r.hi, c.hi)));
    } else {
      // torch's order: each row's four columns weighted and added, then the four rows
      using C = compute_t<T>;
      const CubicTaps<C> r(oh, g.h, g.scale, g.align_corners), c(ow, g.w, g.scale, g.align_corners);
      C acc = 0;
      for (int j = 0; j < 4; ++j) {
        const T* row = xp + r.at[j] * g.w;
        C t = to_compute(row[c.at[0]]) * c.w[0];
        for (int k = 1; k < 4; ++k) t += to_compute(row[c.at[k]]) * c.w[k];
        acc = j == 0 ? t * r.w[0] : acc + t * r.w[j];
      }
      y[i] = from_compute<T>(acc);
    }
  }
  Traffic traffic(index_t n) const {
    const std::uint64_t per = Mode == UpsampleMode::nearest ? 0 : Mode == UpsampleMode::bilinear ? 8 : 40;
    return {kiln::detail::bytes_of<T>(g.planes * g.h * g.w) + kiln::detail::bytes_of<T>(n),
            static_cast<std::uint64_t>(n) * per};
  }
};

/// dx[i] = Σ over the outputs that read input i of their weight times dy (a gather: one write per input,
/// no atomics). Nearest: the Scale x Scale block of outputs that repeat it. Bilinear: the outputs within
/// one input row or column of it, 3 Scale along each axis, weighted as the forward pass read them and
/// added in torch's order (output by output, its four products). Bicubic: the outputs within two input
/// rows or columns of it (and every output whose taps clamp onto it at an edge), about 5 Scale along
/// each axis (6 Scale + 2 with align_corners), in torch's CPU order (output by output; its sixteen taps
/// column by column, dy wy wx).
template <class T, UpsampleMode Mode>
struct UpsampleBackward {
  const T* dy;
  T* dx;
  UpsampleGeometry g;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    using C = compute_t<T>;
    const index_t ho = g.h * g.scale, wo = g.w * g.scale;
    const index_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const T* d = dy + plane * ho * wo;
    C acc = 0;
    if constexpr (Mode == UpsampleMode::nearest) {
      // the outputs whose source is ih: from ih Scale (one less where float's 1 / Scale rounds the
      // product under a whole number) to (ih + 1) Scale, and every later one at the last row
      const index_t h0 = ih * g.scale > 0 ? ih * g.scale - 1 : 0,
                    h1 = ih == g.h - 1 ? ho : (ih + 1) * g.scale + 1;
      const index_t w0 = iw * g.scale > 0 ? iw * g.scale - 1 : 0,
                    w1 = iw == g.w - 1 ? wo : (iw + 1) * g.scale + 1;
      for (index_t oh = h0; oh < h1 && oh < ho; ++oh) {
        if (nearest_source(oh, g.h, g.scale) != ih) continue;
        for (index_t ow = w0; ow < w1 && ow < wo; ++ow)
          if (nearest_source(ow, g.w, g.scale) == iw) acc += to_compute(d[oh * wo + ow]);
      }
    } else if constexpr (Mode == UpsampleMode::bicubic) {
      index_t h0, h1, w0, w1;
      cubic_readers(ih, g.h, h0, h1);
      cubic_readers(iw, g.w, w0, w1);
      for (index_t oh = h0; oh < h1; ++oh) {
        const CubicTaps<C> r(oh, g.h, g.scale, g.align_corners);
        if (r.at[0] > ih || r.at[3] < ih) continue;  // the clamped taps are rows at[0] .. at[3]
        for (index_t ow = w0; ow < w1; ++ow) {
          const CubicTaps<C> c(ow, g.w, g.scale, g.align_corners);
          if (c.at[0] > iw || c.at[3] < iw) continue;
          const C dv = to_compute(d[oh * wo + ow]);
          for (int k = 0; k < 4; ++k) {
            if (c.at[k] != iw) continue;
            for (int j = 0; j < 4; ++j)
              if (r.at[j] == ih) acc += dv * r.w[j] * c.w[k];
          }
        }
      }
    } else {
      index_t h0, h1, w0, w1;
      readers(ih, g.h, h0, h1);
      readers(iw, g.w, w0, w1);
      for (index_t oh = h0; oh < h1; ++oh) {
        const BilinearTaps<C> r(oh, g.h, g.scale, g.align_corners);
        if (r.lo != ih && r.hi != ih) continue;
        for (index_t ow = w0; ow < w1; ++ow) {
          const BilinearTaps<C> c(ow, g.w, g.scale, g.align_corners);
          const C dv = to_compute(d[oh * wo + ow]);
          // torch's four products, in its order (each its own add where two taps are one input)
          if (r.lo == ih) {
            if (c.lo == iw) acc += r.l0 * c.l0 * dv;
            if (c.hi == iw) acc += r.l0 * c.l1 * dv;
          }
          if (r.hi == ih) {
            if (c.lo == iw) acc += r.l1 * c.l0 * dv;
            if (c.hi == iw) acc += r.l1 * c.l1 * dv;
          }
        }
      }
    }
    dx[i] = from_compute<T>(acc);
  }
  /// The outputs [first, last) along an axis of n inputs whose bilinear source lies within one input
  /// of i (a row or two to spare for rounding): 3 Scale of them, or with align_corners the outputs
  /// between i - 1 and i + 1 at (n Scale - 1) / (n - 1) outputs an input (all of them for one input).
  KILN_HOST_DEVICE void readers(index_t i, index_t n, index_t& first, index_t& last) const {
    const index_t out = n * g.scale;
    if (!g.align_corners) {
      first = i > 0 ? (i - 1) * g.scale : 0;
      last = (i + 2) * g.scale < out ? (i + 2) * g.scale : out;
    } else if (n == 1) {
      first = 0, last = out;
    } else {
      first = i > 1 ? (i - 1) * (out - 1) / (n - 1) - 1 : 0;
      last = (i + 1) * (out - 1) / (n - 1) + 2;
      if (last > out) last = out;
    }
  }
  /// The outputs [first, last) along an axis of n inputs whose bicubic taps may reach input i: those
  /// whose source lies within two inputs of i and one to spare (5 Scale), and at the first and last
  /// input every output before or after (their taps clamp onto it); with align_corners at (n Scale - 1)
  /// / (n - 1) outputs an input, three inputs either side (all of them for one input).
  KILN_HOST_DEVICE void cubic_readers(index_t i, index_t n, index_t& first, index_t& last) const {
    const index_t out = n * g.scale;
    if (!g.align_corners) {
      first = i > 2 ? (i - 2) * g.scale : 0;
      last = i + 1 < n && (i + 3) * g.scale < out ? (i + 3) * g.scale : out;
    } else if (n == 1) {
      first = 0, last = out;
    } else {
      first = i > 3 ? (i - 3) * (out - 1) / (n - 1) : 0;
      last = i + 1 < n ? (i + 3) * (out - 1) / (n - 1) + 2 : out;
      if (last > out) last = out;
    }
  }
  Traffic traffic(index_t n) const {
    const std::uint64_t per = Mode == UpsampleMode::nearest ? 1 : Mode == UpsampleMode::bilinear ? 9 : 48;
    return {kiln::detail::bytes_of<T>(n * g.scale * g.scale) + kiln::detail::bytes_of<T>(n),
            static_cast<std::uint64_t>(n * g.scale * g.scale) * per};
  }
};

/// The torch module whose repr an Upsample prints.
enum class UpsampleName { upsample, nearest2d, bilinear2d };

/// Upsample's layer.
template <index_t Scale, UpsampleMode Mode, bool AlignCorners, UpsampleName Name>
struct Upsample2d {
  static_assert(Scale > 0, "kiln::nn::Upsample<Scale, Mode>: the scale factor must be a positive integer");
  static_assert(
      Mode != UpsampleMode::nearest || !AlignCorners,
      "kiln::nn::Upsample<Scale, Mode, AlignCorners>: align_corners applies to bilinear and bicubic "
      "modes only (torch refuses it for nearest)");
  /// A Sequential infers nothing past an Upsample whose arguments fail the checks above (their error
  /// alone, not the next layer's on a [N, C, 0, 0] image).
  template <class S>
  static constexpr bool failed = !(Scale > 0 && (Mode != UpsampleMode::nearest || !AlignCorners));
  // >>> Stopped here? Upsample takes [N, C, H, W] with static C, H and W. <<<
  template <class S>
  static constexpr bool accepts = (S::rank == 4) && (S::extents[1] != dyn) && (S::extents[2] != dyn) &&
                                  (S::extents[3] != dyn);
  template <class S>
  using output = Shape<S::extents[0], S::extents[1], S::extents[2] * Scale, S::extents[3] * Scale>;
  /// What it takes (for the error): [N, C, H, W], all static past the batch.
  template <class S>
  using expects = static_shape_of_rank<4>;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
   public:
    using typename detail::parameter_free<S, output<S>, P>::T;
    using typename detail::parameter_free<S, output<S>, P>::D;
    using typename detail::parameter_free<S, output<S>, P>::output_shape;
    /// torch's repr: "Upsample(scale_factor=2.0, mode=nearest)", "UpsamplingNearest2d(...)" (without
    /// align_corners, as torch's).
    std::string name() const {
      const std::string mode = Mode == UpsampleMode::nearest    ? "nearest"
                               : Mode == UpsampleMode::bilinear ? "bilinear"
                                                                : "bicubic";
      return layer() + "(scale_factor=" + std::to_string(Scale) + ".0, mode=" + mode + ")";
    }
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context) {
      Extents<output_shape> e = {};
      e[0] = x.size(0);
      Tensor<T, output_shape, D> y(e, x.device_index());
      rows_ = x.size(0);
      kiln::detail::executor<D>::for_each(y.numel(),
                                          UpsampleForward<T, Mode>{x.data(), y.data(), geometry(rows_)});
      return y;
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) {
      detail::check_backward_rows(layer(), dy.size(0), rows_);
      Extents<S> e = {};
      e[0] = dy.size(0);
      Tensor<T, S, D> dx(e, dy.device_index());
      kiln::detail::executor<D>::for_each(dx.numel(),
                                          UpsampleBackward<T, Mode>{dy.data(), dx.data(), geometry(rows_)});
      return dx;
    }

   private:
    static std::string layer() {
      return Name == UpsampleName::nearest2d    ? "UpsamplingNearest2d"
             : Name == UpsampleName::bilinear2d ? "UpsamplingBilinear2d"
                                                : "Upsample";
    }
    static UpsampleGeometry geometry(index_t n) {
      return {n * S::extents[1], S::extents[2], S::extents[3], Scale, AlignCorners};
    }
    index_t rows_ = 0;
  };
};
}  // namespace detail

/// Each plane enlarged Scale times, as torch.nn.Upsample(scale_factor=Scale, mode=...) with an integer
/// factor: `Upsample<2>` repeats each pixel 2 x 2 times (mode='nearest', torch's default),
/// `Upsample<2, UpsampleMode::bilinear>` interpolates (mode='bilinear', align_corners=False),
/// `Upsample<2, UpsampleMode::bilinear, true>` with align_corners=True, and `Upsample<2,
/// UpsampleMode::bicubic>` through the sixteen nearest pixels (mode='bicubic'; its overshoot is not
/// clamped, as torch's: an image in [0, 1] may leave it).
/// Shapes: [N, C, H, W] -> [N, C, H Scale, W Scale].
template <index_t Scale, UpsampleMode Mode = UpsampleMode::nearest, bool AlignCorners = false>
struct Upsample : detail::Upsample2d<Scale, Mode, AlignCorners, detail::UpsampleName::upsample> {};
/// torch.nn.UpsamplingNearest2d(scale_factor=Scale): Upsample<Scale> under torch's other name.
template <index_t Scale>
struct UpsamplingNearest2d
    : detail::Upsample2d<Scale, UpsampleMode::nearest, false, detail::UpsampleName::nearest2d> {};
/// torch.nn.UpsamplingBilinear2d(scale_factor=Scale): bilinear with align_corners=True.
template <index_t Scale>
struct UpsamplingBilinear2d
    : detail::Upsample2d<Scale, UpsampleMode::bilinear, true, detail::UpsampleName::bilinear2d> {};

}  // namespace kiln::nn
