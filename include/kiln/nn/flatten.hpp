/// Flatten: [N, d1, d2, ...] -> [N, d1 * d2 * ...], a view (no copy), as torch.nn.Flatten().
#pragma once
#include <string>
#include <vector>

#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// Shapes: [N, C, H, W] -> [N, C*H*W] (every dimension after the first must be static).
struct Flatten {
  template <class S>
  static constexpr bool all_static_after_first() {
    bool ok = S::rank >= 2;
    for (std::size_t i = 1; i < S::rank; ++i) ok = ok && S::extents[i] != dyn;
    return ok;
  }
  template <class S>
  static constexpr index_t features() {
    index_t n = 1;
    for (std::size_t i = 1; i < S::rank; ++i) n *= S::extents[i];
    return n;
  }
  template <class S>
  static constexpr bool accepts = all_static_after_first<S>();
  template <class S>
  using output = Shape<S::extents[0], features<S>()>;
  /// What it takes (for the error): [N, d1, ...], d1 ... static.
  template <class S>
  using expects = static_shape_of_rank_at_least<2>;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
   public:
    using typename detail::parameter_free<S, output<S>, P>::T;
    using typename detail::parameter_free<S, output<S>, P>::D;
    using typename detail::parameter_free<S, output<S>, P>::output_shape;
    std::string name() const { return "Flatten(start_dim=1, end_dim=-1)"; }

    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context) {
      in_ = x.extents();
      return x.template reshape<output_shape>();
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) { return dy.template reshape<S>(in_); }

   private:
    Extents<S> in_{};
  };
};

}  // namespace kiln::nn
