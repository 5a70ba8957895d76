// expect: static assertion failed: kiln::nn::Conv2d<In, Out, K, Stride, Padding, Dilation, Groups, Bias, Mode>: the groups must divide both In and Out
// errors: 1
// Conv2d<4, 6, 3, 1, 1, 1, 4>: 6 filters do not split into 4 groups (torch: ValueError at construction).
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Conv2d<4, 6, 3, 1, 1, 1, 4>, kiln::nn::ReLU>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4, 8, 8>> model(0);
  (void)model;
}
