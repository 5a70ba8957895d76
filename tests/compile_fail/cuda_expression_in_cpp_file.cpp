// expect: kiln: evaluating an expression on kiln::Cuda needs nvcc: compile this file as CUDA
// Evaluating an expression into a kiln::Cuda tensor in a file g++ compiles: the GPU executor exists only
// for nvcc, and the generic executor's static_assert says how to fix the build. It is the first error
// whether or not the target links kiln::cuda, because this file constructs no Cuda tensor itself (it
// takes a reference). Without kiln::cuda, "link your target to kiln::cuda" follows as the second error
// (assign() can allocate an empty destination); cuda_tensor_without_kiln_cuda.cpp shows that a file that
// constructs a Cuda tensor gets that one first.
#include <kiln/kiln.hpp>

void scale(kiln::Tensor<float, kiln::Shape<4>, kiln::Cuda>& y) {  // [4] on the GPU
  y = y * 2.0f;
}

int main() {}
