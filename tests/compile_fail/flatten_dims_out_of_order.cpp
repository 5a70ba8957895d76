// expect: flatten_dims_must_be_in_order<kiln::Shape<-1, 3, 4>, 2, 1>
// errors: 1
// torch: "flatten() has invalid args: start_dim cannot come after end_dim". One error naming the shape
// and both dimensions.
#include <kiln/kiln.hpp>

void view(const kiln::Tensor<float, kiln::Shape<kiln::dyn, 3, 4>>& x) {
  auto y = kiln::flatten<2, 1>(x);
  (void)y;
}
