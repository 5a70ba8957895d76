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

/// Whether an optimizer of master type M, working type W on device D steps Model (its M, D and T).
template <class Model, class M, class D, class W>
inline constexpr bool steps_model =
    std::is_same_v<typename Model::M, M> && std::is_same_v<typename Model::D, D> &&
    std::is_same_v<typename Model::T, W>;

/// m.parameters() for an optimizer of M, W on D: one error naming the rule where the model's types are
/// others (`Adam<double, kiln::Cpu> opt(fp32_model, ...)`), in place of a failed call that lists every
/// constructor.
template <class M, class D, class W, class Model>
Tensor<M, Shape<dyn>, D>& parameters_for(Model& m) {
  // >>> Stopped here? The optimizer's template arguments (element type, device, working type) are not
  //     the model's; leave them out and the model gives them. <<<
  static_assert(steps_model<Model, M, D, W>,
                "kiln::optim: the optimizer's element type, device or working type is not the model's (its "
                "Policy's); leave the template arguments out, Adam opt(model, {.lr = 1e-3}), and they are "
                "the model's");
  if constexpr (steps_model<Model, M, D, W>)
    return m.parameters();
  else
    return *static_cast<Tensor<M, Shape<dyn>, D>*>(nullptr);  // (not reached: compilation stopped)
}
/// m.gradients() for an optimizer of M, W on D (parameters_for says what is wrong otherwise).
template <class M, class D, class W, class Model>
Tensor<M, Shape<dyn>, D>& gradients_for(Model& m) {
  if constexpr (steps_model<Model, M, D, W>)
    return m.gradients();
  else
    return *static_cast<Tensor<M, Shape<dyn>, D>*>(nullptr);
}
/// working_arena_of(m) for an optimizer of M, W on D (parameters_for says what is wrong otherwise).
template <class M, class D, class W, class Model>
Tensor<W, Shape<dyn>, D>* working_arena_for(Model& m) {
  if constexpr (steps_model<Model, M, D, W>)
    return working_arena_of(m);
  else
    return nullptr;
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
