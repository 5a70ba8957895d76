// run_or_exit (kiln/parallel/watchdog.hpp), the deadline around ncclCommAbort: a cleanup that returns in
// time returns normally (once, exceptions included). The other side, a cleanup that blocks, ends the
// process: kiln.parallel.watchdog_exit runs tests/mpi/failures/watchdog_exit.cpp for that.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <kiln/parallel/watchdog.hpp>
#include <stdexcept>

BOOST_AUTO_TEST_SUITE(parallel)
BOOST_AUTO_TEST_SUITE(watchdog)

BOOST_AUTO_TEST_CASE(a_cleanup_that_returns_in_time_runs_once_and_returns) {
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  kiln::parallel::detail::run_or_exit([&] { ++calls; }, std::chrono::seconds(30), "test: ", "cleanup");
  BOOST_TEST(calls == 1);
  // The watchdog does not wait out its 30 s once the cleanup is done.
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(seconds < 10.0);
  BOOST_CHECK_THROW(kiln::parallel::detail::run_or_exit([] { throw std::runtime_error("x"); }, std::chrono::seconds(30),
                                                        "test: ", "cleanup"),
                    std::runtime_error);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
