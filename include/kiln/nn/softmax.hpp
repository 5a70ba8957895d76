/// Softmax and LogSoftmax over one dimension (torch.nn.Softmax(dim), default 1), numerically stable.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kiln/expr/reduce.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/reductions.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// Shared by Softmax and LogSoftmax: over dimension Dim of any shape that has one.
template <bool Log, int Dim>
struct SoftmaxLayer {
  template <class S>
  static constexpr bool accepts = S::rank >= rank_with_dim<Dim>;
  template <class S>
  using output = S;
  /// What it takes (for the error): a shape with a dimension Dim.
  template <class S>
  using expects = any_shape_of_rank_at_least<rank_with_dim<Dim>>;

  template <class S, class P>
  class module : public detail::parameter_free<S, S, P> {
   public:
    using typename detail::parameter_free<S, S, P>::T;
    using typename detail::parameter_free<S, S, P>::D;
    std::string name() const {
      return std::string(Log ? "LogSoftmax" : "Softmax") + "(dim=" + std::to_string(Dim) + ")";
    }

    /// y = exp(x - max) / Σ exp(x - max) along Dim, or its log, as kiln::softmax / log_softmax compute
    /// it: the max and the sum kept as extent 1 and broadcast back, three passes (max, exp-sum, output);
    /// on the CPU along the last axis one, a row at a time (kiln::detail::SoftmaxRows, the same bits).
    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      if (x.numel() == 0) {  // no rows, or no features (Shape<dyn, dyn>): an empty output, as torch's
        Tensor<T, S, D> y(x.extents(), x.device_index());
        y_ = ctx.grad ? y : Tensor<T, S, D>();
        return y;
      }
      Tensor<T, S, D> y(x.extents(), x.device_index());
      kiln::detail::softmax_into<Log, Dim>(y, x);  // kiln::softmax's arithmetic (ops/reductions.hpp)
      y_ = ctx.grad ? y : Tensor<T, S, D>();
      return y;
    }
    /// Softmax: dx = y (dy - Σ dy y); LogSoftmax: dx = dy - exp(y) Σ dy; the sums along Dim (two passes;
    /// on the CPU along the last axis one, kiln::detail::SoftmaxGradRows, the same bits).
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy) {
      if (y_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::" + name() + "::backward: no saved output; run forward with gradients first");
      if (!y_.empty()) detail::check_backward_rows(Log ? "LogSoftmax" : "Softmax", dy.size(0), y_.size(0));
      Tensor<T, S, D> dx(dy.extents(), dy.device_index());
      if constexpr (kiln::detail::rows_of_softmax<Dim, Tensor<T, S, D>, Tensor<T, S, D>>()) {
        if (dy.numel() != 0) {
          const index_t c = dy.extents()[S::rank - 1];
          kiln::detail::executor<Cpu>::for_each(
              dy.numel() / c, kiln::detail::SoftmaxGradRows<Log, T>{y_.data(), dy.data(), dx.data(), c}, c);
        }
      } else if constexpr (Log) {
        const auto g = sum<Dim>(dy, keepdim);
        dx = dy - exp(y_) * g;
      } else {
        const auto g = sum<Dim>(dy * y_, keepdim);
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

/// exp(x) / Σ exp(x) along dimension Dim (negative from the end), torch.nn.Softmax(dim=Dim): `Softmax<>`
/// over the C of [N, C] (dim 1), `Softmax<1>` over the channels of [N, C, H, W], `Softmax<-1>` over the
/// last. Shapes: any with a dimension Dim -> the same.
template <int Dim = 1>
struct Softmax : detail::SoftmaxLayer<false, Dim> {};
/// log softmax along Dim, torch.nn.LogSoftmax(dim=Dim), stable for large logits: `LogSoftmax<>` before an
/// NLLLoss. Shapes: any with a dimension Dim -> the same.
template <int Dim = 1>
struct LogSoftmax : detail::SoftmaxLayer<true, Dim> {};

}  // namespace kiln::nn
