// expect: branch_input_mismatch<1, Shortcut, kiln::Shape<-1, 8>.*a branch is not a kiln::nn layer
// errors: 1
// A branch of an Add that is no layer (a struct of one's own without module<S, P>, accepts<S> and
// output<S>): one error naming the branch's index and type, not a cascade through the block's layers.
#include <kiln/nn/nn.hpp>

struct Shortcut {};

void build() {
  using Block = kiln::nn::Add<kiln::nn::Sequential<kiln::nn::Linear<8, 8>, kiln::nn::ReLU>, Shortcut>;
  kiln::nn::Model<kiln::nn::Sequential<Block, kiln::nn::Linear<8, 2>>, kiln::Shape<kiln::dyn, 8>> model(0);
  (void)model;
}
