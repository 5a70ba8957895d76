// A CUDA source of an outside project: <kiln/cuda.hpp> compiled by nvcc as C++20 (kiln::kiln's
// cxx_std_20), an expression evaluated on kiln::Cuda when a device is usable, else a skip (exit 0).
#include <kiln/cuda.hpp>

#include <cstdio>

int main() {
  if (!kiln::cuda::is_available()) {
    std::puts("consumer cu: no CUDA device, skipped");
    return 0;
  }
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>, kiln::Cuda> x(3), y(3);   // [3, 4]
  x.fill(2.0f);
  y = kiln::relu(x * 2.0f - 1.0f);
  for (float e : y.to_vector()) {
    if (e != 3.0f) {
      std::puts("consumer cu: wrong");
      return 1;
    }
  }
  std::puts("consumer cu: ok");
  return 0;
}
