// expect: kiln: bitwise &, \|, \^, ~ take integers or bools \(torch refuses floating point too\)
// errors: 1
// x & m with x a float tensor: one error naming what the bitwise operations take (torch's
// "bitwise_and_cpu" not implemented for 'Float'), not a wall of template errors.
#include <kiln/kiln.hpp>

void mask(const kiln::Tensor<float, kiln::Shape<4>>& x, const kiln::Tensor<bool, kiln::Shape<4>>& m) {
  kiln::Tensor<float, kiln::Shape<4>> y;
  y = x & m;
}
