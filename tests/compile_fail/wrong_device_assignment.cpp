// expect: kiln::assign: wrong device: the expression's tensors live on another device than the destination
// errors: 1
// A CPU tensor cannot receive an expression over GPU memory: move the operands first.
#include <kiln/kiln.hpp>

int main() {
  kiln::TensorView<const float, kiln::Shape<4>, kiln::Cuda> g{nullptr, {}};
  kiln::Tensor<float, kiln::Shape<4>> y;  // on the CPU
  y = g * 2.0f;
}
