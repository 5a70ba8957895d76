/// Residual: y = x + f(x), where f is a Sequential of the given layers (a skip connection, as in ResNet).
#pragma once
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/nn/detail/sum_epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/nn/sequential.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// Fails to compile, naming both shapes, when the branch of a Residual changes the shape of its input.
template <class Input, class BranchOutput>
struct residual_branch_must_keep_the_shape {
  // >>> Stopped here? The layers inside Residual<...> turn Input into BranchOutput; x + f(x) needs them equal. <<<
  static_assert(std::is_same_v<Input, BranchOutput>,
                "kiln::nn::Residual: the branch must keep the shape of its input (x + f(x)); see the template "
                "arguments of kiln::nn::residual_branch_must_keep_the_shape<input shape, branch output shape> (in "
                "a Shape, -1 means dyn), e.g. use padding (K - 1) / 2 in a Conv2d and as many output channels as "
                "input channels");
  static constexpr bool value = true;
};

/// y = x + f(x), f = Sequential<Layers...>; f's parameters are named "<index in f>.<name>" under the
/// Residual's own index ("2.0.weight"), as a nested nn.Sequential's in PyTorch.
/// Shapes: any the branch keeps -> the same.
/// Example:
///   Sequential<Conv2d<3, 16, 3, 1, 1>, ReLU, Residual<Conv2d<16, 16, 3, 1, 1>, ReLU, Conv2d<16, 16, 3, 1, 1>>, ReLU, ...>
template <class... Layers>
struct Residual {
  using branch = Sequential<Layers...>;
  template <class S>
  static constexpr bool accepts = true;  // the branch checks each of its layers; the module checks the sum
  template <class S>
  using output = S;
  /// Whether the branch keeps the shape S (its error, residual_branch_must_keep_the_shape, if not); true
  /// when a layer of the branch did not fit (that error is the one).
  template <class S>
  static constexpr bool keeps_shape() {
    if constexpr (branch::template failed<S>) {
      return true;
    } else {
      using out = typename branch::template output<S>;
      return residual_branch_must_keep_the_shape<S, out>::value && std::is_same_v<S, out>;
    }
  }
  /// Whether a layer of the branch did not fit, or the branch changes the shape (its error is out, here,
  /// before any layer after the block is checked against the wrong shape): nothing past the block is
  /// inferred.
  template <class S>
  static constexpr bool failed = branch::template failed<S> || !keeps_shape<S>();

  template <class S, class P>
  class module {
    using inner_type = typename branch::template module<S, P>;
    static_assert(residual_branch_must_keep_the_shape<S, typename inner_type::output_shape>::value);

   public:
    using T = typename P::precision::storage;
    using M = typename P::precision::master;
    using D = typename P::device;
    using input_shape = S;
    using output_shape = S;
    static constexpr index_t parameter_count = inner_type::parameter_count;

    void bind(M* params, M* grads, T* work, int device) { inner_.bind(params, grads, work, device); }
    void reset_parameters(Generator& g) { inner_.reset_parameters(g); }
    std::vector<ParameterInfo> parameters() const { return inner_.parameters(); }
    static constexpr index_t buffer_count = inner_type::buffer_count;
    void bind_buffers(M* buffers, int device) { inner_.bind_buffers(buffers, device); }
    void init_buffers(M* host) const { inner_.init_buffers(host); }
    std::vector<BufferInfo> buffers() const { return inner_.buffers(); }
    std::string name() const { return "Residual(" + std::to_string(sizeof...(Layers)) + " layers)"; }

    /// y = x + f(x): f's layers, then one pass for the sum.
    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      const auto fx = inner_.forward(x, ctx);
      Tensor<T, S, D> y(x.extents(), x.device_index());
      y = x + fx;
      return y;
    }
    /// dx = dy + f'(x)ᵀ dy (f's parameter gradients accumulate either way).
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy, bool input_grad = true) {
      auto dfx = inner_.backward(dy, input_grad);
      if (!input_grad) return Tensor<T, S, D>();
      Tensor<T, S, D> dx(dy.extents(), dy.device_index());
      dx = dy + dfx;
      return dx;
    }
    /// y = E(x + f(x)): in a Sequential the activation after the block runs in the pass of the sum
    /// (nn/detail/sum_epilogue.hpp), its own pass saved.
    static constexpr bool fuses_epilogue = true;
    template <class E>
    Tensor<T, S, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      const auto fx = inner_.forward(x, ctx);
      return detail::sum_epilogue<E>(activation_, ctx.grad, x, fx);
    }
    /// E's derivative in one pass (from the value forward_fused<E> kept), then backward().
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, S, D>& dy, bool input_grad = true) {
      return backward(detail::epilogue_backward<E>(dy, activation_, "Residual"), input_grad);
    }
    /// The branch (its layers: branch().template layer<I>()).
    inner_type& branch_module() { return inner_; }

   private:
    inner_type inner_;
    Tensor<T, S, D> activation_;  // what a fused activation's derivative reads (forward_fused)
  };
};

namespace detail {
/// A Residual yields its input's shape, whether its branch fits or not (its error is then out).
template <class... Layers>
struct holds_layers<Residual<Layers...>> : std::true_type {
  template <class In>
  using quiet = std::conditional_t<std::is_same_v<typename quiet_output<In, Layers...>::type, In>, In, void>;
  template <class In>
  using after_failure = In;
};
}  // namespace detail

}  // namespace kiln::nn
