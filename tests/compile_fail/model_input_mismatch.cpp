// expect: model_input_mismatch<kiln::Tensor<float, kiln::Shape<-1, 13>, kiln::Cpu>, kiln::Tensor<float, kiln::Shape<-1, 12>.*kiln::nn::Model::forward: the input does not fit the model
// errors: 1
// Twelve features into a model whose first layer takes 13: one error naming the model's input and the
// tensor given (not the compiler's note on a conversion between them).
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<13, 16>, kiln::nn::ReLU, kiln::nn::Linear<16, 1>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 13>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 12>> x(4);
  auto y = model.forward(x);
  (void)y;
}
