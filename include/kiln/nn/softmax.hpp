/// Softmax and LogSoftmax over the features of [N, C] (dim = 1), numerically stable.
#pragma once
#include <string>
#include <vector>

#include "kiln/expr/reduce.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// A per-row value [N] seen as [N, 1], so that it broadcasts over the row's C features.
template <class T, class D>
Tensor<T, Shape<dyn, 1>, D> as_column(const Tensor<T, Shape<dyn>, D>& v) {
  return v.template reshape<Shape<dyn, 1>>();
}
template <class T, index_t N, class D>
Tensor<T, Shape<N, 1>, D> as_column(const Tensor<T, Shape<N>, D>& v) {
  return v.template reshape<Shape<N, 1>>();
}

/// Shared by Softmax and LogSoftmax: [N, C] only (dim = 1, as torch.nn.Softmax(dim=1)).
template <bool Log>
struct SoftmaxLayer {
  template <class S>
  static constexpr bool accepts = S::rank == 2;
  template <class S>
  using output = S;
  /// What it takes (for the error): [N, F].
  template <class S>
  using expects = any_shape_of_rank<2>;

  template <class S, class P>
  class module : public detail::parameter_free<S, S, P> {
   public:
    using typename detail::parameter_free<S, S, P>::T;
    using typename detail::parameter_free<S, S, P>::D;
    std::string name() const { return Log ? "LogSoftmax(dim=1)" : "Softmax(dim=1)"; }

    /// y = exp(x - max) / Σ exp(x - max), or its log: four passes (max, exp-sum, output).
    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      if (x.numel() == 0) {  // no rows, or no features (Shape<dyn, dyn>): an empty output, as torch's
        Tensor<T, S, D> y(x.extents(), x.device_index());
        y_ = ctx.grad ? y : Tensor<T, S, D>();
        return y;
      }
      const auto m = as_column(max<1>(x));            // [N, 1]
      const auto s = as_column(sum<1>(exp(x - m)));   // [N, 1]
      Tensor<T, S, D> y(x.extents(), x.device_index());
      if constexpr (Log) y = x - m - log(s);
      else y = exp(x - m) / s;
      y_ = ctx.grad ? y : Tensor<T, S, D>();
      return y;
    }
    /// Softmax: dx = y (dy - Σ dy y); LogSoftmax: dx = dy - exp(y) Σ dy.
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy) {
      if (y_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::" + name() + "::backward: no saved output; run forward with gradients first");
      if (!y_.empty()) detail::check_backward_rows(Log ? "LogSoftmax" : "Softmax", dy.size(0), y_.size(0));
      Tensor<T, S, D> dx(dy.extents(), dy.device_index());
      if constexpr (Log) {
        const auto g = as_column(sum<1>(dy));  // [N, 1]
        dx = dy - exp(y_) * g;
      } else {
        const auto g = as_column(sum<1>(dy * y_));  // [N, 1]
        dx = y_ * (dy - g);
      }
      y_ = Tensor<T, S, D>();
      return dx;
    }

   private:
    Tensor<T, S, D> y_;
  };
};
}  // namespace detail

/// exp(x) / Σ exp(x) over the C features of [N, C]. Shapes: [N, C] -> [N, C].
struct Softmax : detail::SoftmaxLayer<false> {};
/// log softmax over the C features of [N, C], stable for large logits. Shapes: [N, C] -> [N, C].
struct LogSoftmax : detail::SoftmaxLayer<true> {};

}  // namespace kiln::nn
