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
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#else
#include <kiln/kiln.hpp>
#endif
#include <kiln/data/data.hpp>
#include <kiln/nn/nn.hpp>

#include <string>

#include "../common/cli.hpp"
#include "../common/images.hpp"
#include "../common/report.hpp"

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
  const auto t_start = examples::Clock::now();
  const kiln::data::FashionMnist train(o.data, true, o.limit), test(o.data, false);
  o.data_summary = std::to_string(train.size()) + " train / " + std::to_string(test.size()) +
                   " test images";  // checkpoints record it: a resume on other data is refused
  // Bytes through the loaders; ToTensor + Normalize(0.5, 0.5) where the batches land (one kernel on a GPU);
  // then the epochs (examples/common/images.hpp).
  const examples::classification::ImageRun images{.program = program,
                                                  .data = "Fashion-MNIST",
                                                  .folder = o.data,
                                                  .network = "LeNet",
                                                  .test_batch_size = 1000,
                                                  .to_float = {255.0f, {0.5f}, {0.5f}}};
  return examples::classification::train_on_images<LeNet, Image, Precision, D>(o, images, train, test,
                                                                               t_start, device);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains LeNet on Fashion-MNIST (kiln's main job)", program};
  examples::TrainOptions o;
  o.data = "/usr/share/datasets/fashion-mnist";
  examples::add_train_options(app, o, LeNet::layer_count);
  if (const int status = examples::parse_options(app, argc, argv, program); status >= 0) return status;
  return examples::run_training(
      program, o, [&]<class D, class Precision>(const std::string& device) { return run<D, Precision>(o, device); });
}
