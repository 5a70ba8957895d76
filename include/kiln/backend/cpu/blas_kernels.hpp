/// Which kernels the CPU BLAS runs, and a better choice where OpenBLAS did not recognise the CPU.
///
/// OpenBLAS (built DYNAMIC_ARCH, as Debian's) picks its kernels for the CPU when it loads. A release
/// that predates the CPU falls back to Prescott's (SSE3): Debian 12's 0.3.21 does on a Xeon with
/// AVX-512 that it does not know, where OPENBLAS_CORETYPE=SkylakeX runs a 1024^3 SGEMM at 153 GFLOP/s
/// against 19 on one thread (7.9x; LeNet's 128 x 120 x 400, 6x).
#pragma once
#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kiln/core/config.hpp"
#include "kiln/core/index.hpp"

#if KILN_WITH_BLAS
#include <cblas.h>
#endif

namespace kiln::backend::cpu {

namespace detail {
/// The OPENBLAS_CORETYPE to suggest for a CPU whose OpenBLAS runs `core`'s kernels: "SkylakeX" on a CPU
/// with AVX-512 (F, BW, DQ, VL), "Haswell" on one with AVX2 and FMA, where `core` is a kernel set older
/// than that (Prescott and the other SSE-only ones, Sandybridge's AVX); "" where its choice stands or
/// the user chose (`coretype_set`).
inline std::string better_coretype(std::string_view core, bool coretype_set, bool avx512, bool avx2_fma) {
  if (coretype_set || !(avx512 || avx2_fma)) return {};
  constexpr std::string_view older[] = {"Prescott", "Core2",   "Penryn",   "Dunnington", "Nehalem", "Atom",
                                        "Sandybridge", "Opteron", "Opteron_SSE3", "Barcelona", "Bobcat"};
  for (const std::string_view o : older)
    if (core == o) return avx512 ? "SkylakeX" : "Haswell";
  return {};
}
/// Whether OpenBLAS core `core` runs fp32 GEMMs of m n k <= 100^3 through its small-matrix kernels
/// (SMALL_MATRIX_OPT, which skip packing): the AVX-512 cores SkylakeX, Cooperlake and SapphireRapids.
inline bool small_matrix_core(std::string_view core) {
  constexpr std::string_view cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
  std::string lower(core);
  for (char& ch : lower) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  for (const std::string_view c : cores)
    if (lower == c) return true;
  return false;
}
/// The columns of C per call (small_gemm_columns) given whether the BLAS has the small-matrix kernels.
constexpr index_t small_gemm_columns(index_t m, index_t n, index_t k, bool small_kernels) {
  constexpr index_t reach = 1000000;  // OpenBLAS 0.3.21's sgemm_small_kernel_permit: m n k <= 100^3
  if (!small_kernels || m <= 0 || k <= 0 || m * n * k <= reach) return n;
  index_t columns = reach / (m * k);
  columns = columns >= 64 ? columns / 64 * 64 : columns / 16 * 16;  // whole vectors of the kernel's tiles
  return columns < 16 ? n : std::min(columns, n);
}
}  // namespace detail

/// The columns of C per GEMM call for a product [m, k] x [k, n] whose n is long (a convolution's
/// per-image GEMMs, n its output pixels): n (one call), or where OpenBLAS has its small-matrix kernels
/// (small_matrix_core) blocks of columns that keep each call within their reach, a multiple of 64 (or
/// of 16 under 64). On this project's AVX-512 machine (Cooperlake kernels, one thread) a ResNet-20
/// convolution's [16, 144] x [144, 1024] ran at 48 GFLOP/s in one call and 114 in blocks of 384;
/// [32, 288] x [288, 256] 94 -> 117, [64, 576] x [576, 64] 95 -> 111, the input-gradient products
/// ([144, 16] x [16, 1024], ...) 55-97 -> 101-116. Haswell's kernels (AVX2, no small-matrix path) ran
/// the first at 84 in one call and lose a little in blocks: there it stays one call.
inline index_t small_gemm_columns(index_t m, index_t n, index_t k) {
#if KILN_WITH_BLAS && defined(OPENBLAS_VERSION)
  static const bool small_kernels = detail::small_matrix_core(openblas_get_corename());
  return detail::small_gemm_columns(m, n, k, small_kernels);
#else
  (void)m, (void)k;
  return n;
#endif
}

/// The CPU BLAS kiln's GEMMs call: "OpenBLAS 0.3.21, Cooperlake kernels" (its version and
/// openblas_get_corename()), "a CBLAS" (another library), or "none (no KILN_WITH_BLAS)".
inline std::string blas_description() {
#if KILN_WITH_BLAS && defined(OPENBLAS_VERSION)
  std::string version = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
  const auto first = version.find_first_not_of(' '), last = version.find_last_not_of(' ');
  version = first == std::string::npos ? "OpenBLAS" : version.substr(first, last - first + 1);
  return version + ", " + openblas_get_corename() + " kernels";
#elif KILN_WITH_BLAS
  return "a CBLAS";
#else
  return "none (no KILN_WITH_BLAS)";
#endif
}

/// Where OpenBLAS (built DYNAMIC_ARCH: the only kind that reads OPENBLAS_CORETYPE) runs older kernels
/// than this CPU has (it did not recognise the CPU) and OPENBLAS_CORETYPE is not set: the value to set
/// ("SkylakeX", "Haswell"); else "". For a note to the user, as the examples print:
/// `OPENBLAS_CORETYPE=SkylakeX ./lenet ...`.
inline std::string better_blas_coretype() {
#if KILN_WITH_BLAS && defined(OPENBLAS_VERSION) && (defined(__x86_64__) || defined(__i386__)) && \
    (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (std::string_view(openblas_get_config()).find("DYNAMIC_ARCH") == std::string_view::npos) return {};
  return detail::better_coretype(openblas_get_corename(), std::getenv("OPENBLAS_CORETYPE") != nullptr, avx512,
                                 avx2_fma);
#else
  return {};
#endif
}

}  // namespace kiln::backend::cpu
