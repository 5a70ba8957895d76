// expect: kiln::nn::Model: the Policy's parallel axis must be SingleDevice.*kiln::parallel::DataParallel
// errors: 1
// The parallel axis of a Policy is not something a Model does by itself: a Model is one device's network,
// and DataParallel / DistributedDataParallel wrap it. Naming the strategy in a Model's Policy is refused
// at compile time, pointing to the wrappers, instead of being silently ignored.
#include <kiln/kiln.hpp>
#include <kiln/nn/nn.hpp>

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4>, kiln::Policy<kiln::Fp32, kiln::Cpu, kiln::DataParallel>> m(0);
  (void)m;
}
