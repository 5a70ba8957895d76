// expect: the optimizer's element type, device or working type is not the model's
// errors: 1
// Adam<double, kiln::Cpu> on an fp32 model: the optimizer's template arguments are not the model's (its
// Policy's). One error naming the rule, not a failed call that lists every constructor.
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

void build() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 2>>, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::optim::Adam<double, kiln::Cpu> opt(model, {.lr = 1e-3});
  (void)opt;
}
