// expect: use of deleted function .*DataLoader<Ds, Transform, Sampler>::begin\(\) const.*declared here.*a const DataLoader has no epochs to run: take the loader as L&, not const L&
// errors: 1
// Each loop over a loader runs an epoch and moves its epoch counter, so a loader taken as const L& cannot
// be looped over: the const begin() is deleted, and the note g++ prints shows its line and the fix.
#include <kiln/data/data.hpp>

#include <cstdint>
#include <vector>

template <class L>
float first_values(const L& loader) {
  float s = 0;
  for (auto [x, y] : loader) s += x[0];
  return s;
}

int main() {
  std::vector<float> xs(20, 1.0f);
  std::vector<std::int64_t> ys(10, 0);
  kiln::data::TensorDataset<kiln::Shape<2>> ds(xs, ys);
  kiln::data::DataLoader loader(ds, {.batch_size = 4});
  return static_cast<int>(first_values(loader));
}
