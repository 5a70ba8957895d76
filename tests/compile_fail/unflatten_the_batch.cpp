// expect: layer_input_mismatch<1, kiln::nn::Unflatten<0, 2, 6>, kiln::Shape<-1, 12>, kiln::nn::unflatten_keeps_the_batch ?>
// errors: 1
// torch's nn.Unflatten(0, (2, 6)) splits the batch; a kiln model's dimension 0 is its batch, which every
// layer keeps (backward counts its rows there). One error naming the rule; kiln::unflatten<0, ...> views a
// tensor so outside a model.
#include <kiln/nn/nn.hpp>

void build() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<13, 12>, kiln::nn::Unflatten<0, 2, 6>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 13>> model(0);
  (void)model;
}
