// resnet_cifar10: a ResNet-20 (He et al., "Deep Residual Learning for Image Recognition", 2016: the
// CIFAR-10 network with 3 stages of 3 basic blocks, 16, 32 and 64 channels) trained on CIFAR-10, with the
// accuracy on the 10,000 test images after every epoch.
//
// What it shows:
//   1. A network that is not a chain is still a type: each basic block is kiln::nn::Add<main branch,
//      shortcut>, y = f(x) + g(x), the shortcut the input itself (Identity) or, where a stage halves the
//      resolution and doubles the channels, a strided 1x1 convolution with BatchNorm (the paper's option
//      B). Every shape in between, the shortcuts' included, is checked when the program compiles.
//   2. BatchNorm2d after every convolution: running statistics kept in the model's buffers, used by the
//      evaluation (eval()), written to and read from the checkpoint with the parameters.
//   3. The rest is lenet_cifar10's (examples/common/cifar10.hpp): the binary batches decoded once, worker
//      threads, ToTensor + Normalize(0.5, 0.5) where the batches land, Adam(1e-3), cross entropy, batch
//      128, evaluation without gradients, --metrics, atomic --checkpoint and --resume, --precision,
//      --parallel dp|ddp.
//
// Get the data once (162 MiB; the default --data is the folder it prints, relative to the current
// directory: run from the repository root):
//   ./scripts/get-cifar10                                   # -> data/cifar10/cifar-10-batches-bin
//   ./build/cpu/examples/resnet_cifar10                     # 10 epochs on the CPU
//   ./build/cpu/examples/resnet_cifar10 --epochs 1 --limit 5000 --device cuda --precision bf16
// Flags: --help. The last line is `result: test_accuracy=... epochs=... seconds=... ok=1`.
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#else
#include <kiln/kiln.hpp>
#endif
#include <kiln/nn/nn.hpp>

#include <string>
#include <type_traits>

#include "../common/cifar10.hpp"

namespace {
using kiln::index_t;
using namespace kiln::nn;

/// 3x3 convolution without a bias (BatchNorm follows), stride S, padding 1.
template <index_t In, index_t Out, index_t S = 1>
using Conv3x3 = Conv2d<In, Out, 3, S, 1, 1, 1, false>;

/// torchvision's BasicBlock: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)), the shortcut x itself when
/// the shape stays, else a strided 1x1 convolution and BatchNorm to the new channels and resolution.
template <index_t In, index_t Out, index_t S = 1>
using Basic = Add<Sequential<Conv3x3<In, Out, S>, BatchNorm2d<Out>, ReLU, Conv3x3<Out, Out>, BatchNorm2d<Out>>,
                  std::conditional_t<In == Out && S == 1, Identity,
                                     Sequential<Conv2d<In, Out, 1, S, 0, 1, 1, false>, BatchNorm2d<Out>>>>;

using ResNet20 = Sequential<Conv3x3<3, 16>, BatchNorm2d<16>, ReLU,                                   // 32 x 32
                            Basic<16, 16>, ReLU, Basic<16, 16>, ReLU, Basic<16, 16>, ReLU,           // 32 x 32
                            Basic<16, 32, 2>, ReLU, Basic<32, 32>, ReLU, Basic<32, 32>, ReLU,        // 16 x 16
                            Basic<32, 64, 2>, ReLU, Basic<64, 64>, ReLU, Basic<64, 64>, ReLU,        // 8 x 8
                            AdaptiveAvgPool2d<1>, Flatten, Linear<64, 10>>;
constexpr examples::cifar10::Program program{"resnet_cifar10", "ResNet-20"};
}  // namespace

int main(int argc, char** argv) {
  return examples::cifar10::main<ResNet20>(
      program, "Trains a ResNet-20 on CIFAR-10 (binary version; get it with scripts/get-cifar10)", argc, argv);
}
