// expect: layer_input_mismatch<0, kiln::nn::Linear<13, 16(, true)?>, kiln::Shape<-1, 12>, kiln::Shape<-1, 13> ?>.*as layer 0 given the model's input shape
// errors: 1
// A Model whose network is one bare layer (not in a Sequential) checks the model's input shape against
// it as a Sequential checks its layers: one error naming the layer, the shape given and the one it
// expects, rather than a matmul error at the first forward.
#include <kiln/nn/nn.hpp>

void build() {
  kiln::nn::Model<kiln::nn::Linear<13, 16>, kiln::Shape<kiln::dyn, 12>> model(0);
  (void)model;
}
