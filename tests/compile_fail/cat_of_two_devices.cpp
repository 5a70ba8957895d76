// expect: operands live on different devices \(kiln::Cpu and kiln::Cuda\)
// errors: 1
// cat of a CPU and a GPU operand (torch: "Expected all tensors to be on the same device"): one error,
// not followed by the GPU code the join would instantiate in a file compiled without CUDA.
#include <kiln/kiln.hpp>

void join() {
  float host[4] = {1, 2, 3, 4};
  kiln::TensorView<const float, kiln::Shape<4>, kiln::Cpu> a{host, {}};
  kiln::TensorView<const float, kiln::Shape<4>, kiln::Cuda> b{nullptr, {}};
  auto c = kiln::cat<0>(a, b);
  (void)c;
}
