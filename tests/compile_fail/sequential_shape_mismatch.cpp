// expect: In instantiation of 'struct kiln::nn::layer_input_mismatch<2, kiln::nn::Linear<120, 84(, true)?>, kiln::Shape<-1, 100>, kiln::Shape<-1, 120> ?>'.*error: static assertion failed: kiln::nn::Sequential: shape mismatch: the layer at this index does not accept the shape the layers before it produce
// errors: 1
// Linear<120, 84> after a layer yielding 100 features: the Sequential's shape inference stops at layer 2
// with one error (no cascade: the layers from the mismatch on are not inferred further), whose
// instantiation context names the index (2), the layer (Linear<120, 84>), the shape it was given
// (Shape<-1, 100>: g++ prints kiln::dyn as -1) and the shape it expects there (Shape<-1, 120>: its
// Linear::expects). Using the model further (forward, backward, summary, SGD) adds no error.
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<10, 100>, kiln::nn::ReLU, kiln::nn::Linear<120, 84>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 10>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 10>> x(4);  // [4, 10]
  x.fill(1.0f);
  auto y = model.forward(x);
  model.backward(y);
  kiln::optim::SGD opt(model, {.lr = 0.1});
  opt.step();
  (void)model.summary(4);
}
