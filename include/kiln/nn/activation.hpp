/// Activations: ReLU, Sigmoid, Tanh — elementwise, shape-preserving, no parameters.
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

}  // namespace kiln::nn
