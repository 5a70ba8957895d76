// expect: In instantiation of 'struct kiln::nn::residual_branch_must_keep_the_shape<kiln::Shape<-1, 8 ?>, kiln::Shape<-1, 4 ?> ?>'.*error: static assertion failed: kiln::nn::Residual: the branch must keep the shape of its input
// errors: 1
// A Residual whose branch turns [N, 8] into [N, 4], followed by a head sized for the branch's output
// (Linear<4, 2>): the Residual's error comes, alone, before the head is checked against [N, 8].
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Residual<kiln::nn::Linear<8, 4>, kiln::nn::ReLU>, kiln::nn::Linear<4, 2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 8>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 8>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
