// expect: join_shapes_must_agree<false, 0, kiln::Shape<2, 3>, kiln::Shape<-1, 4> ?>.*static extents differ
// errors: 1
// torch.cat((a, b)) of [2, 3] and [N, 4] along dimension 0: their columns differ (torch says so when it
// runs, "Sizes of tensors must match except in dimension 0"). Static extents: one compile error naming the
// shapes.
#include <kiln/kiln.hpp>

void join(const kiln::Tensor<float, kiln::Shape<2, 3>>& a, const kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>>& b) {
  auto c = kiln::cat<0>(a, b);
  (void)c;
}
