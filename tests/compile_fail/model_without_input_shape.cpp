// expect: static assertion failed: kiln::nn::Model<Net, In, P>: In is the input shape, e.g. kiln::Shape<kiln::dyn, 3, 32, 32>
// A torch user's Model<Net, Policy>: torch's modules have no input shape, kiln's Model takes it second and
// the Policy third. The first error says so (the layers then fail on the Policy as a shape: no cap).
#include <kiln/nn/nn.hpp>

int main() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 2>>, kiln::Policy<kiln::Fp32, kiln::Cpu>> model(0);
  (void)model;
}
