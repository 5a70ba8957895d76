// expect: kiln::mean: the operand holds integers
// errors: 1
// torch refuses mean() of an integer tensor; kiln's is a compile error naming the cast to take.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<std::int32_t, kiln::Shape<kiln::dyn>> labels(8);
  auto m = kiln::mean(labels);
  (void)m;
}
