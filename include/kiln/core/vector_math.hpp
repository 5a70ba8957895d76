/// The CPU's exp, erf, tanh, log1p and expm1 in float through vector math libraries, four elements a call,
/// with the same bits for an element whether a loop handles it in a vector or alone.
///
/// glibc's scalar erff takes about 6 ns an element here, tanhf 13, log1pf 10, expm1f 7-10, expf 2;
/// four-wide versions take about 1, 1.7, 1.4, 1.2 and 1.1 ns: glibc's vector math library (libmvec:
/// `_ZGVbN4v_erff`, ...) for erf, tanh, log1p and expm1, within 1.9, 1.0, 2.0 and 1.8 ulp of the exact
/// values (a scan of every 61st or 64th float; libmvec's bound is 4), and SLEEF's `Sleef_expf4_u10sse2`
/// for exp, within 0.95 ulp as libm's (torch's CPU exp is SLEEF's too; libmvec's expf is off by up to 2.8
/// ulp, SLEEF's erf and tanh are 5-10 times slower than libmvec's, its expm1 4 times). A compiler calls
/// such a function from a vectorised loop (an `omp simd` loop, or -O3's) when it is declared `omp declare
/// simd`; the loop's remainder then calls the scalar, whose bits differ, so an element's value would
/// depend on its position and on how the threads split the loop. Here the scalar is the vector function
/// on one lane (`kiln_erff`), and its clones, the ones the compiler calls for each instruction set (SSE2,
/// AVX, AVX2, AVX-512: `_ZGV{b,c,d,e}N4v_kiln_erff`), all call the same four-wide function (libmvec's
/// picks its code for the CPU at load time, as OpenBLAS picks its kernels; SLEEF's SSE2 one gives the
/// bits of its AVX and plain-C ones, not those of its FMA ones, so it is named): the same value of an
/// input everywhere in one run. Used where the kiln::openmp target links them (KILN_WITH_LIBMVEC: x86-64
/// with glibc 2.35 or later; KILN_WITH_SLEEF: Debian's libsleef-dev); otherwise, and in device code, they
/// are libm's. log stays libm's (2.2 ns; SLEEF's four-wide 3.1, libmvec's off by more than 1 ulp).
#pragma once
#include "kiln/core/config.hpp"

#if (KILN_WITH_LIBMVEC || KILN_WITH_SLEEF) && !KILN_DEVICE_PASS && defined(__x86_64__) && \
    (defined(__GNUC__) || defined(__clang__))
#define KILN_VECTOR_FUNCTIONS 1
#include <immintrin.h>

// For f, computed four lanes a call by vector_f (declared before): the declaration loops see (four lanes,
// no mask; `const`: it reads and writes no memory, so a loop need not reload after a call what it reads
// through a reference, and g++ if-converts a loop that calls it: g++ 12 vectorises neither a row's sum of
// exp(x) nor a select after a call without it); its clones, by the vector function ABI's names; and the
// scalar, defined under another C++ name (the declaration carries the simd clauses, so it cannot also be
// the definition: the compiler would make clones of its own). g++ moves a `const` call whose value only
// one side of a select uses into that side, a branch, and the loop no longer vectorises: the activations
// use the value on both sides (nn/epilogue.hpp).
#define KILN_VECTOR_FUNCTION(f, vector_f)                                                                    \
  _Pragma("omp declare simd notinbranch simdlen(4)")                                                         \
  extern "C" __attribute__((const)) float kiln_##f(float);                                                   \
  extern "C" __attribute__((used)) inline __m128 _ZGVbN4v_kiln_##f(__m128 x) { return vector_f(x); }         \
  extern "C" __attribute__((used)) inline __m128 _ZGVcN4v_kiln_##f(__m128 x) { return vector_f(x); }         \
  extern "C" __attribute__((used)) inline __m128 _ZGVdN4v_kiln_##f(__m128 x) { return vector_f(x); }         \
  extern "C" __attribute__((used)) inline __m128 _ZGVeN4v_kiln_##f(__m128 x) { return vector_f(x); }         \
  namespace kiln::detail {                                                                                   \
  float f##_one_lane(float x) __asm__("kiln_" #f);                                                           \
  __attribute__((used)) inline float f##_one_lane(float x) {                                                 \
    return _mm_cvtss_f32(vector_f(_mm_set1_ps(x)));                                                          \
  }                                                                                                          \
  }
#else
#define KILN_VECTOR_FUNCTIONS 0
#endif

#if KILN_VECTOR_FUNCTIONS && KILN_WITH_LIBMVEC
#define KILN_VECTOR_MATH 1
extern "C" __m128 _ZGVbN4v_erff(__m128);
extern "C" __m128 _ZGVbN4v_tanhf(__m128);
extern "C" __m128 _ZGVbN4v_log1pf(__m128);
extern "C" __m128 _ZGVbN4v_expm1f(__m128);
KILN_VECTOR_FUNCTION(erff, _ZGVbN4v_erff)
KILN_VECTOR_FUNCTION(tanhf, _ZGVbN4v_tanhf)
KILN_VECTOR_FUNCTION(log1pf, _ZGVbN4v_log1pf)
KILN_VECTOR_FUNCTION(expm1f, _ZGVbN4v_expm1f)
#else
#define KILN_VECTOR_MATH 0
#endif

#if KILN_VECTOR_FUNCTIONS && KILN_WITH_SLEEF
#define KILN_VECTOR_EXP 1
// SLEEF's function under a name of kiln's (<sleef.h> declares it with a const return type, which nvcc
// warns about, and a program may include both).
namespace kiln::detail {
__m128 sleef_expf4(__m128) __asm__("Sleef_expf4_u10sse2");
}
KILN_VECTOR_FUNCTION(expf, kiln::detail::sleef_expf4)
#else
#define KILN_VECTOR_EXP 0
#endif

#undef KILN_VECTOR_FUNCTION
