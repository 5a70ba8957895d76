// expect: error: static assertion failed: kiln::Tensor::reshape<S>\(\): the new shape must hold as many elements as the tensor's own
// errors: 1
// A static [4, 6] (24 elements) reshaped to a static [5, 5] (25): refused at compile time, not left to the
// run-time ShapeError.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<4, 6>> t;
  auto r = t.reshape<kiln::Shape<5, 5>>();
  (void)r;
}
