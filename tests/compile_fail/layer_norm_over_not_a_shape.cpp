// expect: static assertion failed: kiln::nn::LayerNormOver<N>: N is the normalised shape as a kiln::Shape, e.g. Shape<6, 28, 28>
// errors: 1
// LayerNormOver takes torch's normalized_shape as a kiln::Shape (LayerNormOver<Shape<6>>, or LayerNorm<6>
// for the last dimension alone); a plain type is reported once, with nothing failing after it.
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 6>, kiln::nn::LayerNormOver<int>, kiln::nn::ReLU>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(2);
  x.fill(1.0f);
  (void)model.forward(x);
}
