// expect: error: static assertion failed: kiln::optim::SequentialLR: CyclicLR cannot be in a SequentialLR
// errors: 1
// CyclicLR in a SequentialLR: it sets the momentum too, which would stay where the hand-over leaves it.
#include <kiln/optim/optim.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> p(4), g(4);
  kiln::optim::SGD<float, kiln::Cpu> opt(p, g, {.lr = 0.1, .momentum = 0.9});
  kiln::optim::SequentialLR sched({5}, kiln::optim::LinearLR(opt, 0.1, 1.0, 5),
                                  kiln::optim::CyclicLR(opt, 0.01, 0.1, {.step_size_up = 4}));
  sched.step();
}
