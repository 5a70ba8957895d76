/// Conv2d's shared host/device pieces: the geometry, im2col / col2im rows and the GEMM epilogues.
/// The CPU path runs them image by image (nn/detail/conv_cpu.hpp); CUDA over the whole batch.
#pragma once
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/nn/epilogue.hpp"

namespace kiln::nn::detail {

/// The geometry of one convolution: input [N, C, H, W], kernel K x K, stride, padding, dilation (the
/// taps K apart by `dilation`), C / groups input channels per group, output Ho x Wo.
struct ConvGeometry {
  index_t n, c, h, w, k, stride, pad, ho, wo, dilation = 1, groups = 1;
  KILN_HOST_DEVICE index_t pixels() const { return ho * wo; }             // P
  KILN_HOST_DEVICE index_t group_channels() const { return c / groups; }  // C / G
  KILN_HOST_DEVICE index_t patch() const {
    return group_channels() * k * k;
  }                                                                 // (C / G) K K: one group's rows
  KILN_HOST_DEVICE index_t columns() const { return n * ho * wo; }  // N P
  KILN_HOST_DEVICE index_t image() const { return c * h * w; }      // one input image
  KILN_HOST_DEVICE index_t group_image() const { return group_channels() * h * w; }  // one group of it
};

/// cols[(c, ki, kj), (n, oh, ow)] = x[n, c0 + c, oh s - pad + ki d, ow s - pad + kj d] (0 outside):
/// [(C / G) K K, N P] for the group whose first input channel is c0. One call per output row
/// (r, n, oh): the inner loop over ow has no divisions.
template <class T, index_t Stride>
struct Im2colRows {
  const T* x;
  T* cols;
  ConvGeometry g;
  index_t c0 = 0;
  static index_t count(const ConvGeometry& g) { return g.patch() * g.n * g.ho; }
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t r = i / (g.n * g.ho), rem = i - r * (g.n * g.ho), n = rem / g.ho, oh = rem - n * g.ho;
    const index_t c = r / (g.k * g.k), kk = r - c * g.k * g.k, ki = kk / g.k, kj = kk - ki * g.k;
    const index_t ih = oh * Stride - g.pad + ki * g.dilation;
    T* out = cols + r * g.columns() + n * g.pixels() + oh * g.wo;
    if (ih < 0 || ih >= g.h) {
      for (index_t ow = 0; ow < g.wo; ++ow) out[ow] = T(0);
      return;
    }
    const T* in = x + ((n * g.c + c0 + c) * g.h + ih) * g.w;
    const index_t shift = kj * g.dilation - g.pad;  // iw = ow s + shift
    if (Stride == 1 && g.pad == 0) {  // every tap inside: a plain copy
      for (index_t ow = 0; ow < g.wo; ++ow) out[ow] = in[ow + shift];
      return;
    }
    for (index_t ow = 0; ow < g.wo; ++ow) {
      const index_t iw = ow * Stride + shift;
      out[ow] = (iw >= 0 && iw < g.w) ? in[iw] : T(0);
    }
  }
  /// The group's images read, the columns written; no arithmetic.
  Traffic traffic(index_t) const {
    return {
        kiln::detail::bytes_of<T>(g.n * g.group_image()) + kiln::detail::bytes_of<T>(g.patch() * g.columns()),
        0};
  }
};

/// dx[n, c0 + c, ih, iw] = Σ over the kernel taps that read it of dcols[(c, ki, kj), (n, oh, ow)]: a
/// gather over one group's columns, so every input element is written once (deterministic, no atomics).
/// One call per input row of the group.
template <class T, index_t Stride>
struct Col2imRows {
  const T* dcols;
  T* dx;
  ConvGeometry g;
  index_t c0 = 0;
  static index_t count(const ConvGeometry& g) { return g.n * g.group_channels() * g.h; }
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t cg = g.group_channels();
    const index_t ih = i % g.h, c = (i / g.h) % cg, n = i / (g.h * cg);
    T* out = dx + ((n * g.c + c0 + c) * g.h + ih) * g.w;
    for (index_t iw = 0; iw < g.w; ++iw) {
      compute_t<T> acc = 0;
      for (index_t ki = 0; ki < g.k; ++ki) {
        const index_t th = ih + g.pad - ki * g.dilation;
        if (th < 0 || th % Stride != 0 || th / Stride >= g.ho) continue;
        const T* row = dcols + ((c * g.k + ki) * g.k) * g.columns() + n * g.pixels() + (th / Stride) * g.wo;
        for (index_t kj = 0; kj < g.k; ++kj) {
          const index_t tw = iw + g.pad - kj * g.dilation;
          if (tw < 0 || tw % Stride != 0 || tw / Stride >= g.wo) continue;
          acc += to_compute(row[kj * g.columns() + tw / Stride]);
        }
      }
      out[iw] = from_compute<T>(acc);
    }
  }
  /// The group's column gradients read, its image gradients written; one add per column element.
  Traffic traffic(index_t) const {
    return {
        kiln::detail::bytes_of<T>(g.patch() * g.columns()) + kiln::detail::bytes_of<T>(g.n * g.group_image()),
        static_cast<std::uint64_t>(g.patch() * g.columns())};
  }
};

/// y[n, f, :] = E(yt[f, n P : (n + 1) P] + b[f]): the GEMM's [F, N P] result into NCHW with the bias and
/// the activation (nn/epilogue.hpp); z[n, f, :] keeps the pre-activation when not null. yt may be z or y
/// itself (one image: the GEMM wrote NCHW already). One call per (n, f) plane. The GEMM's result may be
/// in a wider type S than the storage T (mixed precision on the CPU: float, rounded once here).
template <class T, class B, class E, class S = T>
struct ColumnsToNchw {
  const S* yt;
  const B* bias;  // null: no bias
  T* z;           // null: pre-activation not kept
  T* y;
  index_t f, p, np;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t ff = i % f, n = i / f;
    const S* src = yt + ff * np + n * p;
    T* zp = z ? z + i * p : nullptr;
    T* dst = y + i * p;
    const compute_t<T> b = bias ? static_cast<compute_t<T>>(to_compute(bias[ff])) : compute_t<T>(0);
    // `omp simd`: g++ -O2 (README.md's line) does not vectorise these loops by itself (src may be dst or
    // zp, element for element, which the simd loop allows).
    if (zp) {
      KILN_PRAGMA_OMP(simd)
      for (index_t q = 0; q < p; ++q) {
        const compute_t<T> v = to_compute(src[q]) + b;
        zp[q] = from_compute<T>(v);
        dst[q] = from_compute<T>(E::forward(v));
      }
    } else {
      KILN_PRAGMA_OMP(simd)
      for (index_t q = 0; q < p; ++q) dst[q] = from_compute<T>(E::forward(to_compute(src[q]) + b));
    }
  }
  /// The GEMM's result read, the bias read, y (and z) written; the add and the activation.
  Traffic traffic(index_t) const {
    const index_t n = f * np;
    return {kiln::detail::bytes_of<S>(n) + (bias ? kiln::detail::bytes_of<B>(f) : 0) + kiln::detail::bytes_of<T>(n) * (z ? 2 : 1),
            static_cast<std::uint64_t>(n) * ((bias ? 1 : 0) + (E::identity ? 0 : 1))};
  }
};

/// dyt[f, n P : (n + 1) P] = E'(dy[n, f, :], saved[n, f, :]): NCHW gradients through the activation into
/// the GEMM's [F, N P] layout (saved is ignored by the identity). One call per (n, f) plane. The result
/// may be in a wider type O than the storage T (mixed precision on the CPU: the GEMM's float operand).
template <class T, class E, class O = T>
struct NchwToColumns {
  const T* dy;
  const T* saved;
  O* dyt;
  index_t f, p, np;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t ff = i % f, n = i / f;
    const T* src = dy + i * p;
    O* dst = dyt + ff * np + n * p;
    if constexpr (E::identity && std::is_same_v<T, O>) {
      KILN_PRAGMA_OMP(simd)
      for (index_t q = 0; q < p; ++q) dst[q] = src[q];
    } else if constexpr (E::identity) {
      KILN_PRAGMA_OMP(simd)
      for (index_t q = 0; q < p; ++q) dst[q] = from_compute<O>(to_compute(src[q]));
    } else {
      const T* s = saved + i * p;
      KILN_PRAGMA_OMP(simd)
      for (index_t q = 0; q < p; ++q) dst[q] = from_compute<O>(E::backward(to_compute(src[q]), to_compute(s[q])));
    }
  }
  /// dy (and the saved value) read, the columns written; the derivative.
  Traffic traffic(index_t) const {
    const index_t n = f * np;
    return {kiln::detail::bytes_of<T>(n) * (E::identity ? 1 : 2) + kiln::detail::bytes_of<O>(n),
            E::identity ? 0 : static_cast<std::uint64_t>(n)};
  }
};

}  // namespace kiln::nn::detail

namespace kiln::nn::detail {

/// y = E(z + b[channel]) over NCHW in place (z may be y), one call per element: the epilogue after a
/// convolution that wrote NCHW itself (cuDNN). z keeps the pre-activation when it is not y.
template <class T, class B, class E>
struct ChannelBiasEpilogue {
  T* z;
  const B* bias;  // null: no bias
  T* y;
  index_t channels, pixels;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const compute_t<T> v =
        to_compute(z[i]) + (bias ? static_cast<compute_t<T>>(to_compute(bias[(i / pixels) % channels])) : compute_t<T>(0));
    if (z != y) z[i] = from_compute<T>(v);
    y[i] = from_compute<T>(E::forward(v));
  }
  Traffic traffic(index_t n) const {
    const index_t c = channels > 0 ? channels : 1;
    return bias_epilogue_traffic<T, B, E>(n / c, c, z, bias, y);
  }
};

/// y = E(acc + b[channel]) over NCHW from a wider accumulator (ConvTranspose2d's col2im sums in fp32 under
/// mixed precision), rounded to T once; z keeps the rounded pre-activation when not null.
template <class T, class A, class B, class E>
struct WideChannelBiasEpilogue {
  const A* acc;
  const B* bias;  // null: no bias
  T* z;           // null: pre-activation not kept
  T* y;
  index_t channels, pixels;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const compute_t<T> v =
        static_cast<compute_t<T>>(acc[i]) +
        (bias ? static_cast<compute_t<T>>(to_compute(bias[(i / pixels) % channels])) : compute_t<T>(0));
    if (z) z[i] = from_compute<T>(v);
    y[i] = from_compute<T>(E::forward(v));
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<A>(n) + kiln::detail::bytes_of<T>(n) * (z ? 2 : 1) +
                (bias ? kiln::detail::bytes_of<B>(channels) : 0),
            static_cast<std::uint64_t>(n) * ((bias ? 1 : 0) + (E::identity ? 0 : 1))};
  }
};

}  // namespace kiln::nn::detail
