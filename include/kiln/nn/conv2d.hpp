/// Conv2d: 2-D convolution (cross-correlation, as torch.nn.Conv2d) through im2col + GEMM.
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
#include "kiln/nn/detail/conv_cpu.hpp"
#include "kiln/nn/detail/conv_functors.hpp"
#include "kiln/nn/detail/weight_bias.hpp"
#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/nn/padding.hpp"
#include "kiln/ops/matmul.hpp"
#include "kiln/tensor/tensor.hpp"

#if KILN_WITH_CUDNN
#include <memory>

#include "kiln/backend/cuda/cudnn.hpp"
#endif

namespace kiln::nn {

/// Conv2d's Padding for torch's padding='same': the output as large as the input (stride 1).
/// Example: `Conv2d<16, 16, 3, 1, kiln::nn::padding_same>`.
inline constexpr index_t padding_same = -1;

/// Convolution with In input channels, Out output channels and a K x K kernel (stride, padding, dilation,
/// groups, optional bias, padding mode), as torch.nn.Conv2d(In, Out, K, stride, padding, dilation, groups,
/// bias, padding_mode), with its parameters in torch's order.
/// Shapes: [N, In, H, W] -> [N, Out, Ho, Wo], Ho = (H + 2 Padding - Dilation (K - 1) - 1) / Stride + 1
/// (Wo alike). Padding = padding_same (torch's padding='same', stride 1) pads Dilation (K - 1) in all:
/// half of it on the top and left, the rest (one more for an even kernel span) on the bottom and right,
/// as torch: Ho = H, Wo = W.
/// Groups: the channels in Groups groups, each group's Out / Groups filters reading its In / Groups
/// channels (Groups = In: depthwise).
/// Mode: what the padding reads (nn/padding.hpp): zeros, or PaddingMode::reflect (Padding less than H and
/// W), replicate or circular (Padding at most H and W), which pad the input into a copy first (as does
/// padding_same for an even kernel span, whose padding differs from side to side).
/// Parameters: weight [Out, In / Groups, K, K], bias [Out]; PyTorch's initialisation (bound
/// 1/sqrt(In / Groups K K)).
/// CPU: one GEMM per image and group, [Out / G, (In / G) K K] x [(In / G) K K, Ho Wo], columns built in
/// cache and the result written NCHW (nn/detail/conv_cpu.hpp). CUDA: cuDNN (backend/cuda/cudnn.hpp;
/// without cuDNN, im2col and one cuBLAS GEMM per group over the batch).
/// Followed by a pointwise activation (ReLU, GELU, ...: nn/activation.hpp) in a Sequential, the bias
/// and the activation are one epilogue.
/// Example:  kiln::nn::Sequential<kiln::nn::Conv2d<3, 6, 5>, kiln::nn::ReLU, kiln::nn::MaxPool2d<2>, ...>
///           Conv2d<3, 16, 3, 1, 1, 1, 1, true, PaddingMode::reflect> is torch's padding_mode='reflect'.
template <index_t In, index_t Out, index_t K, index_t Stride = 1, index_t Padding = 0, index_t Dilation = 1,
          index_t Groups = 1, bool Bias = true, PaddingMode Mode = PaddingMode::zeros>
struct Conv2d {
  static_assert(
      In > 0 && Out > 0 && K > 0 && Stride > 0 && (Padding >= 0 || Padding == padding_same),
      "kiln::nn::Conv2d<In, Out, K, Stride, Padding, Dilation, Groups, Bias, Mode>: channels, kernel and "
      "stride must be positive, padding not negative (or kiln::nn::padding_same)");
  static_assert(
      Dilation > 0,
      "kiln::nn::Conv2d<In, Out, K, Stride, Padding, Dilation, Groups, Bias, Mode>: the dilation must be "
      "positive (the sixth parameter is the dilation, as in torch.nn.Conv2d; without a bias: "
      "Conv2d<In, Out, K, Stride, Padding, 1, 1, false>)");
  static_assert(
      Groups > 0 && In % (Groups > 0 ? Groups : 1) == 0 && Out % (Groups > 0 ? Groups : 1) == 0,
      "kiln::nn::Conv2d<In, Out, K, Stride, Padding, Dilation, Groups, Bias, Mode>: the groups must divide "
      "both In and Out (as torch.nn.Conv2d's)");
  /// Whether the arguments pass the checks above; a Sequential infers nothing past a Conv2d whose do not
  /// (their error alone, no division by a zero stride after it).
  static constexpr bool params_ok =
      In > 0 && Out > 0 && K > 0 && Stride > 0 && (Padding >= 0 || Padding == padding_same) && Dilation > 0 &&
      Groups > 0 && In % (Groups > 0 ? Groups : 1) == 0 && Out % (Groups > 0 ? Groups : 1) == 0;
  template <class S>
  static constexpr bool failed = !params_ok;
  /// The kernel's extent on the input: Dilation (K - 1) + 1.
  static constexpr index_t span = Dilation * (K - 1) + 1;
  static_assert(Padding != padding_same || Stride == 1,
                "kiln::nn::Conv2d: padding_same needs stride 1, as torch's padding='same'");
  /// The padding on the top and left: Padding, or for padding_same (Dilation (K - 1)) / 2.
  static constexpr index_t pad = Padding == padding_same ? Dilation * (K - 1) / 2 : Padding;
  /// The padding on the bottom and right: Padding, or for padding_same the rest of Dilation (K - 1).
  static constexpr index_t pad_end = Padding == padding_same ? Dilation * (K - 1) - pad : Padding;

  // >>> Stopped here? Conv2d takes [N, In, H, W] with static H and W, padded at least as large as the
  //     kernel's span; PaddingMode::reflect needs the padding smaller than H and W, circular at most. <<<
  template <class S>
  static constexpr bool accepts =
      (S::rank == 4) && (S::extents[1] == In) && (S::extents[2] != dyn) && (S::extents[3] != dyn) &&
      (S::extents[2] + pad + pad_end >= span) &&
      (S::extents[3] + pad + pad_end >= span) && detail::padding_fits<Mode>(pad, pad_end, S::extents[2]) &&
      detail::padding_fits<Mode>(pad, pad_end, S::extents[3]);
  template <class S>
  using output = Shape<S::extents[0], Out, (S::extents[2] + pad + pad_end - span) / Stride + 1,
                       (S::extents[3] + pad + pad_end - span) / Stride + 1>;
  /// The least H (and W) that the padded kernel fits (and, for Mode, the padding).
  static constexpr index_t least_extent() {
    index_t n = 1;
    while (n + pad + pad_end < span || !detail::padding_fits<Mode>(pad, pad_end, n)) ++n;
    return n;
  }
  /// What it takes where it is given S (for the error): [N, In, H, W], H and W S's (dyn for another
  /// rank), raised to the least the kernel fits.
  template <class S>
  using expects = typename detail::with_channels<S, 4, In, least_extent()>::type;

  /// torch's repr: padding, dilation and groups only when not the default, "bias=False" only without
  /// a bias, the padding mode only when not zeros.
  static std::string repr() {
    const auto pair = [](index_t v) { return "(" + std::to_string(v) + ", " + std::to_string(v) + ")"; };
    constexpr const char* modes[] = {"zeros", "reflect", "replicate", "circular"};
    return "Conv2d(" + std::to_string(In) + ", " + std::to_string(Out) + ", kernel_size=" + pair(K) +
           ", stride=" + pair(Stride) +
           (Padding == padding_same ? std::string(", padding=same")
            : Padding               ? ", padding=" + pair(Padding)
                                    : std::string()) +
           (Dilation != 1 ? ", dilation=" + pair(Dilation) : std::string()) +
           (Groups != 1 ? ", groups=" + std::to_string(Groups) : std::string()) +
           (Bias ? "" : ", bias=False") +
           (Mode != PaddingMode::zeros ? std::string(", padding_mode=") + modes[static_cast<int>(Mode)]
                                       : "") +
           ")";
  }

  /// The convolution proper, with the same zero padding on every side (and, for another Mode or an
  /// uneven padding_same, on the padded input: padded_module).
  template <class S, class P>
  class zero_padded_module : public detail::WeightAndBias<P, Out, In / Groups * K * K, Out, Bias> {
    static_assert(pad == pad_end,
                  "kiln::nn::Conv2d::zero_padded_module: an uneven padding is padded_module's");
    using base = detail::WeightAndBias<P, Out, In / Groups * K * K, Out, Bias>;

   public:
    using base::bias, base::bias_grad, base::weight, base::weight_grad, base::weight_operand;
    using typename base::D;
    using typename base::M;
    using typename base::T;
    using input_shape = S;
    using output_shape = output<S>;
    static constexpr index_t H = S::extents[2], W = S::extents[3];
    static constexpr index_t Ho = output_shape::extents[2], Wo = output_shape::extents[3];
    static constexpr index_t Patch = In / Groups * K * K;  // one filter's weights: the weight is [Out, Patch]
    static constexpr index_t Fg = Out / Groups;            // filters per group
    /// The CPU's im2col with every size a constant (no dilation, one group).
    using fixed_geometry = std::conditional_t<Dilation == 1 && Groups == 1,
                                              detail::FixedGeometry<In, H, W, K, Ho, Wo, Stride, pad>, void>;

    /// PyTorch's: weight and bias U(-b, b), b = 1/sqrt((In / G) K K).
    void reset_parameters(Generator& g) { this->reset_uniform(g, Patch); }
    /// weight [Out, In / G, K, K] (the GEMMs' [Out, Patch]), bias [Out].
    std::vector<ParameterInfo> parameters() const { return this->weight_and_bias({Out, In / Groups, K, K}); }
    std::string name() const { return repr(); }

    /// y = conv(x, W) + b  // [N, In, H, W] -> [N, Out, Ho, Wo]
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      return forward_fused<epilogue::Identity>(x, ctx);
    }
    /// dW += Σ dY colsᵀ, db += Σ dY, dx = col2im(Wᵀ dY) (empty when input_grad is false).
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      return backward_fused<epilogue::Identity>(dy, input_grad);
    }

    /// y = E(conv(x, W) + b): the bias and the activation run on the GEMM's output (nn/epilogue.hpp).
    static constexpr bool fuses_epilogue = true;
    template <class E>
    Tensor<T, output_shape, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      const auto g = geometry(x.size(0));
      Extents<output_shape> e = {};
      e[0] = x.size(0);
      Tensor<T, output_shape, D> y(e, x.device_index());
      Tensor<T, output_shape, D> z = E::saves_output ? Tensor<T, output_shape, D>() : Tensor<T, output_shape, D>(e, x.device_index());
      const M* b = nullptr;
      if constexpr (Bias) b = bias().data();
      if constexpr (std::is_same_v<D, Cpu>) {
        detail::conv2d_forward_cpu<E, Stride, fixed_geometry>(x.data(), weight_operand().data(), b, z.data(),
                                                              y.data(), g, Out);
      } else {
        bool ran = false;
#if KILN_WITH_CUDNN
        if (x.size(0) == 0) {
          ran = true;
        } else if (const auto* p = plan(x.size(0), x.device_index())) {  // NCHW; then one pass for bias + activation
          T* out = E::saves_output ? y.data() : z.data();
          p->forward(x.data(), weight_operand().data(), out);
          if constexpr (!E::identity || Bias)
            kiln::detail::executor<D>::for_each(
                y.numel(), detail::ChannelBiasEpilogue<T, M, E>{out, b, y.data(), Out, Ho * Wo});
          ran = true;
        }
#endif
        if (!ran) forward_im2col<E>(x, g, b, z, y);
      }
      x_ = ctx.grad ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
      if constexpr (!E::identity) saved_ = ctx.grad ? (E::saves_output ? y : z) : Tensor<T, output_shape, D>();
      return y;
    }
    /// dZ = E'(dY); dW += Σ dZ colsᵀ; db += Σ dZ; dx = col2im(Wᵀ dZ). The columns are recomputed from the
    /// saved input: keeping them would cost In K K times its memory.
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      if (x_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::Conv2d::backward: no saved input; run forward with gradients enabled first");
      if (!E::identity && saved_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::Conv2d::backward: no saved activation; run forward with gradients enabled first");
      detail::check_backward_rows("Conv2d", dy.size(0), x_.size(0));
      const auto g = geometry(dy.size(0));
      Tensor<T, S, D> dx = input_grad ? Tensor<T, S, D>(x_.extents(), dy.device_index()) : Tensor<T, S, D>();
      if constexpr (std::is_same_v<D, Cpu>) {
        M* gb = nullptr;
        if constexpr (Bias) gb = bias_grad().data();
        detail::conv2d_backward_cpu<E, Stride, fixed_geometry>(x_.data(), dy.data(), saved_.data(),
                                                               weight_operand().data(), weight_grad().data(),
                                                               gb, dx.data(), g, Out);
      } else {
        bool ran = false;
#if KILN_WITH_CUDNN
        const auto* p = dy.numel() > 0 ? plan(dy.size(0), dy.device_index()) : nullptr;
        ran = dy.numel() == 0 || p != nullptr;
        if (p != nullptr) {  // dZ = E'(dY) in one pass; then cuDNN's bias, filter, data
          Tensor<T, output_shape, D> dz = E::identity ? Tensor<T, output_shape, D>(dy) : Tensor<T, output_shape, D>(dy.extents(), dy.device_index());
          if constexpr (!E::identity)
            kiln::detail::executor<D>::for_each(dy.numel(), detail::EpilogueGrad<T, E>{dy.data(), saved_.data(), dz.data()});
          if constexpr (Bias) {
            if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
              p->backward_bias(dz.data(), bias_grad().data());
            } else {  // 16-bit: Σ over pixels, then over images, accumulated in fp32 (as autocast's)
              auto planes = Tensor<T, Shape<dyn, Ho * Wo>, D>::from_blob(
                  dz.data(), Extents<Shape<dyn, Ho * Wo>>(dy.size(0) * Out), dz.device_index());
              auto per_image = sum<1>(planes);  // [N Out], fp32
              auto rows = Tensor<typename decltype(per_image)::element_type, Shape<dyn, Out>, D>::from_blob(
                  per_image.data(), Extents<Shape<dyn, Out>>(dy.size(0)), dz.device_index());
              auto gb = bias_grad();
              gb += sum<0>(rows);
            }
          }
          if constexpr (std::is_same_v<T, M>) {
            p->backward_filter(x_.data(), dz.data(), weight_grad().data());
          } else {  // mixed: cuDNN's weight gradient in T (as autocast's), added to the fp32 arena
            Tensor<T, Shape<Out, Patch>, D> gw_low(Extents<Shape<Out, Patch>>{}, dy.device_index());
            p->backward_filter(x_.data(), dz.data(), gw_low.data(), 0.0);
            auto gw = weight_grad();
            gw += cast<M>(gw_low);
          }
          if (input_grad) p->backward_data(weight_operand().data(), dz.data(), dx.data());
        }
#endif
        if (!ran) backward_im2col<E>(dy, g, input_grad, dx);
      }
      x_ = Tensor<T, S, D>();
      saved_ = Tensor<T, output_shape, D>();
      return dx;
    }
   private:
    /// Per group, im2col + one GEMM for the whole batch, then one pass for bias + activation (CUDA
    /// without cuDNN).
    template <class E>
    void forward_im2col(const Tensor<T, S, D>& x, const detail::ConvGeometry& g, const M* b,
                        Tensor<T, output_shape, D>& z, Tensor<T, output_shape, D>& y) {
      Extents<Shape<Out, dyn>> ye;
      ye[1] = g.columns();
      // [Out, N Ho Wo] in compute_t<T>: in mixed precision the fp32 sums, rounded once with the bias and
      // the activation (as on the CPU)
      Tensor<compute_t<T>, Shape<Out, dyn>, D> yt(ye, x.device_index());
      for (index_t grp = 0; grp < Groups; ++grp) {
        auto cols = im2col(x, g, grp);  // [(In / G) K K, N Ho Wo]
        auto ytg = group_rows(yt, grp);
        matmul_into(ytg, group_weight(weight_operand(), grp), cols);
      }
      using Epilogue = detail::ColumnsToNchw<T, M, E, compute_t<T>>;
      kiln::detail::executor<D>::for_each(
          x.size(0) * Out, Epilogue{yt.data(), b, z.data(), y.data(), Out, Ho * Wo, g.columns()});
    }
    /// The im2col path's backward (CUDA without cuDNN): dZ in columns, db, dW += dZ colsᵀ, col2im(Wᵀ dZ).
    template <class E>
    void backward_im2col(const Tensor<T, output_shape, D>& dy, const detail::ConvGeometry& g, bool input_grad,
                         Tensor<T, S, D>& dx) {
      Extents<Shape<Out, dyn>> te;
      te[1] = g.columns();
      Tensor<T, Shape<Out, dyn>, D> dyt(te, dy.device_index());  // [Out, N Ho Wo]
      kiln::detail::executor<D>::for_each(
          dy.size(0) * Out, detail::NchwToColumns<T, E>{dy.data(), saved_.data(), dyt.data(), Out, Ho * Wo, g.columns()});
      if constexpr (Bias) {
        auto gb = bias_grad();
        gb += sum<1>(dyt);  // [Out]
      }
      for (index_t grp = 0; grp < Groups; ++grp) {
        const auto dytg = group_rows(dyt, grp);  // [Out / G, N Ho Wo]
        {
          auto cols = im2col(x_, g, grp);
          auto gw = group_weight(weight_grad(), grp);
          matmul_into(gw, dytg, transposed(cols), 1.0f, 1.0f);  // [Out / G, (In / G) K K]
        }
        if (input_grad) {
          auto dcols =
              matmul(transposed(group_weight(weight_operand(), grp)), dytg);  // [(In / G) K K, N Ho Wo]
          using Col2im = detail::Col2imRows<T, Stride>;
          kiln::detail::executor<D>::for_each(Col2im::count(g),
                                              Col2im{dcols.data(), dx.data(), g, grp * (In / Groups)}, g.w);
        }
      }
    }
    /// Group grp's filters of a weight-shaped tensor, [Out / G, (In / G) K K] (a view: w shares its storage).
    template <class V>
    static Tensor<V, Shape<Fg, Patch>, D> group_weight(Tensor<V, Shape<Out, Patch>, D> w, index_t grp) {
      return Tensor<V, Shape<Fg, Patch>, D>::from_blob(w.data() + grp * Fg * Patch, {}, w.device_index());
    }
    /// Group grp's rows of a [Out, N Ho Wo] tensor, [Out / G, N Ho Wo] (a view).
    template <class V>
    static Tensor<V, Shape<Fg, dyn>, D> group_rows(Tensor<V, Shape<Out, dyn>, D> t, index_t grp) {
      Extents<Shape<Fg, dyn>> e;
      e[1] = t.size(1);
      return Tensor<V, Shape<Fg, dyn>, D>::from_blob(t.data() + grp * Fg * t.size(1), e, t.device_index());
    }

#if KILN_WITH_CUDNN
    /// cuDNN's descriptors and algorithms for this batch size and device (rebuilt when either changes),
    /// or null when cuDNN has no algorithm for this convolution in T within the device's free memory:
    /// then im2col + cuBLAS run, as in builds without cuDNN.
    const kiln::cuda::ConvPlan<T>* plan(index_t n, int device) {
      if (!plan_ || plan_->batch() != n || plan_->device() != device)
        plan_ = std::make_shared<kiln::cuda::ConvPlan<T>>(n, In, H, W, Out, K, Stride, pad, Dilation, Groups,
                                                          device);
      return plan_->usable() ? plan_.get() : nullptr;
    }
    std::shared_ptr<kiln::cuda::ConvPlan<T>> plan_;
#endif
    static detail::ConvGeometry geometry(index_t n) {
      return {n, In, H, W, K, Stride, pad, Ho, Wo, Dilation, Groups};
    }
    /// Group grp's columns, [(In / G) K K, N Ho Wo].
    Tensor<T, Shape<Patch, dyn>, D> im2col(const Tensor<T, S, D>& x, const detail::ConvGeometry& g,
                                           index_t grp) const {
      Extents<Shape<Patch, dyn>> ce;
      ce[1] = g.columns();
      Tensor<T, Shape<Patch, dyn>, D> cols(ce, x.device_index());
      using Im2col = detail::Im2colRows<T, Stride>;
      kiln::detail::executor<D>::for_each(Im2col::count(g),
                                          Im2col{x.data(), cols.data(), g, grp * (In / Groups)}, g.wo);
      return cols;
    }

    Tensor<T, S, D> x_;                 // saved input (training only)
    Tensor<T, output_shape, D> saved_;  // the fused activation's output or input (training only)
  };

  /// A reflect, replicate or circular Conv2d, or one whose padding differs from side to side: the input
  /// padded in Mode into a copy, then the convolution without padding on it (whose parameters, names and
  /// fused epilogues this module has); the backward pass adds the padded input's gradient back onto the
  /// input (nn/padding.hpp).
  template <class S, class P>
  class padded_module
      : public Conv2d<In, Out, K, Stride, 0, Dilation, Groups, Bias>::template zero_padded_module<
            detail::padded_shape<S, pad, pad_end, pad, pad_end>, P> {
    using padded = detail::padded_shape<S, pad, pad_end, pad, pad_end>;
    using base = typename Conv2d<In, Out, K, Stride, 0, Dilation, Groups,
                                 Bias>::template zero_padded_module<padded, P>;

   public:
    using typename base::D;
    using typename base::output_shape;
    using typename base::T;
    using input_shape = S;
    std::string name() const { return repr(); }

    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      return forward_fused<epilogue::Identity>(x, ctx);
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      return backward_fused<epilogue::Identity>(dy, input_grad);
    }
    template <class E>
    Tensor<T, output_shape, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      return base::template forward_fused<E>(detail::pad2d<Mode, pad, pad_end, pad, pad_end>(x), ctx);
    }
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      const auto dxp = base::template backward_fused<E>(dy, input_grad);
      if (!input_grad) return Tensor<T, S, D>();
      return detail::pad2d_backward<Mode, pad, pad_end, pad, pad_end, T, S>(dxp);
    }
  };

  template <class S, class P>
  using module = std::conditional_t<Mode == PaddingMode::zeros && pad == pad_end, zero_padded_module<S, P>,
                                    padded_module<S, P>>;
};

}  // namespace kiln::nn
