// expect: kiln: reduction axis out of range for the operand's rank
// errors: 1
// A rank-2 tensor has axes 0, 1 (or -1, -2); axis 2 does not exist.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(3);
  auto s = kiln::sum<2>(x);
  (void)s;
}
