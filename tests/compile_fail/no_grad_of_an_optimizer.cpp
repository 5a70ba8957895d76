// expect: NoGrad guards a model .*not an optimizer
// errors: 1
// NoGrad given the optimizer instead of the model: one error naming the rule, not member lookups that
// fail inside NoGrad.
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

void build() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 2>>, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::optim::SGD opt(model, {.lr = 0.1});
  kiln::nn::NoGrad guard(opt);
}
