// expect: In instantiation of 'struct kiln::nn::branch_input_mismatch<1, kiln::nn::Linear<6, 4(, true)?>, kiln::Shape<-1, 8>, kiln::Shape<-1, 6> ?>'.*error: static assertion failed: kiln::nn::Add / Concat: a branch does not accept the block's input
// errors: 1
// A Concat whose second branch expects 6 features where the block's input has 8: every branch reads
// the same x. The error names the branch's index, the branch, the input and what the branch expects
// (Shape<-1, 8> and Shape<-1, 6>: g++ prints kiln::dyn as -1); nothing past the block is inferred, so the
// Linear<12, 2> after it adds no error of its own.
#include <kiln/nn/nn.hpp>

int main() {
  namespace nn = kiln::nn;
  using Block = nn::Concat<nn::Identity, nn::Linear<6, 4>>;
  nn::Model<nn::Sequential<Block, nn::Linear<12, 2>>, kiln::Shape<kiln::dyn, 8>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 8>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
