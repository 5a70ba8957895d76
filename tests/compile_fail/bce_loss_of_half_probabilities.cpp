// expect: kiln::nn::BCELoss: probabilities in half or bfloat16 .*BCEWithLogitsLoss on the logits
// errors: 1
// A mixed-precision model ending in Sigmoid, trained with BCELoss: torch's autocast refuses it ("unsafe to
// autocast"); in fp16 or bf16 sigmoid(9) is 1, the loss the clamp's 100 and the gradient through the
// sigmoid 0 (the model stops learning without a word). One error, pointing to BCEWithLogitsLoss.
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 1>, kiln::nn::Sigmoid>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4>, kiln::Policy<kiln::MixedBf16>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(8);
  kiln::Tensor<kiln::bfloat16, kiln::Shape<kiln::dyn, 1>> y(8);
  x.fill(1.0f);
  y.fill(kiln::bfloat16(1.0f));
  kiln::nn::BCELoss bce;
  const auto p = model(x);
  const auto loss = bce(p, y);
  model.backward(bce.backward(p, y));
  (void)loss;
}
