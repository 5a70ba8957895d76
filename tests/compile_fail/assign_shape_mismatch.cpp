// expect: shapes_must_match<kiln::Shape<2, 3>, kiln::Shape<3, 2> ?>.*kiln::assign: shape mismatch: the destination's shape and the expression's shape differ
// errors: 1
// Assigning a [3, 2] tensor to a [2, 3] one is a compile error (static shapes are checked by the
// compiler, not at run time). g++ prints the instantiation of
// kiln::shapes_must_match<kiln::Shape<2, 3>, kiln::Shape<3, 2>> (destination, expression) and then the
// message, as the first error.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<2, 3>> a;  // [2, 3]
  kiln::Tensor<float, kiln::Shape<3, 2>> b;  // [3, 2]
  a = b;
}
