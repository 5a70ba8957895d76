/// The pass of an Add or a Residual (nn/branches.hpp, nn/residual.hpp) that also runs the activation
/// after it in a Sequential: y = E(f0(x) + f1(x) + ...), ResNet's ReLU after the sum, in the pass that
/// adds the branches (the activation's own pass over the block's output saved); its derivative in one
/// pass before the branches' backward, as the activation's own.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn::detail {

/// y[i] = E(Σ_k parts[k][i]): the parts added in order in the compute type (fp32 for 16-bit storage, as
/// the unfused `y = a + b + c`), the sum rounded to T, E applied to that: the bits of the two layers run
/// one after the other (and of torch's add then activation under autocast). KeepSum: z[i] = the rounded
/// sum too, for an E whose derivative reads its input (GELU, SiLU).
template <class T, class E, std::size_t N, bool KeepSum>
struct SumEpilogue {
  std::array<const T*, N> parts;
  T* z;
  T* y;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    compute_t<T> s = to_compute(parts[0][i]);
    for (std::size_t k = 1; k < N; ++k) s += to_compute(parts[k][i]);
    const T sum = from_compute<T>(s);
    if constexpr (KeepSum) z[i] = sum;
    y[i] = from_compute<T>(E::forward(to_compute(sum)));
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<T>(n) * (N + (KeepSum ? 2 : 1)),
            static_cast<std::uint64_t>(n) * (N - 1 + (E::identity ? 0 : 1))};
  }
};

/// y = E(first + rest...) in one pass (the parts: tensors of one type); `saved` gets what E's derivative
/// reads (y, or the sum) when `grad`, else nothing.
template <class E, class X, class... Rest>
X sum_epilogue(X& saved, bool grad, const X& first, const Rest&... rest) {
  using T = typename X::element_type;
  constexpr std::size_t n = 1 + sizeof...(Rest);
  constexpr bool needs_sum = !E::identity && !E::saves_output;
  X y(first.extents(), first.device_index());
  X z = needs_sum && grad ? X(first.extents(), first.device_index()) : X();
  const std::array<const T*, n> parts{first.data(), rest.data()...};
  using Device = typename X::device;
  if (needs_sum && grad)
    kiln::detail::executor<Device>::for_each(y.numel(),
                                             SumEpilogue<T, E, n, true>{parts, z.data(), y.data()});
  else
    kiln::detail::executor<Device>::for_each(y.numel(),
                                             SumEpilogue<T, E, n, false>{parts, nullptr, y.data()});
  saved = grad && !E::identity ? (E::saves_output ? y : z) : X();
  return y;
}

/// dL/dz = E'(dy, saved) in one pass, the saved value released; `layer` ("Add") names the layer in the
/// errors.
template <class E, class X>
X epilogue_backward(const X& dy, X& saved, const char* layer) {
  if constexpr (E::identity) {
    return dy;
  } else {
    if (saved.empty() && dy.numel() != 0)
      throw Error("kiln::nn::" + std::string(layer) +
                  "::backward: nothing saved; run forward with gradients enabled first");
    if (!saved.empty()) check_backward_rows(layer, dy.size(0), saved.size(0));  // (more would read past it)
    using T = typename X::element_type;
    X dz(dy.extents(), dy.device_index());
    kiln::detail::executor<typename X::device>::for_each(
        dz.numel(), EpilogueGrad<T, E>{dy.data(), saved.data(), dz.data()});
    saved = X();
    return dz;
  }
}

}  // namespace kiln::nn::detail
