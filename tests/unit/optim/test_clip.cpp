// clip_grad_norm against torch.nn.utils.clip_grad_norm_ (tests/parity/fixtures/clip.json): the returned
// norm and the clipped gradients within 1e-5 relative for norms 2, inf, 1 and 3, with and without
// clipping; a reduction plus one scaling pass; a model's gradient arena clipped as one vector.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include "support/parity.hpp"
#include "support/policies.hpp"

namespace {
namespace parity = kiln::test::parity;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
using nlohmann::json;

constexpr double rtol = 1e-5;

const json& fixture() {
  static const json j = parity::load("clip.json");
  return j;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_grad_norm_matches_pytorch, D, kiln::test::devices) {
  const auto grad = parity::values(fixture().at("grad"));
  for (const auto& c : fixture().at("cases")) {
    const double max_norm = c.at("max_norm").get<double>();
    const double norm_type = c.at("norm_type").is_string() ? std::numeric_limits<double>::infinity()
                                                           : c.at("norm_type").get<double>();
    BOOST_TEST_CONTEXT("max_norm " << max_norm << ", norm_type " << norm_type) {
      auto g = Tensor<float, Shape<dyn>, D>::from(std::span<const float>(grad),
                                                  Extents<Shape<dyn>>(static_cast<kiln::index_t>(grad.size())));
      const auto before = kiln::passes();
      const double total = kiln::optim::clip_grad_norm(g, max_norm, norm_type);
      const auto passes = kiln::passes() - before;
      const double want_total = c.at("total_norm").get<double>();
      const double norm_rel = std::abs(total - want_total) / want_total;
      BOOST_TEST(norm_rel <= rtol, "norm " << total << " vs torch " << want_total);
      const bool clipped = max_norm < want_total;
      BOOST_TEST(passes == (clipped ? 2u : 1u));  // the reduction, then the scaling only when it clips
      const auto got = g.to_vector();
      const auto want = parity::values(c.at("clipped"));
      const auto d = parity::compare(std::span<const float>(got), std::span<const float>(want));
      BOOST_TEST(d.max_rel <= rtol, "clipped: " << parity::describe(d));
      BOOST_TEST_MESSAGE("parity clip: max_norm " << max_norm << " norm_type " << norm_type << ": norm rel "
                                                  << norm_rel << ", clipped max rel " << d.max_rel);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_grad_norm_of_a_model_is_the_global_norm, D, kiln::test::devices) {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<3, 4>, kiln::nn::ReLU, kiln::nn::Linear<4, 2>>;
  kiln::nn::Model<Net, Shape<dyn, 3>, kiln::Policy<kiln::Fp32, D>> m(/*seed=*/3);
  std::vector<float> gv(static_cast<std::size_t>(m.gradients().numel()));
  for (std::size_t i = 0; i < gv.size(); ++i) gv[i] = 0.25f * static_cast<float>(static_cast<int>(i % 7) - 3);
  m.gradients().copy_from(std::span<const float>(gv));
  double ss = 0.0;
  for (float v : gv) ss += double(v) * v;
  const double want = std::sqrt(ss);
  const double total = kiln::optim::clip_grad_norm(m, 0.5);
  BOOST_TEST(total == want, boost::test_tools::tolerance(1e-6));
  double after = 0.0;
  for (float v : m.gradients().to_vector()) after += double(v) * v;
  BOOST_TEST(std::sqrt(after) == 0.5 * want / (want + 1e-6), boost::test_tools::tolerance(1e-5));
  // Below the bound nothing changes.
  const auto kept = m.gradients().to_vector();
  kiln::optim::clip_grad_norm(m, 100.0);
  BOOST_TEST(m.gradients().to_vector() == kept, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_grad_norm_handles_empty_and_rejects_bad_norms, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> empty(Extents<Shape<dyn>>(0));
  BOOST_TEST(kiln::optim::clip_grad_norm(empty, 1.0) == 0.0);
  Tensor<float, Shape<dyn>, D> g(Extents<Shape<dyn>>(3));
  g.fill(1.0f);
  BOOST_CHECK_THROW(kiln::optim::clip_grad_norm(g, 1.0, 0.0), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::optim::clip_grad_norm(g, 1.0, -2.0), kiln::ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
