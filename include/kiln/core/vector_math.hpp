/// The CPU's erf, tanh and log1p in float through glibc's vector math library (libmvec), four elements a
/// call, with the same bits for an element whether a loop handles it in a vector or alone.
///
/// glibc's scalar erff takes about 6 ns an element here, tanhf 13, log1pf 10; their four-wide versions
/// (`_ZGVbN4v_erff`, ...) about 1, 1.7 and 1.4 ns, within 1.9, 1.0 and 2.0 ulp of the exact values
/// (a scan of every 64th float; libmvec's bound is 4). A compiler calls such a
/// function from a vectorised loop (an `omp simd` loop, or -O3's) when it is declared `omp declare simd`;
/// the loop's remainder then calls the scalar, whose bits differ, so an element's value would depend on
/// its position and on how the threads split the loop. Here the scalar is the vector function on one
/// lane (`kiln_erff`), and its clones, the ones the compiler calls for each instruction set (SSE2, AVX,
/// AVX2, AVX-512: `_ZGV{b,c,d,e}N4v_kiln_erff`), all call `_ZGVbN4v_erff` (which glibc picks for the CPU
/// at load time, as OpenBLAS picks its kernels): the same value of an input everywhere in one run. Used
/// where the kiln::openmp target links libmvec (KILN_WITH_LIBMVEC: x86-64 with glibc 2.35 or later);
/// otherwise, and in device code, they are libm's. exp and log stay libm's: their four-wide versions
/// are about twice as fast, but libmvec's expf is off by up to 2.8 ulp (libm's, and torch's Sleef, 1).
#pragma once
#include "kiln/core/config.hpp"

#if KILN_WITH_LIBMVEC && !KILN_DEVICE_PASS && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_VECTOR_MATH 1
#include <immintrin.h>

// For f: glibc's four-wide f; the declaration loops see (four lanes, no mask); its clones, by the vector
// function ABI's names; and the scalar, defined under another C++ name (the declaration carries the simd
// clauses, so it cannot also be the definition: the compiler would make clones of its own).
#define KILN_VECTOR_FUNCTION(f)                                                                             \
  extern "C" __m128 _ZGVbN4v_##f(__m128);                                                                  \
  _Pragma("omp declare simd notinbranch simdlen(4)") extern "C" float kiln_##f(float);                    \
  extern "C" __attribute__((used)) inline __m128 _ZGVbN4v_kiln_##f(__m128 x) { return _ZGVbN4v_##f(x); } \
  extern "C" __attribute__((used)) inline __m128 _ZGVcN4v_kiln_##f(__m128 x) { return _ZGVbN4v_##f(x); } \
  extern "C" __attribute__((used)) inline __m128 _ZGVdN4v_kiln_##f(__m128 x) { return _ZGVbN4v_##f(x); } \
  extern "C" __attribute__((used)) inline __m128 _ZGVeN4v_kiln_##f(__m128 x) { return _ZGVbN4v_##f(x); } \
  namespace kiln::detail {                                                                                 \
  float f##_one_lane(float x) __asm__("kiln_" #f);                                                        \
  __attribute__((used)) inline float f##_one_lane(float x) {                                              \
    return _mm_cvtss_f32(_ZGVbN4v_##f(_mm_set1_ps(x)));                                                    \
  }                                                                                                        \
  }

KILN_VECTOR_FUNCTION(erff)
KILN_VECTOR_FUNCTION(tanhf)
KILN_VECTOR_FUNCTION(log1pf)
#undef KILN_VECTOR_FUNCTION
#else
#define KILN_VECTOR_MATH 0
#endif
