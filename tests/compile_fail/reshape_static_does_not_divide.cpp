// expect: the tensor's elements \(static here\) do not divide into the new shape's static extents
// errors: 1
// A static [4, 6] (24 elements) viewed as [dyn, 5]: no row count fits (torch: "shape '[-1, 5]' is invalid
// for input of size 24"). Both shapes are known when compiling, so it does not compile.
#include <kiln/kiln.hpp>

void view() {
  kiln::Tensor<float, kiln::Shape<4, 6>> x;
  auto y = x.reshape<kiln::Shape<kiln::dyn, 5>>();
  (void)y;
}
