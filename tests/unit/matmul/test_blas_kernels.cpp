// Which kernels the CPU BLAS runs (kiln/backend/cpu/blas_kernels.hpp): the description names the
// library and, for OpenBLAS, its kernels; a better OPENBLAS_CORETYPE is suggested only where OpenBLAS
// fell back to kernels older than the CPU's and the user has not chosen.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <string>

#include <kiln/backend/cpu/blas_kernels.hpp>

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

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
