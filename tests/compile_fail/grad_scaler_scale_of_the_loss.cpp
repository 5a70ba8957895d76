// expect: GradScaler::scale\(\) takes no argument: kiln's losses take the scale in their backward
// errors: 1
// torch's scaler.scale(loss).backward(): kiln's losses take the scale in their backward
// (ce.backward(logits, y, scaler.loss_scale())). One error saying so, not "no matching function".
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

void train() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 3>>, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::optim::GradScaler<kiln::Cpu> scaler;
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(2);
  kiln::Tensor<std::int64_t, kiln::Shape<kiln::dyn>> y(2);
  kiln::nn::CrossEntropyLoss ce;
  auto loss = ce(model.forward(x), y);
  (void)scaler.scale(loss);
}
