// expect: layer_input_mismatch<2, kiln::nn::Unflatten<1, 16, 4, 4>, kiln::Shape<-1, 100>, kiln::Shape<-1, 256> ?>
// errors: 1
// Unflatten<1, 16, 4, 4> (torch's Unflatten(1, (16, 4, 4))) after 100 features: torch says at run time
// that the sizes don't multiply up to 100; here one compile error names the layer, the shape it is given
// and the one it takes.
#include <kiln/nn/nn.hpp>

void build() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<13, 100>, kiln::nn::ReLU, kiln::nn::Unflatten<1, 16, 4, 4>,
                                   kiln::nn::Conv2d<16, 8, 3>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 13>> model(0);
  (void)model;
}
