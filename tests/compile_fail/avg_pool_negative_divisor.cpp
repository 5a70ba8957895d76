// expect: static assertion failed: kiln::nn::AvgPool2d<K, Stride, Padding, CeilMode, CountIncludePad, DivisorOverride>: DivisorOverride must be positive
// errors: 1
// AvgPool2d<2, 2, 0, false, true, -4>: torch's divisor_override is a positive count (0 here: none).
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Conv2d<3, 6, 3>, kiln::nn::AvgPool2d<2, 2, 0, false, true, -4>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3, 8, 8>> model(0);
  (void)model;
}
