/// The parameters of a GEMM layer (Linear, Conv2d, ConvTranspose2d): a weight, then optionally a bias, in
/// the model's arena, their gradients, and the weight's storage-type working copy.
#pragma once
#include <cmath>
#include <span>
#include <vector>

#include "kiln/core/index.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn::detail {

/// Weight [Rows, Cols] (as the GEMMs see it) at the start of the layer's slice, bias [Out] after it
/// (Bias), under policy P. The layer derives from it and names the weight's torch shape.
template <class P, index_t Rows, index_t Cols, index_t Out, bool Bias>
class WeightAndBias {
 public:
  using T = typename P::precision::storage;
  using M = typename P::precision::master;
  using D = typename P::device;
  static constexpr index_t parameter_count = Rows * Cols + (Bias ? Out : 0);

  /// Points the layer at its slice of the model's parameter, gradient and working-copy arenas (the
  /// working copy is the parameters themselves unless the precision is mixed).
  void bind(M* params, M* grads, T* work, int device) {
    p_ = params, g_ = grads, w_ = work, device_ = device;
  }
  Tensor<M, Shape<Rows, Cols>, D> weight() const {
    return Tensor<M, Shape<Rows, Cols>, D>::from_blob(p_, {}, device_);
  }
  Tensor<M, Shape<Out>, D> bias() const {
    return Tensor<M, Shape<Out>, D>::from_blob(p_ + Rows * Cols, {}, device_);
  }
  Tensor<M, Shape<Rows, Cols>, D> weight_grad() const {
    return Tensor<M, Shape<Rows, Cols>, D>::from_blob(g_, {}, device_);
  }
  Tensor<M, Shape<Out>, D> bias_grad() const {
    return Tensor<M, Shape<Out>, D>::from_blob(g_ + Rows * Cols, {}, device_);
  }
  /// The weight as the GEMMs (and cuDNN) read it: the storage-type working copy (the master itself in fp32).
  Tensor<T, Shape<Rows, Cols>, D> weight_operand() const {
    return Tensor<T, Shape<Rows, Cols>, D>::from_blob(w_, {}, device_);
  }

 protected:
  /// PyTorch's initialisation: the weight, then the bias, uniform in ±1/sqrt(fan_in) (the arena's order).
  void reset_uniform(Generator& g, index_t fan_in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    std::vector<M> v(static_cast<std::size_t>(parameter_count));
    uniform_fill(v, bound, g);
    weight().copy_from(std::span<const M>(v.data(), Rows * Cols));
    if constexpr (Bias) bias().copy_from(std::span<const M>(v.data() + Rows * Cols, Out));
  }
  /// torch's state_dict entries: "weight" of torch's shape, then "bias" [Out].
  std::vector<ParameterInfo> weight_and_bias(std::vector<index_t> weight_shape) const {
    std::vector<ParameterInfo> p{{"weight", 0, Rows * Cols, std::move(weight_shape)}};
    if constexpr (Bias) p.push_back({"bias", Rows * Cols, Out, {Out}});
    return p;
  }

  M* p_ = nullptr;
  M* g_ = nullptr;
  T* w_ = nullptr;
  int device_ = 0;
};

}  // namespace kiln::nn::detail
