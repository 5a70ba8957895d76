/// The work counters: every elementwise loop, kernel launch, reduction, GEMM and convolution adds one
/// pass, the bytes its operands move and the arithmetic it does.
#pragma once
#include <atomic>
#include <cstdint>

namespace kiln {

/// What one pass moves through memory and computes, counted from its operands, not measured:
/// `bytes`: every operand read once and every output written once (a read-modify-write operand counts
/// twice; a broadcast operand its own size; scratch a pass keeps in cache, such as the CPU convolution's
/// columns, not at all), i.e. the traffic a pass that streams each operand once cannot avoid;
/// `ops`: arithmetic operations, one per elementwise operation per element (an add, a multiply, an exp or
/// a comparison alike; a cast none), 2mnk per GEMM, one per element a reduction reads.
struct Traffic {
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;
};

/// The counters at one moment (kiln::counters()); subtract two to get the work of what ran between.
struct Counters {
  std::uint64_t passes = 0;
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;
  friend Counters operator-(const Counters& a, const Counters& b) {
    return {a.passes - b.passes, a.bytes - b.bytes, a.ops - b.ops};
  }
};

namespace detail {
struct CounterCells {
  std::atomic<std::uint64_t> passes{0}, bytes{0}, ops{0};
};
inline CounterCells& counter_cells() {
  static CounterCells c;
  return c;
}
/// One pass that moves and computes `t`.
inline void count_pass(Traffic t = {}) {
  auto& c = counter_cells();
  c.passes.fetch_add(1, std::memory_order_relaxed);
  if (t.bytes) c.bytes.fetch_add(t.bytes, std::memory_order_relaxed);
  if (t.ops) c.ops.fetch_add(t.ops, std::memory_order_relaxed);
}
/// Work done again as a whole, counted once more: a CUDA graph's replay adds what its capture counted.
inline void count_work(const Counters& w) {
  auto& c = counter_cells();
  c.passes.fetch_add(w.passes, std::memory_order_relaxed);
  c.bytes.fetch_add(w.bytes, std::memory_order_relaxed);
  c.ops.fetch_add(w.ops, std::memory_order_relaxed);
}
/// Bytes of n values of T, as the counters take them.
template <class T>
constexpr std::uint64_t bytes_of(std::int64_t n) {
  return static_cast<std::uint64_t>(n) * sizeof(T);
}
}  // namespace detail

/// Passes over memory run so far in this process: one per elementwise assignment (one OpenMP loop or
/// one CUDA kernel), one per reduction, one per GEMM or convolution call. Tests diff it around a
/// statement to prove fusion.
inline std::uint64_t passes() { return detail::counter_cells().passes.load(std::memory_order_relaxed); }

/// Passes, bytes and operations so far in this process (see Traffic for how they are counted). kiln-bench
/// diffs them around a training step and divides the bytes by the machine's copy bandwidth: the time
/// the step would take if memory were its only limit.
inline Counters counters() {
  const auto& c = detail::counter_cells();
  return {c.passes.load(std::memory_order_relaxed), c.bytes.load(std::memory_order_relaxed),
          c.ops.load(std::memory_order_relaxed)};
}
}  // namespace kiln
