/// Activations: ReLU, Sigmoid, Tanh, SiLU, LeakyReLU, ELU, ReLU6, Hardtanh, Hardsigmoid, Hardswish,
/// Softplus, Mish, SELU, CELU, Softsign, LogSigmoid (and GELU, gelu.hpp) — elementwise,
/// shape-preserving, no parameters; each runs its epilogue (nn/epilogue.hpp) on its own, or inside the
/// Linear, Conv2d, ConvTranspose2d or normalisation (BatchNorm, GroupNorm, LayerNorm, InstanceNorm)
/// before it.
#pragma once
#include <string>
#include <vector>

#include "kiln/core/real.hpp"
#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// E's activation of one element, in the compute type (fp32 for 16-bit storage), rounded once.
template <class E>
struct EpilogueForward {
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A z) const { return from_compute<A>(E::forward(to_compute(z))); }
};
/// E's derivative: dL/dz from dL/dy and the saved value (E's output or input), in the compute type.
template <class E>
struct EpilogueDerivative {
  template <class G, class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE G operator()(G dy, V saved) const {
    return from_compute<G>(E::backward(to_compute(dy), to_compute(saved)));
  }
};

/// An activation layer that runs epilogue E (nn/epilogue.hpp) on its own: one pass forward, one
/// backward, keeping E's output or input as its derivative needs. After a Linear, Conv2d, ConvTranspose2d
/// or normalisation in a Sequential it runs inside that layer's passes instead (epilogue_of).
/// Named::repr() is its name.
/// Shapes: any -> the same.
template <class E, class Named>
struct PointwiseActivation {
  /// What a Linear, Conv2d, ConvTranspose2d or normalisation before it in a Sequential runs
  /// (epilogue_of), for fused_layer itself.
  using fused_epilogue = E;
  using fused_layer = Named;
  template <class S>
  static constexpr bool accepts = true;
  template <class S>
  using output = S;

  template <class S, class P>
  class module : public detail::parameter_free<S, S, P> {
   public:
    using typename detail::parameter_free<S, S, P>::T;
    using typename detail::parameter_free<S, S, P>::D;
    std::string name() const { return Named::repr(); }

    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      Tensor<T, S, D> y(x.extents(), x.device_index());
      y = kiln::detail::make_unary<EpilogueForward<E>>(x);
      saved_ = ctx.grad ? Tensor<T, S, D>(E::saves_output ? y : x) : Tensor<T, S, D>();
      return y;
    }
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy) {
      if (saved_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::" + Named::repr() + "::backward: nothing saved; run forward with gradients enabled first");
      Tensor<T, S, D> dx(dy.extents(), dy.device_index());
      dx = kiln::detail::make_binary<EpilogueDerivative<E>>(dy, saved_, "kiln::nn activation backward");  // one pass
      saved_ = Tensor<T, S, D>();
      return dx;
    }

   private:
    Tensor<T, S, D> saved_;
  };
};

}  // namespace detail

/// max(x, 0), torch.nn.ReLU; the gradient 0 where the output is <= 0 (at 0 too) and dy elsewhere, NaN
/// included (torch's threshold_backward). Shapes: any -> the same.
struct ReLU : detail::PointwiseActivation<epilogue::Relu, ReLU> {
  static std::string repr() { return "ReLU()"; }
};
/// 1 / (1 + e^-x), torch.nn.Sigmoid. Shapes: any -> the same.
struct Sigmoid : detail::PointwiseActivation<epilogue::Sigmoid, Sigmoid> {
  static std::string repr() { return "Sigmoid()"; }
};
/// tanh(x), torch.nn.Tanh. Shapes: any -> the same.
struct Tanh : detail::PointwiseActivation<epilogue::Tanh, Tanh> {
  static std::string repr() { return "Tanh()"; }
};
/// x sigmoid(x), torch.nn.SiLU ("swish"). Shapes: any -> the same.
struct SiLU : detail::PointwiseActivation<epilogue::Silu, SiLU> {
  static std::string repr() { return "SiLU()"; }
};
/// x where x > 0, else NegativeSlope x: torch.nn.LeakyReLU(negative_slope=0.01), the slope a float
/// template argument as Dropout's p (`LeakyReLU<0.2f>`). Shapes: any -> the same.
template <Real NegativeSlope = 0.01f>
struct LeakyReLU
    : detail::PointwiseActivation<epilogue::LeakyRelu<NegativeSlope.value>, LeakyReLU<NegativeSlope>> {
  static std::string repr() {
    return "LeakyReLU(negative_slope=" + detail::python_float(NegativeSlope.value) + ")";
  }
};
/// x where x > 0, else Alpha (e^x - 1): torch.nn.ELU(alpha=1.0), `ELU<>` or `ELU<0.5f>`. Shapes: any ->
/// the same.
template <Real Alpha = 1.0f>
struct ELU : detail::PointwiseActivation<epilogue::Elu<Alpha.value>, ELU<Alpha>> {
  static std::string repr() { return "ELU(alpha=" + detail::python_float(Alpha.value) + ")"; }
};

/// min(max(x, 0), 6), torch.nn.ReLU6; the gradient dy strictly between 0 and 6 (and at NaN), else 0.
/// Shapes: any -> the same.
struct ReLU6 : detail::PointwiseActivation<epilogue::Hardtanh<0.0f, 6.0f>, ReLU6> {
  static std::string repr() { return "ReLU6()"; }
};
/// x clamped to [MinVal, MaxVal], torch.nn.Hardtanh(min_val=-1.0, max_val=1.0); the gradient dy strictly
/// inside (and at NaN), else 0. Shapes: any -> the same.
template <Real MinVal = -1.0f, Real MaxVal = 1.0f>
struct Hardtanh
    : detail::PointwiseActivation<epilogue::Hardtanh<MinVal.value, MaxVal.value>, Hardtanh<MinVal, MaxVal>> {
  static_assert(
      MinVal.value < MaxVal.value,
      "kiln::nn::Hardtanh<MinVal, MaxVal>: max_val must be greater than min_val (as torch asserts)");
  static std::string repr() {
    return "Hardtanh(min_val=" + detail::python_float(MinVal.value) +
           ", max_val=" + detail::python_float(MaxVal.value) + ")";
  }
};
/// min(max(x + 3, 0), 6) / 6, torch.nn.Hardsigmoid. Shapes: any -> the same.
struct Hardsigmoid : detail::PointwiseActivation<epilogue::Hardsigmoid, Hardsigmoid> {
  static std::string repr() { return "Hardsigmoid()"; }
};
/// x Hardsigmoid(x), torch.nn.Hardswish (MobileNetV3's). Shapes: any -> the same.
struct Hardswish : detail::PointwiseActivation<epilogue::Hardswish, Hardswish> {
  static std::string repr() { return "Hardswish()"; }
};
/// log(1 + e^(Beta x)) / Beta, and x itself where Beta x > Threshold: torch.nn.Softplus(beta=1,
/// threshold=20). Shapes: any -> the same.
template <Real Beta = 1.0f, Real Threshold = 20.0f>
struct Softplus : detail::PointwiseActivation<epilogue::Softplus<Beta.value, Threshold.value>,
                                              Softplus<Beta, Threshold>> {
  static_assert(Beta.value != 0.0f, "kiln::nn::Softplus<Beta, Threshold>: beta must not be 0");
  /// torch's repr, "Softplus(beta=1, threshold=20)": its defaults are ints, so integral values print
  /// as ints here (torch prints a float argument as "2.0").
  static std::string repr() {
    const auto number = [](float v) {
      return v == static_cast<float>(static_cast<long long>(v)) ? std::to_string(static_cast<long long>(v))
                                                                : detail::python_float(v);
    };
    return "Softplus(beta=" + number(Beta.value) + ", threshold=" + number(Threshold.value) + ")";
  }
};
/// x tanh(softplus(x)), torch.nn.Mish. Shapes: any -> the same.
struct Mish : detail::PointwiseActivation<epilogue::Mish, Mish> {
  static std::string repr() { return "Mish()"; }
};
/// scale (x where x > 0, else alpha (e^x - 1)) with torch's alpha 1.6733 and scale 1.0507: torch.nn.SELU.
/// Shapes: any -> the same.
struct SELU
    : detail::PointwiseActivation<epilogue::ScaledElu<epilogue::selu_alpha, epilogue::selu_scale, 1.0>,
                                  SELU> {
  static std::string repr() { return "SELU()"; }
};
/// x where x > 0, else Alpha (e^(x / Alpha) - 1): torch.nn.CELU(alpha=1.0). Shapes: any -> the same.
template <Real Alpha = 1.0f>
struct CELU
    : detail::PointwiseActivation<
          epilogue::ScaledElu<static_cast<double>(Alpha.value), 1.0, 1.0 / Alpha.value>, CELU<Alpha>> {
  static_assert(Alpha.value != 0.0f, "kiln::nn::CELU<Alpha>: alpha must not be 0 (torch: ZeroDivisionError)");
  static std::string repr() { return "CELU(alpha=" + detail::python_float(Alpha.value) + ")"; }
};
/// x / (1 + |x|), torch.nn.Softsign. Shapes: any -> the same.
struct Softsign : detail::PointwiseActivation<epilogue::Softsign, Softsign> {
  static std::string repr() { return "Softsign()"; }
};
/// log(1 / (1 + e^-x)), torch.nn.LogSigmoid, without overflow for large |x|. Shapes: any -> the same.
struct LogSigmoid : detail::PointwiseActivation<epilogue::LogSigmoid, LogSigmoid> {
  static std::string repr() { return "LogSigmoid()"; }
};

}  // namespace kiln::nn
