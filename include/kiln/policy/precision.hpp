/// The precision axis: storage, compute and master types, and whether the loss is scaled.
#pragma once
#include <concepts>
#include <string_view>

#include "kiln/core/half.hpp"

namespace kiln {

/// Everything in float32.
struct Fp32 {
  using storage = float;  ///< activations and GEMM/conv operands
  using compute = float;  ///< arithmetic and accumulation
  using master = float;   ///< parameters the optimizer updates
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "fp32";
};

/// float16 storage, float32 arithmetic and master weights, dynamic loss scaling (autocast + GradScaler).
struct MixedFp16 {
  using storage = half;
  using compute = float;
  using master = float;
  static constexpr bool loss_scaling = true;
  static constexpr std::string_view name = "fp16";
};

/// bfloat16 storage, float32 arithmetic and master weights; no loss scaling needed.
struct MixedBf16 {
  using storage = bfloat16;
  using compute = float;
  using master = float;
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "bf16";
};

/// Requirements: `storage`, `compute`, `master` element types, a `loss_scaling` flag and a `name`; `compute`
/// is what kiln computes `storage` in (compute_t: float for half and bfloat16, the type itself otherwise),
/// so a policy cannot declare an arithmetic that the layers would not use.
template <class P>
concept precision_policy_members = requires {
  typename P::storage;
  typename P::compute;
  typename P::master;
  { P::loss_scaling } -> std::convertible_to<bool>;
  { P::name } -> std::convertible_to<std::string_view>;
};
template <class P>
concept precision_policy = precision_policy_members<P> && element<typename P::storage> &&
    element<typename P::master> && std::same_as<typename P::compute, compute_t<typename P::storage>>;

}  // namespace kiln
