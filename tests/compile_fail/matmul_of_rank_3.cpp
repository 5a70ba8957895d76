// expect: kiln::matmul: operands must be matrices \(rank 2\); kiln has no batched matmul
// errors: 1
// [2, 3, 4] x [4, 5]: matmul takes matrices; no inner-extents error follows the rank's.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<2, 3, 4>> a;
  kiln::Tensor<float, kiln::Shape<4, 5>> b;
  auto c = kiln::matmul(a, b);
  (void)c;
}
