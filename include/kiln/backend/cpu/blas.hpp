/// CPU GEMM through CBLAS (OpenBLAS): float and double directly, half and bfloat16 via float.
#pragma once
#include <type_traits>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/type_list.hpp"

#if KILN_WITH_BLAS
#include <cblas.h>
#endif

namespace kiln::backend::cpu {

/// C[M, N] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [M, K] (A stored [K, M] when trans_a).
/// T is A's and B's element type; C is T, or float for half/bfloat16 operands (mixed precision: a
/// gradient accumulated in float32 from half activations).
template <class T, class TC = T>
void gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, float alpha, const T* a, index_t lda,
          const T* b, index_t ldb, float beta, TC* c, index_t ldc) {
#if KILN_WITH_BLAS
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float> && std::is_same_v<TC, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k),
                alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  } else if constexpr (std::is_same_v<T, double> && std::is_same_v<TC, double>) {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k),
                alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  } else if constexpr ((std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) &&
                       (std::is_same_v<TC, T> || std::is_same_v<TC, float>)) {
    // Low precision on the CPU: widen to float (exact), one sgemm (fp32 accumulation), round C back
    // once unless it is float already.
    const index_t ra = trans_a ? k : m, ca = trans_a ? m : k, rb = trans_b ? n : k, cb = trans_b ? k : n;
    std::vector<float> fa(static_cast<std::size_t>(ra * ca)), fb(static_cast<std::size_t>(rb * cb));
    for (index_t i = 0; i < ra; ++i)
      for (index_t j = 0; j < ca; ++j) fa[i * ca + j] = to_compute(a[i * lda + j]);
    for (index_t i = 0; i < rb; ++i)
      for (index_t j = 0; j < cb; ++j) fb[i * cb + j] = to_compute(b[i * ldb + j]);
    if constexpr (std::is_same_v<TC, float>) {
      gemm<float>(trans_a, trans_b, m, n, k, alpha, fa.data(), ca, fb.data(), cb, beta, c, ldc);
    } else {
      std::vector<float> fc(static_cast<std::size_t>(m * n));
      if (beta != 0.0f)
        for (index_t i = 0; i < m; ++i)
          for (index_t j = 0; j < n; ++j) fc[i * n + j] = to_compute(c[i * ldc + j]);
      gemm<float>(trans_a, trans_b, m, n, k, alpha, fa.data(), ca, fb.data(), cb, beta, fc.data(), n);
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) c[i * ldc + j] = from_compute<T>(fc[i * n + j]);
    }
  } else {
    static_assert(kiln::detail::dependent_false<T>,
                  "kiln::matmul: CPU GEMM supports float, double, half and bfloat16 operands, with C of the same "
                  "type (or float for half and bfloat16 operands)");
  }
#else
  (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb,
      (void)beta, (void)c, (void)ldc;
  // >>> Stopped here? CPU matmul needs a CBLAS. <<<
  static_assert(kiln::detail::dependent_false<T>,
                "kiln::matmul on the CPU needs a CBLAS: link your target to kiln::blas (OpenBLAS)");
#endif
}

}  // namespace kiln::backend::cpu
