/// The CPU's OpenMP threads: how many a parallel loop gets and which one is running (1 and 0 without
/// OpenMP), for passes that size their work by the threads.
#pragma once
#include "kiln/core/config.hpp"

#if KILN_HAS_OPENMP
#include <omp.h>
#endif

namespace kiln::backend::cpu {

/// The threads the next parallel loop runs on (omp_get_max_threads).
inline int threads() {
#if KILN_HAS_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
/// This thread's number within its parallel loop (omp_get_thread_num).
inline int thread() {
#if KILN_HAS_OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/// Sets the calling thread's OpenMP thread count (omp_set_num_threads) for a scope, then restores it;
/// nothing without OpenMP. DataParallel gives each replica its share this way.
class ScopedThreads {
 public:
  explicit ScopedThreads([[maybe_unused]] int n) {
#if KILN_HAS_OPENMP
    omp_set_num_threads(n);
#endif
  }
  ~ScopedThreads() {
#if KILN_HAS_OPENMP
    omp_set_num_threads(before_);
#endif
  }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int before_ = threads();
};

}  // namespace kiln::backend::cpu
