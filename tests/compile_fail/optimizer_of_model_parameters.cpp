// expect: static assertion failed: kiln::optim: an optimizer is built from the model, not from model.parameters\(\)
// errors: 1
// Torch's optim.Adam(model.parameters(), lr=1e-3): kiln's optimizers take the model (its gradient arena,
// working copy and parameter names come with it). Without the refusing constructor the deduction failed
// and listed every constructor and guide.
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

int main() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 2>>, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::optim::Adam opt(model.parameters(), {.lr = 1e-3});
  opt.step();
}
