// expect: In instantiation of 'struct kiln::nn::residual_branch_must_keep_the_shape<kiln::Shape<-1, 8 ?>, kiln::Shape<-1, 4 ?> ?>'.*error: static assertion failed: kiln::nn::Residual: the branch must keep the shape of its input
// errors: 1
// A Residual whose branch turns [N, 8] into [N, 4]: x + f(x) cannot be formed. The error names both
// shapes (g++ prints kiln::dyn as -1).
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Residual<kiln::nn::Linear<8, 4>, kiln::nn::ReLU>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 8>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 8>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
