// kiln::nn::init (torch.nn.init): calculate_gain and the fans against torch 1.13's
// (tests/parity/fixtures/init.json); each initialiser's distribution over a 400x120 weight (bounds, mean,
// variance: torch's generator is not kiln's, so the draws are compared by their law), constants exactly,
// parameters by their state_dict names, a bias refused by the fan-based ones as torch refuses it, and the
// mixed-precision working copy refreshed before the next forward.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include <kiln/nn/nn.hpp>

#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/throws.hpp"

namespace {
namespace knn = kiln::nn;
namespace init = kiln::nn::init;
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

using Net = knn::Sequential<knn::Linear<400, 120>, knn::ReLU, knn::Linear<120, 10>>;

init::Nonlinearity nonlinearity(const std::string& n) {
  using N = init::Nonlinearity;
  for (const auto& [name, f] : std::vector<std::pair<std::string, N>>{
           {"linear", N::linear}, {"conv1d", N::conv1d}, {"conv2d", N::conv2d}, {"conv3d", N::conv3d},
           {"conv_transpose1d", N::conv_transpose1d}, {"conv_transpose2d", N::conv_transpose2d},
           {"conv_transpose3d", N::conv_transpose3d}, {"sigmoid", N::sigmoid}, {"tanh", N::tanh}, {"relu", N::relu},
           {"leaky_relu", N::leaky_relu}, {"selu", N::selu}})
    if (name == n) return f;
  throw std::runtime_error("init.json names a nonlinearity the test does not know: " + n);
}

/// The values of parameter `name` of m.
template <class Model>
std::vector<double> values_of(const Model& m, const std::string& name) {
  const auto all = m.parameters().to_vector();
  for (const auto& p : m.named_parameters())
    if (p.name == name) return {all.begin() + p.offset, all.begin() + p.offset + p.count};
  return {};
}
struct Moments {
  double mean = 0, var = 0, lo = INFINITY, hi = -INFINITY;
};
Moments moments(const std::vector<double>& v) {
  Moments s;
  for (double x : v) s.mean += x, s.lo = std::min(s.lo, x), s.hi = std::max(s.hi, x);
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.var += (x - s.mean) * (x - s.mean);
  s.var /= static_cast<double>(v.size() - 1);
  return s;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(init_functions)

BOOST_AUTO_TEST_CASE(gains_and_fans_are_torchs) {
  const auto f = kiln::test::parity::load("init.json");
  for (const auto& g : f.at("gains")) {
    const auto f_ = nonlinearity(g.at("nonlinearity").get<std::string>());
    const double got = g.at("param").is_null() ? init::calculate_gain(f_) : init::calculate_gain(f_, g.at("param").get<double>());
    BOOST_TEST(got == g.at("gain").get<double>(), boost::test_tools::tolerance(1e-15));
  }
  for (const auto& c : f.at("fans")) {
    const auto [in, out] = init::fans(c.at("shape").get<std::vector<kiln::index_t>>());
    BOOST_TEST(in == c.at("fan_in").get<double>());
    BOOST_TEST(out == c.at("fan_out").get<double>());
  }
  BOOST_TEST(f.at("gains").size() == 15u);
  BOOST_TEST(kt::throws_with<kiln::ValueError>([] { (void)init::fans({5}, "parameter \"0.bias\""); },
                                               "fan in and fan out can not be computed for parameter \"0.bias\""));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(each_initialiser_draws_torchs_distribution, D, kiln::test::devices) {
  knn::Model<Net, Shape<dyn, 400>, kiln::Policy<kiln::Fp32, D>> m(0);
  knn::Generator g(7);
  const double n = 48000;  // 0.weight: [120, 400], fan_in 400, fan_out 120
  // A uniform's variance is bound² / 3, a normal's std²; a sample of n draws its variance within a few
  // sqrt(2 / n) relative (5 of them asked), its mean within a few std / sqrt(n).
  const auto check = [&](const char* what, double bound, double stddev) {
    BOOST_TEST_CONTEXT(what) {
      const auto s = moments(values_of(m, "0.weight"));
      const double var = bound > 0 ? bound * bound / 3 : stddev * stddev;
      BOOST_TEST(std::abs(s.var / var - 1) <= 5 * std::sqrt(2 / n));
      BOOST_TEST(std::abs(s.mean) <= 5 * std::sqrt(var / n));
      if (bound > 0) BOOST_TEST((s.lo >= -bound && s.hi <= bound && s.hi > 0.99 * bound && s.lo < -0.99 * bound));
    }
  };
  init::xavier_uniform_(m, "0.weight", g);
  check("xavier_uniform_", std::sqrt(6.0 / 520), 0);
  init::xavier_uniform_(m, "0.weight", g, init::calculate_gain(init::Nonlinearity::relu));
  check("xavier_uniform_ gain relu", std::sqrt(2.0) * std::sqrt(6.0 / 520), 0);
  init::xavier_normal_(m, "0.weight", g);
  check("xavier_normal_", 0, std::sqrt(2.0 / 520));
  init::kaiming_uniform_(m, "0.weight", g);  // torch's defaults: a 0, fan_in, leaky_relu: gain sqrt(2)
  check("kaiming_uniform_", std::sqrt(3.0) * std::sqrt(2.0) / 20, 0);
  init::kaiming_normal_(m, "0.weight", g, {.mode = init::FanMode::fan_out, .nonlinearity = init::Nonlinearity::relu});
  check("kaiming_normal_ fan_out relu", 0, std::sqrt(2.0) / std::sqrt(120.0));
  init::kaiming_uniform_(m, "0.weight", g, {.a = std::sqrt(5.0)});  // the layers' own initialisation
  check("kaiming_uniform_ a sqrt(5)", 1 / std::sqrt(400.0), 0);
  init::uniform_(m, "0.weight", g, -0.5, 0.5);
  check("uniform_", 0.5, 0);
  init::normal_(m, "0.weight", g, 0.0, 0.02);
  check("normal_", 0, 0.02);
  // Constants, exactly, and only the parameter named.
  const auto w2 = values_of(m, "2.weight");
  init::constant_(m, "0.bias", 0.125);
  BOOST_TEST(values_of(m, "0.bias") == std::vector<double>(120, 0.125), boost::test_tools::per_element());
  init::zeros_(m, "2.bias");
  BOOST_TEST(values_of(m, "2.bias") == std::vector<double>(10, 0.0), boost::test_tools::per_element());
  init::ones_(m, "2.bias");
  BOOST_TEST(values_of(m, "2.bias") == std::vector<double>(10, 1.0), boost::test_tools::per_element());
  BOOST_TEST(values_of(m, "2.weight") == w2, boost::test_tools::per_element());
  // Another name: a ValueError that lists the model's; a bias for a fan-based one: torch's refusal.
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::zeros_(m, "1.weight"); },
                                               "no parameter \"1.weight\"; it has 0.weight, 0.bias, 2.weight, 2.bias"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::xavier_uniform_(m, "0.bias", g); }, "fewer than 2 dimensions"));
}

BOOST_AUTO_TEST_CASE(degenerate_and_bad_ranges_are_torchs) {
  // torch: normal_(mean, 0) and uniform_(a, a) fill with the one value; a range with from > to, a
  // negative or NaN std (a negative gain makes them) and a bound that is not finite raise. std::'s
  // distributions take none of these (their preconditions: std > 0, a <= b).
  knn::Model<Net, Shape<dyn, 400>> m(0);
  knn::Generator g(3);
  init::normal_(m, "2.bias", g, 1.5, 0.0);
  BOOST_TEST(values_of(m, "2.bias") == std::vector<double>(10, 1.5), boost::test_tools::per_element());
  init::uniform_(m, "2.bias", g, -0.25, -0.25);
  BOOST_TEST(values_of(m, "2.bias") == std::vector<double>(10, -0.25), boost::test_tools::per_element());
  init::xavier_normal_(m, "2.weight", g, 0.0);  // gain 0: zeros, as torch's
  BOOST_TEST(values_of(m, "2.weight") == std::vector<double>(1200, 0.0), boost::test_tools::per_element());
  init::uniform_(m, "2.bias", g, -0.0, 0.0);  // torch: from + (to - from) U is +0.0
  for (const double b : values_of(m, "2.bias")) BOOST_TEST(!std::signbit(b));
  init::normal_(m, "2.bias", g, 1e39, 1.0);  // a mean past float's range: inf, as torch's (no error)
  BOOST_TEST(values_of(m, "2.bias") == std::vector<double>(10, INFINITY), boost::test_tools::per_element());
  const auto w = values_of(m, "0.weight");
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::uniform_(m, "0.weight", g, 1.0, 0.0); },
                                               "kiln::nn::init::uniform_: expects a [from, to) range, but found from=1 > to=0"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::normal_(m, "0.weight", g, 0.0, -1.0); },
                                               "kiln::nn::init::normal_: expects std >= 0.0, but found std -1"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::normal_(m, "0.weight", g, 0.0, NAN); }, "found std nan"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::uniform_(m, "0.weight", g, 0.0, INFINITY); },
                                               "uniform_: to is out of bounds for float (inf)"));
  // Bounds and values the float parameters cannot hold (torch: "from is out of bounds for float", "to-from
  // ... exceed the limit", "value cannot be converted to type float without overflow").
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::uniform_(m, "0.weight", g, -1e39, 1.0); },
                                               "from is out of bounds for float (-1e+39)"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::uniform_(m, "0.weight", g, -3e38, 3e38); },
                                               "expects to - from <= the largest float, but found to=3e+38 and from=-3e+38"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::xavier_uniform_(m, "0.weight", g, 1e40); }, "out of bounds"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::constant_(m, "0.weight", 1e39); }, "constant_"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::xavier_uniform_(m, "0.weight", g, -1.0); },
                                               "xavier_uniform_: expects a [from, to) range"));
  BOOST_TEST(kt::throws_with<kiln::ValueError>([&] { init::xavier_normal_(m, "0.weight", g, -1.0); },
                                               "xavier_normal_: expects std >= 0.0"));
  BOOST_TEST(values_of(m, "0.weight") == w, boost::test_tools::per_element());  // refused before any draw
}

BOOST_AUTO_TEST_CASE(a_mixed_precision_model_reads_the_new_weights) {
  // The GEMMs of a MixedFp16 model read a half working copy: after zeros_ on both weights and ones_ on the
  // last bias, every output is 1 (a stale copy would keep the drawn weights).
  knn::Model<Net, Shape<dyn, 400>, kiln::Policy<kiln::MixedFp16, kiln::Cpu>> m(0);
  Tensor<kiln::half, Shape<dyn, 400>> x(Extents<Shape<dyn, 400>>(2));
  x.fill(0.5);
  (void)m.forward(x);  // the working copy made from the drawn weights
  init::zeros_(m, "0.weight");
  init::zeros_(m, "2.weight");
  init::ones_(m, "2.bias");
  for (const auto& v : m.forward(x).to_vector()) BOOST_TEST(kiln::to_compute(v) == 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
