// expect: error: static assertion failed: kiln::optim::LinearWarmup: a schedule that sets the momentum \(OneCycleLR, CyclicLR\) cannot be
// errors: 1
// OneCycleLR inside LinearWarmup: its momentum would stop cycling after the warm-up; its own first
// phase is the warm-up.
#include <kiln/optim/optim.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> p(4), g(4);
  kiln::optim::SGD<float, kiln::Cpu> opt(p, g, {.lr = 0.1, .momentum = 0.9});
  kiln::optim::LinearWarmup warm(kiln::optim::OneCycleLR(opt, 0.1, 100), 5);
  warm.step();
}
