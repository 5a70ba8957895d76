// expect: layer_input_mismatch<0, kiln::nn::ReflectionPad2d<4>, kiln::Shape<-1, 3, 4, 4>, kiln::Shape<-1, 3, 5, 5> ?>.*error: static assertion failed: kiln::nn::Sequential: shape mismatch
// errors: 1
// ReflectionPad2d<4> on a 4x4 input: torch refuses reflect padding as large as the dimension (its edge
// would be repeated); kiln's Sequential names the layer, the shape and the least it pads
// (Shape<-1, 3, 5, 5>).
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::ReflectionPad2d<4>, kiln::nn::Conv2d<3, 6, 3>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3, 4, 4>> model(0);
  (void)model;
}
