/// Which kernels the CPU BLAS runs, and a better choice where OpenBLAS did not recognise the CPU.
///
/// OpenBLAS (built DYNAMIC_ARCH, as Debian's) picks its kernels for the CPU when it loads. A release
/// that predates the CPU falls back to Prescott's (SSE3): Debian 12's 0.3.21 does on a Xeon with
/// AVX-512 that it does not know, where OPENBLAS_CORETYPE=SkylakeX runs a 1024^3 SGEMM at 153 GFLOP/s
/// against 19 on one thread (7.9x; LeNet's 128 x 120 x 400, 6x).
#pragma once
#include <cstdlib>
#include <string>
#include <string_view>

#include "kiln/core/config.hpp"

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
}  // namespace detail

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
