/// Conv2d: 2-D convolution (cross-correlation, as torch.nn.Conv2d) through im2col + one large GEMM.
#pragma once
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/matmul.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// The geometry of one convolution: input [N, C, H, W], kernel K x K, stride, padding, output Ho x Wo.
struct ConvGeometry {
  index_t n, c, h, w, k, stride, pad, ho, wo;
  KILN_HOST_DEVICE index_t pixels() const { return ho * wo; }       // P
  KILN_HOST_DEVICE index_t patch() const { return c * k * k; }      // C K K
  KILN_HOST_DEVICE index_t columns() const { return n * ho * wo; }  // N P
};

/// cols[(c, ki, kj), (n, oh, ow)] = x[n, c, oh s - pad + ki, ow s - pad + kj] (0 outside): [CKK, N P].
/// One call per output row (r, n, oh): the inner loop over ow has no divisions.
template <class T, index_t Stride>
struct Im2colRows {
  const T* x;
  T* cols;
  ConvGeometry g;
  static index_t count(const ConvGeometry& g) { return g.patch() * g.n * g.ho; }
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t r = i / (g.n * g.ho), rem = i - r * (g.n * g.ho), n = rem / g.ho, oh = rem - n * g.ho;
    const index_t c = r / (g.k * g.k), kk = r - c * g.k * g.k, ki = kk / g.k, kj = kk - ki * g.k;
    const index_t ih = oh * Stride - g.pad + ki;
    T* out = cols + r * g.columns() + n * g.pixels() + oh * g.wo;
    if (ih < 0 || ih >= g.h) {
      for (index_t ow = 0; ow < g.wo; ++ow) out[ow] = T(0);
      return;
    }
    const T* in = x + ((n * g.c + c) * g.h + ih) * g.w;
    for (index_t ow = 0; ow < g.wo; ++ow) {
      const index_t iw = ow * Stride - g.pad + kj;
      out[ow] = (iw >= 0 && iw < g.w) ? in[iw] : T(0);
    }
  }
};

/// dx[n, c, ih, iw] = Σ over the kernel taps that read it of dcols[(c, ki, kj), (n, oh, ow)]: a gather,
/// so every input element is written once (deterministic, no atomics). One call per input row.
template <class T, index_t Stride>
struct Col2imRows {
  const T* dcols;
  T* dx;
  ConvGeometry g;
  static index_t count(const ConvGeometry& g) { return g.n * g.c * g.h; }
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t ih = i % g.h, c = (i / g.h) % g.c, n = i / (g.h * g.c);
    T* out = dx + i * g.w;
    for (index_t iw = 0; iw < g.w; ++iw) {
      compute_t<T> acc = 0;
      for (index_t ki = 0; ki < g.k; ++ki) {
        const index_t th = ih + g.pad - ki;
        if (th < 0 || th % Stride != 0 || th / Stride >= g.ho) continue;
        const T* row = dcols + ((c * g.k + ki) * g.k) * g.columns() + n * g.pixels() + (th / Stride) * g.wo;
        for (index_t kj = 0; kj < g.k; ++kj) {
          const index_t tw = iw + g.pad - kj;
          if (tw < 0 || tw % Stride != 0 || tw / Stride >= g.wo) continue;
          acc += to_compute(row[kj * g.columns() + tw / Stride]);
        }
      }
      out[iw] = from_compute<T>(acc);
    }
  }
};

/// y[n, f, :] = yt[f, n P : (n + 1) P] (+ b[f]): the GEMM's [F, N P] result into NCHW, bias fused.
/// One call per (n, f) plane.
template <class T, class B>
struct ColumnsToNchw {
  const T* yt;
  const B* bias;  // null: no bias
  T* y;
  index_t f, p, np;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t ff = i % f, n = i / f;
    const T* src = yt + ff * np + n * p;
    T* dst = y + i * p;
    const compute_t<T> b = bias ? static_cast<compute_t<T>>(to_compute(bias[ff])) : compute_t<T>(0);
    for (index_t q = 0; q < p; ++q) dst[q] = from_compute<T>(to_compute(src[q]) + b);
  }
};
/// dyt[f, n P : (n + 1) P] = dy[n, f, :]: NCHW gradients into the GEMM's [F, N P] layout; one call per plane.
template <class T>
struct NchwToColumns {
  const T* dy;
  T* dyt;
  index_t f, p, np;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t ff = i % f, n = i / f;
    const T* src = dy + i * p;
    T* dst = dyt + ff * np + n * p;
    for (index_t q = 0; q < p; ++q) dst[q] = src[q];
  }
};
}  // namespace detail

/// Convolution with In input channels, Out output channels and a K x K kernel (stride, zero padding,
/// optional bias), as torch.nn.Conv2d(In, Out, K, stride, padding).
/// Shapes: [N, In, H, W] -> [N, Out, (H + 2 Padding - K) / Stride + 1, (W + 2 Padding - K) / Stride + 1].
/// Parameters: weight [Out, In, K, K], bias [Out]; PyTorch's initialisation (bound 1/sqrt(In K K)).
/// The whole batch is one GEMM: [Out, In K K] x [In K K, N Ho Wo] (large matrices even for 6 channels).
/// Example:  kiln::nn::Sequential<kiln::nn::Conv2d<3, 6, 5>, kiln::nn::ReLU, kiln::nn::MaxPool2d<2>, ...>
template <index_t In, index_t Out, index_t K, index_t Stride = 1, index_t Padding = 0, bool Bias = true>
struct Conv2d {
  static_assert(In > 0 && Out > 0 && K > 0 && Stride > 0 && Padding >= 0,
                "kiln::nn::Conv2d<In, Out, K, Stride, Padding>: channels, kernel and stride must be positive");

  template <class S>
  static constexpr bool accepts = S::rank == 4 && S::extents[1] == In && S::extents[2] != dyn &&
                                  S::extents[3] != dyn && S::extents[2] + 2 * Padding >= K &&
                                  S::extents[3] + 2 * Padding >= K;
  template <class S>
  using output = Shape<S::extents[0], Out, (S::extents[2] + 2 * Padding - K) / Stride + 1,
                       (S::extents[3] + 2 * Padding - K) / Stride + 1>;

  template <class S, class P>
  class module {
   public:
    using T = typename P::precision::storage;
    using M = typename P::precision::master;
    using D = typename P::device;
    using input_shape = S;
    using output_shape = output<S>;
    static constexpr index_t H = S::extents[2], W = S::extents[3];
    static constexpr index_t Ho = output_shape::extents[2], Wo = output_shape::extents[3];
    static constexpr index_t Patch = In * K * K;
    static constexpr index_t parameter_count = Out * Patch + (Bias ? Out : 0);

    void bind(M* params, M* grads, int device) { p_ = params, g_ = grads, device_ = device; }
    void reset_parameters(Generator& g) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(Patch));
      std::vector<M> v(static_cast<std::size_t>(parameter_count));
      detail::uniform_fill(v, bound, g);
      weight().copy_from(std::span<const M>(v.data(), Out * Patch));
      if constexpr (Bias) bias().copy_from(std::span<const M>(v.data() + Out * Patch, Out));
    }
    /// The weight as the GEMM sees it: [Out, In K K] (the same memory as PyTorch's [Out, In, K, K]).
    Tensor<M, Shape<Out, Patch>, D> weight() const { return Tensor<M, Shape<Out, Patch>, D>::from_blob(p_, {}, device_); }
    Tensor<M, Shape<Out>, D> bias() const { return Tensor<M, Shape<Out>, D>::from_blob(p_ + Out * Patch, {}, device_); }
    Tensor<M, Shape<Out, Patch>, D> weight_grad() const {
      return Tensor<M, Shape<Out, Patch>, D>::from_blob(g_, {}, device_);
    }
    Tensor<M, Shape<Out>, D> bias_grad() const { return Tensor<M, Shape<Out>, D>::from_blob(g_ + Out * Patch, {}, device_); }
    std::vector<ParameterInfo> parameters() const {
      std::vector<ParameterInfo> p{{"weight", 0, Out * Patch, {Out, In, K, K}}};
      if constexpr (Bias) p.push_back({"bias", Out * Patch, Out, {Out}});
      return p;
    }
    std::string name() const {
      return "Conv2d(" + std::to_string(In) + ", " + std::to_string(Out) + ", kernel_size=(" + std::to_string(K) +
             ", " + std::to_string(K) + "), stride=(" + std::to_string(Stride) + ", " + std::to_string(Stride) +
             "), padding=(" + std::to_string(Padding) + ", " + std::to_string(Padding) + "))";
    }

    /// im2col, one GEMM, then NCHW + bias: three passes.  // [N, In, H, W] -> [N, Out, Ho, Wo]
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      const auto g = geometry(x.size(0));
      auto cols = im2col(x, g);                       // [In K K, N Ho Wo]
      auto yt = matmul(weight(), cols);               // [Out, N Ho Wo]
      Extents<output_shape> e = {};
      e[0] = x.size(0);
      Tensor<T, output_shape, D> y(e, x.device_index());
      kiln::detail::executor<D>::for_each(
          x.size(0) * Out, detail::ColumnsToNchw<T, M>{yt.data(), Bias ? bias().data() : nullptr, y.data(), Out, Ho * Wo,
                                                  g.columns()});
      x_ = ctx.grad ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
      return y;
    }
    /// dW += dYt colsᵀ, db += Σ dY, dx = col2im(Wᵀ dYt).  // [N, Out, Ho, Wo] -> [N, In, H, W]
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) {
      if (x_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::Conv2d::backward: no saved input; run forward with gradients enabled first");
      const auto g = geometry(dy.size(0));
      Extents<Shape<Out, dyn>> te;
      te[1] = g.columns();
      Tensor<T, Shape<Out, dyn>, D> dyt(te, dy.device_index());  // [Out, N Ho Wo]
      kiln::detail::executor<D>::for_each(
          dy.size(0) * Out, detail::NchwToColumns<T>{dy.data(), dyt.data(), Out, Ho * Wo, g.columns()});
      if constexpr (Bias) {
        auto gb = bias_grad();
        gb += sum<1>(dyt);  // [Out]
      }
      {
        auto cols = im2col(x_, g);  // recomputed: keeping only x saves In K K times the memory
        auto gw = weight_grad();
        matmul_into(gw, dyt, transposed(cols), 1.0f, 1.0f);  // [Out, In K K]
      }
      auto dcols = matmul(transposed(weight()), dyt);  // [In K K, N Ho Wo]
      Tensor<T, S, D> dx(x_.extents(), dy.device_index());
      using Col2im = detail::Col2imRows<T, Stride>;
      kiln::detail::executor<D>::for_each(Col2im::count(g), Col2im{dcols.data(), dx.data(), g});
      x_ = Tensor<T, S, D>();
      return dx;
    }

   private:
    static detail::ConvGeometry geometry(index_t n) { return {n, In, H, W, K, Stride, Padding, Ho, Wo}; }
    Tensor<T, Shape<Patch, dyn>, D> im2col(const Tensor<T, S, D>& x, const detail::ConvGeometry& g) const {
      Extents<Shape<Patch, dyn>> ce;
      ce[1] = g.columns();
      Tensor<T, Shape<Patch, dyn>, D> cols(ce, x.device_index());
      using Im2col = detail::Im2colRows<T, Stride>;
      kiln::detail::executor<D>::for_each(Im2col::count(g), Im2col{x.data(), cols.data(), g});
      return cols;
    }

    M* p_ = nullptr;
    M* g_ = nullptr;
    int device_ = 0;
    Tensor<T, S, D> x_;  // saved input (training only)
  };
};

}  // namespace kiln::nn
