// expect: kiln::optim::SGD needs a learning rate
// errors: 1
// torch's SGD(params) has no default lr (it raises); kiln's says so at compile time, not with a failed
// deduction that lists every constructor.
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

void build() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 2>>, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::optim::SGD opt(model);
  (void)opt;
}
