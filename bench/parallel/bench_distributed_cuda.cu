// bench_distributed_cuda: one process per GPU (Distributed<Nccl>), run as `mpiexec -n <GPUs>
// bench_distributed_cuda`. Weak scaling, as issue #6 measures it: every rank keeps the same batch, so a
// perfect job takes as long per step on N GPUs as one GPU does alone. For the wide MLP (1024-1024-1024-10,
// 2.1 M parameters, 8.4 MB of fp32 gradients: the model the target is for) and LeNet (62 k parameters:
// where communication dominates), it times in the same job:
//
//   single_<model>   rank 0 alone on its GPU with the per-rank batch (the others wait at a barrier)
//   ddp_<model>      every rank on its GPU, gradients averaged by NCCL in buckets during backward
//   allreduce_<model> the averaging of every bucket alone
//
// and reports scaling_efficiency_<model> = single / ddp (target >= 0.90 for the wide MLP on GPUs joined by
// NVLink, when the job has more than one rank). Rank 0 prints and writes --json.
// Without a usable GPU it prints "no CUDA device: skipped" and exits 0.
#include <kiln/cuda.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <kiln/parallel/distributed.hpp>
#include <kiln/parallel/nccl.hpp>

#include <cstdint>
#include <memory>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../harness.hpp"
#include "../models.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;
using P = kiln::Policy<kiln::Fp32, kiln::Cuda>;
using Group = kiln::parallel::ProcessGroup<kiln::Nccl>;

/// One model's three cases: alone on rank 0, DDP on every rank, the averaging alone.
template <class Net, class In, class Y, class SY, class Loss>
void add_cases(kiln::bench::Harness& h, Group& group, const std::string& name, kiln::index_t batch,
               std::vector<Y> targets, kiln::Extents<SY> target_ext, Loss loss) {
  struct State {
    Model<Net, In, P> single{0};
    kiln::parallel::DistributedDataParallel<Net, In, kiln::Nccl, kiln::Fp32, kiln::Cuda> ddp;
    kiln::optim::Adam<float, kiln::Cuda> opt{single, {.lr = 1e-3}};
    kiln::optim::Adam<float, kiln::Cuda> dopt;
    kiln::Tensor<float, In, kiln::Cuda> x;
    kiln::Tensor<Y, SY, kiln::Cuda> y;
    Loss loss;
    State(Group& g, kiln::index_t batch, const std::vector<Y>& t, kiln::Extents<SY> e, Loss l)
        : ddp(g, 0), dopt(ddp.module(), {.lr = 1e-3}), loss(l) {
      kiln::Tensor<float, In> xh{kiln::Extents<In>(batch)};
      for (kiln::index_t i = 0; i < xh.numel(); ++i) xh[i] = static_cast<float>((i * 7919 + g.rank() * 13) % 1000) / 500.0f - 1.0f;
      x = xh.template to<kiln::Cuda>();
      kiln::Tensor<Y, SY> yh{e};
      for (kiln::index_t i = 0; i < yh.numel(); ++i) yh[i] = t[static_cast<std::size_t>(i)];
      y = yh.template to<kiln::Cuda>();
    }
  };
  auto s = std::make_shared<State>(group, batch, targets, target_ext, loss);
  // Rank 0's step, timed before the barrier (a collective's latency is not the step's).
  h.add_timed("single_" + name, 0, "rank 0 alone, batch " + std::to_string(batch), [s, &group] {
    const auto t0 = std::chrono::steady_clock::now();
    if (group.is_main()) {
      s->opt.zero_grad();
      s->single.backward(s->loss.backward(s->single.forward(s->x), s->y));
      s->opt.step();
      kiln::cuda::synchronize_stream();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    group.barrier("the single-GPU step");
    return seconds;
  });
  h.add("ddp_" + name, 0, std::to_string(group.size()) + " ranks, batch " + std::to_string(batch) + " each", [s] {
    s->dopt.zero_grad();
    s->ddp.backward(s->loss.backward(s->ddp.forward(s->x), s->y));
    s->dopt.step();
    kiln::cuda::synchronize_stream();
  });
  h.add("allreduce_" + name, 4.0 * 2 * static_cast<double>(Model<Net, In, P>::parameter_count), "averaging every bucket",
        [s] { s->ddp.all_reduce_gradients(); });
}
}  // namespace

int main(int argc, char** argv) {
  if (!kiln::cuda::is_available()) {  // before MPI starts: a machine without a GPU skips cleanly
    std::printf("no CUDA device: skipped\n");
    return 0;
  }
  Group group;
  std::vector<char*> args(argv, argv + argc);
  if (!group.is_main()) {
    if (std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
    args = kiln::bench::without_json(argc, argv);
  }
  kiln::bench::Harness h("bench_distributed_cuda", static_cast<int>(args.size()), args.data(),
                         {.n = 256, .repeat = 20, .warmup = 3});
  const kiln::index_t batch = h.n();
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  using kiln::bench::models::LeNet;
  using kiln::bench::models::WideMlp;
  add_cases<WideMlp, Shape<dyn, 1024>>(h, group, "wide_mlp", batch, labels, kiln::Extents<Shape<dyn>>(batch),
                                       CrossEntropyLoss{});
  add_cases<LeNet, Shape<dyn, 3, 32, 32>>(h, group, "lenet", batch, labels, kiln::Extents<Shape<dyn>>(batch),
                                          CrossEntropyLoss{});
  std::printf("%d rank%s, one GPU each; batch %lld per rank (weak scaling)\n", group.size(), group.size() == 1 ? "" : "s",
              static_cast<long long>(batch));
  h.run();
  h.info("ranks", group.size());
  for (const char* m : {"wide_mlp", "lenet"}) {
    const double eff = h.median(std::string("single_") + m) / h.median(std::string("ddp_") + m);
    if (group.size() > 1 && std::string(m) == "wide_mlp")
      h.ratio("scaling_efficiency_wide_mlp", eff, 0.90, "1 GPU step / " + std::to_string(group.size()) + "-GPU DDP step");
    else
      h.info(std::string("scaling_efficiency_") + m, eff);
    std::printf("%s: one GPU %.3f ms, %d ranks %.3f ms per step (efficiency %.2f); averaging %.3f ms\n", m,
                h.median(std::string("single_") + m) * 1e3, group.size(), h.median(std::string("ddp_") + m) * 1e3, eff,
                h.median(std::string("allreduce_") + m) * 1e3);
  }
  return h.finish();
}
