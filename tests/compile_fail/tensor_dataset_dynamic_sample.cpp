// expect: kiln::data::TensorDataset: the sample shape must be static \(no dyn\)
// errors: 1
// A TensorDataset counts its samples by the sample shape: a dyn extent has no size to count by.
#include <kiln/data/data.hpp>

int main() {
  kiln::data::TensorDataset<kiln::Shape<kiln::dyn, 4>> ds({}, {});
  (void)ds;
}
