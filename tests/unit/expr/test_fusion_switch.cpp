// The fusion switch (kiln::Unfused, issue #7): with fusion off, an expression runs one pass per
// operation (each into a temporary, then the root into the destination) and gives the fused result;
// broadcasts stay reads, casts store their type; the switch is restored after its scope; set_fusion(false)
// turns it off with no scope (fusion_enabled() says so) and set_fusion(true) back on.
#include <boost/test/unit_test.hpp>
#include <kiln/core/fusion.hpp>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)
BOOST_AUTO_TEST_SUITE(fusion_switch)

BOOST_AUTO_TEST_CASE(the_switch_is_scoped) {
  BOOST_TEST(kiln::fusion_enabled());
  {
    kiln::Unfused off;
    BOOST_TEST(!kiln::fusion_enabled());
    {
      kiln::Unfused again;
      BOOST_TEST(!kiln::fusion_enabled());
    }
    BOOST_TEST(!kiln::fusion_enabled());
  }
  BOOST_TEST(kiln::fusion_enabled());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_chain_runs_one_pass_per_operation_unfused, D, kiln::test::devices) {
  const Extents<Shape<dyn, 16>> ext(37);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(37 * 16, -2, 2, 1), ext);
  const auto b = kt::make_tensor<D>(kt::random_values<float>(16, -1, 1, 2), Extents<Shape<16>>{});
  Tensor<float, Shape<dyn, 16>, D> fused(ext), unfused(ext);
  // 6 operations: *, + (bias, broadcast), relu, neg, exp, -.
  const auto chain = [&] { return kiln::relu(x * 2.0f + b) - kiln::exp(-x); };
  auto before = kiln::passes();
  kiln::assign(fused, chain());
  BOOST_TEST(kiln::passes() - before == 1u);
  {
    kiln::Unfused off;
    before = kiln::passes();
    kiln::assign(unfused, chain());
    BOOST_TEST(kiln::passes() - before == 6u);
  }
  BOOST_TEST(kt::all_close(unfused.to_vector(), kt::to_doubles(fused.to_vector()), 1e-6, 1e-6));
  // A single operation is one pass either way; a compound assignment is one operation on dst.
  kiln::Unfused off;
  before = kiln::passes();
  kiln::assign(unfused, x * 3.0f);
  unfused += x;
  BOOST_TEST(kiln::passes() - before == 2u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(set_fusion_switches_it_until_switched_back, D, kiln::test::devices) {
  // kiln::set_fusion(false), with no scope: fusion_enabled() says off, the 6-operation chain above takes 6
  // passes, an Unfused scope then leaves it off; set_fusion(true) turns it on again: one pass.
  const Extents<Shape<dyn, 16>> ext(37);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(37 * 16, -2, 2, 1), ext);
  const auto b = kt::make_tensor<D>(kt::random_values<float>(16, -1, 1, 2), Extents<Shape<16>>{});
  Tensor<float, Shape<dyn, 16>, D> out(ext);
  const auto chain = [&] { return kiln::relu(x * 2.0f + b) - kiln::exp(-x); };
  BOOST_TEST_REQUIRE(kiln::fusion_enabled());
  kiln::set_fusion(false);
  BOOST_TEST(!kiln::fusion_enabled());
  auto before = kiln::passes();
  kiln::assign(out, chain());
  BOOST_TEST(kiln::passes() - before == 6u);
  {
    kiln::Unfused off;  // restores what set_fusion left: off
  }
  BOOST_TEST(!kiln::fusion_enabled());
  kiln::set_fusion(true);
  BOOST_TEST(kiln::fusion_enabled());
  before = kiln::passes();
  kiln::assign(out, chain());
  BOOST_TEST(kiln::passes() - before == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(where_comparisons_and_casts_split_too, D, kiln::test::devices) {
  const Extents<Shape<dyn>> ext(101);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(101, -3, 3, 3), ext);
  Tensor<float, Shape<dyn>, D> fused(ext), unfused(ext);
  // where(x > 0, x * x, cast<half>(x) + 1): >, *, cast, +, where = 5 operations.
  const auto e = [&] { return kiln::where(x > 0.0f, x * x, kiln::cast<kiln::half>(x) + 1.0f); };
  kiln::assign(fused, e());
  {
    kiln::Unfused off;
    const auto before = kiln::passes();
    kiln::assign(unfused, e());
    BOOST_TEST(kiln::passes() - before == 5u);
  }
  BOOST_TEST(unfused.to_vector() == fused.to_vector(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
