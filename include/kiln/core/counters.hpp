/// The pass counter: every elementwise loop, kernel launch, reduction and GEMM adds one.
#pragma once
#include <atomic>
#include <cstdint>

namespace kiln {
namespace detail {
inline std::atomic<std::uint64_t>& pass_counter() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}
inline void count_pass() { pass_counter().fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

/// Passes over memory run so far in this process: one per elementwise assignment (one OpenMP loop or
/// one CUDA kernel), one per reduction, one per GEMM. Tests diff it around a statement to prove fusion.
inline std::uint64_t passes() { return detail::pass_counter().load(std::memory_order_relaxed); }
}  // namespace kiln
