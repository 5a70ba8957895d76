// bench_fusion_cuda (GPU): what fusing an elementwise chain into one kernel buys.
//
//   y = relu(a * x + b) * c + d          x, y: 2^26 floats (256 MiB each, several times an H200's L2)
//
// Cases, timed round-robin with CUDA events on kiln's current stream:
//   fused      the chain as one kiln assignment: one kernel, reads x once, writes y once
//   unfused    the same chain one op at a time (four kiln::eval temporaries + the final assignment):
//              five kernels, each reading and writing a whole array
//   memcpy     cudaMemcpyAsync device-to-device of the same bytes (the baseline)
//   copy       `y = x` as a kiln assignment (one kernel; for reference)
// Each sample times --inner back-to-back iterations between two events and divides, so launch gaps
// are amortised the way they are in a training step.
//
// Ratios: fused_over_copy_bw >= 0.85 (issue #7's goal: 0.90) -- the chain runs at the speed of a
// copy of the same bytes -- and fused_over_unfused >= 2.5. Before timing it checks once that the fused
// chain is one kernel (kiln::passes()) and that fused and unfused agree.
//
//   ./bench_fusion_cuda [--n 2^26] [--repeat 20] [--warmup 3] [--inner 10] [--json fusion_cuda.json]
// Without a usable GPU it prints "no CUDA device: skipped" and exits 0.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <kiln/cuda.hpp>
#include <string>
#include <vector>

#include "../cuda_timing.hpp"
#include "../harness.hpp"

namespace {

using Vector = kiln::Tensor<float, kiln::Shape<kiln::dyn>, kiln::Cuda>;

constexpr float a = 1.5f, b = -0.25f, c = 2.0f, d = 0.5f;

/// relu(a * x + b) * c + d in one kernel.
void fused(Vector& y, const Vector& x) {
  y = kiln::relu(a * x + b) * c + d;  // [N]
}

/// The same chain one operation at a time: five kernels, four temporaries from the caching allocator.
void unfused(Vector& y, const Vector& x) {
  const auto t1 = kiln::eval(a * x);           // [N]
  const auto t2 = kiln::eval(t1 + b);          // [N]
  const auto t3 = kiln::eval(kiln::relu(t2));  // [N]
  const auto t4 = kiln::eval(t3 * c);          // [N]
  y = t4 + d;                                  // [N]
}

using kiln::bench::event_timed;

}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Harness h("bench_fusion_cuda", argc, argv,
                         {.n = std::int64_t{1} << 26, .repeat = 20, .warmup = 3},
                         {{"--inner", "iterations per timed sample (default 10)"}});
  const int inner = static_cast<int>(h.size_option("--inner", 10, 1, 1 << 20));
  if (inner < 1) {
    std::fprintf(stderr, "bench_fusion_cuda: --inner must be >= 1\n");
    return 2;
  }
  if (!kiln::cuda::is_available()) {
    std::printf("no CUDA device: skipped (%s)\n", kiln::cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    const std::int64_t n = h.n();
    const auto props = kiln::cuda::device_properties(-1);
    h.gpu(props.name);
    const double array_bytes = static_cast<double>(n) * sizeof(float);
    std::printf(
        "bench_fusion_cuda: %s (cc %s, %d SMs, L2 %s, %s); y = relu(%g * x + %g) * %g + %g over %lld "
        "floats\n",
        props.name.c_str(), props.compute_capability().c_str(), props.multiprocessor_count,
        kiln::format_bytes(props.l2_cache_bytes).c_str(), kiln::format_bytes(props.total_memory).c_str(), a,
        b, c, d, static_cast<long long>(n));
    if (array_bytes < 4.0 * static_cast<double>(props.l2_cache_bytes))
      std::printf(
          "  note: one array (%s) is less than 4x the L2 (%s): the numbers measure the cache, not HBM\n",
          kiln::format_bytes(static_cast<std::size_t>(array_bytes)).c_str(),
          kiln::format_bytes(props.l2_cache_bytes).c_str());

    // Deterministic inputs in [-1, 1], made on the host.
    std::vector<float> host(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      host[static_cast<std::size_t>(i)] =
          static_cast<float>((static_cast<std::uint64_t>(i) * 2654435761u) % 2001u) / 1000.0f - 1.0f;
    const Vector x =
        kiln::Tensor<float, kiln::Shape<kiln::dyn>>::from(host, kiln::Extents<kiln::Shape<kiln::dyn>>(n))
            .to<kiln::Cuda>();  // [N]
    Vector y(n), z(n);          // [N] fused output, unfused output

    // ---- once, outside timing: one kernel, and the same numbers as op-at-a-time ----
    const auto p0 = kiln::passes();
    fused(y, x);
    const auto fused_passes = kiln::passes() - p0;
    const auto p1 = kiln::passes();
    unfused(z, x);
    const auto unfused_passes = kiln::passes() - p1;
    kiln::cuda::synchronize();
    const std::vector<float> yv = y.to_vector(), zv = z.to_vector();
    double max_diff = 0, checksum = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) {
      max_diff = std::fmax(max_diff, std::fabs(static_cast<double>(yv[i]) - zv[i]));
      checksum += yv[i];
    }
    // nvcc may contract a * x + b into one FMA in the fused kernel only: allow a few ulps.
    std::printf(
        "  passes: fused %llu (expected 1), unfused %llu (expected 5); max |fused - unfused| = %g; "
        "checksum %.6e\n",
        static_cast<unsigned long long>(fused_passes), static_cast<unsigned long long>(unfused_passes),
        max_diff, checksum);
    if (fused_passes != 1 || unfused_passes != 5) {
      std::fprintf(stderr, "bench_fusion_cuda: FAILED: the fused chain must be exactly one kernel\n");
      return 1;
    }
    if (!(max_diff <= 1e-5)) {
      std::fprintf(stderr, "bench_fusion_cuda: FAILED: fused and unfused results differ by %g\n", max_diff);
      return 1;
    }

    // ---- timing ----
    const double bytes = 2.0 * array_bytes;  // read x + write y
    const std::size_t nbytes = static_cast<std::size_t>(array_bytes);
    h.add_timed("fused", bytes, "1 kernel", event_timed(inner, [&] { fused(y, x); }));
    h.add_timed("unfused", bytes, "5 kernels; GB/s counts the useful bytes only",
                event_timed(inner, [&] { unfused(z, x); }));
    h.add_timed("memcpy", bytes, "cudaMemcpyAsync device to device", event_timed(inner, [&] {
                  KILN_CUDA_CHECK(cudaMemcpyAsync(y.data(), x.data(), nbytes, cudaMemcpyDeviceToDevice,
                                                  kiln::cuda::current_stream()));
                }));
    h.add_timed("copy", bytes, "kiln y = x, 1 kernel", event_timed(inner, [&] { y = x; }));
    h.run();
    KILN_CUDA_CHECK(cudaGetLastError());

    h.info("expression", "y = relu(a * x + b) * c + d");
    h.info("dtype", "float32");
    h.info("device", "cuda");
    h.info("inner", inner);
    h.info("passes_fused", fused_passes);
    h.info("passes_unfused", unfused_passes);
    h.info("checksum", checksum);
    h.info("l2_bytes", props.l2_cache_bytes);
    h.ratio("fused_over_copy_bw", h.bandwidth("fused") / h.bandwidth("memcpy"), 0.85,
            "fused kernel vs cudaMemcpy D2D of the same bytes (issue #7 goal: 0.90)");
    h.ratio("fused_over_unfused", h.median("unfused") / h.median("fused"), 2.5,
            "time of op-at-a-time / time of fused (ideal: 5)");
    return h.finish();
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "bench_fusion_cuda: %s\n", e.what());
    return 1;
  }
}
