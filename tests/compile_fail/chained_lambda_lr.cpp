// expect: error: static assertion failed: kiln::optim::ChainedScheduler: LambdaLR cannot be chained
// errors: 1
// LambdaLR in a ChainedScheduler: torch's sets base_lr * lambda(epoch) at each step, so the last one
// stepped wins instead of the schedules multiplying.
#include <kiln/optim/optim.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> p(4), g(4);
  kiln::optim::SGD<float, kiln::Cpu> opt(p, g, {.lr = 0.1});
  kiln::optim::ChainedScheduler sched(kiln::optim::ExponentialLR(opt, 0.9),
                                      kiln::optim::LambdaLR(opt, [](std::int64_t e) { return 1.0 / (1.0 + e); }));
  sched.step();
}
