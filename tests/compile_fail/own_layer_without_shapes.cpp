// expect: static assertion failed: kiln::nn::Sequential: the layer at this index has a module<S, P> but no accepts<S> or no output<S>
// errors: 1
// A layer of one's own given its module<S, P> alone: before the check, g++ printed 18 errors (accepts is
// not a member, a constexpr call flowing off its end, then every use of the model's inferred layers).
#include <kiln/nn/nn.hpp>

#include <string>

struct Scale {
  template <class S, class P>
  struct module : kiln::nn::detail::parameter_free<S, S, P> {
    kiln::Tensor<float, S> forward(const kiln::Tensor<float, S>& x, kiln::nn::Context) { return x; }
    kiln::Tensor<float, S> backward(const kiln::Tensor<float, S>& dy) { return dy; }
    std::string name() const { return "Scale"; }
  };
};

int main() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 4>, Scale, kiln::nn::Linear<4, 2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4>> model(0);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(2);
  auto y = model.forward(x);
  (void)y;
}
