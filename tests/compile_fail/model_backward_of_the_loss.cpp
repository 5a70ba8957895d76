// expect: Model::backward takes dL/dy, the gradient of the loss
// errors: 1
// torch's loss.backward() written model.backward(loss): the loss's value has no graph behind it in kiln.
// One error saying how kiln writes it (model.backward(ce.backward(logits, y))), not "no matching function".
#include <kiln/nn/nn.hpp>

void train() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<13, 4>>, kiln::Shape<kiln::dyn, 13>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 13>> x(8);
  kiln::Tensor<std::int64_t, kiln::Shape<kiln::dyn>> y(8);
  kiln::nn::CrossEntropyLoss ce;
  auto loss = ce(model.forward(x), y);
  model.backward(loss);
}
