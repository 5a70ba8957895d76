// expect: kiln::optim::GradScaler<D>: D is the device of the gradients it unscales; give kiln::Cpu or kiln::Cuda
// errors: 1
// GradScaler's template argument is a device, not an element type: GradScaler<kiln::Cpu> (the default)
// or GradScaler<kiln::Cuda>.
#include <kiln/optim/grad_scaler.hpp>

int main() {
  kiln::optim::GradScaler<float> scaler;
  (void)scaler;
}
