/// The one place that looks at the compiler: host/device markers, OpenMP pragmas, build facts.
#pragma once

// One line instead of pages of errors about concepts and std::bit_cast: kiln is C++20. (A .cu file of a
// CMake < 3.26 project gets no -std=c++20 unless cmake/KilnCudaCxx20.cmake is included: README.md.)
#if __cplusplus < 202002L
#error "kiln needs C++20: compile with -std=c++20 (nvcc: -std=c++20)"
#endif

// KILN_CUDA_COMPILER: nvcc (or clang-cuda) is compiling this translation unit.
#if defined(__CUDACC__)
#define KILN_CUDA_COMPILER 1
#else
#define KILN_CUDA_COMPILER 0
#endif

// KILN_DEVICE_PASS: this is nvcc's device pass (inside device code only).
#if defined(__CUDA_ARCH__)
#define KILN_DEVICE_PASS 1
#else
#define KILN_DEVICE_PASS 0
#endif

// KILN_WITH_CUDA: the CUDA runtime and libraries are linked (set by the kiln::cuda target).
#ifndef KILN_WITH_CUDA
#define KILN_WITH_CUDA 0
#endif
// KILN_WITH_LIBMVEC: glibc's vector math library is linked (set by the kiln::openmp target where it
// has it: core/vector_math.hpp).
#ifndef KILN_WITH_LIBMVEC
#define KILN_WITH_LIBMVEC 0
#endif
// KILN_WITH_SLEEF: the SLEEF vector math library is linked (set by the kiln::openmp target where it has
// it: core/vector_math.hpp).
#ifndef KILN_WITH_SLEEF
#define KILN_WITH_SLEEF 0
#endif
// KILN_WITH_BLAS: a CBLAS is linked (set by the kiln::blas target).
#ifndef KILN_WITH_BLAS
#define KILN_WITH_BLAS 0
#endif

// KILN_BOUNDS_CHECK: 1 makes a CPU tensor's t[i] and t(i, j, ...) check their indices (an IndexError, as
// torch's indexing raises); 0, the default, leaves them unchecked, as libtorch's accessor (t.at(...) is
// checked either way). The check is a template argument of those operators, so translation units built
// with and without it link together, each keeping its own; define it for the whole program to check all.
#ifndef KILN_BOUNDS_CHECK
#define KILN_BOUNDS_CHECK 0
#endif

#if KILN_CUDA_COMPILER
#define KILN_HOST_DEVICE __host__ __device__
#define KILN_DEVICE __device__
#else
#define KILN_HOST_DEVICE
#define KILN_DEVICE
#endif

#if defined(_MSC_VER)
#define KILN_FORCEINLINE __forceinline
#else
#define KILN_FORCEINLINE inline __attribute__((always_inline))
#endif

// KILN_PRAGMA_OMP(x): `#pragma omp x` when OpenMP is on; nothing otherwise (nor in nvcc's device pass).
#if defined(_OPENMP) && !KILN_DEVICE_PASS
#define KILN_HAS_OPENMP 1
#define KILN_PRAGMA(x) _Pragma(#x)
#define KILN_PRAGMA_OMP(x) KILN_PRAGMA(omp x)
#else
#define KILN_HAS_OPENMP 0
#define KILN_PRAGMA_OMP(x)
#endif

// The half-precision types come from CUDA's headers when they are on the include path (they work in
// plain host code), so a Tensor<__half> means the same type in .cpp and .cu translation units. Without
// them, kiln's own stand-ins (core/half.hpp). -DKILN_HAS_CUDA_HALF=0 takes the stand-ins anyway, in a
// program without CUDA translation units (tests/unit/halfless checks them on a machine with the toolkit).
#if !defined(KILN_HAS_CUDA_HALF) && defined(__has_include)
#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>)
#define KILN_HAS_CUDA_HALF 1
#endif
#endif
#ifndef KILN_HAS_CUDA_HALF
#define KILN_HAS_CUDA_HALF 0
#endif

// KILN_UNROLL: unroll the next loop with a compile-time trip count. Under nvcc only in the device pass:
// its host pass hands `#pragma unroll` to g++ (-Wunknown-pragmas) and rejects `#pragma GCC unroll` (#1675-D).
#if KILN_DEVICE_PASS
#define KILN_UNROLL _Pragma("unroll")
#elif KILN_CUDA_COMPILER
#define KILN_UNROLL
#elif defined(__GNUC__) && !defined(__clang__)
#define KILN_UNROLL _Pragma("GCC unroll 16")
#elif defined(__clang__)
#define KILN_UNROLL _Pragma("unroll")
#else
#define KILN_UNROLL
#endif
