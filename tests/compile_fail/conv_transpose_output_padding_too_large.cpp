// expect: static assertion failed: kiln::nn::ConvTranspose2d<In, Out, K, Stride, Padding, OutputPadding, ...>: the output padding
// errors: 1
// ConvTranspose2d<4, 2, 3, 2, 1, 2>: output padding 2 with stride 2 and dilation 1. torch refuses an
// output padding that reaches both the stride and the dilation (those rows would read no input).
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::ConvTranspose2d<4, 2, 3, 2, 1, 2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4, 5, 5>> model(0);
  (void)model;
}
