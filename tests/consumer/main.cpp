#include <kiln/kiln.hpp>
#include <cstdio>
int main() {
  kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(3), y(3);   // [3, 4]
  x.fill(2.0f);
  y = kiln::relu(x * 2.0f - 1.0f);
  auto v = y.to_vector();
  for (float e : v) if (e != 3.0f) { std::puts("wrong"); return 1; }
  std::puts("consumer ok");
  return 0;
}
