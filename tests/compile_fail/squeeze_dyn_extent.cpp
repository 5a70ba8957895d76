// expect: squeeze_extent_must_be_static<kiln::Shape<-1, 1, -1>, 2>.*extent is dyn
// errors: 1
// torch's x.squeeze(2) drops dimension 2 only when it is 1 at run time; a dyn extent would make the
// result's type depend on it, so kiln refuses it with one error that says to reshape.
#include <kiln/kiln.hpp>

void view(const kiln::Tensor<float, kiln::Shape<kiln::dyn, 1, kiln::dyn>>& x) {
  auto y = kiln::squeeze<2>(x);
  (void)y;
}
