// permute, transpose and narrow (kiln/ops/layout.hpp): each element against an index-by-index reference,
// static shapes, negative dimensions, one pass inside a chain (and one per operation with fusion off),
// the errors of a range outside the extent, and an in-place permute refused.
#include <boost/test/unit_test.hpp>
#include <kiln/core/fusion.hpp>
#include <type_traits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

// [n, c, h, w], row-major.
std::size_t at4(index_t n, index_t c, index_t h, index_t w, index_t C, index_t H, index_t W) {
  return static_cast<std::size_t>(((n * C + c) * H + h) * W + w);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(layout)

// NCHW read as NHWC (permute<0, 2, 3, 1>), with a dyn batch; also at sizes that take the CPU's parallel
// row loop and many CUDA blocks.
BOOST_AUTO_TEST_CASE_TEMPLATE(permute_moves_every_element_where_torch_does, D, kiln::test::devices) {
  for (const index_t n : {1, 3, 64}) {
    constexpr index_t C = 3, H = 5, W = 7;
    BOOST_TEST_CONTEXT("N = " << n) {
      const auto xv = kt::random_values<float>(static_cast<std::size_t>(n * C * H * W), -2, 2, 41);
      const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, C, H, W>>(n));
      using P = decltype(kiln::permute<0, 2, 3, 1>(x));
      static_assert(std::is_same_v<typename P::shape_type, Shape<dyn, H, W, C>>);
      const auto y = kiln::eval(kiln::permute<0, 2, 3, 1>(x));
      BOOST_TEST((y.extents() == Extents<Shape<dyn, H, W, C>>(n)));
      std::vector<double> want(xv.size());
      for (index_t a = 0; a < n; ++a)
        for (index_t h = 0; h < H; ++h)
          for (index_t w = 0; w < W; ++w)
            for (index_t c = 0; c < C; ++c)
              want[static_cast<std::size_t>(((a * H + h) * W + w) * C + c)] = xv[at4(a, c, h, w, C, H, W)];
      BOOST_TEST(kt::all_close(y.to_vector(), want, 0.0, 0.0));
      // Negative dimensions name the same permutation; permuting back gives x.
      const auto z = kiln::eval(kiln::permute<0, -1, 1, 2>(y));
      static_assert(std::is_same_v<typename decltype(z)::shape_type, Shape<dyn, C, H, W>>);
      BOOST_TEST(kt::all_close(z.to_vector(), kt::to_doubles(xv), 0.0, 0.0));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(transpose_swaps_two_dimensions, D, kiln::test::devices) {
  constexpr index_t R = 33, C = 129;
  const auto xv = kt::random_values<double>(R * C, -2, 2, 42);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<R, C>>{});
  Tensor<double, Shape<C, R>, D> t;
  t = kiln::transpose<0, 1>(x);
  std::vector<double> want(xv.size());
  for (index_t i = 0; i < R; ++i)
    for (index_t j = 0; j < C; ++j) want[static_cast<std::size_t>(j * R + i)] = xv[static_cast<std::size_t>(i * C + j)];
  BOOST_TEST(kt::all_close(t.to_vector(), want, 0.0, 0.0));
  // transpose<-2, -1>: the last two of a batch of matrices.
  const auto bv = kt::random_values<float>(2 * 3 * 4, -2, 2, 43);
  const auto b = kt::make_tensor<D>(bv, Extents<Shape<dyn, 3, 4>>(2));
  const auto bt = kiln::eval(kiln::transpose<-2, -1>(b));
  static_assert(std::is_same_v<typename decltype(bt)::shape_type, Shape<dyn, 4, 3>>);
  std::vector<double> bwant(bv.size());
  for (index_t k = 0; k < 2; ++k)
    for (index_t i = 0; i < 3; ++i)
      for (index_t j = 0; j < 4; ++j)
        bwant[static_cast<std::size_t>((k * 4 + j) * 3 + i)] = bv[static_cast<std::size_t>((k * 3 + i) * 4 + j)];
  BOOST_TEST(kt::all_close(bt.to_vector(), bwant, 0.0, 0.0));
}

// narrow on each dimension (torch's x.narrow(dim, start, length)), a negative start, a static length.
BOOST_AUTO_TEST_CASE_TEMPLATE(narrow_keeps_a_range_of_any_dimension, D, kiln::test::devices) {
  constexpr index_t A = 4, B = 5, C = 6;
  const auto xv = kt::random_values<float>(A * B * C, -2, 2, 44);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<A, B, C>>{});
  const auto ref = [&](index_t d, index_t start, index_t length) {
    std::vector<double> out;
    for (index_t i = 0; i < A; ++i)
      for (index_t j = 0; j < B; ++j)
        for (index_t k = 0; k < C; ++k) {
          const index_t at[] = {i, j, k};
          if (at[d] >= start && at[d] < start + length) out.push_back(xv[static_cast<std::size_t>((i * B + j) * C + k)]);
        }
    return out;
  };
  const auto n0 = kiln::eval(kiln::narrow<0>(x, 1, 2));
  static_assert(std::is_same_v<typename decltype(n0)::shape_type, Shape<dyn, B, C>>);
  BOOST_TEST(kt::all_close(n0.to_vector(), ref(0, 1, 2), 0.0, 0.0));
  const auto n1 = kiln::eval(kiln::narrow<1>(x, -3, 3));  // start -3: 2
  BOOST_TEST((n1.extents() == Extents<Shape<A, dyn, C>>(3)));
  BOOST_TEST(kt::all_close(n1.to_vector(), ref(1, 2, 3), 0.0, 0.0));
  const auto n2 = kiln::eval(kiln::narrow<-1, 4>(x, 2));
  static_assert(std::is_same_v<typename decltype(n2)::shape_type, Shape<A, B, 4>>);
  BOOST_TEST(kt::all_close(n2.to_vector(), ref(2, 2, 4), 0.0, 0.0));
  const auto empty = kiln::eval(kiln::narrow<2>(x, 6, 0));  // torch allows start == extent, length 0
  BOOST_TEST(empty.numel() == 0);
  // Composed: the middle of each row, transposed.
  const auto nt = kiln::eval(kiln::transpose<1, 2>(kiln::narrow<2>(x, 1, 4)));
  static_assert(std::is_same_v<typename decltype(nt)::shape_type, Shape<A, dyn, B>>);
  std::vector<double> want;
  for (index_t i = 0; i < A; ++i)
    for (index_t k = 1; k < 5; ++k)
      for (index_t j = 0; j < B; ++j) want.push_back(xv[static_cast<std::size_t>((i * B + j) * C + k)]);
  BOOST_TEST(kt::all_close(nt.to_vector(), want, 0.0, 0.0));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_range_outside_the_extent_is_a_shape_error, D, kiln::test::devices) {
  const auto x = kt::make_tensor<D>(kt::random_values<float>(4 * 5, -1, 1, 45), Extents<Shape<dyn, 5>>(4));
  BOOST_CHECK_EXCEPTION(kiln::narrow<1>(x, 3, 3), kiln::ShapeError,
                        kt::message_contains({"kiln::narrow: dimension 1 of [4, 5] has extent 5; start 3 and length 3"}));
  BOOST_CHECK_EXCEPTION(kiln::narrow<0>(x, -5, 1), kiln::ShapeError, kt::message_contains({"start -5"}));
  BOOST_CHECK_EXCEPTION(kiln::narrow<0>(x, 0, -1), kiln::ShapeError, kt::message_contains({"length -1"}));
  BOOST_CHECK_EXCEPTION(kiln::narrow<0>(x, 5, 0), kiln::ShapeError, kt::message_contains({"start 5"}));
  // An empty dimension wraps as torch's maybe_wrap_dim does, as one of extent 1: start -1 or 0 (length 0).
  const auto none = kt::make_tensor<D>(std::vector<float>{}, Extents<Shape<dyn, 5>>(0));
  BOOST_TEST(kiln::eval(kiln::narrow<0>(none, -1, 0)).numel() == 0);
  BOOST_TEST(kiln::eval(kiln::narrow<0>(none, 0, 0)).numel() == 0);
  BOOST_CHECK_EXCEPTION(kiln::narrow<0>(none, -2, 0), kiln::ShapeError,
                        kt::message_contains({"start -2", "expected -1 <= start <= 0"}));
  BOOST_CHECK_EXCEPTION(kiln::narrow<0>(none, 1, 0), kiln::ShapeError, kt::message_contains({"start 1"}));
}

// Inside a chain a permute is read in the chain's pass: one pass fused, one per operation unfused, the
// same values either way.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_permute_in_a_chain_is_read_in_its_one_pass, D, kiln::test::devices) {
  constexpr index_t R = 17, C = 9;
  const auto av = kt::random_values<float>(R * C, -2, 2, 46);
  const auto bv = kt::random_values<float>(R * C, -2, 2, 47);
  const auto a = kt::make_tensor<D>(av, Extents<Shape<R, C>>{});
  const auto b = kt::make_tensor<D>(bv, Extents<Shape<C, R>>{});
  Tensor<float, Shape<C, R>, D> y, y_unfused;
  auto before = kiln::passes();
  y = kiln::transpose<0, 1>(a * 2.0f) + b;
  BOOST_TEST(kiln::passes() - before == 1u);
  std::vector<double> want(bv.size());
  for (index_t i = 0; i < C; ++i)
    for (index_t j = 0; j < R; ++j) {
      const auto k = static_cast<std::size_t>(i * R + j);
      want[k] = 2.0 * av[static_cast<std::size_t>(j * C + i)] + bv[k];
    }
  BOOST_TEST(kt::all_close(y.to_vector(), want));
  {
    kiln::Unfused off;
    before = kiln::passes();
    y_unfused = kiln::transpose<0, 1>(a * 2.0f) + b;
    BOOST_TEST(kiln::passes() - before == 2u);  // a * 2 into a temporary, then the root
  }
  BOOST_TEST(kt::all_close(y_unfused.to_vector(), want));
}

// A permute of the destination reads it at other indices: refused as torch refuses it (clone first).
// A narrow or permute that reads the destination's elements at their own indices (the whole tensor,
// an identity permute), or none of the elements written (other rows), is fine, as torch's.
BOOST_AUTO_TEST_CASE_TEMPLATE(an_in_place_permute_is_refused, D, kiln::test::devices) {
  auto x = kt::make_tensor<D>(kt::random_values<float>(16, -1, 1, 48), Extents<Shape<4, 4>>{});
  const auto before = x.to_vector();
  BOOST_CHECK_EXCEPTION((x = kiln::transpose<0, 1>(x)), kiln::ValueError, kt::message_contains({"unsupported operation"}));
  auto rows = x.template reshape<Shape<dyn, 4>>(Extents<Shape<dyn, 4>>(4));  // x, its rows sliced below
  BOOST_CHECK_EXCEPTION((rows.slice(0, 3) = kiln::narrow<0>(rows, 1, 3) * 2.0f), kiln::ValueError,
                        kt::message_contains({"unsupported operation"}));  // torch: x[0:3] = x[1:4] * 2
  BOOST_CHECK_EXCEPTION((rows.slice(3, 4) = kiln::narrow<0, 1>(kiln::transpose<0, 1>(rows), 0)),
                        kiln::ValueError,
                        kt::message_contains({"unsupported operation"}));  // column 0 into row 3
  BOOST_TEST((x.to_vector() == before));
  x = kiln::transpose<0, 1>(x.clone());
  const auto after = x.to_vector();
  BOOST_TEST(after[1] == before[4]);
  BOOST_TEST(after[4] == before[1]);
  // torch: x.copy_(x.narrow(0, 0, 4) + 1), x.copy_(x.permute(0, 1) * 2), x[0:2] = x[2:4].
  auto y = kt::make_tensor<D>(std::vector<float>(before), Extents<Shape<dyn, 4>>(4));
  y = kiln::narrow<0>(y, 0, 4) + 1.0f;
  y = kiln::permute<0, 1>(y) * 2.0f;
  y.slice(0, 2) = kiln::narrow<0>(y, 2, 2);
  const auto got = y.to_vector();
  for (std::size_t i = 0; i != 16; ++i) {
    const float want = (before[i < 8 ? i + 8 : i] + 1.0f) * 2.0f;
    BOOST_TEST(got[i] == want);
  }
}

// half storage: read and written as halves, exactly.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_half_tensor_permutes_exactly, D, kiln::test::devices) {
  const auto [values, halves] = kt::rounded_to<kiln::half>(kt::random_values<float>(6, -2, 2, 49));
  const auto h = kt::make_tensor<D>(halves, Extents<Shape<2, 3>>{});
  Tensor<kiln::half, Shape<3, 2>, D> t;
  t = kiln::transpose<0, 1>(h);
  const auto got = t.to_vector();
  const std::size_t order[] = {0, 3, 1, 4, 2, 5};
  for (std::size_t k = 0; k < 6; ++k) BOOST_TEST(kt::to_double(got[k]) == static_cast<double>(values[order[k]]));
}

BOOST_AUTO_TEST_SUITE_END()
