// What the image-classification examples share once their datasets are read: the images' bytes through
// the loaders (worker threads, the training split shuffled with a seed every epoch; pinned for a GPU),
// ToTensor + Normalize in one pass where the batches land (one kernel on a GPU), then the run's line and
// classify.hpp's epoch loop on one model or on replicas (trainer.hpp), and the closing `result:` line.
// lenet_fashion_mnist and the CIFAR-10 examples (cifar10.hpp) train through it.
#pragma once
#include <cstdio>
#include <kiln/backend/cpu/threads.hpp>
#include <kiln/core/config.hpp>
#include <kiln/core/index.hpp>
#include <kiln/data/data.hpp>
#include <kiln/nn/nn.hpp>
#include <string>
#include <type_traits>

#include "checkpoint.hpp"
#include "classify.hpp"
#include "cli.hpp"
#include "device.hpp"
#include "report.hpp"
#include "trainer.hpp"

namespace examples::classification {

/// What an image example says of its run and how its batches become floats.
struct ImageRun {
  const char* program;  // for the run's line: "<program>: <data> N train / M test images from <folder>; ..."
  const char* data;     // "Fashion-MNIST"
  std::string folder;
  const char* network;  // "LeNet"
  int test_batch_size;
  kiln::data::ScaleNormalize to_float;  // ToTensor + Normalize(mean, std)
};

/// Trains Net on `train` (images of shape Image) and evaluates it on `test` after every epoch, on device
/// D in Precision (o: the flags; o.data_summary set by the caller); the exit status.
template <class Net, class Image, class Precision, class D, class Train, class Test>
int train_on_images(const TrainOptions& o, const ImageRun& run, const Train& train, const Test& test,
                    Clock::time_point t_start, const std::string& device) {
  using P = kiln::Policy<Precision, D>;
  // The loaders collate the images' bytes (a quarter of floats' traffic); where the batches land they
  // become floats in one pass.
  const kiln::data::Bytes train_bytes(train);  // two declarations: Train and Test may differ
  const kiln::data::Bytes test_bytes(test);
  const bool pin = std::is_same_v<D, kiln::Cuda>;
  kiln::data::DataLoader train_loader(train_bytes, {.batch_size = o.batch_size,
                                                    .shuffle = true,
                                                    .num_workers = o.workers,
                                                    .pin_memory = pin,
                                                    .seed = o.seed});
  kiln::data::DataLoader test_loader(
      test_bytes, {.batch_size = run.test_batch_size, .num_workers = o.workers, .pin_memory = pin});

  // Resume, the run's line, then per epoch (classify.hpp): cross entropy, the step every --accumulate
  // batches, evaluation without gradients (NoGrad + eval()), the epoch's line, --metrics, --checkpoint.
  const auto fit_and_report = [&](auto& trained, auto& opt, auto& scaler, const std::string& where) {
    const Resumed resumed = resume_training(o, trained, opt, scaler);  // (checkpoint.hpp; --lr replaces its lr)
    const int threads = kiln::backend::cpu::threads();
    std::printf(
        "%s: %s %lld train / %lld test images from %s; %s (%lld parameters) on %s (%d thread%s), "
        "batch %d x %d, %s, %d loader worker%s\n",
        run.program, run.data, static_cast<long long>(train.size()), static_cast<long long>(test.size()),
        run.folder.c_str(), run.network,
        static_cast<long long>(kiln::nn::Model<Net, Image, P>::parameter_count), where.c_str(), threads,
        threads == 1 ? "" : "s", o.batch_size, o.accumulate, describe_optimizer(o, opt).c_str(), o.workers,
        o.workers == 1 ? "" : "s");
    print_resumed(o, resumed);
    std::fflush(stdout);  // (a pipe or a log file sees the run's line before the first epoch ends)
    auto train_batches = device_batches(trained, train_loader, run.to_float);  // on the GPU: a copy stream
    auto test_batches = device_batches(trained, test_loader, run.to_float);
    const auto r = fit(o, trained, opt, scaler, train_batches, test_batches, resumed);
    return report_result(r, t_start, device, o.precision);
  };
  return with_trainer<Net, Image, Precision, D>(o, device, {.lr = o.lr, .weight_decay = o.weight_decay},
                                                fit_and_report);
}

}  // namespace examples::classification
