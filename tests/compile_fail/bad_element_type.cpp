// expect: kiln::Tensor: element type must be float, double, kiln::half, kiln::bfloat16, uint8_t, int32_t, int64_t or bool
// errors: 1
// char is not an element type.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<char, kiln::Shape<4>> t;
  (void)t;
}
