// expect: kiln: tensors on kiln::Cuda need the CUDA runtime: link your target to kiln::cuda
// Constructing a kiln::Cuda tensor in a target that does not link kiln::cuda (no KILN_WITH_CUDA): the
// first error is the allocator's, "link your target to kiln::cuda" (g++ instantiates the constructor
// before the assignment's executor). Once linked, the next one is "compile this file as CUDA" (see
// cuda_expression_in_cpp_file.cpp) unless the file is compiled by nvcc.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<4>, kiln::Cuda> y;  // [4] on the GPU
  y = 1.0f;
}
