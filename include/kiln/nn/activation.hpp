/// Activations: ReLU, Sigmoid, Tanh, SiLU, LeakyReLU, ELU (and GELU, gelu.hpp) — elementwise,
/// shape-preserving, no parameters; each runs its epilogue (nn/epilogue.hpp) on its own, or inside the
/// Linear or Conv2d before it.
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
template <Real NegativeSlope>
struct epilogue_of<LeakyReLU<NegativeSlope>> {
  using type = epilogue::LeakyRelu<NegativeSlope.value>;
};
template <Real Alpha>
struct epilogue_of<ELU<Alpha>> {
  using type = epilogue::Elu<Alpha.value>;
};

}  // namespace kiln::nn
