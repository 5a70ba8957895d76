/// The device axis: where tensors live and which executor runs an expression.
#pragma once
#include <concepts>
#include <string_view>

namespace kiln {

/// Host memory; expressions run as one OpenMP loop, GEMM through CBLAS.
struct Cpu {
  static constexpr std::string_view name = "cpu";
  static constexpr bool is_cuda = false;
};

/// An NVIDIA GPU; expressions run as one CUDA kernel, GEMM through cuBLAS(Lt), convolution through cuDNN.
/// Declared everywhere; its executor is defined in kiln/cuda.hpp, which only nvcc compiles.
struct Cuda {
  static constexpr std::string_view name = "cuda";
  static constexpr bool is_cuda = true;
};

/// Requirements: a `name` and an `is_cuda` flag. Cpu and Cuda model it.
template <class D>
concept device_policy = requires {
  { D::name } -> std::convertible_to<std::string_view>;
  { D::is_cuda } -> std::convertible_to<bool>;
};

}  // namespace kiln
