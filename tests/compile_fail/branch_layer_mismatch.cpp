// expect: In instantiation of 'struct kiln::nn::layer_input_mismatch<2, kiln::nn::Conv2d<6, 8, 3, 1, 1[^>]*>, kiln::Shape<-1, 8, 6, 6>, kiln::Shape<-1, 6, 6, 6> ?>'.*error: static assertion failed: kiln::nn::Sequential: shape mismatch
// errors: 1
// A layer inside a branch that does not fit what comes before it in the branch (6 input channels after a
// convolution yielding 8): the branch's Sequential names the layer's index in the branch and both shapes
// (given [N, 8, 6, 6], expected [N, 6, 6, 6]), and that is the only error: the block, the Sequential
// holding it and the layers after it report nothing more (no cascade from the shape where the branch
// stopped).
#include <kiln/nn/nn.hpp>

int main() {
  namespace nn = kiln::nn;
  using Block = nn::Add<nn::Sequential<nn::Conv2d<4, 8, 3, 1, 1>, nn::ReLU, nn::Conv2d<6, 8, 3, 1, 1>>,
                        nn::Conv2d<4, 8, 1>>;
  nn::Model<nn::Sequential<Block, nn::ReLU, nn::Flatten, nn::Linear<288, 10>>, kiln::Shape<kiln::dyn, 4, 6, 6>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4, 6, 6>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
