// expect: shapes_must_broadcast<kiln::Shape<-1, 3>, kiln::Shape<4> ?>.*kiln: shape mismatch: operand shapes do not broadcast
// errors: 1
// [N, 3] + [4] cannot broadcast (the last extents, 3 and 4, differ and neither is 1). The error names
// both static shapes as the arguments of kiln::shapes_must_broadcast (g++ prints kiln::dyn as -1), and it
// is the only error: the result shape does not cascade into a second one.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 3>> a(2);  // [2, 3]
  kiln::Tensor<float, kiln::Shape<4>> b;                // [4]
  auto e = a + b;
  (void)e;
}
