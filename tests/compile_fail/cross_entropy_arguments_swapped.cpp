// expect: static assertion failed: kiln::nn::CrossEntropyLoss: the first argument \(the logits\) holds integers: the order is ce\(logits, labels\)
// errors: 1
// The labels given first: without the overload that says so, the float logits read as probability
// targets and the first error was kiln::mean's on integers, a function the program never called.
#include <kiln/nn/nn.hpp>

#include <cstdint>

int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 10>> logits(4);
  kiln::Tensor<std::int64_t, kiln::Shape<kiln::dyn>> labels(4);
  kiln::nn::CrossEntropyLoss ce;
  auto dlogits = ce.backward(labels, logits);
  (void)dlogits;
}
