// What the CIFAR-10 examples share once their network is chosen: the binary batches read once into memory,
// Bytes through the loaders (worker threads, shuffled with a seed every epoch), ToTensor + Normalize(0.5,
// 0.5) per channel in one pass where the batches land (one kernel on a GPU), Adam and cross entropy over
// the training split, and an evaluation on the 10,000 test images in batches of 100 after every epoch
// (examples/common/classify.hpp). lenet_cifar10 trains the seeds' LeNet with it, resnet_cifar10 a ResNet.
#pragma once
#include <kiln/core/config.hpp>
#include <kiln/data/data.hpp>
#include <kiln/nn/nn.hpp>

#include <filesystem>
#include <string>
#include <system_error>

#include "classify.hpp"
#include "cli.hpp"
#include "images.hpp"
#include "report.hpp"

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
  const auto t_start = Clock::now();
  std::error_code ec;
  if (o.data == default_data && !std::filesystem::is_directory(o.data, ec)) {
    // The default folder is missing: say how to get it (other folders get Cifar10's own message).
    throw kiln::Error(o.data + ": no such directory (relative to the current directory); expected the CIFAR-10 "
                      "binary batches data_batch_1.bin ... data_batch_5.bin, test_batch.bin; run "
                      "`scripts/get-cifar10` from the repository root (it writes " + std::string(default_data) +
                      "), then run this from there, or pass --data DIR");
  }
  const kiln::data::Cifar10 train_split(o.data, true), test(o.data, false);  // [3, 32, 32] in [0, 1], class
  const classification::FirstSamples train(train_split, o.limit);            // --limit N: the first N images
  o.data_summary = std::to_string(train_split.size()) + " train / " + std::to_string(test.size()) +
                   " test images";  // checkpoints record it: a resume on other data is refused
  // Bytes through the loaders; floats in [-1, 1] per channel where the batches land (ToTensor + Normalize
  // in one pass: one kernel on a GPU); then the epochs (images.hpp).
  const classification::ImageRun images{.program = program.name,
                                        .data = "CIFAR-10",
                                        .folder = train_split.directory(),
                                        .network = program.network,
                                        .test_batch_size = 100,
                                        .to_float = {255.0f, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}};
  return classification::train_on_images<Net, Image, Precision, D>(o, images, train, test, t_start, device);
}

/// The program: the training examples' flags (defaults: the CIFAR-10 folder, 10 epochs), then Net on the
/// device and precision they choose; the exit status.
template <class Net>
int main(const Program& program, const char* description, int argc, char** argv) {
  CLI::App app{description, program.name};
  TrainOptions o;
  o.data = default_data;
  o.epochs = 10;
  add_train_options(app, o, Net::layer_count);
  if (const int status = parse_options(app, argc, argv, program.name); status >= 0) return status;
  return run_training(program.name, o, [&]<class D, class Precision>(const std::string& device) {
    return run<Net, D, Precision>(program, o, device);
  });
}

}  // namespace examples::cifar10
