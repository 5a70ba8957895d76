// expect: kiln: reduction axis out of range for the operand's rank
// errors: 1
// keepdim keeps an axis the operand has: a rank-2 tensor has axes 0, 1 (or -1, -2), not -3.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(3);
  auto s = kiln::max<-3>(x, kiln::keepdim);
  (void)s;
}
