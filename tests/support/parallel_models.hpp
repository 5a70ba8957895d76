// The models the data-parallel tests train (tests/unit/parallel, tests/cuda/parallel, tests/mpi): the
// seeds' 13-16-32-1 MLP, and a LeNet small enough to train for 20 steps in a test (and ones with BatchNorm,
// and with GroupNorm and LayerNorm).
#pragma once
#include <kiln/nn/nn.hpp>

namespace kiln::test::parallel_models {

using Mlp = nn::Sequential<nn::Linear<13, 16>, nn::ReLU, nn::Linear<16, 32>, nn::ReLU, nn::Linear<32, 1>>;
using Row = Shape<dyn, 13>;
/// 1x8x8 images, 10 classes: 4 * 1 * 3 * 3 + 4 = 40 convolution parameters, then 4 * 4 * 4 -> 10.
using LeNet = nn::Sequential<nn::Conv2d<1, 4, 3, 1, 1>, nn::ReLU, nn::MaxPool2d<2>, nn::Flatten, nn::Linear<4 * 4 * 4, 10>>;
using Image = Shape<dyn, 1, 8, 8>;
/// The same LeNet with BatchNorm2d after the convolution (nn::convert_sync_batchnorm_t makes it
/// SyncBatchNorm), which has no bias: a bias before BatchNorm has a gradient of zero plus rounding, and
/// Adam would step along the rounding.
using LeNetBn = nn::Sequential<nn::Conv2d<1, 4, 3, 1, 1, 1, 1, false>, nn::BatchNorm2d<4>, nn::ReLU, nn::MaxPool2d<2>, nn::Flatten,
                               nn::Linear<4 * 4 * 4, 10>>;
/// The LeNet with per-sample normalisations (GroupNorm after the convolution, LayerNorm after a hidden
/// Linear): nothing to synchronise, each sample normalised by itself.
using LeNetGroupNorm =
    nn::Sequential<nn::Conv2d<1, 8, 3, 1, 1, 1, 1, false>, nn::GroupNorm<2, 8>, nn::ReLU, nn::MaxPool2d<2>, nn::Flatten,
                   nn::Linear<8 * 4 * 4, 16>, nn::LayerNorm<16>, nn::ReLU, nn::Linear<16, 10>>;

}  // namespace kiln::test::parallel_models
