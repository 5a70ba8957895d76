// expect: error: static assertion failed: kiln::optim::ChainedScheduler: CyclicLR cannot be chained
// errors: 1
// CyclicLR in a ChainedScheduler: torch's sets its lr from base_lr and max_lr at each step (and the
// momentum), so the last one stepped wins instead of the schedules multiplying.
#include <kiln/optim/optim.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> p(4), g(4);
  kiln::optim::SGD<float, kiln::Cpu> opt(p, g, {.lr = 0.1, .momentum = 0.9});
  kiln::optim::ChainedScheduler sched(kiln::optim::ExponentialLR(opt, 0.9),
                                      kiln::optim::CyclicLR(opt, 0.01, 0.1, {.step_size_up = 4}));
  sched.step();
}
