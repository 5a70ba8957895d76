// expect: In instantiation of 'struct kiln::nn::layer_input_mismatch<1, kiln::nn::LayerNorm<6(, 1\.0+e-0?5f?, true)?>, kiln::Shape<-1, 5>, kiln::Shape<-1, 6> ?>'.*error: static assertion failed: kiln::nn::Sequential: shape mismatch: the layer at this index does not accept the shape the layers before it produce
// errors: 1
// LayerNorm<6> normalises the last dimension, which must be 6: after Linear<4, 5> the Sequential stops at
// layer 1 and names it, the shape it was given (Shape<-1, 5>: g++ prints kiln::dyn as -1) and the one it
// expects (Shape<-1, 6>).
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 5>, kiln::nn::LayerNorm<6>, kiln::nn::ReLU>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
