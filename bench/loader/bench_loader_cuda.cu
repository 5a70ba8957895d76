// bench_loader_cuda: what the DeviceLoader buys on the GPU. LeNet (1 x 28 x 28) trains on the first
// --limit Fashion-MNIST images (batch 128, 2 loader workers, pinned batches) fed three ways, each timed
// over the whole pass with the device synchronised at its end:
//   resident        the same batch, already on the GPU, every step: the compute alone (the baseline)
//   blocking        floats normalised on the host, each batch copied with a blocking to<Cuda>() (kiln's
//                   examples before the DeviceLoader; PyTorch's `.to(device)` without non_blocking)
//   device_loader   bytes through the loader, DeviceLoader<Cuda>: a copy stream one batch ahead, ToTensor +
//                   Normalize in one kernel on the GPU
// Ratios: device_loader_over_blocking (the blocking pass's time / the DeviceLoader's: target >= 1) and
// device_loader_of_resident (the resident pass's time / the DeviceLoader's: the fraction of the compute-only
// rate the fed training keeps; target >= 0.9, the copies hidden behind the steps).
//
//   ./bench_loader_cuda [--data DIR] [--limit 20480] [--repeat 3] [--json FILE]
// Without a usable GPU it prints "no CUDA device: skipped"; without the data it says so; both exit 0.
#include <cstdio>
#include <filesystem>
#include <kiln/cuda.hpp>
#include <kiln/data/data.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <string>

#include "../harness.hpp"
#include "../models.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using Image = Shape<dyn, 1, 28, 28>;
using Net = kiln::bench::models::LeNet28;
}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Harness h("bench_loader_cuda", argc, argv, {.n = 128, .repeat = 3, .warmup = 1},
                         {{"--data", "Fashion-MNIST directory (default /usr/share/datasets/fashion-mnist)"},
                          {"--limit", "first N training images (default 20480)"}});
  if (!kiln::cuda::is_available()) {
    std::printf("no CUDA device: skipped\n");
    return 0;
  }
  const std::string root = h.option("--data").value_or("/usr/share/datasets/fashion-mnist");
  const long long limit = h.size_option("--limit", 20480);
  const bool have_data = std::filesystem::exists(root + "/train-images-idx3-ubyte.gz") ||
                         std::filesystem::exists(root + "/train-images-idx3-ubyte");
  if (!have_data && h.option("--data")) h.fail("--data " + root + ": no train-images-idx3-ubyte[.gz] there");
  if (!have_data) {
    std::printf("bench_loader_cuda: no Fashion-MNIST in %s (Debian: apt-get install dataset-fashion-mnist): skipped\n",
                root.c_str());
    return 0;
  }
  const kiln::data::FashionMnist train(root, true, limit);
  const kiln::data::Bytes bytes(train);
  const kiln::index_t batch = h.n();
  const double images = static_cast<double>(train.size());

  kiln::nn::Model<Net, Image, kiln::Policy<kiln::Fp32, kiln::Cuda>> model(0);
  kiln::optim::Adam opt(model, {.lr = 1e-3});
  kiln::nn::CrossEntropyLoss ce;
  const auto step = [&](const auto& x, const auto& y) {
    opt.zero_grad();
    const auto logits = model.forward(x);
    model.backward(ce.backward(logits, y));
    opt.step();
  };

  kiln::data::DataLoader floats(train, {.batch_size = batch, .shuffle = true, .num_workers = 2, .pin_memory = true, .seed = 1},
                                kiln::data::Normalize{{0.5f}, {0.5f}});
  kiln::data::DataLoader byte_loader(bytes, {.batch_size = batch, .shuffle = true, .num_workers = 2, .pin_memory = true, .seed = 1});
  kiln::data::DeviceLoader<kiln::Cuda, decltype(byte_loader)> on_gpu(byte_loader, {255.0f, {0.5f}, {0.5f}});
  const auto first = *floats.begin();
  const auto fixed_x = first.x.to<kiln::Cuda>();
  const auto fixed_y = first.y.to<kiln::Cuda>();
  const auto steps = static_cast<int>(floats.size());

  h.add("resident", 0, "an epoch's steps on one batch already on the GPU", [&] {
    for (int i = 0; i < steps; ++i) step(fixed_x, fixed_y);
    kiln::cuda::synchronize();
  });
  h.add("blocking", 0, "floats normalised on the host, blocking copies", [&] {
    for (const auto& b : floats) step(b.x.to<kiln::Cuda>(), b.y.to<kiln::Cuda>());
    kiln::cuda::synchronize();
  });
  h.add("device_loader", 0, "bytes, DeviceLoader: copy stream, one kernel per batch", [&] {
    for (const auto& b : on_gpu) step(b.x, b.y);
    kiln::cuda::synchronize();
  });
  h.run();

  std::printf("images/s: resident %.0f, blocking %.0f, DeviceLoader %.0f (%d steps of %lld)\n",
              images / h.median("resident"), images / h.median("blocking"), images / h.median("device_loader"), steps,
              static_cast<long long>(batch));
  h.ratio("device_loader_over_blocking", h.median("blocking") / h.median("device_loader"), 1.0,
          "blocking copies' epoch / DeviceLoader's epoch");
  h.ratio("device_loader_of_resident", h.median("resident") / h.median("device_loader"), 0.9,
          "compute-only epoch / DeviceLoader's epoch: the copies hidden");
  return h.finish();
}
