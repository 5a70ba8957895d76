// expect: In instantiation of 'struct kiln::nn::layer_input_mismatch<0, kiln::nn::Conv2d<3, 6, 5[^>]*>, kiln::Shape<-1, 1, 28, 28>, kiln::Shape<-1, 3, 28, 28> ?>'.*error: static assertion failed: kiln::nn::Sequential: shape mismatch: the layer at this index does not accept the shape the layers before it produce
// errors: 1
// LeNet's first layer, Conv2d<3, 6, 5>, given one-channel 28 x 28 images (MNIST's [N, 1, 28, 28], not
// CIFAR-10's three channels): the error names layer 0, the shape it was given (Shape<-1, 1, 28, 28>: g++
// prints kiln::dyn as -1) and the one it expects there, [N, 3, 28, 28] (its Conv2d::expects). The layers
// after it are not inferred, so they add no error of their own.
#include <kiln/nn/nn.hpp>

int main() {
  namespace nn = kiln::nn;
  using Net = nn::Sequential<nn::Conv2d<3, 6, 5>, nn::ReLU, nn::MaxPool2d<2>, nn::Flatten, nn::Linear<1176, 10>>;
  nn::Model<Net, kiln::Shape<kiln::dyn, 1, 28, 28>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 1, 28, 28>> x(2);  // [2, 1, 28, 28]
  x.fill(1.0f);
  (void)model.forward(x);
}
