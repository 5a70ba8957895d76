// What the CIFAR-10 examples share once their network is chosen: the binary batches read once into memory,
// Bytes through the loaders (worker threads, shuffled with a seed every epoch), ToTensor + Normalize(0.5,
// 0.5) per channel in one pass where the batches land (one kernel on a GPU), Adam and cross entropy over
// the training split, and an evaluation on the 10,000 test images in batches of 100 after every epoch
// (examples/common/classify.hpp). lenet_cifar10 trains the seeds' LeNet with it, resnet_cifar10 a ResNet.
#pragma once
#include <kiln/backend/cpu/threads.hpp>
#include <kiln/core/config.hpp>
#include <kiln/data/data.hpp>
#include <kiln/nn/nn.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <type_traits>

#include "checkpoint.hpp"
#include "classify.hpp"
#include "cli.hpp"
#include "report.hpp"
#include "trainer.hpp"

namespace examples::cifar10 {

using Image = kiln::Shape<kiln::dyn, 3, 32, 32>;
/// What scripts/get-cifar10 writes, relative to the repository root.
inline constexpr const char* default_data = "data/cifar10/cifar-10-batches-bin";

/// The program's name (for its messages) and the network's, for the run's line.
struct Program {
  const char* name;
  const char* network;
};

/// Trains Net on the CIFAR-10 batches in o.data on device D in Precision; the exit status.
template <class Net, class D, class Precision>
int run(const Program& program, TrainOptions o, const std::string& device) {  // a copy: o.data_summary is set
  using P = kiln::Policy<Precision, D>;
  const auto t_start = Clock::now();
  std::error_code ec;
  if (o.data == default_data && !std::filesystem::is_directory(o.data, ec)) {
    // The default folder is missing: say how to get it (other folders get Cifar10's own message).
    std::fprintf(stderr,
                 "%s: error: %s: no such directory (relative to the current directory); expected the CIFAR-10 "
                 "binary batches data_batch_1.bin ... data_batch_5.bin, test_batch.bin; run "
                 "`scripts/get-cifar10` from the repository root (it writes %s), then run this from there, "
                 "or pass --data DIR\n",
                 program.name, o.data.c_str(), default_data);
    return 1;
  }
  const kiln::data::Cifar10 train_split(o.data, true), test(o.data, false);  // [3, 32, 32] in [0, 1], class
  const classification::FirstSamples train(train_split, o.limit);            // --limit N: the first N images
  o.data_summary = std::to_string(train_split.size()) + " train / " + std::to_string(test.size()) +
                   " test images";  // checkpoints record it: a resume on other data is refused
  // Bytes through the loaders; floats in [-1, 1] per channel where the batches land (ToTensor + Normalize
  // in one pass: one kernel on a GPU).
  const kiln::data::Bytes train_bytes(train);  // Bytes<FirstSamples<Cifar10>>
  const kiln::data::Bytes test_bytes(test);    // Bytes<Cifar10>
  const kiln::data::ScaleNormalize to_float{255.0f, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};
  const bool pin = std::is_same_v<D, kiln::Cuda>;
  kiln::data::DataLoader train_loader(train_bytes, {.batch_size = o.batch_size, .shuffle = true,
                                                    .num_workers = o.workers, .pin_memory = pin, .seed = o.seed});
  kiln::data::DataLoader test_loader(test_bytes, {.batch_size = 100, .num_workers = o.workers, .pin_memory = pin});

  // Resume, the run's line, then per epoch (examples/common/classify.hpp): cross entropy, the step every
  // --accumulate batches, evaluation without gradients (NoGrad + eval()), the epoch's line, --metrics,
  // --checkpoint. On one model, or on replicas with --parallel dp/ddp (examples/common/trainer.hpp).
  const auto fit_and_report = [&](auto& trained, auto& opt, auto& scaler, const std::string& where) {
    int start = 0;
    if (o.resume)  // refused when the checkpoint was trained with other settings or data (run_settings)
      start = load_training_state(o.checkpoint, trained, opt, scaler, run_settings(o, trained));
    const int threads = kiln::backend::cpu::threads();
    std::printf("%s: CIFAR-10 %lld train / %lld test images from %s; %s (%lld parameters) on %s (%d thread%s), "
                "batch %d x %d, Adam(lr=%g), %d loader worker%s\n",
                program.name, static_cast<long long>(train.size()), static_cast<long long>(test.size()),
                train_split.directory().c_str(), program.network,
                static_cast<long long>(kiln::nn::Model<Net, Image, P>::parameter_count), where.c_str(), threads,
                threads == 1 ? "" : "s", o.batch_size, o.accumulate, static_cast<double>(opt.lr()), o.workers,
                o.workers == 1 ? "" : "s");
    if (start > 0) std::printf("resumed from %s after epoch %d\n", o.checkpoint.c_str(), start);
    auto train_batches = device_batches(trained, train_loader, to_float);  // on the GPU: a copy stream
    auto test_batches = device_batches(trained, test_loader, to_float);
    const auto r = classification::fit(o, trained, opt, scaler, train_batches, test_batches, start);
    return classification::report_result(r, t_start, device, o.precision);
  };
  return with_trainer<Net, Image, Precision, D>(o, device, {.lr = static_cast<float>(o.lr)}, fit_and_report);
}

/// The program: the training examples' flags (defaults: the CIFAR-10 folder, 10 epochs), then Net on the
/// device and precision they choose; the exit status.
template <class Net>
int main(const Program& program, const char* description, int argc, char** argv) {
  CLI::App app{description, program.name};
  TrainOptions o;
  o.data = default_data;
  o.epochs = 10;
  add_train_options(app, o);
  CLI11_PARSE(app, argc, argv);
  return run_training(program.name, o, [&]<class D, class Precision>(const std::string& device) {
    return run<Net, D, Precision>(program, o, device);
  });
}

}  // namespace examples::cifar10
