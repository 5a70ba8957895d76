// expect: static assertion failed: kiln::nn::GroupNorm<G, C>: the channels C must be divisible by the groups G
// errors: 1
// GroupNorm<4, 6>: 6 channels do not split into 4 equal groups (torch: ValueError at construction).
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Conv2d<3, 6, 3>, kiln::nn::GroupNorm<4, 6>, kiln::nn::ReLU>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 3, 8, 8>> model(0);
  (void)model;
}
