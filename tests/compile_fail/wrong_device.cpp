// expect: common_device<kiln::Cpu, kiln::Cuda>.*kiln: operands live on different devices.*move one first with .to<kiln::Cuda>
// errors: 1
// One expression cannot read a CPU tensor and a GPU tensor. The check is on the device types alone, so
// this compiles without CUDA: views (leaves) are enough, no Cuda storage is instantiated.
#include <kiln/kiln.hpp>

int main() {
  float host[4] = {1, 2, 3, 4};
  kiln::TensorView<const float, kiln::Shape<4>, kiln::Cpu> a{host, {}};
  kiln::TensorView<const float, kiln::Shape<4>, kiln::Cuda> b{nullptr, {}};
  auto e = a * b;
  (void)e;
}
