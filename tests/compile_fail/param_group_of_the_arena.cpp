// expect: kiln::optim::ParamGroup::params: give entries of model.named_parameters\(\).*or their names.*not the parameter arena or a tensor
// errors: 1
// torch's add_param_group takes tensors (model.fc.parameters()); kiln's takes the model's
// named_parameters() entries or their names: the parameter arena is refused with a static_assert that
// says what to give.
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 3>, kiln::nn::ReLU, kiln::nn::Linear<3, 2>>;

int main() {
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::optim::AdamW opt(model, {.lr = 1e-3});
  opt.add_param_group({.params = model.parameters(), .weight_decay = 0.0});
}
