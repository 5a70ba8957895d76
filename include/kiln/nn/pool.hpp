/// MaxPool2d and AvgPool2d over K x K windows (stride defaults to K; ceil_mode, MaxPool2d's dilation,
/// AvgPool2d's count_include_pad and divisor_override), as torch.nn's.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
struct PoolGeometry {
  index_t nc, h, w, k, stride, pad, ho, wo;
  index_t dilation = 1;  // MaxPool2d's: taps Dilation apart
  index_t inputs() const { return nc * h * w; }
  index_t outputs() const { return nc * ho * wo; }
  /// A pass that reads the input planes (type X), writes or reads the output planes (type Y) and, for
  /// a max pool in training, the winners' taps (type I); one operation per window tap.
  template <class X, class Y, class I = void>
  Traffic traffic(bool with_index) const {
    std::uint64_t b = kiln::detail::bytes_of<X>(inputs()) + kiln::detail::bytes_of<Y>(outputs());
    if constexpr (!std::is_void_v<I>)
      if (with_index) b += kiln::detail::bytes_of<I>(outputs());
    return {b, static_cast<std::uint64_t>(outputs() * k * k)};
  }
};

/// The index a MaxPool2d keeps per output for its backward pass: the winner's tap ki K + kj inside its
/// window, one byte for windows up to 15 x 15 (PyTorch keeps an int64 per output: 8 times as much).
template <index_t K>
using window_index_t = std::conditional_t<(K * K < 255), std::uint8_t, std::int32_t>;
/// The index of a window without a winner (all of it padding).
template <class I>
inline constexpr I no_winner = std::numeric_limits<I>::max();

/// The outputs of a pool along an axis of n inputs, as torch's pooling_output_shape: (n + 2 Padding -
/// Dilation (K - 1) - 1) / Stride rounded down (up in ceil mode), + 1; in ceil mode a last window that
/// would start at or past n + Padding (in the trailing padding alone) is dropped.
template <index_t K, index_t Stride, index_t Padding, bool CeilMode, index_t Dilation = 1>
constexpr index_t pool_extent(index_t n) {
  const index_t o = (n + 2 * Padding - Dilation * (K - 1) - 1 + (CeilMode ? Stride - 1 : 0)) / Stride + 1;
  return CeilMode && (o - 1) * Stride >= n + Padding ? o - 1 : o;
}

/// The shortest row of windows whose max pool gradient the CPU gathers in `omp simd` loops: shorter rows
/// are scattered (rows of 5 and 7 windows, LeNet's second pool and a 14 x 14 one, took twice as long
/// gathered).
inline constexpr index_t gather_row = 8;
/// mask (all ones or 0) ? a : b, a float's through its bits: g++ 12 vectorises no float select in a
/// loop with 16-bit loads or stores ("unsupported data-type float"), half's and bfloat16's.
template <class V>
KILN_HOST_DEVICE KILN_FORCEINLINE V select_by_mask(std::uint32_t mask, V a, V b) {
  if constexpr (std::is_same_v<V, float>)
    return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & mask) |
                                (std::bit_cast<std::uint32_t>(b) & ~mask));
  else
    return mask ? a : b;
}

/// The max of x over window (oh, ow) of one plane, its taps Dilation apart, and the winner's tap ki K + kj
/// (-1: none; padding is
/// -inf; ties keep the first; NaN propagates, the last NaN winning, as torch's CPU and CUDA kernels
/// route the gradient). Taps outside the plane are skipped; Bounded = false (no padding, no ceil-mode
/// window past the last row or column) compiles the checks out. The window is a constant: its loops unroll.
template <index_t K, index_t Stride, index_t Padding, index_t Dilation, bool Bounded, class T>
KILN_HOST_DEVICE inline compute_t<T> window_max(const T* xp, index_t oh, index_t ow, const PoolGeometry& g,
                                                index_t& arg) {
  compute_t<T> best = -static_cast<compute_t<T>>(INFINITY);
  arg = -1;
  KILN_UNROLL
  for (index_t ki = 0; ki < K; ++ki) {
    const index_t ih = oh * Stride - Padding + ki * Dilation;
    if (Bounded && (ih < 0 || ih >= g.h)) continue;
    KILN_UNROLL
    for (index_t kj = 0; kj < K; ++kj) {
      const index_t iw = ow * Stride - Padding + kj * Dilation;
      if (Bounded && (iw < 0 || iw >= g.w)) continue;
      const compute_t<T> v = to_compute(xp[ih * g.w + iw]);
      if (arg < 0 || v > best || kiln::detail::is_nan(v)) best = v, arg = ki * K + kj;
    }
  }
  return best;
}

/// y = max over the window, idx = the winner's tap; one call per output element (CUDA).
template <class T, index_t K, index_t Stride, index_t Padding, index_t Dilation, bool Bounded>
struct MaxPoolForward {
  using I = window_index_t<K>;
  const T* x;
  T* y;
  I* idx;  // null in inference
  PoolGeometry g;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t ow = i % g.wo, oh = (i / g.wo) % g.ho, plane = i / (g.wo * g.ho);
    index_t arg;
    y[i] = from_compute<T>(
        window_max<K, Stride, Padding, Dilation, Bounded>(x + plane * g.h * g.w, oh, ow, g, arg));
    if (idx) idx[i] = arg < 0 ? no_winner<I> : static_cast<I>(arg);
  }
  Traffic traffic(index_t) const { return g.traffic<T, T, I>(idx != nullptr); }
};
/// The same, one call per (n, c) plane: no division per element (CPU). Where every window lies inside
/// the plane (Bounded = false: LeNet's and ResNet's pools), a row of windows is one `omp simd` loop of
/// selects, the taps unrolled (the branches of window_max kept a 2 x 2 pool scalar: 0.9 ns an input
/// element, 16 % of LeNet's training step); the same maxima and winners as window_max.
template <class T, index_t K, index_t Stride, index_t Padding, index_t Dilation, bool Bounded>
struct MaxPoolForwardPlanes {
  using I = window_index_t<K>;
  const T* x;
  T* y;
  I* idx;  // null in inference
  PoolGeometry g;
  KILN_HOST_DEVICE void operator()(index_t plane) const {
    const T* xp = x + plane * g.h * g.w;
    const index_t o = plane * g.ho * g.wo;
    if constexpr (!Bounded) {
      if (idx)
        inside<true>(xp, o);
      else
        inside<false>(xp, o);
    } else {
      for (index_t oh = 0; oh < g.ho; ++oh)
        for (index_t ow = 0; ow < g.wo; ++ow) {
          index_t arg;
          y[o + oh * g.wo + ow] =
              from_compute<T>(window_max<K, Stride, Padding, Dilation, Bounded>(xp, oh, ow, g, arg));
          if (idx) idx[o + oh * g.wo + ow] = arg < 0 ? no_winner<I> : static_cast<I>(arg);
        }
    }
  }
  /// Every window inside the plane: its first tap is the first best, then a tap wins where it is larger
  /// or NaN (ties keep the first, the last NaN wins), as window_max. A row of windows runs in pieces:
  /// the maxima and winners of a piece into local arrays of 32-bit lanes, then stored (a loop that mixes
  /// the one-byte winners with float lanes vectorises 16 windows at a time, more than a row of LeNet's).
  template <bool Keep>
  KILN_HOST_DEVICE KILN_FORCEINLINE void inside(const T* xp, index_t o) const {
    using V = compute_t<T>;
    constexpr index_t piece = 64;
    const index_t w = g.w;
    for (index_t oh = 0; oh < g.ho; ++oh)
      for (index_t first = 0; first < g.wo; first += piece) {
        const index_t m = g.wo - first < piece ? g.wo - first : piece;
        const T* row = xp + oh * Stride * w + first * Stride;
        V best[piece];
        std::uint32_t arg[piece];
        KILN_PRAGMA_OMP(simd)
        for (index_t j = 0; j < m; ++j) {
          const T* at = row + j * Stride;
          V b = to_compute(at[0]);
          std::uint32_t a = 0;
          KILN_UNROLL
          for (index_t t = 1; t < K * K; ++t) {
            const V v = to_compute(at[t / K * Dilation * w + t % K * Dilation]);
            const std::uint32_t take = 0u - static_cast<std::uint32_t>((v > b) | kiln::detail::is_nan(v));
            b = select_by_mask(take, v, b);
            a = (static_cast<std::uint32_t>(t) & take) | (a & ~take);
          }
          best[j] = b;
          arg[j] = a;
        }
        T* yr = y + o + oh * g.wo + first;
        KILN_PRAGMA_OMP(simd)
        for (index_t j = 0; j < m; ++j) yr[j] = from_compute<T>(best[j]);
        if constexpr (Keep) {
          I* ir = idx + o + oh * g.wo + first;
          KILN_PRAGMA_OMP(simd)
          for (index_t j = 0; j < m; ++j) ir[j] = static_cast<I>(arg[j]);
        }
      }
  }
  Traffic traffic(index_t) const { return g.traffic<T, T, I>(idx != nullptr); }
};
/// dx = dy scattered to the winners, one call per plane (one thread owns a plane, so overlapping windows
/// add without a race) (CPU). Tiled (windows side by side, K apart, inside the plane: LeNet's and
/// ResNet's 2 x 2 pools): each input is one window's tap, so dx is written once, a gather (dy where the
/// tap won, 0 elsewhere) in `omp simd` loops; the same values as the scatter (0 + dy at a winner).
template <class T, index_t K, index_t Stride, index_t Padding, index_t Dilation, bool Tiled = false>
struct MaxPoolBackwardPlanes {
  using I = window_index_t<K>;
  const T* dy;
  const I* idx;
  T* dx;
  PoolGeometry g;
  KILN_HOST_DEVICE void operator()(index_t plane) const {
    T* dxp = dx + plane * g.h * g.w;
    const index_t o = plane * g.ho * g.wo;
    const T zero = from_compute<T>(compute_t<T>(0));
    if constexpr (Tiled) {
      static_assert(Stride == K && Dilation == 1 && Padding == 0,
                    "MaxPoolBackwardPlanes: tiled windows only");
      if (g.wo >= gather_row) {
        gather(dxp, o, zero);
        return;
      }
    }
    for (index_t i = 0; i < g.h * g.w; ++i) dxp[i] = zero;
    for (index_t oh = 0; oh < g.ho; ++oh)
      for (index_t ow = 0; ow < g.wo; ++ow) {
        const index_t j = o + oh * g.wo + ow;
        const I a = idx[j];
        if (a == no_winner<I>) continue;
        const index_t at =
            (oh * Stride - Padding + a / K * Dilation) * g.w + ow * Stride - Padding + a % K * Dilation;
        dxp[at] = from_compute<T>(to_compute(dxp[at]) + to_compute(dy[j]));
      }
  }
  /// The tiled case: a row of windows in pieces, its gradients and winners first read into 32-bit lanes
  /// (as MaxPoolForwardPlanes::inside), then each of its K input rows written; the columns and rows that
  /// no window covers are 0.
  KILN_HOST_DEVICE KILN_FORCEINLINE void gather(T* dxp, index_t o, T zero) const {
    using V = compute_t<T>;
    constexpr index_t piece = 64;
    const index_t w = g.w;
    for (index_t oh = 0; oh < g.ho; ++oh) {
      for (index_t first = 0; first < g.wo; first += piece) {
        const index_t m = g.wo - first < piece ? g.wo - first : piece;
        V d[piece];
        std::uint32_t a[piece];
        const T* dyr = dy + o + oh * g.wo + first;
        const I* ir = idx + o + oh * g.wo + first;
        KILN_PRAGMA_OMP(simd)
        for (index_t j = 0; j < m; ++j) d[j] = V(0) + to_compute(dyr[j]);
        KILN_PRAGMA_OMP(simd)
        for (index_t j = 0; j < m; ++j) a[j] = ir[j];
        KILN_UNROLL
        for (index_t ki = 0; ki < K; ++ki) {
          T* row = dxp + (oh * K + ki) * w + first * K;
          KILN_PRAGMA_OMP(simd)
          for (index_t j = 0; j < m; ++j) {
            KILN_UNROLL
            for (index_t kj = 0; kj < K; ++kj) {
              const std::uint32_t won =
                  0u - static_cast<std::uint32_t>(a[j] == static_cast<std::uint32_t>(ki * K + kj));
              row[j * K + kj] = from_compute<T>(select_by_mask(won, d[j], V(0)));
            }
          }
        }
      }
      for (index_t ki = 0; ki < K; ++ki)
        for (index_t iw = g.wo * K; iw < w; ++iw) dxp[(oh * K + ki) * w + iw] = zero;
    }
    for (index_t i = g.ho * K * w; i < g.h * w; ++i) dxp[i] = zero;
  }
  Traffic traffic(index_t) const { return g.traffic<T, T, I>(true); }
};

/// dx[i] = Σ dy over the windows that cover i and chose i (a gather: one write per input, no atomics)
/// (CUDA).
template <class T, index_t K>
struct MaxPoolBackward {
  using I = window_index_t<K>;
  const T* dy;
  const I* idx;
  T* dx;
  PoolGeometry g;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    compute_t<T> acc = 0;
    for (index_t ki = 0; ki < g.k; ++ki) {
      const index_t th = ih + g.pad - ki * g.dilation;
      if (th < 0 || th % g.stride != 0 || th / g.stride >= g.ho) continue;
      for (index_t kj = 0; kj < g.k; ++kj) {
        const index_t tw = iw + g.pad - kj * g.dilation;
        if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= g.wo) continue;
        const index_t o = (plane * g.ho + th / g.stride) * g.wo + tw / g.stride;
        if (static_cast<index_t>(idx[o]) == ki * K + kj) acc += to_compute(dy[o]);
      }
    }
    dx[i] = from_compute<T>(acc);
  }
  Traffic traffic(index_t) const { return g.traffic<T, T, I>(true); }
};

/// The divisor of window (oh, ow) of an AvgPool2d, as torch's avg_pool2d: Divisor where every window
/// has the same one (K K, or divisor_override); else (Divisor = 0) the window's taps inside the input and
/// its padding (CountIncludePad: a ceil-mode window is cut at the end of the padding), or inside the input
/// alone. Every window holds an input tap (padding is at most K / 2), so the count is positive.
template <index_t Divisor, bool CountIncludePad>
KILN_HOST_DEVICE inline index_t window_divisor(index_t oh, index_t ow, const PoolGeometry& g) {
  if constexpr (Divisor > 0) {
    return Divisor;
  } else {
    const index_t hs = oh * g.stride - g.pad, ws = ow * g.stride - g.pad;  // may lie in the padding
    const index_t he = hs + g.k, we = ws + g.k;
    if constexpr (CountIncludePad)
      return ((he < g.h + g.pad ? he : g.h + g.pad) - hs) * ((we < g.w + g.pad ? we : g.w + g.pad) - ws);
    else
      return ((he < g.h ? he : g.h) - (hs > 0 ? hs : 0)) * ((we < g.w ? we : g.w) - (ws > 0 ? ws : 0));
  }
}

/// y = the sum over the K x K window's input taps / the window's divisor (window_divisor).
template <class T, index_t Divisor, bool CountIncludePad>
struct AvgPoolForward {
  const T* x;
  T* y;
  PoolGeometry g;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t ow = i % g.wo, oh = (i / g.wo) % g.ho, plane = i / (g.wo * g.ho);
    const T* xp = x + plane * g.h * g.w;
    compute_t<T> acc = 0;
    for (index_t ki = 0; ki < g.k; ++ki) {
      const index_t ih = oh * g.stride - g.pad + ki;
      if (ih < 0 || ih >= g.h) continue;
      for (index_t kj = 0; kj < g.k; ++kj) {
        const index_t iw = ow * g.stride - g.pad + kj;
        if (iw >= 0 && iw < g.w) acc += to_compute(xp[ih * g.w + iw]);
      }
    }
    const index_t divisor = window_divisor<Divisor, CountIncludePad>(oh, ow, g);
    y[i] = from_compute<T>(acc / static_cast<compute_t<T>>(divisor));
  }
  Traffic traffic(index_t) const { return g.traffic<T, T>(false); }
};
/// dx[i] = Σ dy / divisor over the windows that cover i (a gather: one write per input, no atomics); one
/// division at the end where every window has the same divisor.
template <class T, index_t Divisor, bool CountIncludePad>
struct AvgPoolBackward {
  const T* dy;
  T* dx;
  PoolGeometry g;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    compute_t<T> acc = 0;
    for (index_t ki = 0; ki < g.k; ++ki) {
      const index_t th = ih + g.pad - ki;
      if (th < 0 || th % g.stride != 0 || th / g.stride >= g.ho) continue;
      for (index_t kj = 0; kj < g.k; ++kj) {
        const index_t tw = iw + g.pad - kj;
        if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= g.wo) continue;
        const compute_t<T> d = to_compute(dy[(plane * g.ho + th / g.stride) * g.wo + tw / g.stride]);
        if constexpr (Divisor > 0)
          acc += d;
        else
          acc += d / static_cast<compute_t<T>>(
                         window_divisor<Divisor, CountIncludePad>(th / g.stride, tw / g.stride, g));
      }
    }
    dx[i] = from_compute<T>(Divisor > 0 ? acc / static_cast<compute_t<T>>(Divisor) : acc);
  }
  Traffic traffic(index_t) const { return g.traffic<T, T>(false); }
};

template <bool Max, index_t K, index_t Stride, index_t Padding, bool CeilMode, bool CountIncludePad,
          index_t DivisorOverride, index_t Dilation = 1>
struct Pool2d {
  static_assert(K > 0 && Stride > 0 && Padding >= 0 && 2 * Padding <= K,
                "kiln::nn::MaxPool2d/AvgPool2d<K, Stride, Padding>: K and stride positive, padding at most K/2");
  // >>> Stopped here? AvgPool2d's last argument is torch's divisor_override: a positive count, or 0. <<<
  static_assert(Dilation > 0,
                "kiln::nn::MaxPool2d<K, Stride, Padding, CeilMode, Dilation>: the dilation must be positive");
  static_assert(DivisorOverride >= 0,
                "kiln::nn::AvgPool2d<K, Stride, Padding, CeilMode, CountIncludePad, DivisorOverride>: "
                "DivisorOverride must be positive (every window's sum is divided by it), or 0 for none");
  /// Whether the arguments pass the checks above; a Sequential infers nothing past a pool whose do not
  /// (their error alone, no division by a zero stride after it).
  static constexpr bool params_ok =
      K > 0 && Stride > 0 && Padding >= 0 && 2 * Padding <= K && Dilation > 0 && DivisorOverride >= 0;
  template <class S>
  static constexpr bool failed = !params_ok;
  /// A window's extent on the input: Dilation (K - 1) + 1.
  static constexpr index_t span = Dilation * (K - 1) + 1;
  /// torch's rule: one window at least, counted with ceil_mode's extra stride - 1 (a window may then
  /// start inside the input and reach past it and the padding).
  static constexpr index_t reach = 2 * Padding + (CeilMode ? Stride - 1 : 0);
  template <class S>
  static constexpr bool accepts =
      S::rank == 4 && S::extents[1] != dyn&& S::extents[2] != dyn&& S::extents[3] !=
                          dyn&& S::extents[2] + reach >= span&& S::extents[3] + reach >= span;
  template <class S>
  using output =
      Shape<S::extents[0], S::extents[1], pool_extent<K, Stride, Padding, CeilMode, Dilation>(S::extents[2]),
            pool_extent<K, Stride, Padding, CeilMode, Dilation>(S::extents[3])>;
  /// What it takes where it is given S (for the error): S with H and W raised to one window, or
  /// static_shape_of_rank<4> where S is not [N, C, H, W] with static C, H and W.
  template <class S>
  using expects = static_image_at_least<S, span - reach, span - reach>;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
   public:
    using typename detail::parameter_free<S, output<S>, P>::T;
    using typename detail::parameter_free<S, output<S>, P>::D;
    using typename detail::parameter_free<S, output<S>, P>::output_shape;
    /// torch's repr (AvgPool2d's leaves out ceil_mode, count_include_pad and divisor_override, as torch's).
    std::string name() const {
      return std::string(Max ? "MaxPool2d" : "AvgPool2d") + "(kernel_size=" + std::to_string(K) +
             ", stride=" + std::to_string(Stride) + ", padding=" + std::to_string(Padding) +
             (Max ? ", dilation=" + std::to_string(Dilation) +
                        (CeilMode ? ", ceil_mode=True)" : ", ceil_mode=False)")
                  : std::string(")"));
    }

    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      Extents<output_shape> e = {};
      e[0] = x.size(0);
      Tensor<T, output_shape, D> y(e, x.device_index());
      const auto g = geometry(x.size(0));
      if constexpr (Max) {
        idx_ = ctx.grad ? index_tensor(e, x.device_index()) : index_tensor();
        if constexpr (std::is_same_v<D, Cpu>)
          kiln::detail::executor<D>::for_each(g.nc,
                                              MaxPoolForwardPlanes<T, K, Stride, Padding, Dilation, bounded>{
                                                  x.data(), y.data(), idx_.data(), g},
                                              g.h * g.w);
        else
          kiln::detail::executor<D>::for_each(
              y.numel(),
              MaxPoolForward<T, K, Stride, Padding, Dilation, bounded>{x.data(), y.data(), idx_.data(), g});
      } else {
        using Mean = AvgPoolForward<T, divisor, CountIncludePad>;
        kiln::detail::executor<D>::for_each(y.numel(), Mean{x.data(), y.data(), g});
        saved_ = ctx.grad;
      }
      in_ = x.extents();
      return y;
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) {
      if (Max && idx_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::MaxPool2d::backward: no saved indices; run forward with gradients first");
      if (!Max && !saved_ && dy.numel() != 0)
        throw Error("kiln::nn::AvgPool2d::backward: run forward with gradients enabled first");
      detail::check_backward_rows(Max ? "MaxPool2d" : "AvgPool2d", dy.size(0), in_[0]);
      Tensor<T, S, D> dx(in_, dy.device_index());
      const auto g = geometry(dy.size(0));
      if constexpr (Max) {
        if constexpr (std::is_same_v<D, Cpu>)
          kiln::detail::executor<D>::for_each(g.nc,
                                              MaxPoolBackwardPlanes<T, K, Stride, Padding, Dilation, tiled>{
                                                  dy.data(), idx_.data(), dx.data(), g},
                                              g.h * g.w);
        else
          kiln::detail::executor<D>::for_each(dx.numel(), MaxPoolBackward<T, K>{dy.data(), idx_.data(), dx.data(), g});
        idx_ = index_tensor();
      } else {
        using MeanBackward = AvgPoolBackward<T, divisor, CountIncludePad>;
        kiln::detail::executor<D>::for_each(dx.numel(), MeanBackward{dy.data(), dx.data(), g});
        saved_ = false;
      }
      return dx;
    }

   private:
    static constexpr index_t h = S::extents[2], w = S::extents[3];
    static constexpr index_t ho = output_shape::extents[2], wo = output_shape::extents[3];
    /// Some window reaches past the plane: into the padding, or (ceil mode) past the last row or column.
    static constexpr bool bounded = Padding > 0 || (ho - 1) * Stride - Padding + span > h ||
                                    (wo - 1) * Stride - Padding + span > w;
    /// The windows lie side by side inside the plane, each input in one (MaxPoolBackwardPlanes' gather).
    static constexpr bool tiled = !bounded && Stride == K && Dilation == 1;
    /// Some window reaches past the trailing padding (ceil mode): torch's count_include_pad leaves that out.
    static constexpr bool past_padding = (ho - 1) * Stride + K > h + 2 * Padding ||
                                         (wo - 1) * Stride + K > w + 2 * Padding;
    /// AvgPool2d's divisor where every window has the same one, else 0 (one per window: window_divisor).
    static constexpr index_t divisor = DivisorOverride > 0                              ? DivisorOverride
                                       : !bounded || (CountIncludePad && !past_padding) ? K * K
                                                                                        : 0;
    static PoolGeometry geometry(index_t n) {
      return {n * S::extents[1], h, w, K, Stride, Padding, ho, wo, Dilation};
    }
    using index_tensor = Tensor<window_index_t<K>, output_shape, D>;
    index_tensor idx_;  // the winner's tap per output (MaxPool2d, training only)
    Extents<S> in_{};
    bool saved_ = false;
  };
};
}  // namespace detail

/// Max over K x K windows (stride defaults to K, as torch.nn.MaxPool2d(K)); NaN propagates. CeilMode:
/// torch's ceil_mode=True (a last, partial window over the remaining rows and columns; its taps past the
/// input are left out). Dilation: torch's dilation, the window's taps Dilation apart; it comes after
/// CeilMode here (torch puts it before), so that code written before it kept its meaning.
/// Shapes: [N, C, H, W] -> [N, C, Ho, Wo], Ho = floor((H + 2 Padding - Dilation (K - 1) - 1) / Stride) +
/// 1 (ceil in ceil mode, less one if that last window would start at or past H + Padding); Wo alike.
/// Example: `MaxPool2d<3, 2, 1, true>` is torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True);
///          `MaxPool2d<3, 1, 0, false, 2>` is torch.nn.MaxPool2d(3, 1, 0, dilation=2).
template <index_t K, index_t Stride = K, index_t Padding = 0, bool CeilMode = false, index_t Dilation = 1>
struct MaxPool2d : detail::Pool2d<true, K, Stride, Padding, CeilMode, true, 0, Dilation> {};
/// Mean over K x K windows (stride defaults to K), as torch.nn.AvgPool2d with its arguments in torch's
/// order: CeilMode (ceil_mode), CountIncludePad (count_include_pad: divide by the window's taps inside the
/// input and its padding, else inside the input alone; a ceil-mode window is cut at the end of the
/// padding), DivisorOverride (divisor_override: every window's sum divided by it; 0 for none).
/// Shapes: as MaxPool2d's.
/// Example: `AvgPool2d<3, 2, 1, true, false>` is torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True,
/// count_include_pad=False).
template <index_t K, index_t Stride = K, index_t Padding = 0, bool CeilMode = false,
          bool CountIncludePad = true, index_t DivisorOverride = 0>
struct AvgPool2d : detail::Pool2d<false, K, Stride, Padding, CeilMode, CountIncludePad, DivisorOverride> {};

}  // namespace kiln::nn
