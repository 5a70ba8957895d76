// expect: from an expression: auto r = kiln::eval\(x \* 2.0f\); or assign it
// errors: 1
// A Tensor declared from an expression (libtorch's `torch::Tensor r = x * 2;`) is not a conversion
// here: the error shows the line that says to evaluate it (kiln::eval) or assign it.
#include <kiln/kiln.hpp>

void compute() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> x(3);
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> r = x * 2.0f;
  (void)r;
}
