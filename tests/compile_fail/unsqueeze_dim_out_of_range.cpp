// expect: unsqueeze_dim_must_be_in_range<kiln::Shape<-1, 3>, 3>.*Dim must be in 0 .. rank
// errors: 1
// torch: x.unsqueeze(3) of a 2-d tensor raises "Dimension out of range (expected to be in range of [-3, 2],
// but got 3)". One error naming the rule and the shape; nothing past it is instantiated.
#include <kiln/kiln.hpp>

void view() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 3>> x(2);
  auto y = kiln::unsqueeze<3>(x);
  (void)y;
}
