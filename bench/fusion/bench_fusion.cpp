// bench_fusion (CPU): what fusing an elementwise chain into one loop buys.
//
//   y = relu(a * x + b) * c + d          x, y: 2^24 floats (64 MiB each); a, b, c, d: numbers
//
// Cases, timed round-robin in one run:
//   fused    the chain as one kiln assignment: one OpenMP loop, reads x once, writes y once
//   unfused  the same chain one op at a time through kiln (four kiln::eval temporaries + the final
//            assignment): five loops, each reading and writing a whole array
//   copy     `y = x` as a kiln assignment: the same bytes as fused, no arithmetic
//   memcpy   std::memcpy of the same bytes in one chunk per OpenMP thread (libc's copy, kiln's threads)
//            the baseline is the faster of copy and memcpy, so that a slowdown of kiln's loops that hit
//            its copy as well as its chain would still show
//
// and a bias chain over a batch, the most common op of a network (the same x seen as [N / F, F]):
//
//   bias_broadcast  y = relu(x * g + bias)  with g, bias: [F] tensors broadcast over the rows (F = 1024)
//   bias_scalar     y = relu(x * a + b)     the same chain with numbers (the baseline)
//
// Ratios: fused_over_copy_bw >= 0.85 (fusion costs no bandwidth: the chain runs at copy speed),
// fused_over_unfused >= 2.5 (five passes cost about five times one) and broadcast_over_scalar >= 0.8
// (a broadcast operand costs next to nothing). Before timing it checks once that the fused and the bias
// chains are one pass each (kiln::passes()), that fused and unfused agree, and that the bias chain with
// g = a, bias = b gives the scalar chain's numbers.
//
//   ./bench_fusion [--n 2^24] [--repeat 20] [--warmup 3] [--json fusion.json]
//   OMP_NUM_THREADS=2 ./bench_fusion --json fusion.json
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <kiln/kiln.hpp>

#include "../harness.hpp"

namespace {

using Vector = kiln::Tensor<float, kiln::Shape<kiln::dyn>>;
using Matrix = kiln::Tensor<float, kiln::Shape<kiln::dyn, kiln::dyn>>;

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

/// A bias chain over a batch: scale and shift [N, F] by [F] vectors broadcast over the rows.
void bias_broadcast(Matrix& y, const Matrix& x, const Vector& g, const Vector& bias) {
  y = kiln::relu(x * g + bias);  // [N, F]
}

/// The same chain with numbers instead of [F] vectors.
void bias_scalar(Matrix& y, const Matrix& x) {
  y = kiln::relu(x * a + b);  // [N, F]
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

  // The bias chain on the same data seen as rows of F features (the first rows * F elements).
  const std::int64_t features = std::min<std::int64_t>(1024, n);
  const std::int64_t rows = n / features;
  const Matrix xm = x.slice(0, rows * features).reshape(kiln::Extents<Matrix::shape_type>(rows, features));  // [N / F, F]
  Matrix ym(rows, features), zm(rows, features);  // [N / F, F] broadcast output, scalar output
  Vector g(features), bias(features);              // [F]
  g.fill(a);
  bias.fill(b);
  const auto p2 = kiln::passes();
  bias_broadcast(ym, xm, g, bias);
  const auto broadcast_passes = kiln::passes() - p2;
  bias_scalar(zm, xm);
  const double bias_diff = kiln::max(kiln::abs(ym - zm)).item();
  std::printf(
      "  bias chain relu(x * g + bias) over [%lld, %lld]: passes %llu (expected 1); "
      "max |broadcast - scalar| = %g (expected 0)\n",
      static_cast<long long>(rows), static_cast<long long>(features),
      static_cast<unsigned long long>(broadcast_passes), bias_diff);
  if (broadcast_passes != 1) {
    std::fprintf(stderr, "bench_fusion: FAILED: the bias chain must be exactly one pass\n");
    return 1;
  }
  if (!(bias_diff == 0.0)) {
    std::fprintf(stderr, "bench_fusion: FAILED: the bias chain differs from the scalar chain by %g\n", bias_diff);
    return 1;
  }

  // ---- timing ----
  const double bytes = 2.0 * static_cast<double>(n) * sizeof(float);  // read x + write y
  const double bias_bytes = 2.0 * static_cast<double>(rows * features) * sizeof(float);
  h.add("fused", bytes, "1 pass", [&] { fused(y, x); });
  h.add("unfused", bytes, "5 passes; GB/s counts the useful bytes only", [&] { unfused(z, x); });
  h.add("copy", bytes, "kiln y = x, 1 pass", [&] { y = x; });
  h.add("memcpy", bytes, "libc, a chunk per OpenMP thread", [&] {
    const int threads = kiln::bench::omp_threads();
    const auto total = static_cast<std::size_t>(n) * sizeof(float);
    const auto* from = reinterpret_cast<const char*>(x.data());
    auto* to = reinterpret_cast<char*>(y.data());
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const std::size_t begin = total * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads);
      const std::size_t end = total * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
      std::memcpy(to + begin, from + begin, end - begin);
    }
  });
  h.add("bias_broadcast", bias_bytes, "relu(x * g + bias), g, bias [F] over [N, F]",
        [&] { bias_broadcast(ym, xm, g, bias); });
  h.add("bias_scalar", bias_bytes, "relu(x * a + b), numbers", [&] { bias_scalar(zm, xm); });
  h.run();

  h.info("expression", "y = relu(a * x + b) * c + d");
  h.info("dtype", "float32");
  h.info("device", "cpu");
  h.info("passes_fused", fused_passes);
  h.info("passes_unfused", unfused_passes);
  h.info("checksum", checksum);
  h.info("bias_expression", "y = relu(x * g + bias), g, bias: [F] over [N, F]");
  h.info("bias_extents", {rows, features});
  h.info("passes_bias_broadcast", broadcast_passes);
  const double copy_bw = std::max(h.bandwidth("copy"), h.bandwidth("memcpy"));
  h.info("copy_baseline", h.bandwidth("copy") >= h.bandwidth("memcpy") ? "kiln copy" : "memcpy");
  h.ratio("fused_over_copy_bw", h.bandwidth("fused") / copy_bw, 0.85,
          "fused chain vs the faster copy of the same bytes (kiln's, memcpy)");
  h.ratio("fused_over_unfused", h.median("unfused") / h.median("fused"), 2.5,
          "time of op-at-a-time / time of fused (ideal: 5)");
  h.ratio("broadcast_over_scalar", h.median("bias_scalar") / h.median("bias_broadcast"), 0.8,
          "time of the bias chain with numbers / with [F] tensors (ideal: 1)");
  return h.finish();
}
