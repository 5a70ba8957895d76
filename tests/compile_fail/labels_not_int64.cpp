// expect: In instantiation of 'struct kiln::nn::detail::labels_must_be_int64<int,.*error: static assertion failed: kiln::nn: class labels must be std::int64_t
// errors: 1
// Class labels of int (torch's int32): cross entropy takes int64 labels, as torch's; one error that says
// so and how to convert them, not "no match for call".
#include <cstdint>
#include <kiln/nn/nn.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 10>> logits(4);
  kiln::Tensor<int, kiln::Shape<kiln::dyn>> labels(4);
  logits.fill(0.0f);
  labels.fill(1);
  kiln::nn::CrossEntropyLoss ce;
  auto loss = ce(logits, labels);
  (void)loss.item();
}
