// SerialBlas: while a guard lives, Debian's pthreads OpenBLAS runs each GEMM on its calling thread (a
// convolution's per-image GEMMs inside an OpenMP region would otherwise queue for its one pool); guards
// nest and overlap across threads, and the last one out restores the thread count it found. With
// OpenBLAS's OpenMP build (which runs nested calls on their thread itself) a guard changes nothing; with
// another CBLAS there is nothing to test.
#include <boost/test/unit_test.hpp>
#include <kiln/backend/cpu/blas.hpp>
#include <thread>
#include <vector>

BOOST_AUTO_TEST_SUITE(matmul)
BOOST_AUTO_TEST_SUITE(serial_blas)

#if KILN_WITH_BLAS && defined(OPENBLAS_VERSION)
BOOST_AUTO_TEST_CASE(guards_nest_and_restore_the_thread_count) {
  const bool pthreads = openblas_get_parallel() == 1;
  const int found = openblas_get_num_threads();
  openblas_set_num_threads(2);
  const int before = openblas_get_num_threads();
  {
    const kiln::backend::cpu::SerialBlas outer;
    BOOST_TEST(openblas_get_num_threads() == (pthreads ? 1 : before));
    {
      const kiln::backend::cpu::SerialBlas inner;
      const kiln::backend::cpu::SerialBlas inactive(false);
      BOOST_TEST(openblas_get_num_threads() == (pthreads ? 1 : before));
    }
    BOOST_TEST(openblas_get_num_threads() == (pthreads ? 1 : before));  // the outer one still holds
  }
  BOOST_TEST(openblas_get_num_threads() == before);
  // Overlapping on several threads, in any order: the count is back once every guard is gone.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 200; ++i) const kiln::backend::cpu::SerialBlas g;
    });
  for (auto& t : threads) t.join();
  BOOST_TEST(openblas_get_num_threads() == before);
  BOOST_TEST_MESSAGE("OpenBLAS " << (pthreads ? "pthreads" : "not pthreads") << " build");
  openblas_set_num_threads(found);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
