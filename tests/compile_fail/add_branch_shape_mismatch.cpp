// expect: In instantiation of 'struct kiln::nn::add_branches_must_agree<1, kiln::Shape<-1, 8, 3, 3 ?>, kiln::Shape<-1, 8, 6, 6 ?> ?>'.*error: static assertion failed: kiln::nn::Add: every branch must yield the same shape
// errors: 1
// A ResNet block whose shortcut forgets the stride: the main branch halves 6x6 to 3x3, the shortcut
// keeps 6x6, so f(x) + g(x) cannot be formed. The error names the branch and both shapes (g++ prints
// kiln::dyn as -1).
#include <kiln/nn/nn.hpp>

int main() {
  namespace nn = kiln::nn;
  using Block = nn::Add<nn::Sequential<nn::Conv2d<4, 8, 3, 2, 1>, nn::ReLU, nn::Conv2d<8, 8, 3, 1, 1>>,
                        nn::Conv2d<4, 8, 1>>;
  nn::Model<nn::Sequential<Block, nn::ReLU>, kiln::Shape<kiln::dyn, 4, 6, 6>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4, 6, 6>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
