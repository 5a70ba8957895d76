// 00_tensors: a tour of kiln's tensors, in one program.
//
// What it shows, in order:
//   1. A tensor's type carries its element type, shape and device: Tensor<float, Shape<dyn, 4>, Cpu>.
//      Static extents are part of the type (mismatches are compile errors); `dyn` (the batch) is given
//      at run time and checked once per assignment.
//   2. Copies share storage (like torch::Tensor); clone() copies the data.
//   3. Views without copies: reshape<Shape<...>>() and slice(begin, end) along the first dimension.
//   4. Moving to a device: x.to<kiln::Cuda>() and back with .to<kiln::Cpu>() (--device).
//   5. A fused elementwise expression with broadcasting (a bias [4] over [N, 4]): one pass.
//   6. Reductions over everything or one axis: sum, mean, max, argmax.
//   7. matmul: OpenBLAS on the CPU, cuBLAS on the GPU; transposed() reads an operand transposed.
//   8. The caching allocator: freed blocks are reused, statistics, empty_cache().
//
// Run (after `cmake --preset cpu && cmake --build build/cpu`):
//   ./build/cpu/examples/00_tensors                      # batch 8; auto: the GPU in a CUDA build that finds one
//   ./build/cpu/examples/00_tensors --batch 3 --device cpu
// --device cpu|cuda|auto: cuda needs a binary built with CUDA (preset cuda or cuda-native) and a GPU;
// auto takes the GPU when there is one. The last line is `result: key=value ...` (the smoke test reads it).
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#else
#include <kiln/kiln.hpp>
#endif

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

void print_stats(const char* when, const kiln::MemoryStats& s) {
  std::printf(
      "  %-28s allocated %-10s reserved %-10s requests %3llu  cache hits %3llu  device allocs %3llu\n", when,
      kiln::format_bytes(s.allocated_bytes).c_str(), kiln::format_bytes(s.reserved_bytes).c_str(),
      static_cast<unsigned long long>(s.num_requests), static_cast<unsigned long long>(s.num_cache_hits),
      static_cast<unsigned long long>(s.num_device_allocs));
}

template <class T>
void print_values(const char* name, const std::vector<T>& v, std::size_t at_most = 8) {
  std::printf("  %-10s", name);
  for (std::size_t i = 0; i < v.size() && i < at_most; ++i) std::printf(" %8.3f", static_cast<double>(v[i]));
  std::printf(v.size() > at_most ? " ...\n" : "\n");
}

bool close(double a, double b) { return std::fabs(a - b) <= 1e-4 * (1.0 + std::fabs(b)); }

template <class D>
int tour(index_t batch) {
  constexpr const char* dev = D::name.data();
  bool ok = true;

  // ---- 1. shapes: static extents in the type, the batch at run time ----
  std::printf("1. shapes\n");
  Tensor<float, Shape<dyn, 4>> x(batch);  // [N, 4]  N = batch, known at run time
  for (index_t n = 0; n < batch; ++n)
    for (index_t f = 0; f < 4; ++f) x(n, f) = static_cast<float>(n) - 0.5f * static_cast<float>(f);
  Tensor<float, Shape<4, 3>> w = Tensor<float, Shape<4, 3>>::from(  // [4, 3]  fully static
      {1, 0, 0,                                                     //
       0, 1, 0,                                                     //
       0, 0, 1,                                                     //
       1, 1, 1});
  std::printf("  x: %s %s, %lld elements, %zu bytes, rank %zu\n",
              kiln::shape_name<decltype(x)::shape_type>().c_str(), kiln::to_string(x.extents()).c_str(),
              static_cast<long long>(x.numel()), x.nbytes(), x.rank);
  std::printf("  w: %s %s\n", kiln::shape_name<decltype(w)::shape_type>().c_str(),
              kiln::to_string(w.extents()).c_str());
  // Static shapes are checked by the compiler. These lines would not compile:
  //   Tensor<float, Shape<dyn, 3>> bad(batch);  // [N, 3]
  //   bad = x;  // error: kiln::assign: shape mismatch (kiln::shapes_must_match<Shape<-1, 3>, Shape<-1, 4>>)
  // A wrong dynamic extent is a run-time kiln::ShapeError, raised once, before any work:
  try {
    Tensor<float, Shape<dyn, 4>> other(batch + 1);  // [N + 1, 4]
    other = x;
    ok = false;
  } catch (const kiln::ShapeError& e) {
    std::printf("  assigning [N, 4] to [N + 1, 4] throws kiln::ShapeError: %s\n", e.what());
  }

  // ---- 2. copies share storage; clone() copies ----
  std::printf("2. copies\n");
  auto alias = x;         // [N, 4]  the same memory
  auto copy = x.clone();  // [N, 4]  its own memory
  std::printf("  alias shares x's storage: %s; clone does: %s\n", alias.shares_storage_with(x) ? "yes" : "no",
              copy.shares_storage_with(x) ? "yes" : "no");
  ok = ok && alias.shares_storage_with(x) && !copy.shares_storage_with(x);

  // ---- 3. views: reshape and slice (no copies) ----
  std::printf("3. views\n");
  auto flat = x.reshape<Shape<dyn>>();            // [4N]
  auto pairs = x.reshape<Shape<dyn, 2>>();        // [2N, 2]
  auto head = x.slice(0, batch < 2 ? batch : 2);  // [2, 4]  the first two rows
  std::printf("  reshape to %s and %s, slice(0, 2) is %s; all share x's storage: %s\n",
              kiln::to_string(flat.extents()).c_str(), kiln::to_string(pairs.extents()).c_str(),
              kiln::to_string(head.extents()).c_str(),
              flat.storage() == x.storage() && pairs.storage() == x.storage() && head.storage() == x.storage()
                  ? "yes"
                  : "no");
  print_values("x (flat)", flat.to_vector());

  // ---- 4. to the device ----
  std::printf("4. device: %s\n", dev);
  auto xd = x.to<D>();                                                           // [N, 4]  on D
  auto wd = w.to<D>();                                                           // [4, 3]  on D
  auto bias = Tensor<float, Shape<4>>::from({0.5f, -0.5f, 1.0f, 0.0f}).to<D>();  // [4]

  // ---- 5. a fused expression with broadcasting: bias [4] is read under [N, 4]; one pass ----
  std::printf("5. fused expression\n");
  Tensor<float, Shape<dyn, 4>, D> h(batch);  // [N, 4]
  const auto before = kiln::passes();
  h = kiln::relu(xd - bias) * 2.0f;  // [N, 4]
  std::printf("  h = relu(x - bias) * 2 ran in %llu pass(es)\n",
              static_cast<unsigned long long>(kiln::passes() - before));
  const std::vector<float> hv = h.to_vector();
  print_values("h", hv);
  ok = ok && kiln::passes() - before == 1;

  // ---- 6. reductions: over everything (a rank-0 tensor) or one axis (which disappears) ----
  std::printf("6. reductions\n");
  const auto total = kiln::sum(h);         // []
  const auto col_mean = kiln::mean<0>(h);  // [4]
  const auto row_max = kiln::max<1>(h);    // [N]
  const auto best = kiln::argmax<1>(h);    // [N]  int64
  std::printf("  sum(h) = %.3f\n", static_cast<double>(total.item()));
  print_values("mean<0>", col_mean.to_vector());
  print_values("max<1>", row_max.to_vector());
  print_values("argmax<1>", best.to_vector());
  double expect_total = 0;
  for (float v : hv) expect_total += v;
  ok = ok && close(total.item(), expect_total);

  // ---- 7. matmul: [N, 4] x [4, 3] -> [N, 3]; and h hᵀ -> [N, N] ----
  std::printf("7. matmul\n");
  const auto y = kiln::matmul(h, wd);                      // [N, 3]
  const auto gram = kiln::matmul(h, kiln::transposed(h));  // [N, N]
  const std::vector<float> yv = y.to_vector(), gv = gram.to_vector(), wv = w.to_vector();
  print_values("h w", yv, 6);
  double checksum = 0;
  for (index_t n = 0; n < batch; ++n) {
    for (index_t j = 0; j < 3; ++j) {
      double s = 0;
      for (index_t k = 0; k < 4; ++k) s += hv[n * 4 + k] * wv[k * 3 + j];
      ok = ok && close(yv[n * 3 + j], s);
      checksum += yv[n * 3 + j];
    }
    double s = 0;
    for (index_t k = 0; k < 4; ++k) s += hv[n * 4 + k] * hv[n * 4 + k];
    ok = ok && close(gv[n * batch + n], s);  // the diagonal of h hᵀ is each row's squared norm
  }
  std::printf("  y = h w: %s, gram = h hᵀ: %s, sum(y) = %.3f\n", kiln::to_string(y.extents()).c_str(),
              kiln::to_string(gram.extents()).c_str(), checksum);

  // ---- 8. the caching allocator ----
  std::printf("8. caching allocator (%s)\n", dev);
  print_stats("now:", kiln::memory_stats<D>());
  for (int step = 0; step < 3; ++step) {
    const auto t = kiln::eval(h * h + 1.0f);  // [N, 4]  freed at the end of each step...
    (void)t;
  }
  print_stats("after 3 temporaries:", kiln::memory_stats<D>());  // ...and reused: cache hits grow
  kiln::empty_cache<D>();
  const auto after = kiln::memory_stats<D>();
  print_stats("after empty_cache():", after);
  ok = ok && after.reserved_bytes == after.allocated_bytes;

  std::printf("result: device=%s batch=%lld sum=%.4f matmul_checksum=%.4f ok=%d\n", dev,
              static_cast<long long>(batch), static_cast<double>(total.item()), checksum, ok ? 1 : 0);
  return ok ? 0 : 1;
}

struct Options {
  index_t batch = 8;
  std::string device = "auto";  // as the training examples: the GPU when there is one
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--batch" || a == "--device") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--batch")
        o.batch = examples::whole_number("00_tensors", a, v);
      else
        o.device = v;
    } else {
      const bool help = a == "--help" || a == "-h";
      if (!help) {  // which argument, then the usage
        const bool known = a.rfind("--", 0) == 0 && std::string("--batch --device ").find(a + " ") != std::string::npos;
        std::fprintf(stderr, known ? "00_tensors: %s needs a value\n" : "00_tensors: unknown argument '%s'\n", a.c_str());
      }
      std::fprintf(help ? stdout : stderr, "usage: %s [--batch N] [--device cpu|cuda|auto]\n", argv[0]);
      std::exit(help ? 0 : 2);
    }
  }
  if (o.batch < 1) {
    std::fprintf(stderr, "00_tensors: --batch must be >= 1\n");
    std::exit(2);
  }
  if (o.device != "cpu" && o.device != "cuda" && o.device != "auto") {
    std::fprintf(stderr, "00_tensors: --device must be cpu, cuda or auto, not '%s'\n", o.device.c_str());
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
      if (kiln::cuda::is_available()) return tour<kiln::Cuda>(o.batch);
      if (o.device == "cuda") {
        std::fprintf(stderr, "00_tensors: --device cuda: CUDA is not available: %s\n",
                     kiln::cuda::unavailable_reason().c_str());
        return 2;
      }
      std::printf("(--device auto: no usable GPU (%s); running on the CPU)\n",
                  kiln::cuda::unavailable_reason().c_str());
#else
      if (o.device == "cuda") {
        std::fprintf(stderr,
                     "00_tensors: --device cuda: this binary was built without CUDA; configure with the "
                     "cuda preset (nvcc at /usr/local/cuda/bin/nvcc) to compile the examples as CUDA\n");
        return 2;
      }
      std::printf("(--device auto: built without CUDA; running on the CPU)\n");
#endif
    }
    return tour<kiln::Cpu>(o.batch);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "00_tensors: error: %s\n", examples::message_of(e));
    return 1;
  }
}
