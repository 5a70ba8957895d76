// expect: error: static assertion failed: kiln::nn::CrossEntropyLoss: a probability target has the logits' shape \[N, C\] \(class labels are int64 \[N\]\)
// errors: 1
// Probability targets of 5 classes for logits of 10: the target must have the logits' shape.
#include <kiln/nn/nn.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 10>> logits(2);
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 5>> target(2);
  logits.fill(0.0f);
  target.fill(0.2f);
  (void)kiln::nn::CrossEntropyLoss{}(logits, target);
}
