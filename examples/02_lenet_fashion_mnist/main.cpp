// lenet_fashion_mnist: kiln's main job. Trains the seeds' LeNet, adapted to 1 x 28 x 28 images, on
// Fashion-MNIST and reports the test accuracy after every epoch.
//
// What it shows:
//   1. A network is a type: the seeds' LeNet with the first convolution padded by 2, so that 28 x 28
//      images reach the same 16 x 5 x 5 features as CIFAR-10's 32 x 32 ones.
//   2. Data: Debian's dataset-fashion-mnist (the IDX .gz files in /usr/share/datasets/fashion-mnist),
//      decoded once into memory, shuffled with a seed every epoch, collated as bytes by worker threads
//      ahead of the training step (DataLoader over Bytes), then moved to the device (on a GPU: pinned,
//      on a copy stream, one batch ahead) and scaled and normalised there in one pass, ToTensor +
//      Normalize(0.5, 0.5) (DeviceLoader).
//   3. Training: Adam(1e-3), cross entropy, batch 128, optional gradient accumulation (--accumulate K:
//      K micro-batches, one step); each epoch ends with an evaluation without gradients (NoGrad +
//      eval()), a JSON line in --metrics and an atomic checkpoint in --checkpoint (--resume continues).
//
// Run (./scripts/demo does all of it on a fresh Debian 12 machine):
//   ./build/cpu/examples/lenet_fashion_mnist                      # 5 epochs, CPU, about 87-89 %
//   ./build/cpu/examples/lenet_fashion_mnist --epochs 1 --limit 2048 --metrics m.jsonl
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
#include <string>
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

using LeNet = Sequential<Conv2d<1, 6, 5, 1, 2>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, ReLU, MaxPool2d<2>, Flatten,
                         Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
using Image = Shape<dyn, 1, 28, 28>;
constexpr const char* program = "lenet_fashion_mnist";

template <class D, class Precision>
int run(examples::TrainOptions o, const std::string& device) {  // a copy: o.data_summary is set below
  using P = kiln::Policy<Precision, D>;
  const auto t_start = examples::Clock::now();
  const kiln::data::FashionMnist train(o.data, true, o.limit), test(o.data, false);
  o.data_summary = std::to_string(train.size()) + " train / " + std::to_string(test.size()) +
                   " test images";  // checkpoints record it: a resume on other data is refused
  // The loaders collate the images' bytes (a quarter of floats' traffic, pinned for the GPU); where the
  // batches land they become floats, ToTensor + Normalize(0.5, 0.5), in one pass (one kernel on a GPU).
  const kiln::data::Bytes train_bytes(train), test_bytes(test);
  const kiln::data::ScaleNormalize to_float{255.0f, {0.5f}, {0.5f}};
  const bool pin = std::is_same_v<D, kiln::Cuda>;
  kiln::data::DataLoader train_loader(train_bytes, {.batch_size = o.batch_size, .shuffle = true,
                                                    .num_workers = o.workers, .pin_memory = pin, .seed = o.seed});
  kiln::data::DataLoader test_loader(test_bytes, {.batch_size = 1000, .num_workers = o.workers, .pin_memory = pin});

  // Resume, the run's line, then per epoch (examples/common/classify.hpp): cross entropy, the step every
  // --accumulate batches, evaluation without gradients (NoGrad + eval()), the epoch's line, --metrics,
  // --checkpoint. On one model, or on CPU replicas with --parallel dp (examples/common/trainer.hpp).
  const auto fit_and_report = [&](auto& trained, auto& opt, auto& scaler, const std::string& where) {
    int start = 0;
    if (o.resume)  // refused when the checkpoint was trained with other settings or data (run_settings)
      start = examples::load_training_state(o.checkpoint, trained, opt, scaler,
                                            examples::run_settings(o, trained));
    const int threads = kiln::backend::cpu::threads();
    std::printf("%s: Fashion-MNIST %lld train / %lld test images from %s; LeNet (%lld parameters) on %s (%d thread%s), "
                "batch %d x %d, Adam(lr=%g), %d loader worker%s\n",
                program, static_cast<long long>(train.size()), static_cast<long long>(test.size()), o.data.c_str(),
                static_cast<long long>(Model<LeNet, Image, P>::parameter_count), where.c_str(), threads, threads == 1 ? "" : "s",
                o.batch_size, o.accumulate, static_cast<double>(opt.lr()), o.workers, o.workers == 1 ? "" : "s");
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
  CLI::App app{"Trains LeNet on Fashion-MNIST (kiln's main job)", program};
  examples::TrainOptions o;
  o.data = "/usr/share/datasets/fashion-mnist";
  examples::add_train_options(app, o);
  CLI11_PARSE(app, argc, argv);
  return examples::run_training(
      program, o, [&]<class D, class Precision>(const std::string& device) { return run<D, Precision>(o, device); });
}
