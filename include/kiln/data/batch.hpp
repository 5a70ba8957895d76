/// A batch of inputs x and targets y with its index in the epoch: the loaders' batch types share it.
#pragma once
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kiln/core/index.hpp"

namespace kiln::data {

/// Inputs x [B, sample...], targets y [B, target...] (tensors of any element type and device) and the
/// batch's index in the epoch. Copies share the tensors, and so does assignment: it rebinds to the
/// other batch's tensors, as libtorch's Tensor handles do (Tensor's copy-assignment writes values into
/// the storage held, which a short last batch does not fit and a copy kept elsewhere may share).
template <class X, class Y>
struct TensorBatch {
  X x;
  Y y;
  index_t index = 0;
  index_t size() const { return x.size(0); }

  TensorBatch() = default;
  TensorBatch(const TensorBatch&) = default;
  TensorBatch(TensorBatch&&) noexcept = default;
  TensorBatch& operator=(const TensorBatch& o) {
    x = X(o.x);  // a copy shares; its move-assignment rebinds
    y = Y(o.y);
    index = o.index;
    return *this;
  }
  TensorBatch& operator=(TensorBatch&&) noexcept = default;  // Tensor's move-assignment rebinds

  /// torch's `for x, y in loader`: `for (auto [x, y] : loader)` binds the inputs and the targets (the
  /// index stays a member, `batch.index`).
  template <std::size_t I>
  auto& get() & {
    static_assert(I < 2, "kiln::data::TensorBatch: a batch binds two names, [x, y]");
    if constexpr (I == 0) return x; else return y;
  }
  template <std::size_t I>
  const auto& get() const& {
    static_assert(I < 2, "kiln::data::TensorBatch: a batch binds two names, [x, y]");
    if constexpr (I == 0) return x; else return y;
  }
  template <std::size_t I>
  auto&& get() && {
    static_assert(I < 2, "kiln::data::TensorBatch: a batch binds two names, [x, y]");
    if constexpr (I == 0) return std::move(x); else return std::move(y);
  }
};

namespace detail {
template <class X, class Y>
void as_tensor_batch(const TensorBatch<X, Y>&);
}  // namespace detail
/// A TensorBatch or a type derived from it (the loaders' Batch), without const or volatile.
template <class B>
concept tensor_batch = std::is_same_v<B, std::remove_cv_t<B>> && requires(const B& b) { detail::as_tensor_batch(b); };

}  // namespace kiln::data

/// A batch binds as a pair: `auto [x, y] = batch;`.
template <kiln::data::tensor_batch B>
struct std::tuple_size<B> : std::integral_constant<std::size_t, 2> {};
template <std::size_t I, kiln::data::tensor_batch B>
struct std::tuple_element<I, B> {
  using type = std::remove_cvref_t<decltype(std::declval<B&>().template get<I>())>;
};
