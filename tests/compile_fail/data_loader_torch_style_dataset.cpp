// expect: static assertion failed: kiln::data::DataLoader: the dataset must be a kiln::data::dataset: sample_shape, target_shape, target_type, index_t size\(\) const and read\(i, x, y\) const
// A torch-style dataset (size() and a get(i) returning the sample) is not a kiln dataset, which reads
// sample i into the batch's memory. The first error says what a dataset needs (the loader's members then
// fail on the missing types: no cap).
#include <kiln/data/data.hpp>

#include <cstdint>
#include <utility>
#include <vector>

struct Rows {
  kiln::index_t size() const { return 8; }
  std::pair<std::vector<float>, std::int64_t> get(kiln::index_t i) const { return {std::vector<float>(13, float(i)), 0}; }
};

int main() {
  Rows rows;
  kiln::data::DataLoader loader(rows, {.batch_size = 4});
  for (auto& b : loader) (void)b;
}
