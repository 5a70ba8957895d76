// expect: error: static assertion failed: kiln::optim::SequentialLR: OneCycleLR cannot be in a SequentialLR
// errors: 1
// OneCycleLR in a SequentialLR: it sets the momentum too, which would stay where the hand-over leaves
// it; its own first phase is the warm-up.
#include <kiln/optim/optim.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> p(4), g(4);
  kiln::optim::SGD<float, kiln::Cpu> opt(p, g, {.lr = 0.1, .momentum = 0.9});
  kiln::optim::SequentialLR sched({5}, kiln::optim::LinearLR(opt, 0.1, 1.0, 5), kiln::optim::OneCycleLR(opt, 0.1, 100));
  sched.step();
}
