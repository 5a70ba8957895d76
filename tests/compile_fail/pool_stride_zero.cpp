// expect: MaxPool2d/AvgPool2d<K, Stride, Padding>: K and stride positive
// errors: 1
// torch.nn.MaxPool2d(2, stride=0) raises "stride should not be zero". One error, the pool's: nothing
// is inferred past it (its output size would divide by the stride), so the layers after it add none.
#include <kiln/nn/nn.hpp>

void build() {
  using Net = kiln::nn::Sequential<kiln::nn::Conv2d<3, 8, 3>, kiln::nn::MaxPool2d<2, 0>, kiln::nn::Flatten,
                                   kiln::nn::Linear<72, 2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3, 8, 8>> model(0);
  (void)model;
}
