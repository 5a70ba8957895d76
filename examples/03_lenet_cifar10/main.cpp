// lenet_cifar10: the seeds' recipe. Trains LeNet on CIFAR-10 (32 x 32 colour images, 10 classes) and
// reports the accuracy on the 10,000 test images after every epoch.
//
// What it shows:
//   1. A network is a type: the seeds' LeNet exactly, Conv2d<3, 6, 5> ... Linear<84, 10> on
//      [N, 3, 32, 32]; every shape in between is checked when the program compiles.
//   2. Data: kiln::data::Cifar10 reads the binary version (data_batch_1..5.bin, test_batch.bin), decoded
//      once into memory as bytes, shuffled with a seed every epoch, collated as bytes by worker threads
//      ahead of the training step (DataLoader over Bytes), then moved to the device (on a GPU: pinned, on
//      a copy stream, one batch ahead) and scaled and normalised there in one pass, ToTensor +
//      Normalize(0.5, 0.5) per channel (DeviceLoader).
//   3. Training: Adam(1e-3), cross entropy, batch 128, 10 epochs, optional gradient accumulation
//      (--accumulate K); each epoch ends with an evaluation on the test split in batches of 100, without
//      gradients, a JSON line in --metrics and an atomic checkpoint in --checkpoint (--resume continues).
//      The loop is examples/common/classify.hpp, shared with lenet_fashion_mnist.
//
// Get the data once (162 MiB; the default --data is the folder it prints, relative to the current
// directory: run from the repository root):
//   ./scripts/get-cifar10                                   # -> data/cifar10/cifar-10-batches-bin
//   ./build/cpu/examples/lenet_cifar10                      # 10 epochs on the CPU
//   ./build/cpu/examples/lenet_cifar10 --epochs 1 --limit 5000 --metrics m.jsonl
// Flags: --help. The last line is `result: test_accuracy=... epochs=... seconds=... ok=1`.
#include <kiln/backend/cpu/threads.hpp>
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#else
#include <kiln/kiln.hpp>
#endif
#include <kiln/data/data.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <type_traits>

#include "../common/checkpoint.hpp"
#include "../common/classify.hpp"
#include "../common/cli.hpp"
#include "../common/report.hpp"
#include "../common/trainer.hpp"

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;

using LeNet = Sequential<Conv2d<3, 6, 5>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, ReLU, MaxPool2d<2>, Flatten,
                         Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
using Image = Shape<dyn, 3, 32, 32>;
constexpr const char* program = "lenet_cifar10";
constexpr const char* default_data = "data/cifar10/cifar-10-batches-bin";  // what scripts/get-cifar10 writes

template <class D, class Precision>
int run(examples::TrainOptions o, const std::string& device) {  // a copy: o.data_summary is set below
  using P = kiln::Policy<Precision, D>;
  const auto t_start = examples::Clock::now();
  std::error_code ec;
  if (o.data == default_data && !std::filesystem::is_directory(o.data, ec)) {
    // The default folder is missing: say how to get it (other folders get Cifar10's own message).
    std::fprintf(stderr,
                 "%s: error: %s: no such directory (relative to the current directory); expected the CIFAR-10 "
                 "binary batches data_batch_1.bin ... data_batch_5.bin, test_batch.bin; run "
                 "`scripts/get-cifar10` from the repository root (it writes %s), then run this from there, "
                 "or pass --data DIR\n",
                 program, o.data.c_str(), default_data);
    return 1;
  }
  const kiln::data::Cifar10 train_split(o.data, true), test(o.data, false);  // [3, 32, 32] in [0, 1], class
  const examples::classification::FirstSamples train(train_split, o.limit);  // --limit N: the first N images
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
  // --checkpoint. On one model, or on CPU replicas with --parallel dp (examples/common/trainer.hpp).
  const auto fit_and_report = [&](auto& trained, auto& opt, auto& scaler, const std::string& where) {
    int start = 0;
    if (o.resume)  // refused when the checkpoint was trained with other settings or data (run_settings)
      start = examples::load_training_state(o.checkpoint, trained, opt, scaler,
                                            examples::run_settings(o, trained));
    const int threads = kiln::backend::cpu::threads();
    std::printf("%s: CIFAR-10 %lld train / %lld test images from %s; LeNet (%lld parameters) on %s (%d thread%s), "
                "batch %d x %d, Adam(lr=%g), %d loader worker%s\n",
                program, static_cast<long long>(train.size()), static_cast<long long>(test.size()),
                train_split.directory().c_str(), static_cast<long long>(Model<LeNet, Image, P>::parameter_count), where.c_str(), threads,
                threads == 1 ? "" : "s", o.batch_size, o.accumulate, static_cast<double>(opt.lr()), o.workers, o.workers == 1 ? "" : "s");
    if (start > 0) std::printf("resumed from %s after epoch %d\n", o.checkpoint.c_str(), start);
    auto train_batches = examples::device_batches(trained, train_loader, to_float);  // on the GPU: a copy stream
    auto test_batches = examples::device_batches(trained, test_loader, to_float);
    const auto r = examples::classification::fit(o, trained, opt, scaler, train_batches, test_batches, start);
    return examples::classification::report_result(r, t_start, device, o.precision);
  };
  return examples::with_trainer<LeNet, Image, Precision, D>(o, device, {.lr = static_cast<float>(o.lr)}, fit_and_report);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains the seeds' LeNet on CIFAR-10 (binary version; get it with scripts/get-cifar10)", program};
  examples::TrainOptions o;
  o.data = default_data;
  o.epochs = 10;
  examples::add_train_options(app, o);
  CLI11_PARSE(app, argc, argv);
  return examples::run_training(
      program, o, [&]<class D, class Precision>(const std::string& device) { return run<D, Precision>(o, device); });
}
