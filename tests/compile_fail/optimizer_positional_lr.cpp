// expect: static assertion failed: kiln::optim: an optimizer's options are named, not positional
// errors: 1
// Torch's optim.SGD(params, 0.01): kiln's options are a struct with designated initializers,
// SGD opt(model, {.lr = 0.01}). Without the refusing constructor the deduction failed on every guide.
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

int main() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 2>>, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::optim::SGD opt(model, 0.01);
  opt.step();
}
