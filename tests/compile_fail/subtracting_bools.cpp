// expect: kiln: subtracting bools \(torch refuses it too\)
// errors: 1
// torch raises for bool - bool ("Subtraction, the `-` operator, with two bool tensors is not supported").
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> x(8);
  kiln::Tensor<bool, kiln::Shape<kiln::dyn>> m(8);
  m = (x > 0.0f) - (x < 1.0f);
}
