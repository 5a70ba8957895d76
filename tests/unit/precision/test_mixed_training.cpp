// Mixed precision training: the optimizers rewrite the model's low-precision working copy in their one
// pass (it equals the rounded masters after every step); a change to the masters outside an optimizer
// reaches the next forward; a skipped step (GradScaler) leaves masters and working copy alone; and a
// small network trained in fp16 (with loss scaling) and bf16 follows its fp32 run.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <limits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;
using D = std::tuple_element_t<0, kt::devices>;

using Net = knn::Sequential<knn::Linear<6, 16>, knn::ReLU, knn::Linear<16, 3>>;
template <class P>
using Model = knn::Model<Net, Shape<dyn, 6>, kiln::Policy<P, D>>;

template <class U, class T, class S>
Tensor<U, S, D> to(const Tensor<T, S, D>& x) {
  Tensor<U, S, D> out(x.extents(), x.device_index());
  kiln::assign(out, kiln::cast<U>(x));
  return out;
}

/// Three separable classes in 6 features: class k has mean 1.5 in feature k, noise ±1 elsewhere.
struct Data {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  explicit Data(int n, std::uint32_t seed) {
    const auto noise = kt::random_values<float>(static_cast<std::size_t>(n * 6), -1, 1, seed);
    x = noise;
    for (int i = 0; i < n; ++i) {
      y.push_back(i % 3);
      x[static_cast<std::size_t>(i * 6 + i % 3)] += 1.5f;
    }
  }
  template <class T>
  Tensor<T, Shape<dyn, 6>, D> inputs() const {
    return to<T>(kt::make_tensor<D>(x, Extents<Shape<dyn, 6>>(static_cast<kiln::index_t>(y.size()))));
  }
  Tensor<std::int64_t, Shape<dyn>, D> labels() const {
    return kt::make_tensor<D>(y, Extents<Shape<dyn>>(static_cast<kiln::index_t>(y.size())));
  }
};

/// The working copy equals the masters rounded to T, element for element.
template <class M>
bool working_copy_is_rounded_masters(M& model) {
  using T = typename M::T;
  const auto masters = model.parameters().to_vector();
  const auto work = model.working_parameters().to_vector();
  for (std::size_t i = 0; i < masters.size(); ++i)
    if (kiln::to_compute(work[i]) != kiln::to_compute(kiln::from_compute<T>(masters[i]))) return false;
  return true;
}

/// One step of `opt` on the data; returns the passes the step itself took.
template <class M, class Opt>
std::uint64_t train_step(M& model, Opt& opt, const Data& d) {
  using T = typename M::T;
  knn::CrossEntropyLoss ce;
  opt.zero_grad();
  const auto logits = model.forward(d.inputs<T>());
  model.backward(ce.backward(logits, d.labels()));
  const auto before = kiln::passes();
  opt.step();
  return kiln::passes() - before;
}

template <class P, class Opt>
void check_optimizer_rewrites_working_copy() {
  Model<P> model(3);
  Opt opt(model, {.lr = 1e-3});
  const Data d(12, 1);
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(train_step(model, opt, d) == 1u);  // masters and working copy in one pass
    BOOST_TEST(working_copy_is_rounded_masters(model));
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(precision)
BOOST_AUTO_TEST_SUITE(mixed_training)

BOOST_AUTO_TEST_CASE(the_optimizers_step_masters_and_working_copy_in_one_pass) {
  using kiln::MixedBf16;
  using kiln::MixedFp16;
  static_assert(Model<MixedFp16>::has_working_copy && !Model<kiln::Fp32>::has_working_copy);
  static_assert(std::is_same_v<decltype(kiln::optim::Adam(std::declval<Model<MixedFp16>&>())),
                               kiln::optim::Adam<float, D, kiln::half>>);
  check_optimizer_rewrites_working_copy<MixedFp16, kiln::optim::SGD<float, D, kiln::half>>();
  check_optimizer_rewrites_working_copy<MixedFp16, kiln::optim::Adam<float, D, kiln::half>>();
  check_optimizer_rewrites_working_copy<MixedBf16, kiln::optim::AdamW<float, D, kiln::bfloat16>>();
}

BOOST_AUTO_TEST_CASE(momentum_sgd_in_mixed_precision_follows_the_working_copy) {
  Model<kiln::MixedFp16> model(4);
  kiln::optim::SGD opt(model, {.lr = 0.05, .momentum = 0.9, .nesterov = true});
  const Data d(12, 2);
  for (int i = 0; i < 3; ++i) (void)train_step(model, opt, d);
  BOOST_TEST(working_copy_is_rounded_masters(model));
}

BOOST_AUTO_TEST_CASE(a_change_to_the_masters_reaches_the_next_forward) {
  Model<kiln::MixedFp16> model(5), other(6);
  const Data d(6, 3);
  const auto before = model.forward(d.inputs<kiln::half>()).to_vector();
  model.parameters() = other.parameters();  // as a checkpoint load does
  const auto after = model.forward(d.inputs<kiln::half>()).to_vector();
  const auto expected = other.forward(d.inputs<kiln::half>()).to_vector();
  BOOST_TEST(working_copy_is_rounded_masters(model));
  bool same_as_other = true, same_as_before = true;
  for (std::size_t i = 0; i < after.size(); ++i) {
    same_as_other &= kiln::to_compute(after[i]) == kiln::to_compute(expected[i]);
    same_as_before &= kiln::to_compute(after[i]) == kiln::to_compute(before[i]);
  }
  BOOST_TEST(same_as_other);
  BOOST_TEST(!same_as_before);

  // Through a reference taken earlier, the change needs mark_parameters_changed().
  auto& masters = model.parameters();
  (void)model.forward(d.inputs<kiln::half>());  // refreshed here
  masters.fill(0.0f);
  model.mark_parameters_changed();
  const auto zeros = model.forward(d.inputs<kiln::half>()).to_vector();
  bool all_zero = true;
  for (auto v : zeros) all_zero &= kiln::to_compute(v) == 0.0f;
  BOOST_TEST(all_zero);
}

BOOST_AUTO_TEST_CASE(an_optimizer_for_a_low_precision_working_type_needs_the_working_copy) {
  Model<kiln::MixedFp16> model(7);
  BOOST_CHECK_THROW((kiln::optim::Adam<float, D, kiln::half>(model.parameters(), model.gradients())),
                    kiln::ShapeError);
}

BOOST_AUTO_TEST_CASE(a_skipped_step_leaves_masters_and_working_copy_untouched) {
  Model<kiln::MixedFp16> model(8);
  kiln::optim::Adam opt(model, {.lr = 1e-2});
  kiln::optim::GradScaler<D> scaler;
  const Data d(12, 4);
  knn::CrossEntropyLoss ce;
  (void)train_step(model, opt, d);
  const auto masters = model.parameters().to_vector();
  const auto work = model.working_parameters().to_vector();

  opt.zero_grad();
  auto x = d.inputs<kiln::half>();
  const auto logits = model.forward(x);
  model.backward(ce.backward(logits, d.labels(), scaler.scale()));
  model.gradients().fill(std::numeric_limits<float>::infinity());  // an overflow
  BOOST_TEST(!scaler.step(opt));
  scaler.update();
  BOOST_TEST(scaler.scale() == 32768.0);
  BOOST_TEST(model.parameters().to_vector() == masters);
  const auto work_after = model.working_parameters().to_vector();
  bool same = true;
  for (std::size_t i = 0; i < work.size(); ++i) same &= kiln::to_compute(work[i]) == kiln::to_compute(work_after[i]);
  BOOST_TEST(same);
}

// Training with the GradScaler loop (fp16) or without it (bf16) reaches fp32's loss: 60 Adam steps on a
// separable 3-class problem; the final losses agree within 5% and all three classify every sample.
BOOST_AUTO_TEST_CASE(mixed_training_follows_fp32) {
  const Data d(48, 5);
  const auto run = [&]<class P>(P) {
    using T = typename P::storage;
    Model<P> model(9);
    kiln::optim::Adam opt(model, {.lr = 1e-2});
    kiln::optim::GradScaler<D> scaler({.enabled = P::loss_scaling});
    knn::CrossEntropyLoss ce;
    const auto x = d.inputs<T>();
    const auto y = d.labels();
    double loss = 0;
    for (int step = 0; step < 60; ++step) {
      opt.zero_grad();
      const auto logits = model.forward(x);
      loss = ce(logits, y).item();
      model.backward(ce.backward(logits, y, scaler.scale()));
      scaler.step(opt);
      scaler.update();
    }
    const auto predicted = kiln::argmax<1>(to<float>(model.forward(x))).to_vector();
    int correct = 0;
    for (std::size_t i = 0; i < predicted.size(); ++i) correct += predicted[i] == d.y[i];
    BOOST_TEST_MESSAGE(P::name << ": loss " << loss << ", correct " << correct << ", skipped "
                               << scaler.skipped_steps());
    BOOST_TEST(correct == 48);
    return loss;
  };
  const double fp32 = run(kiln::Fp32{});
  BOOST_TEST(std::abs(run(kiln::MixedFp16{}) - fp32) <= 0.05 * fp32);
  BOOST_TEST(std::abs(run(kiln::MixedBf16{}) - fp32) <= 0.05 * fp32);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
