/// ConvTranspose2d: the transposed 2-D convolution (the adjoint of Conv2d, as torch.nn.ConvTranspose2d).
#pragma once
#include <cmath>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/expr/cast.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/nn/detail/conv_functors.hpp"
#include "kiln/nn/detail/conv_transpose_cpu.hpp"
#include "kiln/nn/detail/weight_bias.hpp"
#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/matmul.hpp"
#include "kiln/tensor/tensor.hpp"

#if KILN_WITH_CUDNN
#include <memory>

#include "kiln/backend/cuda/cudnn.hpp"
#endif

namespace kiln::nn {

/// Transposed convolution with In input channels, Out output channels and a K x K kernel (stride,
/// padding, output padding, groups, optional bias, dilation), as torch.nn.ConvTranspose2d(In, Out, K,
/// stride, padding, output_padding, groups, bias, dilation), with its parameters in torch's order: the
/// gradient of Conv2d<Out, In, K, Stride, Padding, Dilation, Groups> with respect to its input, which
/// upsamples by Stride.
/// Shapes: [N, In, H, W] -> [N, Out, Ho, Wo],
///   Ho = (H - 1) Stride - 2 Padding + Dilation (K - 1) + OutputPadding + 1 (Wo alike).
/// OutputPadding (smaller than Stride or Dilation, as torch requires) adds rows and columns at the bottom
/// and right that no Padding crops, so that a Conv2d with the same Stride maps Ho back to H.
/// Parameters: weight [In, Out / Groups, K, K] (torch's layout), bias [Out]; PyTorch's initialisation
/// (bound 1/sqrt(Out / Groups K K)).
/// CPU: per image and group, one GEMM wᵀ x into columns and col2im into the output
/// (nn/detail/conv_transpose_cpu.hpp). CUDA: cuDNN's backward-data convolution (the forward pass),
/// forward convolution (dx) and backward filter (dw); without cuDNN, or where cuDNN has no algorithm,
/// cuBLAS GEMMs with col2im / im2col.
/// Followed by a pointwise activation (ReLU, GELU, ...: nn/activation.hpp) in a Sequential, the bias
/// and the activation are one epilogue.
/// Example: a decoder doubling 8 x 8 to 16 x 16:
///   Sequential<ConvTranspose2d<32, 16, 3, 2, 1, 1>, ReLU, ConvTranspose2d<16, 3, 4, 2, 1>, Sigmoid>
template <index_t In, index_t Out, index_t K, index_t Stride = 1, index_t Padding = 0,
          index_t OutputPadding = 0, index_t Groups = 1, bool Bias = true, index_t Dilation = 1>
struct ConvTranspose2d {
  static_assert(
      In > 0 && Out > 0 && K > 0 && Stride > 0 && Padding >= 0 && Dilation > 0,
      "kiln::nn::ConvTranspose2d<In, Out, K, Stride, Padding, OutputPadding, Groups, Bias, Dilation>: "
      "channels, kernel, stride and dilation must be positive, padding not negative");
  static_assert(
      OutputPadding >= 0 && (OutputPadding < Stride || OutputPadding < Dilation),
      "kiln::nn::ConvTranspose2d<In, Out, K, Stride, Padding, OutputPadding, ...>: the output padding "
      "(the sixth parameter, as in torch.nn.ConvTranspose2d) must be smaller than the stride or the "
      "dilation, as torch requires");
  static_assert(
      Groups > 0 && In % Groups == 0 && Out % Groups == 0,
      "kiln::nn::ConvTranspose2d<In, Out, K, Stride, Padding, OutputPadding, Groups, ...>: the groups "
      "must divide both In and Out (as torch.nn.ConvTranspose2d's)");
  /// The kernel's extent on the output: Dilation (K - 1) + 1.
  static constexpr index_t span = Dilation * (K - 1) + 1;
  /// The output extent for an input extent n (0 or less: the padding crops everything).
  static constexpr index_t extent(index_t n) { return (n - 1) * Stride - 2 * Padding + span + OutputPadding; }

  // >>> Stopped here? ConvTranspose2d takes [N, In, H, W] with static H and W, large enough that
  //     (H - 1) Stride + Dilation (K - 1) + OutputPadding + 1 exceeds twice the padding. <<<
  template <class S>
  static constexpr bool accepts = (S::rank == 4) && (S::extents[1] == In) && (S::extents[2] != dyn) &&
                                  (S::extents[3] != dyn) && (extent(S::extents[2]) > 0) &&
                                  (extent(S::extents[3]) > 0);
  template <class S>
  using output = Shape<S::extents[0], Out, extent(S::extents[2]), extent(S::extents[3])>;
  /// The least H (and W) whose output is not cropped away.
  static constexpr index_t least_extent() {
    index_t n = 1;
    while (extent(n) <= 0) ++n;
    return n;
  }
  /// What it takes where it is given S (for the error): [N, In, H, W], H and W S's (dyn for another
  /// rank), raised to the least that yields an output.
  template <class S>
  using expects = typename detail::with_channels<S, 4, In, least_extent()>::type;

  /// torch's repr: padding, dilation, output_padding and groups only when not the default (in that
  /// order), "bias=False" only without a bias.
  static std::string repr() {
    const auto pair = [](index_t v) { return "(" + std::to_string(v) + ", " + std::to_string(v) + ")"; };
    return "ConvTranspose2d(" + std::to_string(In) + ", " + std::to_string(Out) + ", kernel_size=" + pair(K) +
           ", stride=" + pair(Stride) + (Padding ? ", padding=" + pair(Padding) : std::string()) +
           (Dilation != 1 ? ", dilation=" + pair(Dilation) : std::string()) +
           (OutputPadding ? ", output_padding=" + pair(OutputPadding) : std::string()) +
           (Groups != 1 ? ", groups=" + std::to_string(Groups) : std::string()) +
           (Bias ? "" : ", bias=False") + ")";
  }

  template <class S, class P>
  class module : public detail::WeightAndBias<P, In, Out / Groups * K * K, Out, Bias> {
    using base = detail::WeightAndBias<P, In, Out / Groups * K * K, Out, Bias>;

   public:
    using base::bias, base::bias_grad, base::weight, base::weight_grad, base::weight_operand;
    using typename base::D;
    using typename base::M;
    using typename base::T;
    using input_shape = S;
    using output_shape = output<S>;
    static constexpr index_t H = S::extents[2], W = S::extents[3];
    static constexpr index_t Ho = output_shape::extents[2], Wo = output_shape::extents[3];
    static constexpr index_t Patch =
        Out / Groups * K * K;                   // one input channel's weights: the weight is [In, Patch]
    static constexpr index_t Ig = In / Groups;  // input channels per group

    /// torch's: kaiming_uniform(a = sqrt(5)) over fan_in = weight.size(1) K K, which is the bound
    /// 1/sqrt((Out / Groups) K K), and the bias within the same bound.
    void reset_parameters(Generator& g) { this->reset_uniform(g, Patch); }
    /// weight [In, Out / G, K, K] (the GEMMs' [In, Patch]), bias [Out].
    std::vector<ParameterInfo> parameters() const { return this->weight_and_bias({In, Out / Groups, K, K}); }
    std::string name() const { return repr(); }

    /// y = convᵀ(x, W) + b  // [N, In, H, W] -> [N, Out, Ho, Wo]
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      return forward_fused<epilogue::Identity>(x, ctx);
    }
    /// dW += Σ x im2col(dY)ᵀ, db += Σ dY, dx = conv(dY, W) (empty when input_grad is false).
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      return backward_fused<epilogue::Identity>(dy, input_grad);
    }

    /// y = E(convᵀ(x, W) + b): the bias and the activation in one pass after the sums (nn/epilogue.hpp).
    static constexpr bool fuses_epilogue = true;
    template <class E>
    Tensor<T, output_shape, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      const auto g = geometry(x.size(0));
      Extents<output_shape> e = {};
      e[0] = x.size(0);
      Tensor<T, output_shape, D> y(e, x.device_index());
      Tensor<T, output_shape, D> z =
          E::saves_output ? Tensor<T, output_shape, D>() : Tensor<T, output_shape, D>(e, x.device_index());
      const M* b = nullptr;
      if constexpr (Bias) b = bias().data();
      if constexpr (std::is_same_v<D, Cpu>) {
        detail::conv_transpose2d_forward_cpu<E, Stride>(x.data(), weight_operand().data(), b, z.data(),
                                                        y.data(), g, In);
      } else {
        bool ran = false;
#if KILN_WITH_CUDNN
        if (x.size(0) == 0) {
          ran = true;
        } else if (const auto* p =
                       plan(x.size(0), x.device_index())) {  // cuDNN's data gradient; then bias + E
          T* out = E::saves_output ? y.data() : z.data();
          p->backward_data(weight_operand().data(), x.data(), out);
          if constexpr (!E::identity || Bias)
            kiln::detail::executor<D>::for_each(
                y.numel(), detail::ChannelBiasEpilogue<T, M, E>{out, b, y.data(), Out, Ho * Wo});
          ran = true;
        }
#endif
        if (!ran) forward_im2col<E>(x, g, b, z, y);
      }
      x_ = ctx.grad ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
      if constexpr (!E::identity)
        saved_ = ctx.grad ? (E::saves_output ? y : z) : Tensor<T, output_shape, D>();
      return y;
    }
    /// dZ = E'(dY); db += Σ dZ; dW += Σ x im2col(dZ)ᵀ; dx = conv(dZ, W).
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      if (x_.empty() && dy.numel() != 0)
        throw Error(
            "kiln::nn::ConvTranspose2d::backward: no saved input; run forward with gradients enabled first");
      if (!E::identity && saved_.empty() && dy.numel() != 0)
        throw Error(
            "kiln::nn::ConvTranspose2d::backward: no saved activation; run forward with gradients enabled "
            "first");
      detail::check_backward_rows("ConvTranspose2d", dy.size(0), x_.size(0));
      const auto g = geometry(dy.size(0));
      Tensor<T, S, D> dx = input_grad ? Tensor<T, S, D>(x_.extents(), dy.device_index()) : Tensor<T, S, D>();
      if constexpr (std::is_same_v<D, Cpu>) {
        M* gb = nullptr;
        if constexpr (Bias) gb = bias_grad().data();
        detail::conv_transpose2d_backward_cpu<E, Stride>(x_.data(), dy.data(), saved_.data(),
                                                         weight_operand().data(), weight_grad().data(), gb,
                                                         dx.data(), g, In);
      } else if (dy.numel() > 0) {
        Tensor<T, output_shape, D> dz = E::identity
                                            ? Tensor<T, output_shape, D>(dy)
                                            : Tensor<T, output_shape, D>(dy.extents(), dy.device_index());
        if constexpr (!E::identity)
          kiln::detail::executor<D>::for_each(
              dy.numel(), detail::EpilogueGrad<T, E>{dy.data(), saved_.data(), dz.data()});
        if constexpr (Bias) add_bias_grad(dz);
        bool ran = false;
#if KILN_WITH_CUDNN
        if (const auto* p = plan(dy.size(0), dy.device_index())) {  // cuDNN: the filter, then the data
          if constexpr (std::is_same_v<T, M>) {
            p->backward_filter(dz.data(), x_.data(), weight_grad().data());
          } else {  // mixed: cuDNN's weight gradient in T (as autocast's), added to the fp32 arena
            Tensor<T, Shape<In, Patch>, D> gw_low(Extents<Shape<In, Patch>>{}, dy.device_index());
            p->backward_filter(dz.data(), x_.data(), gw_low.data(), 0.0);
            auto gw = weight_grad();
            gw += cast<M>(gw_low);
          }
          if (input_grad) p->forward(dz.data(), weight_operand().data(), dx.data());
          ran = true;
        }
#endif
        if (!ran) backward_im2col(dz, g, input_grad, dx);
      }
      x_ = Tensor<T, S, D>();
      saved_ = Tensor<T, output_shape, D>();
      return dx;
    }

   private:
    /// db += Σ over images and pixels of dZ, per channel, accumulated in compute_t<T> (CUDA).
    void add_bias_grad(Tensor<T, output_shape, D>& dz) {
      auto planes = Tensor<T, Shape<dyn, Ho * Wo>, D>::from_blob(
          dz.data(), Extents<Shape<dyn, Ho * Wo>>(dz.size(0) * Out), dz.device_index());
      auto per_image = sum<1>(planes);  // [N Out]
      auto rows = Tensor<typename decltype(per_image)::element_type, Shape<dyn, Out>, D>::from_blob(
          per_image.data(), Extents<Shape<dyn, Out>>(dz.size(0)), dz.device_index());
      auto gb = bias_grad();
      gb += sum<0>(rows);
    }
    /// x as the GEMMs' columns, [In, N H W] (CUDA without cuDNN).
    Tensor<T, Shape<In, dyn>, D> columns_of(const Tensor<T, S, D>& x) const {
      Extents<Shape<In, dyn>> e;
      e[1] = x.size(0) * H * W;
      Tensor<T, Shape<In, dyn>, D> xt(e, x.device_index());
      kiln::detail::executor<D>::for_each(x.size(0) * In, detail::NchwToColumns<T, epilogue::Identity>{
                                                              x.data(), nullptr, xt.data(), In, H * W, e[1]});
      return xt;
    }
    /// Per group, dcols = W_gᵀ x_g over the batch and col2im, summed in compute_t<T>; then one pass for
    /// the bias and the activation, rounding once (CUDA without cuDNN).
    template <class E>
    void forward_im2col(const Tensor<T, S, D>& x, const detail::ConvGeometry& g, const M* b,
                        Tensor<T, output_shape, D>& z, Tensor<T, output_shape, D>& y) {
      using A = compute_t<T>;
      const auto xt = columns_of(x);
      Tensor<A, output_shape, D> sums(y.extents(), x.device_index());
      Extents<Shape<Patch, dyn>> ce;
      ce[1] = g.columns();
      Tensor<A, Shape<Patch, dyn>, D> dcols(ce, x.device_index());  // [(Out / G) K K, N H W]
      for (index_t grp = 0; grp < Groups; ++grp) {
        matmul_into(dcols, transposed(group_weight(weight_operand(), grp)), group_rows(xt, grp));
        using Col2im = detail::Col2imRows<A, Stride>;
        kiln::detail::executor<D>::for_each(Col2im::count(g),
                                            Col2im{dcols.data(), sums.data(), g, grp * (Out / Groups)}, g.w);
      }
      kiln::detail::executor<D>::for_each(y.numel(), detail::WideChannelBiasEpilogue<T, A, M, E>{
                                                         sums.data(), b, z.data(), y.data(), Out, Ho * Wo});
    }
    /// Per group, cols = im2col(dZ) ([(Out / G) K K, N H W]), dW_g += x_g colsᵀ and dx_g = W_g cols (CUDA
    /// without cuDNN).
    void backward_im2col(const Tensor<T, output_shape, D>& dz, const detail::ConvGeometry& g, bool input_grad,
                         Tensor<T, S, D>& dx) {
      const auto xt = columns_of(x_);
      Extents<Shape<In, dyn>> te;
      te[1] = g.columns();
      Tensor<T, Shape<In, dyn>, D> dxt =
          input_grad ? Tensor<T, Shape<In, dyn>, D>(te, dz.device_index()) : Tensor<T, Shape<In, dyn>, D>();
      Extents<Shape<Patch, dyn>> ce;
      ce[1] = g.columns();
      Tensor<T, Shape<Patch, dyn>, D> cols(ce, dz.device_index());
      for (index_t grp = 0; grp < Groups; ++grp) {
        using Im2col = detail::Im2colRows<T, Stride>;
        kiln::detail::executor<D>::for_each(Im2col::count(g),
                                            Im2col{dz.data(), cols.data(), g, grp * (Out / Groups)}, g.wo);
        auto gw = group_weight(weight_grad(), grp);
        matmul_into(gw, group_rows(xt, grp), transposed(cols), 1.0f, 1.0f);  // [In / G, (Out / G) K K]
        if (input_grad) {
          auto dxg = group_rows(dxt, grp);
          matmul_into(dxg, group_weight(weight_operand(), grp), cols);  // [In / G, N H W]
        }
      }
      if (input_grad)
        kiln::detail::executor<D>::for_each(
            dz.size(0) * In, detail::ColumnsToNchw<T, M, epilogue::Identity>{
                                 dxt.data(), nullptr, nullptr, dx.data(), In, H * W, g.columns()});
    }
    /// Group grp's rows of a weight-shaped tensor, [In / G, (Out / G) K K] (a view).
    template <class V>
    static Tensor<V, Shape<Ig, Patch>, D> group_weight(Tensor<V, Shape<In, Patch>, D> w, index_t grp) {
      return Tensor<V, Shape<Ig, Patch>, D>::from_blob(w.data() + grp * Ig * Patch, {}, w.device_index());
    }
    /// Group grp's rows of a [In, N H W] tensor, [In / G, N H W] (a view).
    template <class V>
    static Tensor<V, Shape<Ig, dyn>, D> group_rows(const Tensor<V, Shape<In, dyn>, D>& t, index_t grp) {
      Extents<Shape<Ig, dyn>> e;
      e[1] = t.size(1);
      return Tensor<V, Shape<Ig, dyn>, D>::from_blob(const_cast<V*>(t.data()) + grp * Ig * t.size(1), e,
                                                     t.device_index());
    }

#if KILN_WITH_CUDNN
    /// Whether the convolution cuDNN is given (from [N, Out, Ho, Wo] to [N, In, H, W]) has exactly this
    /// input's extent: not when OutputPadding reaches the stride (allowed below the dilation), where it
    /// would have more; then the im2col path runs.
    static constexpr bool cudnn_shape =
        (Ho + 2 * Padding - span) / Stride + 1 == H && (Wo + 2 * Padding - span) / Stride + 1 == W;
    /// cuDNN's descriptors and algorithms for that convolution at this batch size and device (rebuilt when
    /// either changes), or null when cuDNN cannot run it.
    const kiln::cuda::ConvPlan<T>* plan(index_t n, int device) {
      if constexpr (!cudnn_shape) {
        (void)n, (void)device;
        return nullptr;
      } else {
        if (!plan_ || plan_->batch() != n || plan_->device() != device)
          plan_ = std::make_shared<kiln::cuda::ConvPlan<T>>(n, Out, Ho, Wo, In, K, Stride, Padding, Dilation,
                                                            Groups, device);
        return plan_->usable() ? plan_.get() : nullptr;
      }
    }
    std::shared_ptr<kiln::cuda::ConvPlan<T>> plan_;
#endif
    /// The adjoint convolution's geometry: input [N, Out, Ho, Wo], output [N, In, H, W].
    static detail::ConvGeometry geometry(index_t n) {
      return {n, Out, Ho, Wo, K, Stride, Padding, H, W, Dilation, Groups};
    }

    Tensor<T, S, D> x_;                 // saved input (training only)
    Tensor<T, output_shape, D> saved_;  // the fused activation's output or input (training only)
  };
};

}  // namespace kiln::nn
