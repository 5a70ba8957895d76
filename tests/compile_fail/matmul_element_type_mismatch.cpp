// expect: kiln::matmul: A, B and C must have the same element type \(C may be float when A and B are half or bfloat16\); cast<T>\(\) one of them
// errors: 1
// float x double: GEMM operands share one element type.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<2, 3>> a;
  kiln::Tensor<double, kiln::Shape<3, 5>> b;
  auto c = kiln::matmul(a, b);
  (void)c;
}
