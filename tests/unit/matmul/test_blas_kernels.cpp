// Which kernels the CPU BLAS runs (kiln/backend/cpu/blas_kernels.hpp): the description names the
// library and, for OpenBLAS, its kernels; a better OPENBLAS_CORETYPE is suggested only where OpenBLAS
// fell back to kernels older than the CPU's and the user has not chosen. A convolution's long GEMMs run
// in blocks of columns within the reach of OpenBLAS's small-matrix kernels where it has them, and give
// the product of one call.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <kiln/backend/cpu/blas.hpp>
#include <kiln/backend/cpu/blas_kernels.hpp>

#include "support/reference.hpp"

BOOST_AUTO_TEST_SUITE(matmul)
BOOST_AUTO_TEST_SUITE(blas_kernels)

BOOST_AUTO_TEST_CASE(a_fallback_to_older_kernels_suggests_the_cpus_own) {
  using kiln::backend::cpu::detail::better_coretype;
  // Debian 12's OpenBLAS 0.3.21 on a CPU newer than it: Prescott's SSE3 kernels.
  BOOST_TEST(better_coretype("Prescott", false, true, true) == "SkylakeX");
  BOOST_TEST(better_coretype("Prescott", false, false, true) == "Haswell");
  BOOST_TEST(better_coretype("Sandybridge", false, false, true) == "Haswell");
  // Its own choice stands: kernels the CPU's, or a CPU without AVX2, or OPENBLAS_CORETYPE set by the user.
  BOOST_TEST(better_coretype("SkylakeX", false, true, true).empty());
  BOOST_TEST(better_coretype("Cooperlake", false, true, true).empty());
  BOOST_TEST(better_coretype("Haswell", false, false, true).empty());
  BOOST_TEST(better_coretype("Zen", false, false, true).empty());
  BOOST_TEST(better_coretype("Prescott", false, false, false).empty());
  BOOST_TEST(better_coretype("Prescott", true, true, true).empty());
}

BOOST_AUTO_TEST_CASE(the_description_names_the_library_and_its_kernels) {
  const std::string d = kiln::backend::cpu::blas_description();
#if KILN_WITH_BLAS && defined(OPENBLAS_VERSION)
  BOOST_TEST(d.starts_with("OpenBLAS 0."), d);
  BOOST_TEST(d.ends_with(" kernels"), d);
  BOOST_TEST(d.find(openblas_get_corename()) != std::string::npos, d);
  // What is suggested is never the kernels that run.
  const std::string better = kiln::backend::cpu::better_blas_coretype();
  BOOST_TEST_MESSAGE("CPU BLAS: " << d << (better.empty() ? "" : "; better: OPENBLAS_CORETYPE=" + better));
  BOOST_TEST(better != std::string(openblas_get_corename()));
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) BOOST_TEST(better.empty());
#elif KILN_WITH_BLAS
  BOOST_TEST(d == "a CBLAS");
#else
  BOOST_TEST(d == "none (no KILN_WITH_BLAS)");
#endif
}

BOOST_AUTO_TEST_CASE(long_products_split_into_blocks_within_the_small_kernels_reach) {
  using kiln::backend::cpu::detail::small_gemm_columns;
  using kiln::backend::cpu::detail::small_matrix_core;
  BOOST_TEST(small_matrix_core("SkylakeX"));
  BOOST_TEST(small_matrix_core("Cooperlake"));
  BOOST_TEST(small_matrix_core("SapphireRapids"));
  BOOST_TEST(!small_matrix_core("Haswell"));
  BOOST_TEST(!small_matrix_core("Zen"));
  BOOST_TEST(!small_matrix_core("Prescott"));
  // ResNet-20's convolutions, forward ([Out, C K K] x [C K K, P]) and input gradient ([C K K, Out] x [Out, P]).
  BOOST_TEST(small_gemm_columns(16, 1024, 144, true) == 384);  // 16 x 384 x 144 <= 100^3, a multiple of 64
  BOOST_TEST(small_gemm_columns(144, 1024, 16, true) == 384);
  BOOST_TEST(small_gemm_columns(32, 256, 288, true) == 64);
  BOOST_TEST(small_gemm_columns(64, 64, 576, true) == 16);  // under 64: a multiple of 16
  // One call: within reach already, no block of 16 columns within it, or kernels without the path.
  BOOST_TEST(small_gemm_columns(16, 1024, 27, true) == 1024);
  BOOST_TEST(small_gemm_columns(6, 784, 25, true) == 784);
  BOOST_TEST(small_gemm_columns(128, 1024, 576, true) == 1024);
  BOOST_TEST(small_gemm_columns(16, 1024, 144, false) == 1024);
  BOOST_TEST(small_gemm_columns(16, 0, 144, true) == 0);
}

BOOST_AUTO_TEST_CASE(a_product_in_blocks_of_columns_is_the_product_in_one_call) {
  namespace cpu = kiln::backend::cpu;
  // C = op(A) B + beta C, op(A) [m, k], B [k, n] inside a wider array (ldb, ldc > n): blocks with a
  // shorter last one, one block, and the default (small_gemm_columns), A transposed or not.
  const kiln::index_t m = 12, k = 20, n = 100, ld = 104;
  const auto a = kiln::test::random_values<float>(static_cast<std::size_t>(m * k), -1, 1, 1);
  const auto b = kiln::test::random_values<float>(static_cast<std::size_t>(k * ld), -1, 1, 2);
  const auto c0 = kiln::test::random_values<float>(static_cast<std::size_t>(m * ld), -1, 1, 3);
  for (const bool trans_a : {false, true})
    for (const kiln::index_t columns : {kiln::index_t{16}, kiln::index_t{48}, n, kiln::index_t{0}}) {
      std::vector<float> one = c0, blocks = c0;
      const kiln::index_t lda = trans_a ? m : k;
      cpu::gemm<float>(trans_a, false, m, n, k, 1.0, a.data(), lda, b.data(), ld, 0.5, one.data(), ld);
      cpu::gemm_in_column_blocks<float>(trans_a, m, n, k, 1.0, a.data(), lda, b.data(), ld, 0.5, blocks.data(), ld,
                                        columns);
      BOOST_TEST_CONTEXT("trans_a " << trans_a << ", columns " << columns) {
        for (kiln::index_t i = 0; i < m; ++i)
          for (kiln::index_t j = 0; j < ld; ++j) {
            const auto at = static_cast<std::size_t>(i * ld + j);
            if (j >= n) BOOST_TEST(blocks[at] == c0[at]);  // past the n columns: untouched
            else BOOST_TEST(std::abs(blocks[at] - one[at]) <= 1e-5f);  // (another kernel may add in another order)
          }
      }
    }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
