// expect: dim_must_be_in_range<kiln::Shape<-1, 3>, 2>.*kiln: dimension out of range
// errors: 1
// narrow<2> on a rank-2 operand: dimension 2 does not exist (0, 1, or -2, -1 as in torch). One error,
// naming the shape and the dimension.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 3>> x(2);
  auto y = kiln::narrow<2>(x, 0, 1);
  (void)y;
}
