// expect: the required expression .d\.read\(i, x, y\). is invalid.*std::span<target_type> y\) const: const, as workers share it
// errors: 4
// A dataset's read(i, x, y) must be const: the loader's worker threads call it on one shared dataset.
// A read without const fails kiln::data::dataset; g++ prints the requirement's line, whose comment gives
// the signature and says why.
#include <kiln/data/data.hpp>

#include <span>

struct Rows {
  using sample_shape = kiln::Shape<13>;
  using target_shape = kiln::Shape<1>;
  using target_type = float;
  kiln::index_t size() const { return 8; }
  void read(kiln::index_t i, std::span<float> x, std::span<float> y) {  // const forgotten
    x[0] = static_cast<float>(i);
    y[0] = 0.0f;
  }
};

void train() {
  Rows rows;
  kiln::data::DataLoader loader(rows, {.batch_size = 4});
  for (const auto& batch : loader) (void)batch;
}
