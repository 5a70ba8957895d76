/// Identity: the input passed through, as torch.nn.Identity (a placeholder where a network has a
/// choice of layer, e.g. a shortcut that needs no projection).
#pragma once
#include <string>

#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// Shapes: any, unchanged. The output shares the input's storage, and dx dy's.
struct Identity {
  template <class S>
  static constexpr bool accepts = true;
  template <class S>
  using output = S;

  template <class S, class P>
  class module : public detail::parameter_free<S, S, P> {
   public:
    using typename detail::parameter_free<S, S, P>::T;
    using typename detail::parameter_free<S, S, P>::D;
    std::string name() const { return "Identity()"; }
    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context) { return x; }
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy) { return dy; }
  };
};

}  // namespace kiln::nn
