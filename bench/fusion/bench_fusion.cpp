// bench_fusion (CPU): what fusing an elementwise chain into one loop buys.
//
//   y = relu(a * x + b) * c + d          x, y: 2^24 floats (64 MiB each); a, b, c, d: numbers
//
// Cases, timed round-robin in one run:
//   fused    the chain as one kiln assignment: one OpenMP loop, reads x once, writes y once
//   unfused  the same chain one op at a time through kiln (four kiln::eval temporaries + the final
//            assignment): five loops, each reading and writing a whole array
//   copy     `y = x` as a kiln assignment: the same bytes as fused, no arithmetic (the baseline)
//   memcpy   std::memcpy of the same bytes (single-threaded libc; for reference only)
//
// Ratios: fused_over_copy_bw >= 0.85 (fusion costs no bandwidth: the chain runs at copy speed) and
// fused_over_unfused >= 2.5 (five passes cost about five times one). Before timing it checks once that
// the fused chain is one pass (kiln::passes()) and that fused and unfused agree.
//
//   ./bench_fusion [--n 2^24] [--repeat 20] [--warmup 3] [--json fusion.json]
//   OMP_NUM_THREADS=2 ./bench_fusion --json fusion.json
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <kiln/kiln.hpp>

#include "../harness.hpp"

namespace {

using Vector = kiln::Tensor<float, kiln::Shape<kiln::dyn>>;

constexpr float a = 1.5f, b = -0.25f, c = 2.0f, d = 0.5f;

/// relu(a * x + b) * c + d in one pass.
void fused(Vector& y, const Vector& x) {
  y = kiln::relu(a * x + b) * c + d;  // [N]
}

/// The same chain one operation at a time: five passes, four temporaries from the caching allocator.
void unfused(Vector& y, const Vector& x) {
  const auto t1 = kiln::eval(a * x);           // [N]
  const auto t2 = kiln::eval(t1 + b);          // [N]
  const auto t3 = kiln::eval(kiln::relu(t2));  // [N]
  const auto t4 = kiln::eval(t3 * c);          // [N]
  y = t4 + d;                                  // [N]
}

}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Harness h("bench_fusion", argc, argv, {.n = std::int64_t{1} << 24, .repeat = 20, .warmup = 3});
  const std::int64_t n = h.n();

  Vector x(n), y(n), z(n);  // [N] input, fused output, unfused output
  // Deterministic values in [-1, 1]; written by the threads that later read them (first touch).
  float* px = x.data();
  KILN_PRAGMA_OMP(parallel for schedule(static))
  for (std::int64_t i = 0; i < n; ++i)
    px[i] = static_cast<float>((static_cast<std::uint64_t>(i) * 2654435761u) % 2001u) / 1000.0f - 1.0f;

  // ---- once, outside timing: one pass, and the same numbers as op-at-a-time ----
  const auto p0 = kiln::passes();
  fused(y, x);
  const auto fused_passes = kiln::passes() - p0;
  const auto p1 = kiln::passes();
  unfused(z, x);
  const auto unfused_passes = kiln::passes() - p1;
  const double max_diff = kiln::max(kiln::abs(y - z)).item();
  const double checksum = kiln::sum(y).item();
  std::printf("bench_fusion: y = relu(%g * x + %g) * %g + %g over %lld floats\n", a, b, c, d,
              static_cast<long long>(n));
  std::printf(
      "  passes: fused %llu (expected 1), unfused %llu (expected 5); max |fused - unfused| = %g; "
      "checksum %.6e\n",
      static_cast<unsigned long long>(fused_passes), static_cast<unsigned long long>(unfused_passes),
      max_diff, checksum);
  if (fused_passes != 1 || unfused_passes != 5) {
    std::fprintf(stderr, "bench_fusion: FAILED: the fused chain must be exactly one pass\n");
    return 1;
  }
  if (!(max_diff <= 1e-5)) {
    std::fprintf(stderr, "bench_fusion: FAILED: fused and unfused results differ by %g\n", max_diff);
    return 1;
  }

  // ---- timing ----
  const double bytes = 2.0 * static_cast<double>(n) * sizeof(float);  // read x + write y
  h.add("fused", bytes, "1 pass", [&] { fused(y, x); });
  h.add("unfused", bytes, "5 passes; GB/s counts the useful bytes only", [&] { unfused(z, x); });
  h.add("copy", bytes, "kiln y = x, 1 pass", [&] { y = x; });
  h.add("memcpy", bytes, "libc, 1 thread",
        [&] { std::memcpy(y.data(), x.data(), static_cast<std::size_t>(n) * sizeof(float)); });
  h.run();

  h.info("expression", "y = relu(a * x + b) * c + d");
  h.info("dtype", "float32");
  h.info("device", "cpu");
  h.info("passes_fused", fused_passes);
  h.info("passes_unfused", unfused_passes);
  h.info("checksum", checksum);
  h.ratio("fused_over_copy_bw", h.bandwidth("fused") / h.bandwidth("copy"), 0.85,
          "fused chain vs kiln copy of the same bytes");
  h.ratio("fused_over_unfused", h.median("unfused") / h.median("fused"), 2.5,
          "time of op-at-a-time / time of fused (ideal: 5)");
  return h.finish();
}
