// expect: kiln::mean: the operand holds integers
// errors: 1
// torch refuses mean() of an integer tensor, keepdim or not; the message names the cast to take.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<std::int32_t, kiln::Shape<kiln::dyn, 3>> counts(8);
  auto m = kiln::mean<1>(counts, kiln::keepdim);
  (void)m;
}
