// expect: kiln::assign: right-hand side must be a kiln tensor or expression.*wrap raw buffers with kiln::Tensor<...>::from_blob
// errors: 1
// A std::vector is not an expression: assigning one to a tensor stops at kiln::assign's first check
// (and only there), with the fix: wrap the memory with from_blob, or build the tensor with from().
#include <kiln/kiln.hpp>

#include <vector>

int main() {
  kiln::Tensor<float, kiln::Shape<4>> a;
  std::vector<float> v(4, 1.0f);
  a = v;
}
