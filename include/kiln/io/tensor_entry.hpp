/// A Tensor as a safetensors entry and back: test inputs, outputs and any other tensors moving between
/// kiln and PyTorch (safetensors.torch.save_file / load_file) or between kiln programs.
#pragma once
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/io/safetensors.hpp"
#include "kiln/tensor/shape.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

/// The entry of a tensor (copied to the host): its dtype ("F32", "F16", "I64", ...), extents and bytes.
/// `write_safetensors(path, {{"x", to_entry(x)}})` writes what `safetensors.torch.load_file` reads.
template <class T, class S, class D>
SafetensorsEntry to_entry(const Tensor<T, S, D>& t) {
  static_assert(std::string_view(safetensors_dtype<T>()) != "?",
                "kiln::to_entry: safetensors has no dtype kiln writes for this element type (float, double, "
                "half, bfloat16, int64, int32, uint8, bool)");
  const auto values = t.to_vector();
  std::vector<index_t> shape(S::rank);
  for (std::size_t d = 0; d != S::rank; ++d) shape[d] = t.size(static_cast<int>(d));
  if constexpr (std::is_same_v<T, bool>) {  // (std::vector<bool> packs bits) a byte each, 0 or 1, as torch's
    SafetensorsEntry e{"BOOL", std::move(shape), {}};
    e.bytes.assign(values.begin(), values.end());
    return e;
  } else {
    return make_entry<T>(values, std::move(shape));
  }
}

/// A tensor of shape S (a dyn extent takes the entry's) on device D from an entry: a floating-point
/// entry (F16, BF16, F32, F64) converts into a floating-point T, as torch's `copy_` between dtypes does;
/// an integer T takes its own dtype only (I64 for int64 labels). `name` is for the messages: a
/// ShapeError when the rank or a static extent differs, a ValueError for a dtype T cannot hold.
template <class T, class S, class D = Cpu>
Tensor<T, S, D> tensor_from_entry(const SafetensorsEntry& e, const std::string& name = "the entry",
                                  int device = -1) {
  static_assert(std::string_view(safetensors_dtype<T>()) != "?",
                "kiln::tensor_from_entry: safetensors has no dtype kiln reads into this element type (float, "
                "double, half, bfloat16, int64, int32, uint8, bool)");
  constexpr bool floating = std::is_floating_point_v<T> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;
  const bool entry_floating = e.dtype == "F16" || e.dtype == "BF16" || e.dtype == "F32" || e.dtype == "F64";
  const std::string who = "kiln::tensor_from_entry: '" + detail::name_shown(name) + "' ";
  if (floating ? !entry_floating : e.dtype != safetensors_dtype<T>())
    throw ValueError(who + "is " + e.dtype + ", expected " +
                     (floating ? std::string("a floating-point dtype (F16, BF16, F32 or F64)")
                               : std::string(safetensors_dtype<T>())));
  if (e.shape.size() != S::rank)
    throw ShapeError(who + "has shape " + detail::shape_text(e.shape) + " (rank " + std::to_string(e.shape.size()) +
                     "), expected " + shape_name<S>());
  Extents<S> ext;
  for (std::size_t d = 0; d != S::rank; ++d) ext[d] = e.shape[d];
  for (std::size_t d = 0; d != S::rank; ++d)
    if (S::extents[d] != dyn && e.shape[d] != S::extents[d])
      throw ShapeError(who + "has shape " + detail::shape_text(e.shape) + ", expected " + shape_name<S>() +
                       " (extent " + std::to_string(d) + " is static: " + std::to_string(S::extents[d]) + ")");
  const auto n = static_cast<std::size_t>(detail::checked_numel(ext, sizeof(T), "kiln::tensor_from_entry"));
  if (e.bytes.size() != n * detail::dtype_size(e.dtype))
    throw ValueError(who + "holds " + std::to_string(e.bytes.size()) + " bytes for shape " +
                     detail::shape_text(e.shape) + " of " + e.dtype);
  if constexpr (std::is_same_v<T, bool>) {  // any byte but 0 is true (a bool of another value is UB)
    const auto flags = std::make_unique<bool[]>(n);
    for (std::size_t i = 0; i != n; ++i) flags[i] = e.bytes[i] != 0;
    return Tensor<T, S, D>::from(std::span<const bool>(flags.get(), n), ext, device);
  } else {
    std::vector<T> values(n);
    if (e.dtype == safetensors_dtype<T>()) {
      if (!e.bytes.empty()) std::memcpy(values.data(), e.bytes.data(), e.bytes.size());
    } else if constexpr (std::is_floating_point_v<T>) {
      detail::convert_floating(e, values.data());
    } else if constexpr (floating) {  // half, bfloat16: through double, rounded once
      std::vector<double> wide(values.size());
      detail::convert_floating(e, wide.data());
      for (std::size_t i = 0; i != values.size(); ++i) values[i] = from_compute<T>(wide[i]);
    }
    return Tensor<T, S, D>::from(values, ext, device);
  }
}

}  // namespace kiln
