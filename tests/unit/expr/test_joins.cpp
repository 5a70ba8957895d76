// cat and stack (ops/joins.hpp), as torch.cat and torch.stack: every dimension of a rank-3 operand
// against the definition (exact: the values are copied), the joined shapes in the type (static where
// every operand's is), expression operands evaluated in one pass each, torch's promotion, empty operands,
// and dyn extents that differ refused in torch's words.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <kiln/kiln.hpp>

#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/throws.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

/// Row-major a [a0, a1, a2] and b (of a's extents but along dim) joined along dim (cat), block by block.
std::vector<float> cat_reference(const std::vector<float>& a, const int (&ea)[3], const std::vector<float>& b,
                                 int dim) {
  std::vector<float> out;
  const int outer = dim == 0 ? 1 : dim == 1 ? ea[0] : ea[0] * ea[1];
  const int block_a = static_cast<int>(a.size()) / outer, block_b = static_cast<int>(b.size()) / outer;
  for (int o = 0; o < outer; ++o) {
    out.insert(out.end(), a.begin() + o * block_a, a.begin() + (o + 1) * block_a);
    out.insert(out.end(), b.begin() + o * block_b, b.begin() + (o + 1) * block_b);
  }
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)
BOOST_AUTO_TEST_SUITE(joins)

BOOST_AUTO_TEST_CASE_TEMPLATE(cat_along_every_dimension_matches_the_definition, D, kt::devices) {
  const auto va = kt::random_values<float>(2 * 3 * 4, -1, 1, 301);
  const auto x = kt::make_tensor<D>(va, Extents<Shape<dyn, 3, 4>>(2));
  {  // dimension 0: [2, 3, 4] and [1, 3, 4]
    const auto vb = kt::random_values<float>(1 * 3 * 4, -1, 1, 302);
    const auto y = kt::make_tensor<D>(vb, Extents<Shape<dyn, 3, 4>>(1));
    const auto z = kiln::cat<0>(x, y);
    static_assert(std::is_same_v<typename decltype(z)::shape_type, Shape<dyn, 3, 4>>);
    BOOST_TEST((z.extents() == Extents<Shape<dyn, 3, 4>>(3)));
    BOOST_TEST(z.to_vector() == cat_reference(va, {2, 3, 4}, vb, 0), boost::test_tools::per_element());
  }
  {  // dimension 1: [2, 3, 4] and [2, 5, 4], static: the sum is static
    const auto vb = kt::random_values<float>(2 * 5 * 4, -1, 1, 303);
    const auto y = kt::make_tensor<D>(vb, Extents<Shape<dyn, 5, 4>>(2));
    const auto z = kiln::cat<1>(x, y);
    static_assert(std::is_same_v<typename decltype(z)::shape_type, Shape<dyn, 8, 4>>);
    BOOST_TEST(z.to_vector() == cat_reference(va, {2, 3, 4}, vb, 1), boost::test_tools::per_element());
  }
  {  // dimension -1 (2): [2, 3, 4] and [2, 3, 1]
    const auto vb = kt::random_values<float>(2 * 3 * 1, -1, 1, 304);
    const auto y = kt::make_tensor<D>(vb, Extents<Shape<dyn, 3, 1>>(2));
    const auto z = kiln::cat<-1>(x, y);
    static_assert(std::is_same_v<typename decltype(z)::shape_type, Shape<dyn, 3, 5>>);
    BOOST_TEST(z.to_vector() == cat_reference(va, {2, 3, 4}, vb, 2), boost::test_tools::per_element());
  }
  {  // three operands, the middle one empty along the joined dimension; one operand: a copy
    Tensor<float, Shape<dyn, 3, 4>, D> none(0);
    const auto z = kiln::cat<0>(x, none, x);
    BOOST_TEST(z.size(0) == 4);
    std::vector<float> twice = va;
    twice.insert(twice.end(), va.begin(), va.end());
    BOOST_TEST(z.to_vector() == twice, boost::test_tools::per_element());
    const auto copy = kiln::cat<0>(x);
    BOOST_TEST(!copy.shares_storage_with(x));
    BOOST_TEST(copy.to_vector() == va, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(stack_adds_a_dimension_anywhere, D, kt::devices) {
  const auto va = kt::random_values<float>(6, -1, 1, 311), vb = kt::random_values<float>(6, -1, 1, 312);
  const auto a = kt::make_tensor<D>(va, Extents<Shape<2, 3>>());
  const auto b = kt::make_tensor<D>(vb, Extents<Shape<2, 3>>());
  const auto s0 = kiln::stack<0>(a, b);
  static_assert(std::is_same_v<typename decltype(s0)::shape_type, Shape<2, 2, 3>>);
  const auto s1 = kiln::stack<1>(a, b);
  static_assert(std::is_same_v<typename decltype(s1)::shape_type, Shape<2, 2, 3>>);
  const auto s2 = kiln::stack<-1>(a, b, a);  // torch: dim -1 of the result, after the last
  static_assert(std::is_same_v<typename decltype(s2)::shape_type, Shape<2, 3, 3>>);
  std::vector<float> w0(va), w1, w2;
  w0.insert(w0.end(), vb.begin(), vb.end());
  for (int i = 0; i < 2; ++i)
    for (int s = 0; s < 2; ++s)
      for (int j = 0; j < 3; ++j) w1.push_back((s == 0 ? va : vb)[static_cast<std::size_t>(i * 3 + j)]);
  for (int i = 0; i < 6; ++i)
    for (int s = 0; s < 3; ++s) w2.push_back((s == 1 ? vb : va)[static_cast<std::size_t>(i)]);
  BOOST_TEST(s0.to_vector() == w0, boost::test_tools::per_element());
  BOOST_TEST(s1.to_vector() == w1, boost::test_tools::per_element());
  BOOST_TEST(s2.to_vector() == w2, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(stack_joins_numbers_into_a_vector, D, kt::devices) {
  // torch.stack([loss1, loss2]): rank-0 tensors into [2] (cat refuses them, as torch's).
  Tensor<float, Shape<>, D> a, b;
  a = 1.5f;
  b = -2.0f;
  const auto ab = kiln::stack<0>(a, b, a);
  static_assert(std::is_same_v<typename decltype(ab)::shape_type, Shape<3>>);
  BOOST_TEST(ab.to_vector() == (std::vector<float>{1.5f, -2.0f, 1.5f}), boost::test_tools::per_element());
  static_assert(std::is_same_v<typename decltype(kiln::stack<-1>(a, b))::shape_type, Shape<2>>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(expression_operands_are_read_in_one_pass_each, D, kt::devices) {
  const auto v = kt::random_values<float>(8, -1, 1, 321);
  const auto x = kt::make_tensor<D>(v, Extents<Shape<dyn, 4>>(2));
  const auto before = kiln::counters();
  const auto z = kiln::cat<1>(x * 2.0f + 1.0f, kiln::relu(x));
  BOOST_TEST((kiln::counters() - before).passes == 2u);  // one per operand, the output written once
  static_assert(std::is_same_v<typename decltype(z)::shape_type, Shape<dyn, 8>>);
  std::vector<float> want;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) want.push_back(v[static_cast<std::size_t>(i * 4 + j)] * 2.0f + 1.0f);
    for (int j = 0; j < 4; ++j) want.push_back(std::max(v[static_cast<std::size_t>(i * 4 + j)], 0.0f));
  }
  BOOST_TEST(z.to_vector() == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(element_types_promote_as_torchs, D, kt::devices) {
  const auto i = kt::make_tensor<D>(std::vector<std::int32_t>{1, -2, 3}, Extents<Shape<3>>());
  const auto f = kt::make_tensor<D>(std::vector<float>{0.5f, 1.5f}, Extents<Shape<2>>());
  const auto l = kt::make_tensor<D>(std::vector<std::int64_t>{7}, Extents<Shape<1>>());
  const auto fi = kiln::cat<0>(i, f);  // torch.cat((int32, float32)): float32
  static_assert(std::is_same_v<typename decltype(fi)::element_type, float>);
  BOOST_TEST(fi.to_vector() == (std::vector<float>{1, -2, 3, 0.5f, 1.5f}), boost::test_tools::per_element());
  const auto il = kiln::cat<0>(i, l);  // int32 and int64: int64
  static_assert(std::is_same_v<typename decltype(il)::element_type, std::int64_t>);
  BOOST_TEST(il.to_vector() == (std::vector<std::int64_t>{1, -2, 3, 7}), boost::test_tools::per_element());
  const auto h = kiln::eval(kiln::cast<kiln::half>(f));
  const auto hh = kiln::stack<0>(h, h);  // half stays half
  static_assert(std::is_same_v<typename decltype(hh)::element_type, kiln::half>);
  BOOST_TEST(kiln::eval(kiln::cast<float>(hh)).to_vector() == (std::vector<float>{0.5f, 1.5f, 0.5f, 1.5f}),
             boost::test_tools::per_element());
  // torch: half and float32 give float32, half and int32 half, half and bfloat16 float32. An expression
  // over half is float in kiln (it computes in float), so it joins a half tensor as float.
  static_assert(std::is_same_v<typename decltype(kiln::cat<0>(h, f))::element_type, float>);
  static_assert(std::is_same_v<typename decltype(kiln::cat<0>(i, h))::element_type, kiln::half>);
  const auto hb = kiln::eval(kiln::cast<kiln::bfloat16>(f));
  static_assert(std::is_same_v<typename decltype(kiln::cat<0>(h, hb))::element_type, float>);
  const auto mixed = kiln::cat<0>(h * 2.0f, h);
  static_assert(std::is_same_v<typename decltype(mixed)::element_type, float>);
  BOOST_TEST(mixed.to_vector() == (std::vector<float>{1.0f, 3.0f, 0.5f, 1.5f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dyn_extents_that_differ_are_refused_in_torchs_words, D, kt::devices) {
  Tensor<float, Shape<dyn, dyn>, D> a(2, 3), b(2, 4), c(3, 3);
  a.fill(1.0f), b.fill(2.0f), c.fill(3.0f);
  BOOST_TEST(kiln::cat<1>(a, b).size(1) == 7);
  BOOST_TEST(kiln::cat<0>(a, c).size(0) == 5);
  BOOST_TEST(kt::throws_with<kiln::ShapeError>(
      [&] { (void)kiln::cat<0>(a, b); },
      "kiln::cat: sizes of tensors must match except in dimension 0: expected size 3 but got size 4 for tensor "
      "number 1 in the list ([2, 4] against [2, 3])"));
  BOOST_TEST(kt::throws_with<kiln::ShapeError>([&] { (void)kiln::cat<-1>(a, c, b); },
                                                "except in dimension 1: expected size 2 but got size 3 for tensor number 1"));
  BOOST_TEST(kt::throws_with<kiln::ShapeError>(
      [&] { (void)kiln::stack<0>(a, a, b); },
      "kiln::stack: stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [2, 4] at entry 2"));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
