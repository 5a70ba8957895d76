// The work counters (kiln::counters(), issue #7): a pass's bytes are its operands read once and its
// destination written once, a broadcast operand at its own size, a repeated operand once; its operations
// one per Unary/Binary/Where per element (casts none), one per element a reduction reads, 2mnk a GEMM.
// The same chain unfused does the same arithmetic and moves each intermediate twice more.
#include <boost/test/unit_test.hpp>
#include <kiln/core/fusion.hpp>
#include <kiln/optim/adam.hpp>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

/// The counters' change over f().
template <class F>
kiln::Counters work_of(F&& f) {
  const auto before = kiln::counters();
  f();
  return kiln::counters() - before;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)
BOOST_AUTO_TEST_SUITE(traffic)

BOOST_AUTO_TEST_CASE_TEMPLATE(an_assignment_counts_its_operands_once, D, kiln::test::devices) {
  constexpr kiln::index_t rows = 37, n = rows * 16;
  const Extents<Shape<dyn, 16>> ext(rows);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(n, -2, 2, 1), ext);
  const auto b = kt::make_tensor<D>(kt::random_values<float>(16, -1, 1, 2), Extents<Shape<16>>{});
  Tensor<float, Shape<dyn, 16>, D> y(ext);
  // x * 2 + b: two operations; x, the bias once (16 floats, not 37 x 16) and y.
  auto w = work_of([&] { kiln::assign(y, x * 2.0f + b); });
  BOOST_TEST(w.passes == 1u);
  BOOST_TEST(w.bytes == (n + 16 + n) * sizeof(float));
  BOOST_TEST(w.ops == 2u * n);
  // x * x - x reads x once.
  w = work_of([&] { kiln::assign(y, x * x - x); });
  BOOST_TEST(w.bytes == 2 * n * sizeof(float));
  BOOST_TEST(w.ops == 2u * n);
  // y += x reads y, reads x, writes y; a cast is a move, not arithmetic.
  w = work_of([&] { y += x; });
  BOOST_TEST(w.bytes == 3 * n * sizeof(float));
  BOOST_TEST(w.ops == 1u * n);
  Tensor<kiln::half, Shape<dyn, 16>, D> h(ext);
  w = work_of([&] { kiln::assign(h, kiln::cast<kiln::half>(x)); });
  BOOST_TEST(w.bytes == n * (sizeof(float) + sizeof(kiln::half)));
  BOOST_TEST(w.ops == 0u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unfused_does_the_same_arithmetic_and_moves_the_intermediates, D, kiln::test::devices) {
  constexpr kiln::index_t n = 4099;
  const Extents<Shape<dyn>> ext(n);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(n, -2, 2, 3), ext);
  Tensor<float, Shape<dyn>, D> y(ext);
  // exp(-x) * 3 + x: four operations; unfused, three of them write an intermediate that the next pass
  // reads again, and x is read twice (by -x and by the last +), where the fused pass reads it once.
  const auto chain = [&] { kiln::assign(y, kiln::exp(-x) * 3.0f + x); };
  const auto fused = work_of(chain);
  kiln::Counters unfused;
  {
    kiln::Unfused off;
    unfused = work_of(chain);
  }
  BOOST_TEST(fused.passes == 1u);
  BOOST_TEST(unfused.passes == 4u);
  BOOST_TEST(unfused.ops == fused.ops);
  BOOST_TEST(fused.ops == 4u * n);
  BOOST_TEST(fused.bytes == 2 * n * sizeof(float));
  BOOST_TEST(unfused.bytes == fused.bytes + (3 * 2 + 1) * n * sizeof(float));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reductions_and_gemms, D, kiln::test::devices) {
  constexpr kiln::index_t m = 7, k = 5, n = 3;
  const auto a = kt::make_tensor<D>(kt::random_values<float>(m * k, -1, 1, 4), Extents<Shape<m, k>>{});
  const auto b = kt::make_tensor<D>(kt::random_values<float>(k * n, -1, 1, 5), Extents<Shape<k, n>>{});
  // A full sum reads every element once and writes one value.
  auto w = work_of([&] { (void)kiln::sum(a); });
  BOOST_TEST(w.passes == 1u);
  BOOST_TEST(w.bytes == (m * k + 1) * sizeof(float));
  BOOST_TEST(w.ops == 1u * m * k);
  // Rows: m outputs; the tree's own operation counts per element too.
  w = work_of([&] { (void)kiln::sum<1>(a * a); });
  BOOST_TEST(w.bytes == (m * k + m) * sizeof(float));
  BOOST_TEST(w.ops == 2u * m * k);
  // C = A B: A and B read, C written; C += A B reads C too; 2 m n k operations.
  Tensor<float, Shape<m, n>, D> c(Extents<Shape<m, n>>{});
  w = work_of([&] { kiln::matmul_into(c, a, b); });
  BOOST_TEST(w.passes == 1u);
  BOOST_TEST(w.bytes == (m * k + k * n + m * n) * sizeof(float));
  BOOST_TEST(w.ops == 2u * m * n * k);
  w = work_of([&] { kiln::matmul_into(c, a, b, 1.0f, 1.0f); });
  BOOST_TEST(w.bytes == (m * k + k * n + 2 * m * n) * sizeof(float));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_optimizer_step_counts_every_arena, D, kiln::test::devices) {
  constexpr kiln::index_t n = 1000;
  const Extents<Shape<dyn>> ext(n);
  auto p = kt::make_tensor<D>(kt::random_values<float>(n, -1, 1, 6), ext);
  auto g = kt::make_tensor<D>(kt::random_values<float>(n, -1, 1, 7), ext);
  kiln::optim::Adam<float, D> adam(p, g, {.lr = 1e-3});
  // One pass: p, m and v read and written, g read.
  const auto w = work_of([&] { adam.step(); });
  BOOST_TEST(w.passes == 1u);
  BOOST_TEST(w.bytes == 7 * n * sizeof(float));
  BOOST_TEST(w.ops >= 13u * n);
  // Unfused (torch's single-tensor order) moves far more for the same update.
  kiln::Unfused off;
  const auto u = work_of([&] { adam.step(); });
  BOOST_TEST(u.passes > 5u);
  BOOST_TEST(u.bytes > 3 * w.bytes);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
