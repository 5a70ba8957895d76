// bench_train_step_cuda: one training step (forward, backward, Adam) of the seeds' LeNet at batch 128 on
// the GPU, with cuDNN convolutions and fused epilogues, against PyTorch eager on the same GPU when
// `python3` (or $KILN_TORCH_PYTHON) has a CUDA-enabled torch (ratio lenet_speedup_vs_torch, target >= 3). These
// steps are launched op by op; the same steps captured in a CUDA graph and replayed (kiln::cuda::Graph, the
// issue's recipe for a launch-bound model) are kiln-bench's GPU rows, next to PyTorch eager and torch.compile.
// Also the MLP step. Times are per step over --inner back-to-back steps, measured with CUDA events.
//
// Precision (issue #5): LeNet (batch 128) and a wide MLP (1024-1024-1024-10, batch 1024) in fp32, mixed
// fp16 (GradScaler loop) and mixed bf16. Targets: each mixed step >= 1.5x its fp32 step, fp16's
// activation memory <= 0.55x fp32's (allocator bytes a training forward leaves allocated), and ahead of
// PyTorch's autocast (+ GradScaler for fp16) step on the same GPU.
//
//   ./bench_train_step_cuda [--repeat 20] [--inner 20] [--json FILE]
// Without a usable GPU it prints "no CUDA device: skipped" and exits 0.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <kiln/cuda.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <memory>
#include <random>
#include <string>

#include "../cuda_timing.hpp"
#include "../harness.hpp"
#include "../models.hpp"
#include "step_case.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;
using P = kiln::Policy<kiln::Fp32, kiln::Cuda>;
using kiln::bench::models::LeNet;
using kiln::bench::models::Mlp;

using kiln::bench::models::WideMlp;

/// A training step of Net on the GPU under precision Prec (step_case.hpp).
template <class Net, class In, class Prec>
using GpuCase = kiln::bench::StepCase<Net, In, Prec, kiln::Cuda>;

template <class S>
kiln::Tensor<float, S, kiln::Cuda> random_on_gpu(kiln::index_t batch, std::uint32_t seed) {
  kiln::Tensor<float, S> t{kiln::Extents<S>(batch)};
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (kiln::index_t i = 0; i < t.numel(); ++i) t[i] = n(g);
  return t.template to<kiln::Cuda>();
}

using kiln::bench::event_timed;

/// PyTorch's side: the same batch, `inner` steps per sample synchronised once (as kiln's events time
/// them), after warm-up.
nlohmann::json run_torch(kiln::index_t batch, int repeat, int warmup, int inner) {
  // The GPU machines' CUDA-enabled torch is the `python3` on PATH (not Debian's CPU-only one).
  const char* python = std::getenv("KILN_TORCH_PYTHON");
  return kiln::bench::run_json(std::string(python ? python : "python3") + " " + std::string(KILN_BENCH_DIR) +
                               "/train_step/torch_step.py --device cuda --amp --batch " + std::to_string(batch) +
                               " --repeat " + std::to_string(repeat) + " --warmup " + std::to_string(warmup) +
                               " --inner " + std::to_string(inner));
}
}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Harness h("bench_train_step_cuda", argc, argv, {.n = 128, .repeat = 20, .warmup = 3},
                         {{"--inner", "steps per timed sample (default 20)"}, {"--torch", "yes (default) or no"}});
  const int inner = static_cast<int>(h.size_option("--inner", 20, 1, 1 << 20));
  if (inner < 1) {
    std::fprintf(stderr, "bench_train_step_cuda: --inner must be >= 1\n");
    return 2;
  }
  if (!kiln::cuda::is_available()) {
    std::printf("no CUDA device: skipped\n");
    return 0;
  }
  const kiln::index_t batch = h.n();
  Model<Mlp, Shape<dyn, 13>, P> mlp(0);
  const auto mx = random_on_gpu<Shape<dyn, 13>>(batch, 1);
  const auto my = random_on_gpu<Shape<dyn, 1>>(batch, 2);
  MSELoss mse;
  kiln::optim::Adam mlp_opt(mlp, {.lr = 1e-3});

  Model<LeNet, Shape<dyn, 3, 32, 32>, P> lenet(0);
  const auto lx = random_on_gpu<Shape<dyn, 3, 32, 32>>(batch, 3);
  kiln::Tensor<std::int64_t, Shape<dyn>> ly_host(batch);
  for (kiln::index_t i = 0; i < batch; ++i) ly_host[i] = i % 10;
  const auto ly = ly_host.to<kiln::Cuda>();
  CrossEntropyLoss ce;
  kiln::optim::Adam lenet_opt(lenet, {.lr = 1e-3});

  h.add_timed("kiln_mlp_step", 0, "13-16-32-1, MSE, Adam", event_timed(inner, [&] {
                mlp_opt.zero_grad();
                const auto p = mlp.forward(mx);
                mlp.backward(mse.backward(p, my));
                mlp_opt.step();
              }));
  h.add_timed("kiln_lenet_step", 0, "LeNet 3x32x32, cross entropy, Adam", event_timed(inner, [&] {
                lenet_opt.zero_grad();
                const auto logits = lenet.forward(lx);
                lenet.backward(ce.backward(logits, ly));
                lenet_opt.step();
              }));
  // Precision: LeNet and the wide MLP in fp32, fp16 and bf16.
  GpuCase<LeNet, Shape<dyn, 3, 32, 32>, kiln::MixedFp16> lenet16(lx, ly);
  GpuCase<LeNet, Shape<dyn, 3, 32, 32>, kiln::MixedBf16> lenetb16(lx, ly);
  constexpr kiln::index_t wide_batch = 1024;
  const auto wx = random_on_gpu<Shape<dyn, 1024>>(wide_batch, 4);
  kiln::Tensor<std::int64_t, Shape<dyn>> wy_host(wide_batch);
  for (kiln::index_t i = 0; i < wide_batch; ++i) wy_host[i] = i % 10;
  const auto wy = wy_host.to<kiln::Cuda>();
  GpuCase<WideMlp, Shape<dyn, 1024>, kiln::Fp32> wide32(wx, wy);
  GpuCase<WideMlp, Shape<dyn, 1024>, kiln::MixedFp16> wide16(wx, wy);
  GpuCase<WideMlp, Shape<dyn, 1024>, kiln::MixedBf16> wideb16(wx, wy);
  h.add_timed("kiln_lenet_step_fp16", 0, "LeNet, mixed fp16 + GradScaler", event_timed(inner, [&] { lenet16.step(); }));
  h.add_timed("kiln_lenet_step_bf16", 0, "LeNet, mixed bf16", event_timed(inner, [&] { lenetb16.step(); }));
  h.add_timed("kiln_wide_mlp_step", 0, "1024-1024-1024-10 MLP, batch 1024, fp32", event_timed(inner, [&] { wide32.step(); }));
  h.add_timed("kiln_wide_mlp_step_fp16", 0, "the same, mixed fp16 + GradScaler", event_timed(inner, [&] { wide16.step(); }));
  h.add_timed("kiln_wide_mlp_step_bf16", 0, "the same, mixed bf16", event_timed(inner, [&] { wideb16.step(); }));
  GpuCase<LeNet, Shape<dyn, 3, 32, 32>, kiln::Fp32> lenet32(lx, ly);
  const double act32 = lenet32.activation_bytes(), act16 = lenet16.activation_bytes();
  const double wact32 = wide32.activation_bytes(), wact16 = wide16.activation_bytes();

  const auto p0 = kiln::passes();
  lenet_opt.zero_grad();
  lenet.backward(ce.backward(lenet.forward(lx), ly));
  lenet_opt.step();
  kiln::cuda::synchronize();
  const auto step_passes = kiln::passes() - p0;  // one step's
  h.info("lenet_step_passes", static_cast<double>(step_passes));
  h.run();
  std::printf("kiln LeNet step: %.3f ms, %llu kernel launches / library calls per step\n",
              h.median("kiln_lenet_step") * 1e3, static_cast<unsigned long long>(step_passes));
  std::printf("kiln LeNet fp32 / fp16 / bf16 step: %.3f / %.3f / %.3f ms; wide MLP %.3f / %.3f / %.3f ms\n",
              h.median("kiln_lenet_step") * 1e3, h.median("kiln_lenet_step_fp16") * 1e3,
              h.median("kiln_lenet_step_bf16") * 1e3, h.median("kiln_wide_mlp_step") * 1e3,
              h.median("kiln_wide_mlp_step_fp16") * 1e3, h.median("kiln_wide_mlp_step_bf16") * 1e3);
  h.ratio("lenet_fp16_speedup", h.median("kiln_lenet_step") / h.median("kiln_lenet_step_fp16"), 1.5, "fp32 step / fp16 step");
  h.ratio("lenet_bf16_speedup", h.median("kiln_lenet_step") / h.median("kiln_lenet_step_bf16"), 1.5, "fp32 step / bf16 step");
  h.ratio("wide_mlp_fp16_speedup", h.median("kiln_wide_mlp_step") / h.median("kiln_wide_mlp_step_fp16"), 1.5,
          "fp32 step / fp16 step");
  h.ratio("wide_mlp_bf16_speedup", h.median("kiln_wide_mlp_step") / h.median("kiln_wide_mlp_step_bf16"), 1.5,
          "fp32 step / bf16 step");
  h.ratio("lenet_fp32_over_fp16_activation_mem", act32 / act16, 1.0 / 0.55, "fp16 activations <= 0.55 x fp32's");
  h.ratio("wide_mlp_fp32_over_fp16_activation_mem", wact32 / wact16, 1.0 / 0.55, "fp16 activations <= 0.55 x fp32's");
  if (h.yes_no_option("--torch", true)) {
    const auto t = run_torch(h.n(), h.repeat(), h.warmup(), inner);
    if (t.contains("error") || (!t.contains("skipped") && !t.contains("lenet_step_s")) ||
        (t.contains("batch") && t["batch"] != h.n())) {
      std::fprintf(stderr, "bench_train_step_cuda: PyTorch's side failed: %s\n", t.dump().substr(0, 400).c_str());
      (void)h.finish();
      return 1;
    }
    if (t.contains("lenet_step_s")) {
      h.info("torch", t);
      std::printf("PyTorch %s eager on %s: LeNet step %.3f ms\n", t["torch"].get<std::string>().c_str(),
                  t["device"].get<std::string>().c_str(), t["lenet_step_s"].get<double>() * 1e3);
      h.ratio("lenet_speedup_vs_torch", t["lenet_step_s"].get<double>() / h.median("kiln_lenet_step"), 3.0,
              "PyTorch eager step / kiln step, same GPU");
      for (const char* name : {"lenet_step_fp16", "lenet_step_bf16", "wide_mlp_step_fp16", "wide_mlp_step_bf16"})
        if (t.contains(std::string(name) + "_s"))
          h.ratio(std::string(name) + "_vs_torch_autocast",
                  t[std::string(name) + "_s"].get<double>() / h.median(std::string("kiln_") + name), 1.0,
                  "PyTorch autocast step / kiln step, same GPU");
    } else {
      std::printf("PyTorch on the GPU not measured (%s): ratio skipped\n", t["skipped"].dump().c_str());
    }
  }
  return h.finish();
}
