// The device list a policy-generic test runs over: kiln::Cpu in kiln_cpu_test_<module>, kiln::Cuda in
// the same sources compiled by nvcc as kiln_cuda_test_<module> (KILN_TEST_CUDA=1).
#pragma once
#include <tuple>
#include <kiln/kiln.hpp>
#if KILN_TEST_CUDA
#include <kiln/cuda.hpp>  // the CUDA umbrella adds the GPU executor (nvcc only)
#endif
namespace kiln::test {
#if KILN_TEST_CUDA
using devices = std::tuple<kiln::Cuda>;
#else
using devices = std::tuple<kiln::Cpu>;
#endif
}
