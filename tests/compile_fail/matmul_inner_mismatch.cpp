// expect: matmul_inner_extents_must_match<3, 4>.*kiln::matmul: shape mismatch: op\(A\) is \[M, KA\] and op\(B\) is \[KB, N\] with KA != KB
// errors: 1
// [2, 3] x [4, 5]: the inner extents (3 and 4) differ; both appear as the template arguments of
// kiln::detail::matmul_inner_extents_must_match.
#include <kiln/kiln.hpp>

int main() {
  kiln::Tensor<float, kiln::Shape<2, 3>> a;
  kiln::Tensor<float, kiln::Shape<4, 5>> b;
  auto c = kiln::matmul(a, b);
  (void)c;
}
