// bench_train_step: one training step (forward, backward, optimizer) of the seeds' two models at batch
// 128 on the CPU, kiln against PyTorch eager measured in the same run (same thread count):
//
//   mlp    13-16-32-1 MLP, MSE, Adam(1e-3)       target: >= 10x PyTorch's step (about 130 tiny ops there)
//   lenet  LeNet on 3x32x32, cross entropy, Adam  target: >= 1.2x PyTorch's step
//   lenet_bn  the same with BatchNorm2d after each convolution  target: >= 1.2x PyTorch's step
//   lenet_gn  the same with GroupNorm after each convolution, LayerNorm after the first Linear  target: >= 1.2x
//   lenet_groups  the LeNet step with the biases in a parameter group (the optimizer's pass once per
//             stretch of the arena: 10 for 1)  target: >= 0.9x the step without groups
//   lenet_frozen  the LeNet step with its convolutions frozen (Model::freeze(7): backward stops at the
//             first Linear, the optimizer skips the convolutions)  target: >= 1.3x the whole step
//   resnet20  ResNet-20 on 3x32x32 (Add blocks, BatchNorm), cross entropy, Adam  reported against PyTorch
//             (no issue's target; oneDNN's convolutions there, im2col + OpenBLAS here)
//
// Memory: the bytes a LeNet training forward keeps for backward (and the logits), kiln's allocator count
// against the tensors PyTorch's autograd saves (parameters and input left out on both sides): ratio
// torch_activation_mem_over_kiln, target >= 1 (kiln keeps no more). Also: kiln's peak allocator bytes
// during a training step and during an inference forward (NoGrad), reported.
//
// Precision (issue #5): the LeNet step in fp32, mixed fp16 (with the GradScaler loop) and mixed bf16,
// and the activation memory of each: the allocator bytes a training forward leaves allocated (what it
// keeps for backward, and the logits). Target: fp16's at most 0.55 of fp32's (reported as
// fp32_over_fp16_activation_mem >= 1.82). On the CPU the low types are storage only (arithmetic in
// fp32 after a conversion), so their step times are reported, not targeted.
//
// PyTorch runs as a child process (/usr/bin/python3 bench/train_step/torch_step.py --serve, with this
// process's thread count and batch, both checked) whose samples the harness takes in the same rounds as
// kiln's (bench/reference.hpp), when Debian's python3-torch is installed; otherwise only kiln's numbers
// are printed and the ratios are skipped. A PyTorch side that fails ends the bench with exit status 1.
//
//   OMP_NUM_THREADS=2 ./bench_train_step [--n 128] [--repeat 30] [--warmup 5] [--json train_step.json]
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../harness.hpp"
#include "../models.hpp"
#include "../reference.hpp"
#include "step_case.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;
using kiln::bench::models::LeNet;
using kiln::bench::models::LeNetBn;
using kiln::bench::models::LeNetGn;
using kiln::bench::models::Mlp;
using kiln::bench::models::ResNet20;

/// The LeNet step under precision Prec on the CPU (step_case.hpp).
template <class Prec>
using LenetCase = kiln::bench::StepCase<LeNet, Shape<dyn, 3, 32, 32>, Prec, kiln::Cpu>;

template <class T, class S>
kiln::Tensor<T, S> filled(const kiln::Extents<S>& e, std::uint32_t seed) {
  kiln::Tensor<T, S> t(e);
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (kiln::index_t i = 0; i < t.numel(); ++i) t[i] = static_cast<T>(n(g));
  return t;
}

/// PyTorch's side, serving samples of the same models at `batch` with this process's thread count.
kiln::bench::Reference start_torch(kiln::index_t batch) {
  auto torch = kiln::bench::Reference::start(
      {"/usr/bin/python3", std::string(KILN_BENCH_DIR) + "/train_step/torch_step.py", "--serve", "--threads",
       std::to_string(kiln::bench::omp_threads()), "--batch", std::to_string(batch)},
      "PyTorch");
  if (torch.available()) {
    torch.expect("threads", kiln::bench::omp_threads());
    torch.expect("batch", batch);
  }
  return torch;
}
}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Harness h("bench_train_step", argc, argv, {.n = 128, .repeat = 30, .warmup = 5},
                         {{"--torch", "run PyTorch's side too: yes (default) or no"}});
  const kiln::index_t batch = h.n();

  Model<Mlp, Shape<dyn, 13>> mlp(0);
  const auto mx = filled<float>(kiln::Extents<Shape<dyn, 13>>(batch), 1);
  const auto my = filled<float>(kiln::Extents<Shape<dyn, 1>>(batch), 2);
  MSELoss mse;
  kiln::optim::Adam mlp_opt(mlp, {.lr = 1e-3});

  Model<LeNet, Shape<dyn, 3, 32, 32>> lenet(0);
  const auto lx = filled<float>(kiln::Extents<Shape<dyn, 3, 32, 32>>(batch), 3);
  kiln::Tensor<std::int64_t, Shape<dyn>> ly(batch);
  for (kiln::index_t i = 0; i < batch; ++i) ly[i] = i % 10;
  CrossEntropyLoss ce;
  kiln::optim::Adam lenet_opt(lenet, {.lr = 1e-3});

  // The MLP step is ~30 µs: time 20 consecutive steps per sample (as PyTorch's side runs its steps back
  // to back), so that the LeNet case timed in between does not leave it a cold cache every time.
  constexpr int mlp_steps = 20;
  const auto mlp_step = [&] {
    mlp_opt.zero_grad();
    const auto p = mlp.forward(mx);
    mlp.backward(mse.backward(p, my));
    mlp_opt.step();
  };
  h.add_timed("kiln_mlp_step", 0, "13-16-32-1, MSE, Adam", [&] {
    mlp_step();  // warms the caches after the other case
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < mlp_steps; ++i) mlp_step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / mlp_steps;
  });
  // One LeNet training step of `model` with `opt` (the whole model, with groups, frozen).
  const auto lenet_step = [&](auto& model, auto& opt) {
    opt.zero_grad();
    const auto logits = model.forward(lx);
    model.backward(ce.backward(logits, ly));
    opt.step();
  };
  h.add("kiln_lenet_step", 0, "LeNet 3x32x32, cross entropy, Adam", [&] { lenet_step(lenet, lenet_opt); });
  // The LeNet step with parameter groups: the five biases in a group of their own (torch's no-decay
  // split), so the optimizer runs ten passes, one per stretch of the arena, where it ran one.
  Model<LeNet, Shape<dyn, 3, 32, 32>> lenet_grouped(0);
  kiln::optim::Adam grouped_opt(lenet_grouped, {.lr = 1e-3});
  {
    std::vector<ParameterInfo> biases;
    for (const auto& p : lenet_grouped.named_parameters())
      if (p.shape.size() == 1) biases.push_back(p);
    grouped_opt.add_param_group({.params = biases, .lr = 2e-3});
  }
  h.add("kiln_lenet_step_groups", 0, "the LeNet step with the biases in a parameter group (10 optimizer passes)",
        [&] { lenet_step(lenet_grouped, grouped_opt); });
  // The LeNet step fine-tuning the head: the convolutions, pools and Flatten (layers 0 to 6) frozen.
  Model<LeNet, Shape<dyn, 3, 32, 32>> lenet_frozen(0);
  lenet_frozen.freeze(7);
  kiln::optim::Adam frozen_opt(lenet_frozen, {.lr = 1e-3});
  h.add("kiln_lenet_step_frozen", 0, "the LeNet step with layers 0 to 6 (the convolutions) frozen",
        [&] { lenet_step(lenet_frozen, frozen_opt); });
  // The other CIFAR-sized networks, each one StepCase (the same Adam and cross entropy; fp32).
  kiln::bench::StepCase<LeNetBn, Shape<dyn, 3, 32, 32>, kiln::Fp32, kiln::Cpu> lenet_bn(lx, ly);
  kiln::bench::StepCase<LeNetGn, Shape<dyn, 3, 32, 32>, kiln::Fp32, kiln::Cpu> lenet_gn(lx, ly);
  kiln::bench::StepCase<ResNet20, Shape<dyn, 3, 32, 32>, kiln::Fp32, kiln::Cpu> resnet(lx, ly);
  h.add("kiln_lenet_bn_step", 0, "LeNet with BatchNorm2d, cross entropy, Adam", [&] { lenet_bn.step(); });
  h.add("kiln_lenet_gn_step", 0, "LeNet with GroupNorm and LayerNorm, cross entropy, Adam", [&] { lenet_gn.step(); });
  h.add("kiln_resnet20_step", 0, "ResNet-20 3x32x32, cross entropy, Adam", [&] { resnet.step(); });
  LenetCase<kiln::MixedFp16> fp16(lx, ly);
  LenetCase<kiln::MixedBf16> bf16(lx, ly);
  h.add("kiln_lenet_step_fp16", 0, "the same in mixed fp16 + GradScaler", [&] { fp16.step(); });
  h.add("kiln_lenet_step_bf16", 0, "the same in mixed bf16", [&] { bf16.step(); });
  // PyTorch's samples in the same rounds.
  std::optional<kiln::bench::Reference> torch;
  if (h.yes_no_option("--torch", true)) {
    torch.emplace(start_torch(batch));
    if (torch->available()) {
      const std::string eager = "PyTorch " + torch->hello()["torch"].get<std::string>() + " eager";
      for (const char* name : {"mlp", "lenet", "lenet_bn", "lenet_gn", "resnet20"})
        h.add_timed(std::string("torch_") + name + "_step", 0, eager, [&torch, name] { return torch->time(name); });
    }
  }
  h.run();

  // Precision: activation memory of a training forward, fp32 against fp16 and bf16.
  LenetCase<kiln::Fp32> fp32(lx, ly);
  const double act32 = fp32.activation_bytes(), act16 = fp16.activation_bytes(), actb16 = bf16.activation_bytes();
  std::printf("kiln LeNet activation memory (batch %lld): fp32 %.2f MiB, fp16 %.2f MiB, bf16 %.2f MiB; "
              "step fp16 %.2f ms, bf16 %.2f ms (fp32 %.2f ms)\n",
              static_cast<long long>(batch), act32 / 1048576.0, act16 / 1048576.0, actb16 / 1048576.0,
              h.median("kiln_lenet_step_fp16") * 1e3, h.median("kiln_lenet_step_bf16") * 1e3,
              h.median("kiln_lenet_step") * 1e3);
  h.info("kiln_lenet_activation_bytes", {{"fp32", act32}, {"fp16", act16}, {"bf16", actb16}});
  h.ratio("fp32_over_fp16_activation_mem", act32 / act16, 1.0 / 0.55, "fp16 activations <= 0.55 x fp32's");
  h.info("fp32_over_bf16_activation_mem", act32 / actb16);
  h.info("fp16_step_over_fp32", h.median("kiln_lenet_step_fp16") / h.median("kiln_lenet_step"));
  h.info("bf16_step_over_fp32", h.median("kiln_lenet_step_bf16") / h.median("kiln_lenet_step"));
  h.ratio("lenet_step_without_over_with_groups", h.median("kiln_lenet_step") / h.median("kiln_lenet_step_groups"),
          0.9, "LeNet step time with one group / with the biases in a second (10 optimizer passes for 1)");

  h.ratio("lenet_step_whole_over_frozen_convolutions", h.median("kiln_lenet_step") / h.median("kiln_lenet_step_frozen"),
          1.3, "LeNet step time / with its convolutions frozen (backward stops at the first Linear)");

  // Memory: peak allocator bytes of one training step and of one inference forward.
  auto& alloc = kiln::caching_allocator<kiln::Cpu>();
  alloc.reset_peak_stats();
  const auto base = alloc.stats().allocated_bytes;
  lenet_step(lenet, lenet_opt);
  const double train_peak = static_cast<double>(alloc.stats().peak_allocated_bytes - base);
  alloc.reset_peak_stats();
  {
    NoGrad guard(lenet);
    const auto logits = lenet.forward(lx);
  }
  const double infer_peak = static_cast<double>(alloc.stats().peak_allocated_bytes - base);
  h.info("kiln_lenet_train_step_peak_bytes", train_peak);
  h.info("kiln_lenet_inference_peak_bytes", infer_peak);
  std::printf("kiln LeNet peak memory: training step %.2f MiB, inference forward (NoGrad) %.2f MiB\n",
              train_peak / 1048576.0, infer_peak / 1048576.0);
  h.info("train_over_inference_mem", train_peak / infer_peak);  // (> 1 by construction: reported only)

  if (torch && torch->available()) {
    h.info("torch", torch->hello());
    std::printf("PyTorch %s eager, %d thread(s), batch %lld: MLP step %.3f ms, LeNet step %.3f ms\n",
                torch->hello()["torch"].get<std::string>().c_str(), torch->hello()["threads"].get<int>(),
                static_cast<long long>(batch), h.median("torch_mlp_step") * 1e3, h.median("torch_lenet_step") * 1e3);
    const auto speedup = [&](const char* name) { return h.median(std::string("torch_") + name + "_step") / h.median(std::string("kiln_") + name + "_step"); };
    h.ratio("mlp_speedup_vs_torch", speedup("mlp"), 10.0, "PyTorch step / kiln step");
    h.ratio("lenet_speedup_vs_torch", speedup("lenet"), 1.2, "PyTorch step / kiln step");
    h.ratio("lenet_bn_speedup_vs_torch", speedup("lenet_bn"), 1.2, "PyTorch step / kiln step, LeNet with BatchNorm2d");
    h.ratio("lenet_gn_speedup_vs_torch", speedup("lenet_gn"), 1.2,
            "PyTorch step / kiln step, LeNet with GroupNorm and LayerNorm");
    h.info("resnet20_speedup_vs_torch", speedup("resnet20"));  // no issue's target: reported only
    std::printf("ResNet-20: PyTorch step / kiln step %.2f (reported, no target)\n", speedup("resnet20"));
    const double torch_act = torch->info("lenet_activation_bytes").get<double>();
    std::printf("LeNet activation memory of a training forward: PyTorch %.2f MiB, kiln %.2f MiB\n",
                torch_act / 1048576.0, act32 / 1048576.0);
    h.ratio("torch_activation_mem_over_kiln", torch_act / act32, 1.0,
            "bytes PyTorch's autograd saves (+ logits) / kiln's held activations, LeNet fp32");
  } else if (torch) {
    std::printf("PyTorch not measured (%s): ratios skipped\n", torch->skipped().c_str());
  }
  return h.finish();
}
