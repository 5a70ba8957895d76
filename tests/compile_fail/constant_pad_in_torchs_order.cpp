// expect: could not convert .2. from .int. to .kiln::nn::PadValue.
// errors: 4
// ConstantPad2d<2, 3.5>: torch's order (padding, value) written as is. kiln takes the value first, as a
// floating-point number, so neither argument fits its place: an error, not a padding of 3 with value 2.
#include <kiln/nn/nn.hpp>

using Pad = kiln::nn::ConstantPad2d<2, 3.5>;

int main() {}
