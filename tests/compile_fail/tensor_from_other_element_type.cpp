// expect: another element type or device: kiln::eval\(kiln::cast<T>\(x\)\), x\.to<Dev>\(\), or g = x; into an allocated g
// errors: 1
// A half tensor does not initialise a float one (a copy shares storage, and storage has one element
// type): the diagnostic's note shows the deleted constructor's line, which says how to convert.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<kiln::half, kiln::Shape<4>> h;
  kiln::Tensor<float, kiln::Shape<4>> g = h;
  (void)g;
}
