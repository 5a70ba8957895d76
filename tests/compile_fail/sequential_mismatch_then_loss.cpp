// expect: layer_input_mismatch<0, kiln::nn::Linear<13, 16(, true)?>, kiln::Shape<-1, 12>, kiln::Shape<-1, 13> ?>.*error: static assertion failed: kiln::nn::Sequential: shape mismatch
// errors: 1
// The seeds' Net1 (a Sequential inside a Sequential) declared for twelve features where its first layer
// takes 13, then trained with MSELoss against [N, 1] targets: the mismatch's one error. The model's
// output is inferred on from what Linear<13, 16> expected ([N, 1], the shape its author meant), so the
// loss, its backward and Adam add none (its output was [N, 12], the mismatched input: two more errors,
// the loss's shapes).
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

int main() {
  using namespace kiln::nn;
  using Net = Sequential<Sequential<Linear<13, 16>>, ReLU, Sequential<Linear<16, 32>>, ReLU, Linear<32, 1>>;
  Model<Net, kiln::Shape<kiln::dyn, 12>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 12>> x(4);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 1>> target(4);
  MSELoss mse;
  kiln::optim::Adam opt(model, {.lr = 1e-3});
  auto y = model(x);
  auto loss = mse(y, target);
  model.backward(mse.backward(y, target));
  opt.step();
  (void)loss;
}
