/// GELU: x Φ(x) with the exact erf form (torch.nn.GELU(approximate='none')).
#pragma once
#include <string>
#include <vector>

#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
struct GeluForward {  // the arithmetic is the epilogue's (nn/epilogue.hpp)
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A x) const { return epilogue::Gelu::forward(x); }
};
struct GeluDerivative {  // Φ(x) + x φ(x)
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE A operator()(A x) const { return epilogue::Gelu::backward(A(1), x); }
};
}  // namespace detail

/// Shapes: any -> the same. Keeps its input for backward.
struct GELU {
  template <class S>
  static constexpr bool accepts = true;
  template <class S>
  using output = S;

  template <class S, class P>
  class module : public detail::parameter_free<S, S, P> {
   public:
    using typename detail::parameter_free<S, S, P>::T;
    using typename detail::parameter_free<S, S, P>::D;
    std::string name() const { return "GELU(approximate='none')"; }

    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      Tensor<T, S, D> y(x.extents(), x.device_index());
      y = kiln::detail::make_unary<detail::GeluForward>(x);
      x_ = ctx.grad ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
      return y;
    }
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy) {
      if (x_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::GELU::backward: no saved input; run forward with gradients enabled first");
      Tensor<T, S, D> dx(dy.extents(), dy.device_index());
      dx = dy * kiln::detail::make_unary<detail::GeluDerivative>(x_);  // one pass
      x_ = Tensor<T, S, D>();
      return dx;
    }

   private:
    Tensor<T, S, D> x_;
  };
};

/// After a Linear or Conv2d in a Sequential, GELU runs inside its epilogue (nn/epilogue.hpp).
template <>
struct epilogue_of<GELU> {
  using type = epilogue::Gelu;
};

}  // namespace kiln::nn
