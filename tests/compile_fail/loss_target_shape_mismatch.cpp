// expect: In instantiation of 'struct kiln::nn::detail::loss_shapes_must_match<kiln::Shape<-1, 1 ?>, kiln::Shape<-1 ?>,.*error: static assertion failed: kiln::nn: a loss's prediction and target must have the same shape
// errors: 1
// A regression head's [N, 1] against targets loaded as [N]: torch would broadcast them to [N, N] (with a
// warning); kiln refuses it with one error naming both shapes, for the loss and its gradient alike.
#include <kiln/nn/nn.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 1>> pred(4);
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> target(4);
  pred.fill(1.0f);
  target.fill(0.5f);
  kiln::nn::MSELoss mse;
  auto loss = mse(pred, target);
  (void)loss.item();
}
