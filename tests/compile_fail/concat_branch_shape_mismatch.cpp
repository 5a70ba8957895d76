// expect: In instantiation of 'struct kiln::nn::concat_branches_must_agree<2, kiln::Shape<-1, 4, 5, 5 ?>, kiln::Shape<-1, 4, 3, 3 ?> ?>'.*error: static assertion failed: kiln::nn::Concat: the branches' outputs must agree in every dimension but 1
// errors: 1
// An Inception-like block whose third branch pools without padding: 5x5 becomes 3x3 there, 5x5 in the
// others, so the outputs cannot be joined along the channels. The error names the branch and both
// shapes (g++ prints kiln::dyn as -1).
#include <kiln/nn/nn.hpp>

int main() {
  namespace nn = kiln::nn;
  using Block = nn::Concat<nn::Conv2d<3, 4, 1>, nn::Conv2d<3, 4, 3, 1, 1>,
                           nn::Sequential<nn::MaxPool2d<3, 1>, nn::Conv2d<3, 4, 1>>>;
  nn::Model<nn::Sequential<Block, nn::ReLU>, kiln::Shape<kiln::dyn, 3, 5, 5>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 3, 5, 5>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
