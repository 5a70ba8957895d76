// expect: kiln::matmul: operands must be tensors or kiln::transposed\(tensor\); evaluate expressions first with kiln::eval\(\)
// errors: 1
// An expression is not a matrix in memory: matmul(kiln::eval(x * 2.0f), w). The checks after the first
// one are not reached (no "'rank' is not a member" after it).
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<2, 3>> x;
  kiln::Tensor<float, kiln::Shape<3, 4>> w;
  auto c = kiln::matmul(x * 2.0f, w);
  (void)c;
}
