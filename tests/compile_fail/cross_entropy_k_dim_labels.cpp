// expect: kiln::nn: the labels of class scores \[N, C, d1, \.\.\., dk\] are \[N, d1, \.\.\., dk\]
// errors: 1
// Per-pixel logits [N, 4, 8, 8] against labels [N, 8] (a row dropped): one error naming the shape the labels
// must have, torch's K-dimensional rule.
#include <kiln/nn/nn.hpp>

void segment(const kiln::Tensor<float, kiln::Shape<kiln::dyn, 4, 8, 8>>& logits,
             const kiln::Tensor<std::int64_t, kiln::Shape<kiln::dyn, 8>>& labels) {
  kiln::nn::CrossEntropyLoss ce;
  auto loss = ce(logits, labels);
  (void)loss;
}
