// 01_fused_expressions: an elementwise chain is one loop (one CUDA kernel), however long it is.
//
// What it shows:
//   1. Writing `relu(h * 1.5f - 0.25f) * 0.5f + x` (the elementwise tail of a residual block) builds an
//      expression tree and computes nothing: the tree is a small, trivially copyable value (pointers,
//      extents, numbers), held in `auto`.
//   2. Assigning it to a tensor runs it as ONE pass over memory: kiln::passes() goes up by one.
//   3. The same statement with fusion switched off (`kiln::Unfused`: each operation into a temporary,
//      as an eager framework runs it) takes five passes, reading and writing several times the memory.
//   4. Both ways give the same numbers; the fused one is faster (the time of each is printed).
//   5. Broadcasting stays inside the pass: relu(x * gamma + beta) with gamma, beta [F] under [N, F].
//   6. A reduction fuses its argument too: sum(exp(y - 1)) is one pass, with no temporary for exp(...).
//
// Run (after `cmake --preset cpu && cmake --build build/cpu`):
//   ./build/cpu/examples/01_fused_expressions                       # 4096 x 1024 floats; auto device
//   ./build/cpu/examples/01_fused_expressions --rows 256 --cols 64 --device cpu --repeat 3
// --device cpu|cuda|auto as in 00_tensors (cuda: a CUDA build and a GPU). The last line is
// `result: key=value ...` (the smoke test reads it).
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#else
#include <kiln/kiln.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/message.hpp"
#include "../common/whole_number.hpp"

using kiln::dyn;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;

namespace {

/// Waits for queued GPU work (a no-op on the CPU, where an assignment has finished when it returns).
template <class D>
void synchronize() {
#if KILN_CUDA_COMPILER
  if constexpr (std::is_same_v<D, kiln::Cuda>) kiln::cuda::synchronize();
#endif
}

/// Median wall-clock milliseconds of `repeat` runs of f, after one untimed run.
template <class D, class F>
double median_ms(int repeat, F f) {
  f();
  synchronize<D>();
  std::vector<double> ms;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    synchronize<D>();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <class D>
int run(index_t rows, index_t cols, int repeat) {
  using Matrix = Tensor<float, Shape<dyn, dyn>, D>;  // [N, F]
  using Row = Tensor<float, Shape<dyn>, D>;          // [F]

  // Inputs, made on the host and moved to the device.
  Tensor<float, Shape<dyn, dyn>> hh(rows, cols), xh(rows, cols);  // [N, F]
  Tensor<float, Shape<dyn>> gh(cols), bh(cols);                   // [F]
  for (index_t i = 0; i < xh.numel(); ++i) {
    hh[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
    xh[i] = static_cast<float>((i * 13) % 29) / 14.0f - 1.0f;
  }
  for (index_t j = 0; j < cols; ++j) {
    gh[j] = 1.0f + static_cast<float>(j % 7) / 7.0f;
    bh[j] = static_cast<float>(j % 5) / 10.0f - 0.2f;
  }
  const Matrix h = hh.to<D>();          // [N, F]  a layer's output
  const Matrix x = xh.to<D>();          // [N, F]  the block's input (the residual)
  const Row gamma = gh.to<D>();         // [F]
  const Row beta = bh.to<D>();          // [F]
  Matrix y(rows, cols), z(rows, cols);  // [N, F]

  // 1. Building the expression computes nothing.
  const auto p0 = kiln::passes();
  const auto expr = kiln::relu(h * 1.5f - 0.25f) * 0.5f + x;  // [N, F], not evaluated yet
  static_assert(kiln::expression<decltype(expr)> && std::is_trivially_copyable_v<decltype(expr)>);
  std::printf("1. the expression is a %zu-byte trivially copyable value; building it ran %llu passes\n",
              sizeof(expr), static_cast<unsigned long long>(kiln::passes() - p0));

  // 2. Assignment runs it: one loop / one kernel.
  const auto p1 = kiln::passes();
  y = expr;  // [N, F]
  synchronize<D>();
  const auto fused_passes = kiln::passes() - p1;
  std::printf("2. y = relu(h * 1.5 - 0.25) * 0.5 + x: %llu pass on %s\n",
              static_cast<unsigned long long>(fused_passes), D::name.data());

  // 3. The same statement with fusion switched off (kiln::Unfused, for a scope): one pass per operation,
  //    each into a temporary (h * 1.5, - 0.25, relu, * 0.5), then + x into z: five passes.
  const auto op_at_a_time = [&] {
    kiln::Unfused off;
    z = expr;  // [N, F]
  };
  const auto p2 = kiln::passes();
  op_at_a_time();
  synchronize<D>();
  const auto unfused_passes = kiln::passes() - p2;
  std::printf("3. the same chain one op at a time: %llu passes\n",
              static_cast<unsigned long long>(unfused_passes));

  // 4. Same numbers; time of each.
  const double max_diff = kiln::max(kiln::abs(y - z)).item();  // []
  const double checksum = kiln::sum(y).item();                 // []
  const double fused_ms = median_ms<D>(repeat, [&] { y = expr; });
  const double unfused_ms = median_ms<D>(repeat, op_at_a_time);
  const double mb = 3.0 * static_cast<double>(y.nbytes()) / 1e6;  // h and x read, y written
  std::printf("4. max |fused - op-at-a-time| = %g; checksum sum(y) = %.6f\n", max_diff, checksum);
  std::printf("   fused        %9.3f ms  (%7.1f GB/s)\n", fused_ms, mb / fused_ms);
  std::printf("   op-at-a-time %9.3f ms  (%.2fx the fused time)\n", unfused_ms, unfused_ms / fused_ms);

  // 5. Broadcasting: gamma and beta ([F]) are read under every row ([N, F]) inside the same single pass.
  const auto p4 = kiln::passes();
  z = kiln::relu(x * gamma + beta);  // [N, F]
  synchronize<D>();
  const auto broadcast_passes = kiln::passes() - p4;
  std::printf("5. z = relu(x * gamma + beta) with gamma, beta [%lld] under [%lld, %lld]: %llu pass\n",
              static_cast<long long>(cols), static_cast<long long>(rows), static_cast<long long>(cols),
              static_cast<unsigned long long>(broadcast_passes));

  // 6. A reduction evaluates its argument expression inside its own single pass.
  const auto p5 = kiln::passes();
  const double energy = kiln::sum(kiln::exp(y - 1.0f)).item();  // []
  const auto reduce_passes = kiln::passes() - p5;
  std::printf("6. sum(exp(y - 1)) = %.6g in %llu pass\n", energy,
              static_cast<unsigned long long>(reduce_passes));

  const bool ok = fused_passes == 1 && unfused_passes == 5 && broadcast_passes == 1 && reduce_passes == 1 &&
                  max_diff <= 1e-5;
  std::printf(
      "result: device=%s n=%lld passes_fused=%llu passes_unfused=%llu checksum=%.6f fused_ms=%.3f "
      "unfused_ms=%.3f speedup=%.2f ok=%d\n",
      D::name.data(), static_cast<long long>(y.numel()), static_cast<unsigned long long>(fused_passes),
      static_cast<unsigned long long>(unfused_passes), checksum, fused_ms, unfused_ms, unfused_ms / fused_ms,
      ok ? 1 : 0);
  return ok ? 0 : 1;
}

struct Options {
  index_t rows = 4096, cols = 1024;
  int repeat = 10;
  std::string device = "auto";  // as the training examples: the GPU when there is one
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--rows" || a == "--cols" || a == "--repeat" || a == "--device") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--rows")
        o.rows = examples::whole_number("01_fused_expressions", a, v);
      else if (a == "--cols")
        o.cols = examples::whole_number("01_fused_expressions", a, v);
      else if (a == "--repeat")
        o.repeat = static_cast<int>(
            std::min<long long>(examples::whole_number("01_fused_expressions", a, v), 1 << 30));
      else
        o.device = v;
    } else {
      const bool help = a == "--help" || a == "-h";
      if (!help) {  // which argument, then the usage
        const bool known = a.rfind("--", 0) == 0 && std::string("--rows --cols --repeat --device ").find(a + " ") != std::string::npos;
        std::fprintf(stderr, known ? "01_fused_expressions: %s needs a value\n" : "01_fused_expressions: unknown argument '%s'\n", a.c_str());
      }
      std::fprintf(help ? stdout : stderr,
                   "usage: %s [--rows N] [--cols F] [--repeat R] [--device cpu|cuda|auto]\n", argv[0]);
      std::exit(help ? 0 : 2);
    }
  }
  if (o.rows < 1 || o.cols < 1 || o.repeat < 1) {
    std::fprintf(stderr, "01_fused_expressions: --rows, --cols and --repeat must be >= 1\n");
    std::exit(2);
  }
  if (o.device != "cpu" && o.device != "cuda" && o.device != "auto") {
    std::fprintf(stderr, "01_fused_expressions: --device must be cpu, cuda or auto, not '%s'\n",
                 o.device.c_str());
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    if (o.device != "cpu") {
#if KILN_CUDA_COMPILER
      if (kiln::cuda::is_available()) return run<kiln::Cuda>(o.rows, o.cols, o.repeat);
      if (o.device == "cuda") {
        std::fprintf(stderr, "01_fused_expressions: --device cuda: CUDA is not available: %s\n",
                     kiln::cuda::unavailable_reason().c_str());
        return 2;
      }
      std::printf("(--device auto: no usable GPU (%s); running on the CPU)\n",
                  kiln::cuda::unavailable_reason().c_str());
#else
      if (o.device == "cuda") {
        std::fprintf(
            stderr,
            "01_fused_expressions: --device cuda: this binary was built without CUDA; configure "
            "with the cuda preset (nvcc at /usr/local/cuda/bin/nvcc) to compile the examples as CUDA\n");
        return 2;
      }
      std::printf("(--device auto: built without CUDA; running on the CPU)\n");
#endif
    }
    return run<kiln::Cpu>(o.rows, o.cols, o.repeat);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "01_fused_expressions: error: %s\n", examples::message_of(e));
    return 1;
  }
}
