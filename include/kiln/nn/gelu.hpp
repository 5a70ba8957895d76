/// GELU: x Φ(x) with the exact erf form (torch.nn.GELU(approximate='none')).
#pragma once
#include <string>

#include "kiln/nn/activation.hpp"
#include "kiln/nn/epilogue.hpp"

namespace kiln::nn {

/// x Φ(x), torch.nn.GELU() (the exact erf form; cuBLASLt's GELU_BIAS epilogue is the tanh
/// approximation, so it is not used). Keeps its input for backward. Shapes: any -> the same.
struct GELU : detail::PointwiseActivation<epilogue::Gelu, GELU> {
  static std::string repr() { return "GELU(approximate='none')"; }
};

/// After a Linear or Conv2d in a Sequential, GELU runs inside its epilogue (nn/epilogue.hpp).
template <>
struct epilogue_of<GELU> {
  using type = epilogue::Gelu;
};

}  // namespace kiln::nn
