// expect: kiln::optim::GradScaler: the optimizer needs gradients\(\) returning its gradient arena
// errors: 1
// GradScaler unscales an optimizer's gradient arena in place, so the optimizer must expose it as
// `gradients()` (kiln's SGD, Adam and AdamW do).
#include <kiln/optim/grad_scaler.hpp>

struct MyOptimizer {
  void step() {}
};

int main() {
  MyOptimizer opt;
  kiln::optim::GradScaler scaler;
  scaler.unscale_(opt);
}
