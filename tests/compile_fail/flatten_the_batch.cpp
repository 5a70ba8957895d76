// expect: layer_input_mismatch<1, kiln::nn::FlattenDims<0>, kiln::Shape<-1, 4, 3>, kiln::nn::flatten_keeps_the_batch ?>
// errors: 1
// torch's nn.Flatten(0) folds the batch into the features; a kiln model's dimension 0 is its batch,
// which every layer keeps (backward counts its rows there). One error naming the rule; kiln::flatten<0>
// views a tensor so outside a model.
#include <kiln/nn/nn.hpp>

void build() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<2, 3>, kiln::nn::FlattenDims<0>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 4, 2>> model(0);
  (void)model;
}
