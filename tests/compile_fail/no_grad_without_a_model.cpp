// expect: static assertion failed: kiln::nn::NoGrad guards one model: kiln::nn::NoGrad guard\(model\);
// errors: 1
// torch's `with torch.no_grad():` is global; kiln's switch is per model. Before the default template
// argument, `NoGrad guard;` was a failed deduction listing the constructors (29 lines).
#include <kiln/nn/nn.hpp>

int main() {
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 2>>, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::nn::NoGrad guard;
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(2);
  auto y = model.forward(x);
  (void)y;
}
