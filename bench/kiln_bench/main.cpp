// kiln-bench: what fusion buys on real models. For the seeds' 13-16-32-1 MLP (Boston housing, MSE), the
// seeds' LeNet (CIFAR-10 shape, cross entropy) and a 1024-wide MLP, a training step (forward, backward,
// Adam through the GradScaler) and an inference step (no gradients), each fused (kiln's default) and
// unfused (kiln::Unfused: one pass per operation, layer and activation apart, the optimizer in torch's
// single-tensor order), over batch sizes and precisions; a table, --json with the ratios
// (fused_over_unfused_step.<model>.<precision>.<batch>.<mode>, the fused speed-up: unfused time / fused
// time; unfused_over_fused_passes..., and the fused/unfused agreement), and --plot DIR (gnuplot). See
// docs/benchmarks.md.
//
//   ./build/cpu/bench/kiln-bench --batches 32,128,512 --precisions fp32,bf16 --json kb.json --plot kb
#include "kiln_bench/suite.hpp"
#include "models.hpp"

int main(int argc, char** argv) {
  using kiln::dyn;
  using kiln::Shape;
  namespace m = kiln::bench::models;
  kiln::bench::Suite suite;
  suite.add_regression<m::Mlp, Shape<dyn, 13>>("mlp", "the seeds' 13-16-32-1 MLP, MSE");
  suite.add_classifier<m::LeNet, Shape<dyn, 3, 32, 32>>("lenet", 10, "the seeds' LeNet on 3x32x32, cross entropy");
  suite.add_classifier<m::WideMlp, Shape<dyn, 1024>>("wide_mlp", 10, "1024-1024-1024-10 MLP, cross entropy");
  return suite.main(argc, argv);
}
