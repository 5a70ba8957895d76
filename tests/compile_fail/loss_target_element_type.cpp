// expect: error: static assertion failed: kiln::nn: a loss's target must have the prediction's element type or its compute type
// errors: 1
// Integer targets for a float prediction: MSELoss takes targets of pred's element type (or float for
// half and bfloat16 predictions).
#include <kiln/nn/nn.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 1>> pred(2);
  kiln::Tensor<int, kiln::Shape<kiln::dyn, 1>> target(2);
  pred.fill(0.0f);
  target.fill(1);
  (void)kiln::nn::MSELoss{}(pred, target);
}
