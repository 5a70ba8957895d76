// kiln.parallel.watchdog_exit: a cleanup that never returns under run_or_exit (the deadline kiln puts
// around ncclCommAbort) ends the process within its grace period with exit status 1 and a message,
// instead of hanging (tests/CMakeLists.txt checks the message, the status and the time).
#include <chrono>
#include <cstdio>
#include <kiln/parallel/watchdog.hpp>
#include <thread>

int main() {
  kiln::parallel::detail::run_or_exit([] { std::this_thread::sleep_for(std::chrono::hours(1)); },
                                      std::chrono::milliseconds(300), "rank 0 of 2: ", "ncclCommAbort");
  std::printf("run_or_exit returned\n");  // never reached
  return 0;
}
