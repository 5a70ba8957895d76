// expect: use of deleted function .kiln::data::DataLoader<Ds, Transform, Sampler>::DataLoader\(const Ds&&.*declared here.*a temporary dataset: name it first, it must outlive the loader
// errors: 1
// A DataLoader keeps a pointer to its dataset (as Subset and Bytes do), so a temporary dataset would be
// gone before the first batch: the rvalue constructors are deleted, and the note g++ prints shows the
// deleted line, whose comment says to name the dataset first.
#include <kiln/data/data.hpp>

#include <cstdint>
#include <vector>

using Pairs = kiln::data::TensorDataset<kiln::Shape<2>>;

void train() {
  kiln::data::DataLoader loader(Pairs(std::vector<float>(8), std::vector<std::int64_t>(4)), {.batch_size = 2});
}
