// bench_loader: the DataLoader's throughput on Fashion-MNIST with 0, 1 and 2 workers against the LeNet
// training step's throughput measured in the same run, and a whole training epoch against PyTorch's.
//
//   loader_over_train        samples/s of the loader (2 workers, Normalize) / samples/s of training
//                            (LeNet step, batch 128): target >= 5, so the loader is never the bottleneck
//   bytes_loader_over_train  the same for the examples' path: bytes through the loader (2 workers), then
//                            DeviceLoader<Cpu> (ToTensor + Normalize in one pass per batch): target >= 5
//   epoch_speedup_vs_torch   PyTorch's epoch (its fastest path: pre-normalised tensors gathered by
//                            shuffled index, bench/loader/torch_epoch.py) / kiln's epoch (DataLoader with
//                            2 workers + training): target >= 1 (when /usr/bin/python3 has torch). PyTorch
//                            runs as a child with this process's thread count and batch (both checked)
//                            whose epochs the harness times in the same rounds as kiln's (warm-up too).
//
//   OMP_NUM_THREADS=2 ./bench_loader [--data DIR] [--limit N] [--repeat 3] [--epoch yes|no] [--torch yes|no]
// Without the data (Debian: dataset-fashion-mnist) it says so and exits 0.
#include <array>
#include <cstdio>
#include <filesystem>
#include <kiln/data/data.hpp>
#include <kiln/kiln.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#include <memory>
#include <optional>
#include <string>

#include "../harness.hpp"
#include "../models.hpp"
#include "../reference.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;
using LeNet = kiln::bench::models::LeNet28;

/// PyTorch's epoch on the same data, batch and thread count, served one epoch per request.
kiln::bench::Reference start_torch(const std::string& data, long long limit, kiln::index_t batch, double samples) {
  auto torch = kiln::bench::Reference::start(
      {"/usr/bin/python3", std::string(KILN_BENCH_DIR) + "/loader/torch_epoch.py", "--serve", "--data", data,
       "--limit", std::to_string(limit), "--batch", std::to_string(batch), "--threads",
       std::to_string(kiln::bench::omp_threads())},
      "PyTorch");
  if (torch.available()) {
    torch.expect("threads", kiln::bench::omp_threads());
    torch.expect("batch", batch);
    torch.expect("samples", samples);
  }
  return torch;
}
}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Harness h("bench_loader", argc, argv, {.n = 128, .repeat = 3, .warmup = 1},
                         {{"--data", "Fashion-MNIST directory (default /usr/share/datasets/fashion-mnist)"},
                          {"--limit", "first N training images (default all)"},
                          {"--epoch", "time a whole training epoch too: yes (default) or no"},
                          {"--torch", "run PyTorch's epoch too: yes (default) or no"}});
  const std::string root = h.option("--data").value_or("/usr/share/datasets/fashion-mnist");
  const long long limit = h.size_option("--limit", -1);
  const bool have_data = std::filesystem::exists(root + "/train-images-idx3-ubyte.gz") ||
                         std::filesystem::exists(root + "/train-images-idx3-ubyte");
  if (!have_data && h.option("--data")) h.fail("--data " + root + ": no train-images-idx3-ubyte[.gz] there");
  if (!have_data) {
    std::printf("bench_loader: no Fashion-MNIST in %s (Debian: apt-get install dataset-fashion-mnist): skipped\n", root.c_str());
    return 0;
  }
  const kiln::data::FashionMnist train(root, true, limit);
  const kiln::data::Normalize normalize{{0.5f}, {0.5f}};
  const auto samples = static_cast<double>(train.size());
  const kiln::index_t batch = h.n();

  for (int workers : {0, 1, 2}) {
    auto loader = std::make_shared<kiln::data::DataLoader<kiln::data::FashionMnist, kiln::data::Normalize>>(
        train, kiln::data::LoaderOptions{.batch_size = batch, .shuffle = true, .num_workers = workers, .seed = 1},
        normalize);
    h.add("loader_" + std::to_string(workers) + "_workers", 0, "one epoch of batches, Normalize", [loader] {
      double sum = 0;
      for (const auto& b : *loader) sum += b.x.data()[0];
      (void)sum;
    });
  }

  // The examples' path: bytes through the loader (2 workers), ToTensor + Normalize in one pass where the
  // batch lands (DeviceLoader<Cpu>: one OpenMP loop per batch on the consuming thread).
  const kiln::data::Bytes bytes(train);
  kiln::data::DataLoader byte_loader(bytes, {.batch_size = batch, .shuffle = true, .num_workers = 2, .seed = 1});
  kiln::data::DeviceLoader<kiln::Cpu, decltype(byte_loader)> device_loader(byte_loader, {255.0f, {0.5f}, {0.5f}});
  h.add("loader_bytes_2_workers", 0, "one epoch: bytes, DeviceLoader<Cpu> (ToTensor + Normalize, 1 pass per batch)",
        [&] {
          double sum = 0;
          for (const auto& b : device_loader) sum += b.x.data()[0];
          (void)sum;
        });

  Model<LeNet, Shape<dyn, 1, 28, 28>> model(0);
  kiln::optim::Adam opt(model, {.lr = 1e-3});
  CrossEntropyLoss ce;
  kiln::data::DataLoader one(train, {.batch_size = batch}, normalize);
  const auto fixed = *one.begin();
  const auto step = [&](const auto& x, const auto& y) {
    opt.zero_grad();
    const auto logits = model.forward(x);
    model.backward(ce.backward(logits, y));
    opt.step();
  };
  constexpr int steps = 10;
  h.add("train_steps", 0, "10 LeNet steps (batch 128), data in memory", [&] {
    for (int i = 0; i < steps; ++i) step(fixed.x, fixed.y);
  });
  const bool epoch = h.yes_no_option("--epoch", true);
  kiln::data::DataLoader epoch_loader(train, {.batch_size = batch, .shuffle = true, .num_workers = 2, .seed = 2}, normalize);
  if (epoch)
    h.add("train_epoch", 0, "a training epoch: loader (2 workers) + steps", [&] {
      for (const auto& b : epoch_loader) step(b.x, b.y);
    });
  std::optional<kiln::bench::Reference> torch;
  if (epoch && h.yes_no_option("--torch", true)) {
    torch.emplace(start_torch(root, limit, batch, samples));
    if (torch->available())
      h.add_timed("torch_epoch", 0, "PyTorch " + torch->hello()["torch"].get<std::string>() + ": an epoch, tensors gathered by index",
                  [&torch] { return torch->time("epoch"); });
  }
  h.run();

  const double train_rate = steps * static_cast<double>(fixed.size()) / h.median("train_steps");
  for (int workers : {0, 1, 2})
    h.info("loader_" + std::to_string(workers) + "_workers_samples_per_s",
           samples / h.median("loader_" + std::to_string(workers) + "_workers"));
  h.info("loader_bytes_2_workers_samples_per_s", samples / h.median("loader_bytes_2_workers"));
  h.info("train_samples_per_s", train_rate);
  std::printf("samples/s: loader 0/1/2 workers %.0f / %.0f / %.0f, bytes + DeviceLoader (2 workers) %.0f, training %.0f\n",
              samples / h.median("loader_0_workers"), samples / h.median("loader_1_workers"),
              samples / h.median("loader_2_workers"), samples / h.median("loader_bytes_2_workers"), train_rate);
  h.ratio("bytes_loader_over_train", samples / h.median("loader_bytes_2_workers") / train_rate, 5.0,
          "bytes + DeviceLoader (2 workers) / training step, samples per second");
  h.ratio("loader_over_train", samples / h.median("loader_2_workers") / train_rate, 5.0,
          "loader with 2 workers / training step, samples per second");
  if (epoch) {
    std::printf("kiln epoch: %.2f s for %.0f images\n", h.median("train_epoch"), samples);
    if (torch && torch->available()) {
      h.info("torch", torch->hello());
      std::printf("PyTorch %s epoch (%s): %.2f s, %d thread(s)\n", torch->hello()["torch"].get<std::string>().c_str(),
                  torch->hello()["mode"].get<std::string>().c_str(), h.median("torch_epoch"),
                  torch->hello()["threads"].get<int>());
      h.ratio("epoch_speedup_vs_torch", h.median("torch_epoch") / h.median("train_epoch"), 1.0,
              "PyTorch epoch / kiln epoch");
    } else if (torch) {
      std::printf("PyTorch not measured (%s): ratio skipped\n", torch->skipped().c_str());
    }
  }
  return h.finish();
}
