// expect: In instantiation of 'struct kiln::nn::layer_input_mismatch<1, Scale, kiln::Shape<-1, 4>, kiln::nn::see_the_layers_accepts ?>'.*error: static assertion failed: kiln::nn::Sequential: the type at this index is not a kiln::nn layer
// errors: 1
// A type that is no layer (no accepts<Shape>) in a Sequential: one error naming its index and the type,
// not a cascade of "is not a member" errors.
#include <kiln/nn/nn.hpp>

struct Scale {  // a user's functor, not a layer
  float k = 2.0f;
};

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<3, 4>, Scale, kiln::nn::Linear<4, 2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 3>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
