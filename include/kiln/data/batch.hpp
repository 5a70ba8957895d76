/// A batch of inputs x and targets y with its index in the epoch: the loaders' batch types share it.
#pragma once
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
};

}  // namespace kiln::data
