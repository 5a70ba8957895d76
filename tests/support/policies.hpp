// The device list a policy-generic test runs over: kiln::Cpu in kiln_cpu_test_<module>, kiln::Cuda in
// the same sources compiled by nvcc as kiln_cuda_test_<module> (KILN_TEST_CUDA=1).
#pragma once
#include <string_view>
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

/// Everything in float64: the precision of finite-difference gradient checks and optimizer references.
struct Fp64 {
  using storage = double;
  using compute = double;
  using master = double;
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "fp64";
};
static_assert(kiln::precision_policy<Fp64>);
}  // namespace kiln::test
