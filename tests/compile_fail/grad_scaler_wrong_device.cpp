// expect: kiln::optim::GradScaler<D>: the optimizer's gradients live on another device; declare the scaler for theirs: kiln::optim::GradScaler<kiln::Cuda>
// errors: 1
// A GradScaler unscales the gradients of one device (its template argument, kiln::Cpu by default); an
// optimizer whose gradient arena is on the GPU needs GradScaler<kiln::Cuda>. The check is on the
// types alone, so this compiles without CUDA (the optimizer's functions are only declared).
#include <kiln/optim/grad_scaler.hpp>

struct GpuOptimizer {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>, kiln::Cuda>& gradients();
  void step();
};

void train(GpuOptimizer& opt) {
  kiln::optim::GradScaler scaler;  // GradScaler<kiln::Cpu>
  scaler.step(opt);
}
