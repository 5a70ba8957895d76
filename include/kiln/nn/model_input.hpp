/// What a model's forward takes besides its own input type: a static batch where the model's is dynamic,
/// and a float tensor into a half or bfloat16 model (cast, as autocast casts it). Anything else is one
/// compile error that names the model's input and the tensor given.
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>

#include "kiln/core/half.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/shape.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// Whether elements of type U go into a model that stores T: the same type, or float into a model whose
/// storage is half or bfloat16 (autocast casts float inputs; a double it leaves, and the op refuses it).
template <class T, class U>
inline constexpr bool element_fits =
    std::is_same_v<T, U> ||
    (std::is_same_v<U, float> && (std::is_same_v<T, kiln::half> || std::is_same_v<T, kiln::bfloat16>));
}  // namespace detail

/// Fails to compile, naming both tensor types, when a model's forward is given a tensor it cannot take.
template <class ModelInput, class Given>
struct model_input_mismatch {
  // >>> Stopped here? The tensor given to forward is not one the model takes: see the two Tensor<...>
  //     arguments of model_input_mismatch above (the model's input, the tensor given; -1 means dyn). <<<
  static_assert(kiln::detail::dependent_false<Given>,
                "kiln::nn::Model::forward: the input does not fit the model; see the two Tensor<...> arguments "
                "(the model's input, the tensor given) of kiln::nn::model_input_mismatch in this message. The "
                "element type must be the model's storage type (a float tensor into a half or bfloat16 model is "
                "cast for you; else kiln::eval(kiln::cast<T>(x))), the device the model's (x.to<kiln::Cuda>(), "
                "x.to<kiln::Cpu>()), and the shape the model's input wherever both are static (a static batch "
                "into a dyn one is fine); another feature count or image size means the first layer does not fit "
                "the data");
};

namespace detail {
/// x as a model's input Tensor<T, In, D>: a view with the model's shape (its dyn extents x's), cast to T
/// first where x is float and T half or bfloat16 (one pass, a new tensor). A ShapeError where a static
/// extent of the model's meets a different run-time extent of x's.
template <class T, class In, class D, class U, class S, class D2>
Tensor<T, In, D> as_model_input(const Tensor<U, S, D2>& x) {
  if constexpr (std::is_same_v<D, D2> && element_fits<T, U> && static_extents_agree<In, S>) {
    Extents<In> e;
    for (std::size_t i = 0; i != In::rank; ++i) e[i] = x.extents()[i];
    try {
      kiln::detail::check_static_extents(e, "kiln::nn::Model::forward: the input");
    } catch (const ShapeError& error) {
      if (In::extents[0] == dyn || e[0] == In::extents[0]) throw;
      // A batch that is not the model's static one: most often a loader's short last batch.
      throw ShapeError(std::string(error.what()) + ": a batch of " + std::to_string(e[0]) +
                       " rows into a model of a static batch; give the model a dyn batch (Shape<kiln::dyn, ...>), "
                       "or the loader drop_last");
    }
    if constexpr (std::is_same_v<T, U>)
      return x.template reshape<In>(e);
    else
      return kiln::eval(kiln::cast<T>(x)).template reshape<In>(e);
  } else {
    [[maybe_unused]] model_input_mismatch<Tensor<T, In, D>, Tensor<U, S, D2>> check;
    return {};
  }
}
}  // namespace detail

}  // namespace kiln::nn
