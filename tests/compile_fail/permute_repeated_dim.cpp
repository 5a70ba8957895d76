// expect: permute_dims_must_name_each_dim_once<kiln::Shape<-1, 3, 4>, 0, 2, 2>.*kiln::permute: the dimensions must name each dimension of the operand once
// errors: 1
// permute<0, 2, 2> names dimension 2 twice and dimension 1 never. The error names the operand's shape and
// the dimensions given, and it is the only one: the result's shape is not formed.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 3, 4>> x(2);
  auto y = kiln::permute<0, 2, 2>(x);
  (void)y;
}
