/// The models the benches time, defined once: the seeds' MLP and LeNet (3x32x32, CIFAR-10's), LeNet
/// with BatchNorm, LeNet adapted to 1x28x28 (the main job's), a wide MLP for GPU-sized GEMMs, and a
/// ResNet-20 (convolutions of 16-64 channels, residual blocks).
#pragma once
#include <kiln/nn/nn.hpp>
#include <type_traits>

namespace kiln::bench::models {
using namespace kiln::nn;

/// The seeds' 13-16-32-1 regression MLP (Boston housing).
using Mlp = Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 1>>;
/// The seeds' LeNet on 3 x 32 x 32 images.
using LeNet = Sequential<Conv2d<3, 6, 5>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, ReLU, MaxPool2d<2>, Flatten,
                         Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
/// LeNet with BatchNorm2d after each convolution (the step's normalisation cost against PyTorch's).
using LeNetBn = Sequential<Conv2d<3, 6, 5>, BatchNorm2d<6>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, BatchNorm2d<16>, ReLU,
                           MaxPool2d<2>, Flatten, Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
/// LeNet with GroupNorm after each convolution (groups of 3 and 4 channels) and LayerNorm after the
/// first Linear: the per-sample normalisations' cost against PyTorch's.
using LeNetGn = Sequential<Conv2d<3, 6, 5>, GroupNorm<2, 6>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, GroupNorm<4, 16>, ReLU,
                           MaxPool2d<2>, Flatten, Linear<400, 120>, LayerNorm<120>, ReLU, Linear<120, 84>, ReLU,
                           Linear<84, 10>>;
/// LeNet on 1 x 28 x 28 images (the first convolution padded by 2): the main job's.
using LeNet28 = Sequential<Conv2d<1, 6, 5, 1, 2>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, ReLU, MaxPool2d<2>, Flatten,
                           Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
/// 1024-1024-1024-10: GEMMs large enough for tensor cores (issue #5's mixed-precision target).
using WideMlp = Sequential<Linear<1024, 1024>, ReLU, Linear<1024, 1024>, ReLU, Linear<1024, 10>>;

/// A 3x3 convolution without a bias (BatchNorm follows), stride S, padding 1.
template <index_t In, index_t Out, index_t S = 1>
using Conv3x3 = Conv2d<In, Out, 3, S, 1, 1, 1, false>;
/// torchvision's BasicBlock, its shortcut x itself or a strided 1x1 convolution + BatchNorm.
template <index_t In, index_t Out, index_t S = 1>
using BasicBlock =
    Add<Sequential<Conv3x3<In, Out, S>, BatchNorm2d<Out>, ReLU, Conv3x3<Out, Out>, BatchNorm2d<Out>>,
        std::conditional_t<In == Out && S == 1, Identity, Sequential<Conv2d<In, Out, 1, S, 0, 1, 1, false>, BatchNorm2d<Out>>>>;
/// He et al.'s CIFAR-10 ResNet-20 (3 stages of 3 blocks, 16/32/64 channels; projection shortcuts),
/// examples/05_resnet_cifar10's, 272,474 parameters.
using ResNet20 = Sequential<Conv3x3<3, 16>, BatchNorm2d<16>, ReLU, BasicBlock<16, 16>, ReLU, BasicBlock<16, 16>, ReLU,
                            BasicBlock<16, 16>, ReLU, BasicBlock<16, 32, 2>, ReLU, BasicBlock<32, 32>, ReLU,
                            BasicBlock<32, 32>, ReLU, BasicBlock<32, 64, 2>, ReLU, BasicBlock<64, 64>, ReLU,
                            BasicBlock<64, 64>, ReLU, AdaptiveAvgPool2d<1>, Flatten, Linear<64, 10>>;

}  // namespace kiln::bench::models
