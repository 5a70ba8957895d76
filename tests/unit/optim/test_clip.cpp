// clip_grad_norm against torch.nn.utils.clip_grad_norm_ (tests/parity/fixtures/clip.json): the returned
// norm and the clipped gradients within 1e-5 relative for norms 2, inf, 1, 3, -inf and -2, with and
// without clipping; a reduction plus one scaling pass; a model's gradient arena clipped as one vector;
// the order 0 counting parameters (one tensor, a model's four); error_if_nonfinite;
// clip_grad_norm_capturable: the same bits, the norm left on the device, three passes; clip_grad_value:
// torch's clamp (NaN kept, a negative value everywhere), one pass, a model's arena.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

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

double norm_of(const json& v) {
  if (!v.is_string()) return v.get<double>();
  const double inf = std::numeric_limits<double>::infinity();
  return v.get<std::string>() == "-inf" ? -inf : inf;
}

template <class D>
Tensor<float, Shape<dyn>, D> vector_of(const std::vector<float>& v) {
  return Tensor<float, Shape<dyn>, D>::from(std::span<const float>(v), Extents<Shape<dyn>>(static_cast<kiln::index_t>(v.size())));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)

// clip_coefficient.json: gradients whose 2-norm is exact, so the clipped values are torch's to the bit
// exactly when the coefficient is rounded as torch rounds it (reciprocal(total + 1e-6) * max_norm); 11
// of its 28 cases tell that from max_norm / (total + 1e-6). On the host and on the device.
BOOST_AUTO_TEST_CASE_TEMPLATE(clip_coefficient_is_rounded_as_torchs, D, kiln::test::devices) {
  static const json f = parity::load("clip_coefficient.json");
  int telling = 0;
  for (const auto& c : f.at("cases")) {
    const auto ab = c.at("grad").get<std::vector<float>>();
    const double max_norm = c.at("max_norm").get<double>();
    const auto want = parity::values(c.at("clipped"));
    telling += c.at("division_differs").get<bool>() ? 1 : 0;
    BOOST_TEST_CONTEXT("grad [" << ab[0] << ", " << ab[1] << "], max_norm " << max_norm) {
      auto g = vector_of<D>(ab);
      BOOST_TEST(kiln::optim::clip_grad_norm(g, max_norm) == std::hypot(ab[0], ab[1]));
      BOOST_TEST(g.to_vector() == want, boost::test_tools::per_element());
      auto h = vector_of<D>(ab);
      (void)kiln::optim::clip_grad_norm_capturable(h, max_norm);
      BOOST_TEST(h.to_vector() == want, boost::test_tools::per_element());
    }
  }
  BOOST_TEST(telling == 11);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_grad_norm_matches_pytorch, D, kiln::test::devices) {
  const auto grad = parity::values(fixture().at("grad"));
  for (const auto& c : fixture().at("cases")) {
    const double max_norm = c.at("max_norm").get<double>();
    const double norm_type = norm_of(c.at("norm_type"));
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

BOOST_AUTO_TEST_CASE_TEMPLATE(torchs_spelling_with_the_parameters_is_refused_not_a_clip_of_the_weights, D,
                              kiln::test::devices) {
  // torch: clip_grad_norm_(model.parameters(), 1.0) clips the gradients. model.parameters() in kiln is
  // the weights' arena, of the gradients' type: it used to be clipped as if it were gradients.
  using Net = kiln::nn::Sequential<kiln::nn::Linear<3, 4>, kiln::nn::ReLU, kiln::nn::Linear<4, 2>>;
  kiln::nn::Model<Net, Shape<dyn, 3>, kiln::Policy<kiln::Fp32, D>> m(/*seed=*/3);
  const auto weights = m.parameters().to_vector();
  const auto says =
      kiln::test::message_contains({"clip_grad_norm", "model's parameters", "clip_grad_norm(model, ...)"});
  BOOST_CHECK_EXCEPTION(kiln::optim::clip_grad_norm(m.parameters(), 1e-3), kiln::ValueError, says);
  BOOST_CHECK_EXCEPTION(kiln::optim::clip_grad_norm_capturable(m.parameters(), 1e-3), kiln::ValueError, says);
  BOOST_CHECK_EXCEPTION(kiln::optim::clip_grad_value(m.parameters(), 1e-3), kiln::ValueError,
                        kiln::test::message_contains({"clip_grad_value(model, ...)"}));
  auto view = m.parameters().template reshape<Shape<dyn>>();  // a handle of the same arena
  BOOST_CHECK_THROW(kiln::optim::clip_grad_norm(view, 1e-3), kiln::ValueError);
  BOOST_TEST(m.parameters().to_vector() == weights, boost::test_tools::per_element());
  // The gradients, by the model or by their arena, are clipped as before.
  m.gradients().fill(1.0f);
  BOOST_TEST(kiln::optim::clip_grad_norm(m.gradients(), 100.0) > 0.0);
  kiln::optim::clip_grad_value(m.gradients(), 0.5);
  BOOST_TEST(m.gradients().to_vector()[0] == 0.5f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_grad_norm_of_order_zero_counts_parameters_like_pytorch, D, kiln::test::devices) {
  const json& oz = fixture().at("order_zero");
  // One tensor is one parameter: torch's norm 0 of [its count of nonzeros] is 1.
  const auto grad = parity::values(oz.at("grad"));
  for (const auto& c : oz.at("single")) {
    const double max_norm = c.at("max_norm").get<double>();
    BOOST_TEST_CONTEXT("one tensor, max_norm " << max_norm) {
      auto g = vector_of<D>(grad);
      const double total = kiln::optim::clip_grad_norm(g, max_norm, 0.0);
      BOOST_TEST(total == c.at("total_norm").get<double>());
      const auto got = g.to_vector();
      const auto want = parity::values(c.at("clipped"));
      const auto d = parity::compare(std::span<const float>(got), std::span<const float>(want));
      BOOST_TEST(d.max_rel <= rtol, "clipped: " << parity::describe(d));
    }
  }
  auto zeros = vector_of<D>(std::vector<float>(5, 0.0f));
  BOOST_TEST(kiln::optim::clip_grad_norm(zeros, 1.0, 0.0) == 0.0);  // no nonzero: 0, nothing clipped
  BOOST_TEST(zeros.to_vector() == std::vector<float>(5, 0.0f), boost::test_tools::per_element());

  // A model's parameters, one of them with a zero gradient: 3 counted (and norm 2 for comparison).
  using Net = kiln::nn::Sequential<kiln::nn::Linear<6, 5>, kiln::nn::ReLU, kiln::nn::Linear<5, 4>>;
  kiln::nn::Model<Net, Shape<dyn, 6>, kiln::Policy<kiln::Fp32, D>> m(/*seed=*/1);
  const json& model = oz.at("model");
  for (const auto& c : model.at("cases")) {
    const double max_norm = c.at("max_norm").get<double>(), norm_type = c.at("norm_type").get<double>();
    BOOST_TEST_CONTEXT("model, max_norm " << max_norm << ", norm_type " << norm_type) {
      std::vector<float> arena(static_cast<std::size_t>(m.gradients().numel()), 0.0f);
      const auto params = m.named_parameters();
      BOOST_TEST(params.size() == model.at("grad").size());
      for (const auto& p : params) {
        const auto v = parity::values(model.at("grad").at(p.name));
        BOOST_TEST_REQUIRE(v.size() == static_cast<std::size_t>(p.count));
        std::copy(v.begin(), v.end(), arena.begin() + p.offset);
      }
      m.gradients().copy_from(std::span<const float>(arena));
      const double total = kiln::optim::clip_grad_norm(m, max_norm, norm_type);
      const double want_total = c.at("total_norm").get<double>();
      BOOST_TEST(std::abs(total - want_total) <= rtol * want_total, "norm " << total << " vs torch " << want_total);
      const auto got = m.gradients().to_vector();
      for (const auto& p : params) {
        const auto want = parity::values(c.at("clipped").at(p.name));
        const auto d = parity::compare(std::span<const float>(got).subspan(static_cast<std::size_t>(p.offset), want.size()),
                                       std::span<const float>(want));
        BOOST_TEST(d.max_rel <= rtol, p.name << ": " << parity::describe(d));
      }
    }
  }
}

// Frozen layers have no gradient (torch's .grad None, which clip_grad_norm_ and clip_grad_value_ leave out):
// the -inf and -2 norms are the trainable gradients' (a frozen zero made them 0, and nothing was clipped),
// a negative clip value leaves the frozen zeros, and clipping through the optimizer is the same.
BOOST_AUTO_TEST_CASE_TEMPLATE(frozen_layers_are_left_out_as_torchs_none_gradients, D, kiln::test::devices) {
  const json& f = fixture().at("order_zero").at("model").at("frozen_layer_0");
  using Net = kiln::nn::Sequential<kiln::nn::Linear<6, 5>, kiln::nn::ReLU, kiln::nn::Linear<5, 4>>;
  kiln::nn::Model<Net, Shape<dyn, 6>, kiln::Policy<kiln::Fp32, D>> m(/*seed=*/1);
  m.freeze(1);
  kiln::optim::SGD opt(m, {.lr = 0.1});
  const auto params = m.named_parameters();
  for (const auto& c : f.at("cases")) {
    for (const bool through_optimizer : {false, true}) {
      const bool value = c.contains("clip_value");
      if (through_optimizer && !value && norm_of(c.at("norm_type")) == 0.0) continue;  // (one arena: 1 part)
      BOOST_TEST_CONTEXT(c.dump().substr(0, 60) << (through_optimizer ? " through the optimizer" : "")) {
        std::vector<float> arena(static_cast<std::size_t>(m.gradients().numel()), 0.0f);
        for (const auto& p : params)
          if (f.at("grad").contains(p.name)) {
            const auto v = parity::values(f.at("grad").at(p.name));
            std::copy(v.begin(), v.end(), arena.begin() + p.offset);
          }
        m.gradients().copy_from(std::span<const float>(arena));
        if (value) {
          if (through_optimizer) kiln::optim::clip_grad_value(opt, c.at("clip_value").get<double>());
          else kiln::optim::clip_grad_value(m, c.at("clip_value").get<double>());
        } else {
          const double max_norm = c.at("max_norm").get<double>(), norm_type = norm_of(c.at("norm_type"));
          const double total = through_optimizer ? kiln::optim::clip_grad_norm(opt, max_norm, norm_type)
                                                 : kiln::optim::clip_grad_norm(m, max_norm, norm_type);
          const double want = c.at("total_norm").get<double>();
          BOOST_TEST(std::abs(total - want) <= rtol * want, "norm " << total << " vs torch " << want);
        }
        const auto got = m.gradients().to_vector();
        for (const auto& p : params) {
          const auto part = std::span<const float>(got).subspan(static_cast<std::size_t>(p.offset),
                                                                static_cast<std::size_t>(p.count));
          if (!c.at("clipped").contains(p.name)) {  // frozen: still 0
            BOOST_TEST(std::all_of(part.begin(), part.end(), [](float v) { return v == 0.0f; }), p.name);
            continue;
          }
          const auto want = parity::values(c.at("clipped").at(p.name));
          const auto d = parity::compare(part, std::span<const float>(want));
          BOOST_TEST(d.max_rel <= rtol, p.name << ": " << parity::describe(d));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_grad_norm_handles_empty_and_rejects_bad_norms, D, kiln::test::devices) {
  Tensor<float, Shape<dyn>, D> empty(Extents<Shape<dyn>>(0));
  BOOST_TEST(kiln::optim::clip_grad_norm(empty, 1.0) == 0.0);
  Tensor<float, Shape<dyn>, D> g(Extents<Shape<dyn>>(3));
  g.fill(1.0f);
  BOOST_CHECK_THROW(kiln::optim::clip_grad_norm(g, 1.0, std::numeric_limits<double>::quiet_NaN()), kiln::ValueError);
  // p = -2 over ones: (3 * 1)^(-1/2); p = 0.5: 3^2.
  BOOST_TEST(kiln::optim::clip_grad_norm(g, 10.0, -2.0) == 1.0 / std::sqrt(3.0), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(kiln::optim::clip_grad_norm(g, 10.0, 0.5) == 9.0, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_non_finite_norm_throws_with_error_if_nonfinite_and_spreads_without, D,
                              kiln::test::devices) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const double norm_type : {2.0, 1.0, std::numeric_limits<double>::infinity(), 3.0}) {
    BOOST_TEST_CONTEXT("norm_type " << norm_type) {
      const std::vector<float> v{0.5f, inf, -2.0f};
      auto g = vector_of<D>(v);
      try {
        kiln::optim::clip_grad_norm(g, 1.0, norm_type, /*error_if_nonfinite=*/true);
        BOOST_ERROR("no exception for an infinite gradient");
      } catch (const kiln::ValueError& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("non-finite") != std::string::npos, what);
        BOOST_TEST(what.find("error_if_nonfinite") != std::string::npos, what);
        std::ostringstream order;
        order << "of order " << norm_type << " ";  // 2, 1, inf, 3
        BOOST_TEST(what.find(order.str()) != std::string::npos, what);
      }
      BOOST_TEST(g.to_vector() == v, boost::test_tools::per_element());  // left as they were
      // Without the flag torch multiplies by max_norm / (inf + 1e-6) = 0: finite ones become 0, inf NaN.
      BOOST_TEST(std::isinf(kiln::optim::clip_grad_norm(g, 1.0, norm_type)));
      const auto after = g.to_vector();
      BOOST_TEST(after[0] == 0.0f);
      BOOST_TEST(std::isnan(after[1]));
      BOOST_TEST(after[2] == 0.0f);
    }
  }
  // A finite norm passes with the flag.
  auto g = vector_of<D>({3.0f, 4.0f});
  BOOST_TEST(kiln::optim::clip_grad_norm(g, 1.0, 2.0, true) == 5.0, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_grad_norm_capturable_gives_the_same_bits_and_keeps_the_norm_on_the_device, D,
                              kiln::test::devices) {
  // Every fixture case of order 2, 1 or infinity, clipping or not: the same gradients bit for bit and the
  // same norm (rounded to float) as clip_grad_norm, in three passes (the reduction, the norm, the scale).
  const auto grad = parity::values(fixture().at("grad"));
  int cases = 0;
  for (const auto& c : fixture().at("cases")) {
    const double max_norm = c.at("max_norm").get<double>();
    const double norm_type = norm_of(c.at("norm_type"));
    if (!(norm_type == 2.0 || norm_type == 1.0 || norm_type == std::numeric_limits<double>::infinity())) continue;
    ++cases;
    BOOST_TEST_CONTEXT("max_norm " << max_norm << ", norm_type " << norm_type) {
      auto host = vector_of<D>(grad), device = vector_of<D>(grad);
      const double total = kiln::optim::clip_grad_norm(host, max_norm, norm_type);
      const auto before = kiln::passes();
      const auto norm = kiln::optim::clip_grad_norm_capturable(device, max_norm, norm_type);
      BOOST_TEST(kiln::passes() - before == 3u);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(norm)>, Tensor<float, Shape<>, D>>);
      BOOST_TEST(static_cast<double>(norm.item()) == total);
      BOOST_TEST(device.to_vector() == host.to_vector(), boost::test_tools::per_element());
    }
  }
  BOOST_TEST(cases >= 4);
  // A model's arena is one vector; an infinite gradient spreads NaN and zeros as clip_grad_norm's; an
  // empty one has norm 0; the orders that need the host are refused.
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<3, 2>>, Shape<dyn, 3>, kiln::Policy<kiln::Fp32, D>> a(1), b(1);
  const auto xs = kiln::test::make_tensor<D>(std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, 1.0f, -1.0f},
                                             Extents<Shape<dyn, 3>>(2));
  const auto dy = kiln::test::make_tensor<D>(std::vector<float>{5.0f, -4.0f, 3.0f, 2.0f}, Extents<Shape<dyn, 2>>(2));
  for (auto* m : {&a, &b}) {
    m->forward(xs);
    m->backward(dy);
  }
  const double total = kiln::optim::clip_grad_norm(a, 0.5);
  BOOST_TEST(static_cast<double>(kiln::optim::clip_grad_norm_capturable(b, 0.5).item()) == total);
  BOOST_TEST(b.gradients().to_vector() == a.gradients().to_vector(), boost::test_tools::per_element());
  const float inf = std::numeric_limits<float>::infinity();
  auto g = vector_of<D>({0.5f, inf, -2.0f});
  BOOST_TEST(std::isinf(kiln::optim::clip_grad_norm_capturable(g, 1.0).item()));
  const auto after = g.to_vector();
  BOOST_TEST((after[0] == 0.0f && std::isnan(after[1]) && after[2] == 0.0f));
  Tensor<float, Shape<dyn>, D> empty(Extents<Shape<dyn>>(0));
  BOOST_TEST(kiln::optim::clip_grad_norm_capturable(empty, 1.0).item() == 0.0f);
  BOOST_CHECK_EXCEPTION((void)kiln::optim::clip_grad_norm_capturable(g, 1.0, 3.0), kiln::ValueError,
                        [](const kiln::ValueError& e) {
                          return std::string(e.what()).find("norm_type 3 is not offered here; give 2 (the default), "
                                                            "1 or infinity") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_grad_value_clamps_as_torch, D, kiln::test::devices) {
  // torch 1.13: clip_grad_value_(p, 0.5) on [nan, -2, -0.5, 0.25, 0.75, inf] gives
  // [nan, -0.5, -0.5, 0.25, 0.5, 0.5]; with -0.5 (clamp(min=0.5, max=-0.5)) every number is -0.5.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto g = kiln::test::make_tensor<D>(std::vector<float>{nan, -2.0f, -0.5f, 0.25f, 0.75f, inf},
                                      kiln::Extents<kiln::Shape<kiln::dyn>>(6));
  const auto before = kiln::passes();
  kiln::optim::clip_grad_value(g, 0.5);
  BOOST_TEST(kiln::passes() - before == 1u);
  const auto got = g.to_vector();
  BOOST_TEST(std::isnan(got[0]));
  const std::vector<float> rest{got.begin() + 1, got.end()};
  BOOST_TEST(rest == (std::vector<float>{-0.5f, -0.5f, 0.25f, 0.5f, 0.5f}), boost::test_tools::per_element());
  kiln::optim::clip_grad_value(g, -0.5);
  const auto neg = g.to_vector();
  BOOST_TEST(std::isnan(neg[0]));
  for (std::size_t i = 1; i < neg.size(); ++i) BOOST_TEST(neg[i] == -0.5f);
  kiln::optim::clip_grad_value(g, std::numeric_limits<double>::quiet_NaN());  // torch: every element NaN
  for (float v : g.to_vector()) BOOST_TEST(std::isnan(v));
  // A model's arena, every parameter at once.
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<4, 3>>, kiln::Shape<kiln::dyn, 4>,
                  kiln::Policy<kiln::Fp32, D>> m(0);
  const auto n = static_cast<std::size_t>(m.parameter_count);
  m.gradients().copy_from(std::span<const float>(kiln::test::random_values<float>(n, -3, 3, 7)));
  kiln::optim::clip_grad_value(m, 1.0);
  for (float v : m.gradients().to_vector()) BOOST_TEST((v >= -1.0f && v <= 1.0f));
}

BOOST_AUTO_TEST_SUITE_END()
