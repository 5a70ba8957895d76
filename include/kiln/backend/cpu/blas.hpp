/// CPU GEMM through CBLAS (OpenBLAS): float and double directly, half and bfloat16 via float.
#pragma once
#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "kiln/backend/cpu/blas_kernels.hpp"
#include "kiln/core/config.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/type_list.hpp"

#if KILN_WITH_BLAS
#include <cblas.h>
#endif

namespace kiln::backend::cpu {

#if KILN_WITH_BLAS
/// The CBLAS integer: OpenBLAS's blasint (32 bits in Debian's, 64 in an INTERFACE64 build); int in
/// another CBLAS (the reference one, BLIS's).
#if defined(OPENBLAS_VERSION)
using blas_int = blasint;
#else
using blas_int = int;
#endif
#endif

/// While one is alive (and `active`), OpenBLAS runs each GEMM on the thread that calls it: for GEMMs called
/// from inside an OpenMP parallel region, one per thread (a convolution's per-image GEMMs). Debian's
/// default OpenBLAS, built with pthreads, would hand each of them to its one thread pool, which serves one
/// caller at a time while the others spin in sched_yield: ResNet-20's training step on 2 cores took 9x as
/// long (perf: 85% of the time in exec_blas_async and sched_yield, 3% in the GEMM kernel). The OpenMP
/// build runs nested calls on their thread by itself, and another CBLAS is left alone. Guards nest and
/// overlap across threads (DataParallel's CPU replicas): the first sets one thread, the last restores the
/// number it found.
class SerialBlas {
 public:
  explicit SerialBlas(bool active = true) : active_(active && pthreads()) {
#if defined(OPENBLAS_VERSION)
    if (!active_) return;
    const std::lock_guard<std::mutex> lock(state().mutex);
    if (state().depth++ == 0) {
      state().threads = openblas_get_num_threads();
      openblas_set_num_threads(1);
    }
#endif
  }
  ~SerialBlas() {
#if defined(OPENBLAS_VERSION)
    if (!active_) return;
    const std::lock_guard<std::mutex> lock(state().mutex);
    if (--state().depth == 0) openblas_set_num_threads(state().threads);
#endif
  }
  SerialBlas(const SerialBlas&) = delete;
  SerialBlas& operator=(const SerialBlas&) = delete;

 private:
  struct State {
    std::mutex mutex;
    int depth = 0;
    int threads = 1;
  };
  static State& state() {
    static State s;
    return s;
  }
  /// Whether the linked BLAS is OpenBLAS built with its own pthreads pool.
  static bool pthreads() {
#if defined(OPENBLAS_VERSION)
    static const bool value = openblas_get_parallel() == 1;
    return value;
#else
    return false;
#endif
  }
  bool active_;
};

/// dst[i ld_dst + j] = src[i ld_src + j] converted (widened to float, or rounded back) over a rows x cols
/// block, the rows spread over the OpenMP threads when the block is large.
template <class To, class From>
void convert_block(const From* src, index_t ld_src, index_t rows, index_t cols, To* dst, index_t ld_dst) {
  const bool parallel = rows > 1 && rows * cols >= (index_t(1) << 15);
  (void)parallel;
  KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel))
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) dst[i * ld_dst + j] = from_compute<To>(to_compute(src[i * ld_src + j]));
}

/// C[M, N] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [M, K] (A stored [K, M] when trans_a).
/// T is A's and B's element type; C is T, or float for half/bfloat16 operands (mixed precision: a
/// gradient accumulated in float32 from half activations). alpha and beta are doubles (as torch.addmm's),
/// narrowed to float for a float product.
template <class T, class TC = T>
void gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, double alpha, const T* a, index_t lda,
          const T* b, index_t ldb, double beta, TC* c, index_t ldc) {
#if KILN_WITH_BLAS
  // >>> Stopped here? A dimension exceeds the CBLAS integer (32 bits in Debian's OpenBLAS). <<<
  for (const index_t d : {m, n, k, lda, ldb, ldc})
    if (d > std::numeric_limits<blas_int>::max())
      throw ValueError("kiln::matmul (CPU): a dimension of " + std::to_string(d) + " exceeds this BLAS's integer (" +
                       std::to_string(std::numeric_limits<blas_int>::max()) + "); split the product");
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  // CBLAS wants ld >= max(1, ...); an operand with no elements (k or n == 0) has ld 0 in row-major.
  const auto ld = [](index_t v) { return static_cast<blas_int>(std::max<index_t>(v, 1)); };
  if constexpr (std::is_same_v<T, float> && std::is_same_v<TC, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blas_int>(m), static_cast<blas_int>(n),
                static_cast<blas_int>(k), static_cast<float>(alpha), a, ld(lda), b, ld(ldb),
                static_cast<float>(beta), c, ld(ldc));
  } else if constexpr (std::is_same_v<T, double> && std::is_same_v<TC, double>) {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blas_int>(m), static_cast<blas_int>(n),
                static_cast<blas_int>(k), alpha, a, ld(lda), b, ld(ldb), beta, c, ld(ldc));
  } else if constexpr ((std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) &&
                       (std::is_same_v<TC, T> || std::is_same_v<TC, float>)) {
    // Low precision on the CPU: widen to float (exact), one sgemm (fp32 accumulation), round C back
    // once unless it is float already. The float copies are not zeroed first and are converted in
    // parallel (serial, the widening took a quarter of a 32 x 1024 x 1024 bf16 GEMM).
    const index_t ra = trans_a ? k : m, ca = trans_a ? m : k, rb = trans_b ? n : k, cb = trans_b ? k : n;
    const std::unique_ptr<float[]> fa(new float[static_cast<std::size_t>(ra * ca)]);
    const std::unique_ptr<float[]> fb(new float[static_cast<std::size_t>(rb * cb)]);
    convert_block(a, lda, ra, ca, fa.get(), ca);
    convert_block(b, ldb, rb, cb, fb.get(), cb);
    if constexpr (std::is_same_v<TC, float>) {
      gemm<float>(trans_a, trans_b, m, n, k, alpha, fa.get(), ca, fb.get(), cb, beta, c, ldc);
    } else {
      const std::unique_ptr<float[]> fc(new float[static_cast<std::size_t>(m * n)]);
      if (beta != 0.0) convert_block(c, ldc, m, n, fc.get(), n);
      gemm<float>(trans_a, trans_b, m, n, k, alpha, fa.get(), ca, fb.get(), cb, beta, fc.get(), n);
      convert_block(fc.get(), n, m, n, c, ldc);
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
                "kiln::matmul on the CPU needs a CBLAS: link your target to kiln::blas (OpenBLAS); without CMake, "
                "compile with -DKILN_WITH_BLAS=1 and link -lopenblas");
#endif
}

/// gemm with B not transposed, in calls of `columns` columns of B and C each (the last one shorter): the
/// same product, which an fp32 convolution's per-image GEMMs run in OpenBLAS's small-matrix kernels
/// where it has them (small_gemm_columns, the default for float; one call otherwise).
template <class T>
void gemm_in_column_blocks(bool trans_a, index_t m, index_t n, index_t k, double alpha, const T* a,
                           index_t lda, const T* b, index_t ldb, double beta, T* c, index_t ldc,
                           index_t columns = 0) {
  if (columns <= 0) {
    if constexpr (std::is_same_v<T, float>)
      columns = small_gemm_columns(m, n, k);
    else
      columns = n;
  }
  if (columns >= n) return gemm<T>(trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  for (index_t j = 0; j < n; j += columns)
    gemm<T>(trans_a, false, m, std::min(columns, n - j), k, alpha, a, lda, b + j, ldb, beta, c + j, ldc);
}

}  // namespace kiln::backend::cpu
