// expect: kiln::where: the condition must be bool-valued
// errors: 1
// torch.where refuses a condition that is not bool ("where expected condition to be a boolean tensor");
// kiln's is a compile error that names the comparison to write (a NaN would otherwise count as true).
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn>> m(8), x(8);
  auto y = kiln::eval(kiln::where(m, x, 0.0f));
  (void)y;
}
