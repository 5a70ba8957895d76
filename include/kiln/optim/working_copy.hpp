/// The working copy an optimizer rewrites in its step under mixed precision (nn/model.hpp).
#pragma once
#include <string>
#include <type_traits>

#include "kiln/core/errors.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim::detail {

/// A model an optimizer can be built on: it has a parameter and a gradient arena.
template <class Model>
concept trainable_model = requires(Model& m) {
  m.parameters();
  m.gradients();
};

/// The model's low-precision working copy of its parameters, or null when it has none (fp32, fp64).
template <class Model>
auto* working_arena_of(Model& m) {
  using W = Tensor<typename Model::T, Shape<dyn>, typename Model::D>;
  if constexpr (requires { Model::has_working_copy; } && Model::has_working_copy)
    return &m.working_parameters();
  else
    return static_cast<W*>(nullptr);
}

/// The working copy's data, checked: an optimizer whose working type W differs from the master type M
/// needs one of the same length; with W = M there is none to write.
template <class M, class W, class D>
W* working_copy(const Tensor<M, Shape<dyn>, D>& params, Tensor<W, Shape<dyn>, D>* work, const char* who) {
  if constexpr (std::is_same_v<W, M>) {
    return nullptr;
  } else {
    if (work == nullptr || work->numel() != params.numel())
      throw ShapeError(std::string("kiln::optim::") + who + ": a working copy of " + std::to_string(params.numel()) +
                       " parameters is needed for a low-precision working type; construct the optimizer from "
                       "the model (it passes model.working_parameters())");
    return work->data();
  }
}

}  // namespace kiln::optim::detail
