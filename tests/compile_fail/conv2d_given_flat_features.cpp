// expect: layer_input_mismatch<0, kiln::nn::Conv2d<3, 6, 5>, kiln::Shape<-1, 3072>, kiln::Shape<-1, 3, 5, 5> ?>
// errors: 1
// A Conv2d given flat features (a CIFAR-10 image as [N, 3072]) names what it takes: [N, 3, H, W] with
// static H and W, shown at the least the kernel fits (5 x 5), not dyn, which it does not take.
#include <kiln/nn/nn.hpp>

void build() {
  using Net = kiln::nn::Sequential<kiln::nn::Conv2d<3, 6, 5>, kiln::nn::ReLU>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3072>> model(0);
  (void)model;
}
