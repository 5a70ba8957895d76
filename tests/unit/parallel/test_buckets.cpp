// Gradient buckets (plan_buckets) and the backward pass's GradientsReady signal that starts them:
// buckets tile the arena from its end, never split a parameter, honour the first and later caps; the
// signal comes once per layer with parameters, last layer first, with that layer's arena offset, and
// each offset is told only after that layer's gradients are written.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <kiln/nn/nn.hpp>
#include <kiln/parallel/buckets.hpp>
#include <string>
#include <vector>

#include "support/parallel_models.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using kiln::parallel::Bucket;
using kiln::parallel::plan_buckets;

using kiln::test::parallel_models::Image;
using kiln::test::parallel_models::LeNet;
using kiln::test::parallel_models::Mlp;
using kiln::test::parallel_models::Row;

constexpr double mib = 1.0 / 1048576.0;  // one byte, in MiB

void check_tiling(const std::vector<Bucket>& b, index_t total) {
  BOOST_REQUIRE(!b.empty());
  BOOST_TEST(b.front().end == total);
  BOOST_TEST(b.back().begin == 0);
  for (std::size_t i = 1; i < b.size(); ++i) BOOST_TEST(b[i].end == b[i - 1].begin);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(parallel)
BOOST_AUTO_TEST_SUITE(buckets)

BOOST_AUTO_TEST_CASE(default_caps_put_a_small_model_in_one_bucket) {
  knn::Model<Mlp, Row> m(0);
  const auto b = plan_buckets(m.named_parameters(), sizeof(float));
  BOOST_TEST(b.size() == 1u);
  check_tiling(b, m.parameter_count);
  // Last layer first, as backward produces them.
  BOOST_TEST(b[0].parameters == (std::vector<std::string>{"4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_tiny_cap_gives_each_parameter_its_own_bucket) {
  knn::Model<Mlp, Row> m(0);
  const auto b = plan_buckets(m.named_parameters(), sizeof(float), {.bucket_cap_mb = mib, .first_bucket_mb = mib});
  BOOST_TEST(b.size() == 6u);
  check_tiling(b, m.parameter_count);
  BOOST_TEST(b[0].parameters == std::vector<std::string>{"4.bias"}, boost::test_tools::per_element());
  BOOST_TEST(b[0].size() == 1);
  BOOST_TEST(b[1].size() == 32);  // 4.weight [1, 32]
  BOOST_TEST(b[5].size() == 16 * 13);
}

BOOST_AUTO_TEST_CASE(buckets_close_once_they_reach_their_cap) {
  // Arena (forward order): 0.weight 208, 0.bias 16, 2.weight 512, 2.bias 32, 4.weight 32, 4.bias 1.
  // First cap 40 floats (160 B): 4.bias + 4.weight = 33 < 40, + 2.bias = 65 closes it. Later cap 600
  // floats: 2.weight 512 + 0.bias 16 + 0.weight 208 = 736 >= 600 closes at 0.weight.
  knn::Model<Mlp, Row> m(0);
  const auto b = plan_buckets(m.named_parameters(), sizeof(float), {.bucket_cap_mb = 2400 * mib, .first_bucket_mb = 160 * mib});
  BOOST_TEST(b.size() == 2u);
  check_tiling(b, m.parameter_count);
  BOOST_TEST(b[0].size() == 65);
  BOOST_TEST(b[0].parameters == (std::vector<std::string>{"4.bias", "4.weight", "2.bias"}), boost::test_tools::per_element());
  BOOST_TEST(b[1].size() == 736);
  // In doubles the same caps hold half as many elements.
  const auto d = plan_buckets(m.named_parameters(), sizeof(double), {.bucket_cap_mb = 2400 * mib, .first_bucket_mb = 160 * mib});
  BOOST_TEST(d.size() == 3u);  // 4.bias+4.weight (33 >= 20); 2.bias+2.weight (544 >= 300); 0.bias+0.weight
  check_tiling(d, m.parameter_count);
}

BOOST_AUTO_TEST_CASE(bad_caps_and_holes_are_errors) {
  knn::Model<Mlp, Row> m(0);
  BOOST_CHECK_THROW(plan_buckets(m.named_parameters(), 4, {.bucket_cap_mb = 0}), kiln::ValueError);
  BOOST_CHECK_THROW(plan_buckets(m.named_parameters(), 4, {.bucket_cap_mb = 25, .first_bucket_mb = -1}), kiln::ValueError);
  // torch: int(inf * 2**20) is an OverflowError; a cap past any arena is one bucket (it was UB: one each).
  BOOST_CHECK_THROW(plan_buckets(m.named_parameters(), 4, {.bucket_cap_mb = INFINITY}), kiln::ValueError);
  BOOST_CHECK_THROW(plan_buckets(m.named_parameters(), 4, {.bucket_cap_mb = NAN}), kiln::ValueError);
  BOOST_TEST(plan_buckets(m.named_parameters(), 4, {.bucket_cap_mb = 1e30, .first_bucket_mb = 1e30}).size() == 1u);
  auto params = m.named_parameters();
  params.erase(params.begin() + 2);  // a hole where 2.weight was
  BOOST_CHECK_THROW(plan_buckets(params, 4), kiln::ValueError);
  BOOST_TEST(plan_buckets({}, 4).empty());
}

BOOST_AUTO_TEST_CASE(backward_tells_each_layer_when_its_gradients_are_done) {
  knn::Model<LeNet, Image> m(1);
  const auto x = kt::make_tensor<kiln::Cpu>(kt::random_values<float>(3 * 64, -1, 1, 1), Extents<Image>(3));
  const std::vector<std::int64_t> labels{1, 4, 7};
  const auto y = kt::make_tensor<kiln::Cpu>(labels, Extents<Shape<dyn>>(3));
  knn::CrossEntropyLoss ce;
  const auto pred = m.forward(x);
  const auto dy = ce.backward(pred, y);

  knn::Model<LeNet, Image> reference(1);  // the finished gradients, to compare with what is ready when told
  reference.backward(ce.backward(reference.forward(x), y));
  const auto want = reference.gradients().to_vector();

  std::vector<index_t> told;
  bool complete_when_told = true;
  const knn::GradientsReady ready = [&](index_t offset) {
    told.push_back(offset);
    const auto now = m.gradients().to_vector();
    for (index_t i = offset; i < m.parameter_count; ++i)
      if (now[static_cast<std::size_t>(i)] != want[static_cast<std::size_t>(i)]) complete_when_told = false;
  };
  m.backward(dy, ready);
  // Linear (offset 4*1*3*3 + 4 = 40), then Conv2d (0), then the final ready(0).
  BOOST_TEST(told == (std::vector<index_t>{40, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(complete_when_told);
  BOOST_TEST(m.gradients().to_vector() == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
