// expect: static assertion failed: kiln::nn::Conv2d<In, Out, K, Stride, Padding, Dilation, Groups, Bias, Mode>: the dilation must be positive
// errors: 1
// Conv2d<3, 6, 3, 1, 1, false>: the order before dilation and groups came in (Bias sixth) meets the torch
// order (Dilation sixth): `false` is a dilation of 0, refused with the order spelled out.
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Conv2d<3, 6, 3, 1, 1, false>, kiln::nn::ReLU>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3, 8, 8>> model(0);
  (void)model;
}
