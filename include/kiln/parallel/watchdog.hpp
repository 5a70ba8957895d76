/// A deadline for a cleanup that may block: if it has not returned in time, the process ends (exit
/// status 1, after a message) instead of hanging, and mpirun then ends the job's other ranks.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace kiln::parallel::detail {

/// Runs f() on the calling thread while a watchdog thread waits up to `grace`; if f has not returned by
/// then, the watchdog prints "<who><what> did not return within <grace>: ending this process" and calls
/// std::_Exit(1) (no destructors, no atexit handlers: they could block on the same thing). Used around
/// ncclCommAbort, which can block when a peer died inside a collective (NCCL issue #863). f's exceptions
/// reach the caller.
template <class F>
void run_or_exit(F&& f, std::chrono::milliseconds grace, const std::string& who, const std::string& what) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(m);
    if (cv.wait_for(lock, grace, [&] { return done; })) return;
    std::fprintf(stderr, "%s%s did not return within %.1f s: ending this process\n", who.c_str(), what.c_str(),
                 std::chrono::duration<double>(grace).count());
    std::fflush(nullptr);
    std::_Exit(1);
  });
  struct Finish {  // stops the watchdog however f ends
    std::mutex& m;
    std::condition_variable& cv;
    bool& done;
    std::thread& t;
    ~Finish() {
      {
        std::lock_guard lock(m);
        done = true;
      }
      cv.notify_all();
      t.join();
    }
  } finish{m, cv, done, watchdog};
  f();
}

}  // namespace kiln::parallel::detail
