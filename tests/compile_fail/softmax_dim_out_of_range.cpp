// expect: layer_input_mismatch<1, kiln::nn::Softmax<2>, kiln::Shape<-1, 10>, kiln::nn::any_shape_of_rank_at_least<3> ?>
// errors: 1
// Softmax<2> (torch's Softmax(dim=2)) after a Linear: [N, 10] has no dimension 2. One error naming the
// layer, the shape it is given and its rule: a shape of rank 3 or more.
#include <kiln/nn/nn.hpp>

void build() {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<13, 10>, kiln::nn::Softmax<2>>;
  kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 13>> model(0);
  (void)model;
}
