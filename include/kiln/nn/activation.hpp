/// Activations: ReLU, Sigmoid, Tanh, SiLU, LeakyReLU, ELU — elementwise, shape-preserving, no parameters.
#pragma once
#include <string>
#include <vector>

#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// An elementwise activation whose backward needs only its output y: dx = dy * Derivative(y).
/// Shapes: any -> the same.
template <class Forward, class Derivative, const char* Name>
struct Activation {
  template <class S>
  static constexpr bool accepts = true;
  template <class S>
  using output = S;

  template <class S, class P>
  class module : public detail::parameter_free<S, S, P> {
   public:
    using typename detail::parameter_free<S, S, P>::T;
    using typename detail::parameter_free<S, S, P>::D;
    std::string name() const { return std::string(Name) + "()"; }

    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      Tensor<T, S, D> y(x.extents(), x.device_index());
      y = Forward{}(x);
      y_ = ctx.grad ? y : Tensor<T, S, D>();
      return y;
    }
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy) {
      if (y_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::" + std::string(Name) + "::backward: no saved output; run forward with gradients first");
      Tensor<T, S, D> dx(dy.extents(), dy.device_index());
      dx = Derivative{}(dy, y_);  // one pass
      y_ = Tensor<T, S, D>();
      return dx;
    }

   private:
    Tensor<T, S, D> y_;
  };
};

struct ReluForward {
  template <class X>
  auto operator()(const X& x) const { return relu(x); }
};
struct ReluBackward {  // 0 where y <= 0, else dy (PyTorch's threshold_backward: at 0 it is 0, at NaN dy)
  template <class G, class Y>
  auto operator()(const G& dy, const Y& y) const { return where(y <= 0.0f, 0.0f, dy); }
};
struct SigmoidForward {
  template <class X>
  auto operator()(const X& x) const { return sigmoid(x); }
};
struct SigmoidBackward {
  template <class G, class Y>
  auto operator()(const G& dy, const Y& y) const { return dy * y * (1.0f - y); }
};
struct TanhForward {
  template <class X>
  auto operator()(const X& x) const { return tanh(x); }
};
struct TanhBackward {
  template <class G, class Y>
  auto operator()(const G& dy, const Y& y) const { return dy * (1.0f - y * y); }
};
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
/// backward, keeping E's output or input as its derivative needs. After a Linear or Conv2d in a
/// Sequential it runs inside that layer's epilogue instead (epilogue_of). Named::repr() is its name.
/// Shapes: any -> the same.
template <class E, class Named>
struct PointwiseActivation {
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

inline constexpr char relu_name[] = "ReLU";
inline constexpr char sigmoid_name[] = "Sigmoid";
inline constexpr char tanh_name[] = "Tanh";
}  // namespace detail

/// max(x, 0). Shapes: any -> the same.
struct ReLU : detail::Activation<detail::ReluForward, detail::ReluBackward, detail::relu_name> {};
/// 1 / (1 + e^-x). Shapes: any -> the same.
struct Sigmoid : detail::Activation<detail::SigmoidForward, detail::SigmoidBackward, detail::sigmoid_name> {};
/// tanh(x). Shapes: any -> the same.
struct Tanh : detail::Activation<detail::TanhForward, detail::TanhBackward, detail::tanh_name> {};

/// x sigmoid(x), torch.nn.SiLU ("swish"). Shapes: any -> the same.
struct SiLU : detail::PointwiseActivation<epilogue::Silu, SiLU> {
  static std::string repr() { return "SiLU()"; }
};
/// x where x > 0, else NegativeSlope x: torch.nn.LeakyReLU(negative_slope=0.01), the slope a float
/// template argument as Dropout's p (`LeakyReLU<0.2f>`). Shapes: any -> the same.
template <float NegativeSlope = 0.01f>
struct LeakyReLU : detail::PointwiseActivation<epilogue::LeakyRelu<NegativeSlope>, LeakyReLU<NegativeSlope>> {
  static std::string repr() { return "LeakyReLU(negative_slope=" + detail::python_float(NegativeSlope) + ")"; }
};
/// x where x > 0, else Alpha (e^x - 1): torch.nn.ELU(alpha=1.0), `ELU<>` or `ELU<0.5f>`. Shapes: any ->
/// the same.
template <float Alpha = 1.0f>
struct ELU : detail::PointwiseActivation<epilogue::Elu<Alpha>, ELU<Alpha>> {
  static std::string repr() { return "ELU(alpha=" + detail::python_float(Alpha) + ")"; }
};

// After a Linear or Conv2d in a Sequential, these run inside its epilogue (nn/epilogue.hpp).
template <>
struct epilogue_of<ReLU> {
  using type = epilogue::Relu;
};
template <>
struct epilogue_of<Sigmoid> {
  using type = epilogue::Sigmoid;
};
template <>
struct epilogue_of<Tanh> {
  using type = epilogue::Tanh;
};
template <>
struct epilogue_of<SiLU> {
  using type = epilogue::Silu;
};
template <float NegativeSlope>
struct epilogue_of<LeakyReLU<NegativeSlope>> {
  using type = epilogue::LeakyRelu<NegativeSlope>;
};
template <float Alpha>
struct epilogue_of<ELU<Alpha>> {
  using type = epilogue::Elu<Alpha>;
};

}  // namespace kiln::nn
