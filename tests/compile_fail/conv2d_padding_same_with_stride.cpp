// expect: static assertion failed: kiln::nn::Conv2d: padding_same needs stride 1
// errors: 1
// Conv2d<3, 6, 3, 2, padding_same>: torch refuses padding='same' for strided convolutions too.
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Conv2d<3, 6, 3, 2, kiln::nn::padding_same>, kiln::nn::ReLU>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3, 8, 8>> model(0);
  (void)model;
}
