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
//      The loop is examples/common/classify.hpp, shared with lenet_fashion_mnist; the data and the
//      training around it examples/common/cifar10.hpp, shared with resnet_cifar10.
//
// Get the data once (162 MiB; the default --data is the folder it prints, relative to the current
// directory: run from the repository root):
//   ./scripts/get-cifar10                                   # -> data/cifar10/cifar-10-batches-bin
//   ./build/cpu/examples/lenet_cifar10                      # 10 epochs on the CPU
//   ./build/cpu/examples/lenet_cifar10 --epochs 1 --limit 5000 --metrics m.jsonl
// Flags: --help. The last line is `result: test_accuracy=... epochs=... seconds=... ok=1`.
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#else
#include <kiln/kiln.hpp>
#endif
#include <kiln/nn/nn.hpp>

#include <string>

#include "../common/cifar10.hpp"

namespace {
using namespace kiln::nn;

using LeNet = Sequential<Conv2d<3, 6, 5>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, ReLU, MaxPool2d<2>, Flatten,
                         Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
constexpr examples::cifar10::Program program{"lenet_cifar10", "LeNet"};
}  // namespace

int main(int argc, char** argv) {
  return examples::cifar10::main<LeNet>(
      program, "Trains the seeds' LeNet on CIFAR-10 (binary version; get it with scripts/get-cifar10)", argc, argv);
}
