// docs/data.md's dataset of one's own (Points) and its training loop, and docs/models.md's test accuracy
// without gradients over it: the blocks as the pages show them (cmake/KilnDocSnippets.cmake), checked
// against an independent count and for learning the task.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <kiln/data/data.hpp>
#include <kiln/kiln.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {
using Row = kiln::Tensor<float, kiln::Shape<kiln::dyn, 2>>;
#include "data.own_dataset.inc"
}  // namespace

BOOST_AUTO_TEST_SUITE(docs)

BOOST_AUTO_TEST_CASE(data_own_dataset_reads_its_points_and_refuses_an_index_outside_it) {
  const Points p(5, 3);
  static_assert(kiln::data::dataset<Points>);
  BOOST_TEST(p.size() == 5);
  const auto s = kiln::data::get(p, 4);
  BOOST_TEST(s.x.size() == 2u);
  BOOST_TEST(s.x[0] == p.xy[8]);
  BOOST_TEST(s.y.at(0) == (p.xy[8] + p.xy[9] > 1.0f ? 1 : 0));
  std::vector<float> x(2);
  std::vector<std::int64_t> y(1);
  BOOST_CHECK_THROW(p.read(5, x, y), kiln::ValueError);
}

BOOST_AUTO_TEST_CASE(data_own_dataset_trains_and_models_inference_counts_its_test_accuracy) {
#include "data.own_dataset_loop.inc"
  BOOST_TEST(loader.size() == 16);  // 15 batches of 64 and one of 40
#include "models.inference.inc"
  BOOST_TEST(model.training());
  BOOST_TEST(seen == 200.0);
  // The same count by hand, sample by sample, from the dataset itself.
  int hits = 0;
  {
    kiln::nn::NoGrad guard(model);
    for (kiln::index_t i = 0; i < test.size(); ++i) {
      const auto s = kiln::data::get(test, i);
      const auto logits = model.forward(Row::from(s.x, kiln::Extents<Row::shape_type>(1)));
      hits += ((logits[1] > logits[0]) ? 1 : 0) == s.y.at(0) ? 1 : 0;
    }
  }
  BOOST_TEST(correct == static_cast<double>(hits));
  BOOST_TEST_MESSAGE("docs/data.md Points: test accuracy " << accuracy);
  BOOST_TEST(accuracy > 0.9);  // a line through the unit square: learnt
}

BOOST_AUTO_TEST_SUITE_END()
