// expect: kiln: the result of this in-place op is floating point and the tensor holds integers
// errors: 1
// i *= 0.5 would truncate silently; torch refuses it ("result type Float can't be cast to ... Int").
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<std::int32_t, kiln::Shape<kiln::dyn>> i(8);
  i *= 0.5;
}
