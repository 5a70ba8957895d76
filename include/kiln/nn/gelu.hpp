/// GELU: x Φ(x) with the exact erf form (torch.nn.GELU(approximate='none')), and its tanh
/// approximation (approximate='tanh').
#pragma once
#include <string>

#include "kiln/nn/activation.hpp"
#include "kiln/nn/epilogue.hpp"

namespace kiln::nn {

/// x Φ(x), torch.nn.GELU() (the exact erf form; cuBLASLt's GELU_BIAS epilogue is the tanh
/// approximation, so it is not used). Keeps its input for backward; after a Linear, Conv2d or
/// ConvTranspose2d in a Sequential it runs inside that layer's epilogue. Shapes: any -> the same.
struct GELU : detail::PointwiseActivation<epilogue::Gelu, GELU> {
  static std::string repr() { return "GELU(approximate='none')"; }
};

/// The tanh approximation, torch.nn.GELU(approximate='tanh') (GPT-2's and BERT's "gelu_new"): torch's
/// formula and derivative (epilogue::GeluTanh). Fused after a Linear, Conv2d, ConvTranspose2d or BatchNorm
/// as GELU.
struct GELUTanh : detail::PointwiseActivation<epilogue::GeluTanh, GELUTanh> {
  static std::string repr() { return "GELU(approximate='tanh')"; }
};

}  // namespace kiln::nn
