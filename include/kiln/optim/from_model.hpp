/// An optimizer is built from the model, with named options: Adam opt(model, {.lr = 1e-3}). Torch's two
/// habits, Adam(model.parameters(), ...) and SGD(params, 0.01), reach a constructor that stops with one
/// message saying so, instead of a failed deduction that lists every constructor.
#pragma once
#include <type_traits>

#include "kiln/core/type_list.hpp"
#include "kiln/optim/working_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim::detail {

/// A learning rate (or any number) where the options belong.
template <class X>
concept positional_option = std::is_arithmetic_v<X>;

template <class X>
inline constexpr bool is_arena_v = false;
template <class M, class D>
inline constexpr bool is_arena_v<Tensor<M, Shape<dyn>, D>> = true;

/// The refusal of a tensor given where the model belongs; its return type lets the refusing constructor
/// delegate to the arena one (nothing runs: compilation stops here).
template <class X, class Arena>
Arena& refuse_tensor_argument() {
  static_assert(!is_arena_v<X>,
                "kiln::optim: an optimizer is built from the model, not from model.parameters() (torch's "
                "Adam(model.parameters(), lr=1e-3)): write Adam opt(model, {.lr = 1e-3}), or give both arenas, "
                "Adam opt(model.parameters(), model.gradients(), {.lr = 1e-3})");
  static_assert(is_arena_v<X>,
                "kiln::optim: an optimizer is built from a kiln::nn::Model, not from a tensor: "
                "Adam opt(model, {.lr = 1e-3})");
  return *static_cast<Arena*>(nullptr);
}

/// The refusal of a number given where the options belong.
template <class X, class Options>
Options refuse_positional_option() {
  static_assert(!positional_option<X>,
                "kiln::optim: an optimizer's options are named, not positional (torch's SGD(params, 0.01)): "
                "SGD opt(model, {.lr = 0.01}), Adam opt(model, {.lr = 1e-3, .weight_decay = 1e-4})");
  return {};
}

/// The refusal of SGD(model) without options: SGD has no default learning rate (torch's SGD(params)
/// raises for lr too).
template <class Model, class Options>
Options require_lr() {
  static_assert(
      kiln::detail::dependent_false<Model>,
      "kiln::optim::SGD needs a learning rate, as torch's (it has no default): SGD opt(model, {.lr = "
      "0.01}), with momentum SGD opt(model, {.lr = 0.01, .momentum = 0.9})");
  return {};
}

}  // namespace kiln::optim::detail
