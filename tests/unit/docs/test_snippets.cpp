// The C++ of README.md and docs/*.md, compiled and run as the pages show it: each snippet
// (`#include "<page>.<name>.inc"`, written from the page by cmake/KilnDocSnippets.cmake) sits in a test
// case that declares what the page leaves to the reader (`model`, `x`, `batches`, a file path, ...), and
// the case checks what the page says it does. A page that drifts from the library breaks this build, with
// the error at the page's line (each .inc starts with #line). GPU snippets: tests/cuda/docs.
#include <algorithm>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <kiln/data/data.hpp>
#include <kiln/io/optimizer_state.hpp>
#include <kiln/io/safetensors.hpp>
#include <kiln/kiln.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <kiln/parallel/data_parallel.hpp>
#if KILN_WITH_MPI
#include <kiln/parallel/distributed.hpp>
#include <kiln/parallel/mpi.hpp>
#endif
#include <limits>
#include <map>
#include <numbers>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/reference.hpp"
#include "support/temp_dir.hpp"

// The pages name values the reader goes on to use (a loss to print, logits to score): not warnings here.
#pragma GCC diagnostic ignored "-Wunused-variable"

namespace {

using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

template <class S>
Tensor<float, S, kiln::Cpu> random_batch(kiln::index_t n, std::uint32_t stream) {
  const auto ext = Extents<S>(n);
  return kiln::test::make_tensor<kiln::Cpu>(kiln::test::random_values<float>(ext.numel(), -1.0, 1.0, stream), ext);
}

Tensor<std::int64_t, Shape<dyn>, kiln::Cpu> random_labels(kiln::index_t n, int classes, std::uint32_t stream) {
  return kiln::test::make_tensor<kiln::Cpu>(kiln::test::random_integers<std::int64_t>(n, 0, classes - 1, stream),
                                            Extents<Shape<dyn>>(n));
}

/// Runs f with the working directory in a fresh temporary directory (snippets that write "x.safetensors").
template <class F>
void in_temp_dir(const kiln::test::TempDir& dir, F f) {
  const auto before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  try {
    f();
  } catch (...) {
    std::filesystem::current_path(before);
    throw;
  }
  std::filesystem::current_path(before);
}

double param_change(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

using LeNetNet = kiln::nn::Sequential<kiln::nn::Conv2d<3, 6, 5>, kiln::nn::ReLU, kiln::nn::MaxPool2d<2>,
                                      kiln::nn::Conv2d<6, 16, 5>, kiln::nn::ReLU, kiln::nn::MaxPool2d<2>,
                                      kiln::nn::Flatten, kiln::nn::Linear<400, 120>, kiln::nn::ReLU,
                                      kiln::nn::Linear<120, 84>, kiln::nn::ReLU, kiln::nn::Linear<84, 10>>;
using Image = Shape<dyn, 3, 32, 32>;

/// `batches` of the training-loop snippets: two batches of the type the loaders yield (the snippets bind
/// them as `auto [x, y]`, as torch's `for x, y in loader`).
template <class X, class Y>
std::vector<kiln::data::TensorBatch<X, Y>> two_batches(const X& x, const Y& y) {
  std::vector<kiln::data::TensorBatch<X, Y>> out(2);
  for (auto& b : out) {
    b.x = X(x);  // a copy shares; its move-assignment rebinds
    b.y = Y(y);
  }
  return out;
}

/// Precondition of the cases that read Fashion-MNIST: Boost.Test reports them skipped, with this reason,
/// where it is not installed (scripts/install-deps installs it).
boost::test_tools::assertion_result fashion_mnist_installed(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result installed(std::filesystem::exists("/usr/share/datasets/fashion-mnist"));
  installed.message() << "no /usr/share/datasets/fashion-mnist "
                         "(Debian: apt-get install dataset-fashion-mnist)";
  return installed;
}

// (a template and a function, at namespace scope)
#include "tensors.pick_device.inc"
}  // namespace

BOOST_AUTO_TEST_SUITE(docs)

// readme.quick_start.inc is a whole program: tests/CMakeLists.txt builds it as one (kiln.docs.readme_quick_start).

BOOST_AUTO_TEST_CASE(tensors_factories_make_torchs_ranges_and_draws) {
#include "tensors.factories.inc"
  BOOST_TEST(steps.to_vector() == (std::vector<float>{0, 0.25f, 0.5f, 0.75f}), boost::test_tools::per_element());
  BOOST_TEST(grid.to_vector() == (std::vector<double>{-1, -0.5, 0, 0.5, 1}), boost::test_tools::per_element());
  BOOST_TEST(id.to_vector() == (std::vector<float>{1, 0, 0, 0, 1, 0}), boost::test_tools::per_element());
  BOOST_TEST(noise.numel() == 12);
  const auto l = labels.to_vector();
  BOOST_TEST(l.size() == 8u);
  BOOST_TEST(std::all_of(l.begin(), l.end(), [](std::int64_t v) { return v >= 0 && v < 10; }));
  BOOST_TEST(mask.to_vector() == std::vector<float>(12, 1.0f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(tensors_basics_views_share_storage_and_clones_do_not) {
#include "tensors.basics.inc"
  BOOST_TEST(total == 5.0f);
  BOOST_TEST(values == (std::vector<float>{0, 0, 0, 0, 0, 5}), boost::test_tools::per_element());
  BOOST_TEST(v.to_vector() == w.to_vector(), boost::test_tools::per_element());
  BOOST_TEST((x.size(0) == 2 && x.size(1) == 3 && x.numel() == 6 && x.nbytes() == 24u));
  BOOST_TEST(y.shares_storage_with(x));
  BOOST_TEST(!z.shares_storage_with(x));
  x(0, 0) = 7.0f;  // seen through every view, not by the clone
  BOOST_TEST(y(0, 0) == 7.0f);
  BOOST_TEST(flat[0] == 7.0f);
  BOOST_TEST(z(0, 0) == 0.0f);
  BOOST_TEST((second_row.size(0) == 1 && second_row(0, 2) == 5.0f));
}

BOOST_AUTO_TEST_CASE(tensors_pick_device_trains_where_it_can) {
  // A .cpp file: the CPU branch, in a build with CUDA or without (tests/cuda/docs runs the GPU's).
  BOOST_TEST(fit_a_line_where_it_runs_best() < 1e-6f);  // y = 2x + 1 fitted
#if !KILN_WITH_CUDA
  // Without kiln::cuda the checks exist and say no (torch.cuda.is_available() of a CPU build).
  BOOST_TEST(!kiln::cuda::is_available());
  BOOST_TEST(kiln::cuda::device_count() == 0);
  BOOST_TEST(kiln::cuda::unavailable_reason().find("built without CUDA") != std::string::npos);
  // and no GPU memory, as torch.cuda.memory_allocated() of a CPU build (empty_cache: nothing to do).
  const auto cpu_bytes = kiln::memory_stats<kiln::Cpu>().reserved_bytes;
  kiln::cuda::empty_cache();
  BOOST_TEST(kiln::memory_stats<kiln::Cpu>().reserved_bytes == cpu_bytes);  // the CPU's cache kept
  BOOST_TEST(kiln::cuda::memory_allocated() == 0u);
  BOOST_TEST(kiln::cuda::memory_reserved(0) == 0u);
  BOOST_TEST(kiln::cuda::max_memory_allocated() == 0u);
  BOOST_TEST(kiln::cuda::max_memory_reserved() == 0u);
#endif
}

BOOST_AUTO_TEST_CASE(tensors_layout_shapes_follow_the_permutation) {
#include "tensors.layout.inc"
  static_assert(std::is_same_v<decltype(nhwc)::shape_type, kiln::Shape<kiln::dyn, 4, 5, 3>>);
  static_assert(std::is_same_v<decltype(swapped)::shape_type, kiln::Shape<kiln::dyn, 3, 5, 4>>);
  static_assert(std::is_same_v<decltype(middle)::shape_type, kiln::Shape<kiln::dyn, 3, 4, kiln::dyn>>);
  static_assert(std::is_same_v<decltype(first_two)::shape_type, kiln::Shape<kiln::dyn, 2, 4, 5>>);
  BOOST_TEST((middle.size(0) == 2 && middle.size(3) == 3));
  BOOST_TEST(first_two.numel() == 2 * 2 * 4 * 5);
  BOOST_TEST(kiln::sum(y).item() == 3.0f * 2 * 4 * 5 * 3);
}

BOOST_AUTO_TEST_CASE(tensors_views_share_the_storage) {
#include "tensors.views.inc"
  static_assert(std::is_same_v<decltype(features)::shape_type, kiln::Shape<kiln::dyn, 60>>);
  static_assert(std::is_same_v<decltype(planes)::shape_type, kiln::Shape<kiln::dyn, 3, 20>>);
  static_assert(std::is_same_v<decltype(column)::shape_type, kiln::Shape<kiln::dyn, 60, 1>>);
  static_assert(std::is_same_v<decltype(again)::shape_type, kiln::Shape<kiln::dyn, 60>>);
  again = 2.0f;  // written through, into images
  BOOST_TEST(kiln::sum(images).item() == 2.0f * 2 * 60);
  BOOST_TEST((planes.size(0) == 2 && planes.data() == images.data()));
}

BOOST_AUTO_TEST_CASE(tensors_joins_shapes_and_values) {
#include "tensors.joins.inc"
  static_assert(std::is_same_v<decltype(ab)::shape_type, kiln::Shape<kiln::dyn, 8>>);
  static_assert(std::is_same_v<decltype(rows)::shape_type, kiln::Shape<kiln::dyn, 3>>);
  static_assert(std::is_same_v<decltype(pair)::shape_type, kiln::Shape<2, kiln::dyn, 3>>);
  static_assert(std::is_same_v<decltype(last)::shape_type, kiln::Shape<kiln::dyn, 3, 2>>);
  BOOST_TEST((ab.size(0) == 2 && rows.size(0) == 6 && pair.size(1) == 2));
  BOOST_TEST(kiln::sum(ab).item() == 2.0f * (3 * 1.0f + 5 * 2.0f));
  BOOST_TEST(kiln::sum(rows).item() == 2.0f * 3 * (1.0f + 3.0f + 1.0f));
  BOOST_TEST(kiln::sum(last).item() == 2.0f * 3 * 2);
}

BOOST_AUTO_TEST_CASE(readme_lenet_steps_once) {
  const auto x = random_batch<Image>(4, 1);
  const auto labels = random_labels(4, 10, 2);
  std::vector<float> before, after;
  {
#include "readme.lenet.inc"
    static_assert(decltype(model)::parameter_count == 62006);  // the page's comment
    after = model.parameters().to_vector();
    kiln::nn::Model<LeNet, kiln::Shape<kiln::dyn, 3, 32, 32>> fresh(0);
    before = fresh.parameters().to_vector();
  }
  BOOST_TEST(param_change(before, after) > 0.0);
}

BOOST_AUTO_TEST_CASE(design_tree_runs_in_one_pass) {
  using namespace kiln;
  const index_t n = 3;
  std::uint64_t passes = 0;
  std::vector<float> x_values, y_values;
  {
    const auto start = kiln::passes();
#include "design.tree.inc"
    passes = kiln::passes() - start;
    x_values = x.to_vector();  // uninitialised, as torch.empty: whatever the allocator held
    y_values = y.to_vector();
  }
  BOOST_TEST(passes == 1u);
  BOOST_REQUIRE(y_values.size() == 12u);
  for (std::size_t i = 0; i < y_values.size(); ++i) {  // the memory may hold NaN, which relu keeps
    const float want = std::isnan(x_values[i]) ? x_values[i] : std::max(x_values[i] * 2.0f - 1.0f, 0.0f);
    BOOST_TEST((std::isnan(want) ? std::isnan(y_values[i]) : y_values[i] == want), i << ": " << y_values[i]);
  }
}

BOOST_AUTO_TEST_CASE(design_matmul_bias_relu_and_a_fused_mean) {
  const auto x = random_batch<Shape<dyn, 3>>(2, 3);
  auto w = kiln::eval(kiln::Tensor<float, Shape<3, 4>>::from({1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1}) * 1.0f);
  const auto bias = kiln::Tensor<float, Shape<4>>::from({0.5f, -0.5f, 0.0f, 0.25f});
  Tensor<float, Shape<dyn, 4>> y(2);
  float mean = 0;
  {
#include "design.matmul.inc"
    mean = loss.item();
  }
  const auto xv = x.to_vector(), yv = y.to_vector();
  const float b[4] = {0.5f, -0.5f, 0.0f, 0.25f};
  double expect = 0;
  for (int r = 0; r < 2; ++r) {
    const float h[4] = {xv[r * 3], xv[r * 3 + 1], xv[r * 3 + 2], xv[r * 3] + xv[r * 3 + 1] + xv[r * 3 + 2]};
    for (int c = 0; c < 4; ++c) {
      const float want = std::max(h[c] + b[c], 0.0f);
      BOOST_TEST(std::abs(yv[r * 4 + c] - want) < 1e-5f);
      expect += std::exp(static_cast<double>(want) - 1.0) / 8.0;
    }
  }
  BOOST_TEST(std::abs(mean - expect) < 1e-5 * expect);
}

BOOST_AUTO_TEST_CASE(models_train_loop_accumulation_and_schedule) {
  kiln::nn::Model<LeNetNet, Image> model(0);
  const auto x0 = random_batch<Image>(4, 4);
  const auto y0 = random_labels(4, 10, 5);
  const auto batches = two_batches(x0, y0);
  const auto start = model.parameters().to_vector();
  {
#include "models.train_loop.inc"
  }
  BOOST_TEST(param_change(start, model.parameters().to_vector()) > 0.0);

  kiln::nn::CrossEntropyLoss ce;
  kiln::optim::Adam opt(model, {.lr = 1e-3});
  const int k = 2, b = 2;
  const auto& x = x0;
  const auto& y = y0;
  // What the page says the k micro-batches equal: one batch of k b, from the same parameters (a model
  // with the trained ones), whose gradients then take the same Adam step.
  kiln::nn::Model<LeNetNet, Image> whole(1);
  kiln::assign(whole.parameters(), model.parameters());
  kiln::optim::Adam whole_opt(whole, {.lr = 1e-3});
  whole_opt.zero_grad();
  whole.backward(ce.backward(whole.forward(x0), y0));
  whole_opt.step();
  {
#include "models.accumulation.inc"
  }
  const auto accumulated = model.gradients().to_vector(), want = whole.gradients().to_vector();
  BOOST_TEST(accumulated.size() == want.size());
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::abs(static_cast<double>(want[i])));
    worst = std::max(worst, std::abs(static_cast<double>(accumulated[i]) - want[i]));
  }
  BOOST_TEST(largest > 1e-3, "the whole batch's gradients are not all 0: " << largest);
  BOOST_TEST(worst <= 1e-5 * largest, "largest gradient difference " << worst << " of " << largest);
  BOOST_TEST(opt.step_count() == 1, "one step for the k micro-batches");
  // The same Adam step (a step missed or taken twice differs by about lr = 1e-3; a gradient near Adam's
  // eps may move its parameter's step by a little of that).
  BOOST_TEST(param_change(whole.parameters().to_vector(), model.parameters().to_vector()) <= 1e-4);
}

BOOST_AUTO_TEST_CASE(models_loss_options_are_torchs_reduction_and_label_smoothing) {
  kiln::nn::Model<LeNetNet, Image> model(0);
  const auto logits = model.forward(random_batch<Image>(4, 8));
  const auto y = random_labels(4, 10, 9);
  const double mean = kiln::nn::CrossEntropyLoss{}(logits, y).item();
  {
#include "models.loss_options.inc"
    BOOST_TEST(static_cast<double>(loss) == 4.0 * mean, boost::test_tools::tolerance(1e-5));
    BOOST_TEST(static_cast<double>(smoothed(logits, y).item()) != mean);
    BOOST_TEST((mse_sum.reduction == kiln::nn::Reduction::sum));
    // The weighted mean: Σ w[y] l / Σ w[y] over the unweighted rows l.
    const auto rows = kiln::nn::CrossEntropyLoss{}.unreduced(logits, y).to_vector();
    double total = 0, weights = 0;
    for (kiln::index_t n = 0; n < y.numel(); ++n) {
      const double w = y[n] == 9 ? 4.0 : 1.0;
      total += w * rows[static_cast<std::size_t>(n)];
      weights += w;
    }
    BOOST_TEST(static_cast<double>(weighted) == total / weights, boost::test_tools::tolerance(1e-5));
  }
  bool any = false;
  for (float g : model.gradients().to_vector()) any = any || g != 0.0f;
  BOOST_TEST(any);  // the smoothed gradient reached the parameters
}

BOOST_AUTO_TEST_CASE(models_init_loop_draws_every_weight_and_zeros_every_bias) {
  kiln::nn::Model<LeNetNet, Image> model(0);
  const auto before = model.parameters().to_vector();
#include "models.init.inc"
  const auto after = model.parameters().to_vector();
  for (const auto& p : model.named_parameters()) {
    double sq = 0;
    bool changed = false;
    for (kiln::index_t i = p.offset; i < p.offset + p.count; ++i) {
      const auto k = static_cast<std::size_t>(i);
      sq += static_cast<double>(after[k]) * after[k];
      changed = changed || after[k] != before[k];
    }
    if (p.shape.size() >= 2) {  // He's std sqrt(2 / fan_out), fan_out = out · k...
      double fan_out = static_cast<double>(p.shape[0]);
      for (std::size_t d = 2; d < p.shape.size(); ++d) fan_out *= static_cast<double>(p.shape[d]);
      BOOST_TEST(changed, p.name);
      BOOST_TEST(std::sqrt(sq / static_cast<double>(p.count)) == std::sqrt(2.0 / fan_out), boost::test_tools::tolerance(0.2));
    } else {
      BOOST_TEST(sq == 0.0, p.name);
    }
  }
}

BOOST_AUTO_TEST_CASE(models_segmentation_loss_is_the_rows_loss_of_every_pixel) {
  // The page's lines on logits [2, 3, 4, 5] and masks [2, 4, 5]: the mean of the pixels' cross entropy,
  // and its gradient in the logits' layout.
  const auto pixel_logits = random_batch<Shape<dyn, 3, 4, 5>>(2, 21);
  std::vector<std::int64_t> m(2 * 4 * 5);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::int64_t>((i * 7) % 3);
  const auto masks = kiln::test::make_tensor<kiln::Cpu>(m, Extents<Shape<dyn, 4, 5>>(2));
#include "models.segmentation_loss.inc"
  const auto l = pixel_logits.to_vector();
  double want = 0;
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t p = 0; p < 20; ++p) {
      const auto at = [&](std::size_t c) { return static_cast<double>(l[(n * 3 + c) * 20 + p]); };
      double s = 0;
      for (std::size_t c = 0; c < 3; ++c) s += std::exp(at(c));
      want += std::log(s) - at(static_cast<std::size_t>(m[n * 20 + p]));
    }
  BOOST_TEST(static_cast<double>(loss) == want / 40.0, boost::test_tools::tolerance(1e-5));
  static_assert(std::is_same_v<decltype(dlogits)::shape_type, Shape<dyn, 3, 4, 5>>);
  double total = 0;  // each pixel's softmax minus its one-hot sums to 0 over the classes
  for (float g : dlogits.to_vector()) total += g;
  BOOST_TEST(total == 0.0, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(models_soft_targets_are_the_mean_of_the_rows_cross_entropy) {
  // The page's mixup lines on LeNet: the loss is the mean over the rows of -Σ_j t_j log_softmax_j, and
  // its gradient reaches the parameters.
  kiln::nn::Model<LeNetNet, Image> model(0);
  const auto logits = model.forward(random_batch<Image>(4, 8));
  const auto y = random_labels(4, 10, 9), y2 = random_labels(4, 10, 10);
  std::vector<float> a(40, 0.0f), b(40, 0.0f);
  for (kiln::index_t n = 0; n < 4; ++n) {
    a[static_cast<std::size_t>(n * 10 + y[n])] = 1.0f;
    b[static_cast<std::size_t>(n * 10 + y2[n])] = 1.0f;
  }
  const auto one_hot = kiln::test::make_tensor<kiln::Cpu>(a, Extents<Shape<dyn, 10>>(4));
  const auto other = kiln::test::make_tensor<kiln::Cpu>(b, Extents<Shape<dyn, 10>>(4));
  {
#include "models.soft_targets.inc"
    const auto l = logits.to_vector();
    double want = 0;
    for (std::size_t n = 0; n < 4; ++n) {
      double m = -INFINITY, s = 0;
      for (std::size_t j = 0; j < 10; ++j) m = std::max(m, static_cast<double>(l[n * 10 + j]));
      for (std::size_t j = 0; j < 10; ++j) s += std::exp(l[n * 10 + j] - m);
      for (std::size_t j = 0; j < 10; ++j)
        want -= (0.7 * a[n * 10 + j] + 0.3 * b[n * 10 + j]) * (l[n * 10 + j] - m - std::log(s));
    }
    BOOST_TEST(static_cast<double>(loss) == want / 4.0, boost::test_tools::tolerance(1e-5));
  }
  bool any = false;
  for (float g : model.gradients().to_vector()) any = any || g != 0.0f;
  BOOST_TEST(any);
}

BOOST_AUTO_TEST_CASE(models_elementwise_losses_train_a_regressor) {
  // The page's Huber and BCE lines on a 13-16-32-1 MLP: finite values, a gradient that reaches the
  // parameters, and pos_weight 3 weighing the positive term three times.
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<13, 16>, kiln::nn::ReLU, kiln::nn::Linear<16, 32>,
                                       kiln::nn::ReLU, kiln::nn::Linear<32, 1>>,
                  Shape<dyn, 13>>
      model(0);
  const auto pred = model.forward(random_batch<Shape<dyn, 13>>(8, 12));
  const auto target = kiln::test::make_tensor<kiln::Cpu>(std::vector<float>{1, 0, 1, 1, 0, 0, 1, 0}, Extents<Shape<dyn, 1>>(8));
  {
#include "models.elementwise_losses.inc"
    BOOST_TEST(std::isfinite(h));
    const auto terms = kiln::nn::BCEWithLogitsLoss{}.unreduced(pred, target).to_vector();
    const auto p = pred.to_vector();
    double want = 0;
    for (std::size_t i = 0; i < terms.size(); ++i) {
      const double positive = std::log1p(std::exp(-static_cast<double>(p[i])));  // -log sigmoid(p)
      want += target[static_cast<kiln::index_t>(i)] == 1.0f ? 3.0 * positive : terms[i];
    }
    BOOST_TEST(static_cast<double>(b) == want / 8.0, boost::test_tools::tolerance(1e-5));
  }
  bool any = false;
  for (float g : model.gradients().to_vector()) any = any || g != 0.0f;
  BOOST_TEST(any);
}

BOOST_AUTO_TEST_CASE(models_kl_div_distils_a_teacher_per_sample) {
  // The page's lines on a student ending in LogSoftmax against a teacher's probability rows: the
  // divergence summed over each row and averaged over the rows, its gradient -teacher / N, which
  // reaches the parameters.
  kiln::nn::Model<kiln::nn::Sequential<kiln::nn::Linear<13, 10>, kiln::nn::LogSoftmax<>>, Shape<dyn, 13>> model(0);
  const auto log_probs = model.forward(random_batch<Shape<dyn, 13>>(4, 13));
  auto t = kiln::test::random_values<float>(40, 0.05f, 1.0f, 14);
  for (std::size_t n = 0; n < 4; ++n) {
    float s = 0;
    for (std::size_t j = 0; j < 10; ++j) s += t[n * 10 + j];
    for (std::size_t j = 0; j < 10; ++j) t[n * 10 + j] /= s;
  }
  const auto teacher = kiln::test::make_tensor<kiln::Cpu>(t, Extents<Shape<dyn, 10>>(4));
  {
#include "models.kl_div.inc"
    const auto x = log_probs.to_vector();
    double want = 0;
    for (std::size_t i = 0; i < 40; ++i) want += t[i] * (std::log(static_cast<double>(t[i])) - x[i]);
    BOOST_TEST(static_cast<double>(d) == want / 4.0, boost::test_tools::tolerance(1e-5));
    const auto g = dlog_probs.to_vector();
    for (std::size_t i = 0; i < 40; ++i) BOOST_TEST(g[i] == -t[i] / 4.0f, boost::test_tools::tolerance(1e-6f));
    model.backward(dlog_probs);
  }
  bool any = false;
  for (float g : model.gradients().to_vector()) any = any || g != 0.0f;
  BOOST_TEST(any);
}

BOOST_AUTO_TEST_CASE(models_unreduced_rows_with_unit_weights_are_the_mean) {
  // With every weight 1 the weighted mean is CrossEntropyLoss's mean, and so is its gradient.
  kiln::nn::Model<LeNetNet, Image> model(0);
  const auto x = random_batch<Image>(4, 8);
  const auto y = random_labels(4, 10, 9);
  const auto w = kiln::test::make_tensor<kiln::Cpu>(std::vector<float>(4, 1.0f), kiln::Extents<Shape<dyn>>(4));
  model.backward(kiln::nn::CrossEntropyLoss{}.backward(model.forward(x), y));
  const auto mean_grad = model.gradients().to_vector();
  const std::vector<double> want(mean_grad.begin(), mean_grad.end());
  model.zero_grad();
  const auto logits = model.forward(x);
  {
#include "models.unreduced.inc"
    BOOST_TEST(loss == kiln::nn::CrossEntropyLoss{}(logits, y).item(), boost::test_tools::tolerance(1e-6f));
  }
  BOOST_TEST(kiln::test::all_close(model.gradients().to_vector(), want));
}

BOOST_AUTO_TEST_CASE(models_load_state_dict_under_a_new_head) {
  // The page's file: an MLP with Linear<32, 1> as layer 4; `model` has Linear<32, 3> there.
  kiln::test::TempDir dir;
  using kiln::nn::Linear, kiln::nn::ReLU, kiln::nn::Sequential;
  kiln::nn::Model<Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 1>>, Shape<dyn, 13>>
      trained(1);
  kiln::nn::Model<Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 3>>, Shape<dyn, 13>>
      model(2);
  const auto fresh = model.parameters().to_vector();
  in_temp_dir(dir, [&] {
    kiln::save_checkpoint("mlp.safetensors", trained);
#include "models.load_state_dict.inc"
    BOOST_TEST((keys.missing_keys == std::vector<std::string>{"4.weight", "4.bias"}));
    BOOST_TEST(keys.unexpected_keys.empty());
  });
  const auto loaded = model.parameters().to_vector();
  const auto body = trained.parameters().to_vector();
  const auto at = static_cast<std::ptrdiff_t>(model.layer_offset(4));
  BOOST_TEST(std::equal(loaded.begin(), loaded.begin() + at, body.begin()));    // the body, trained
  BOOST_TEST(std::equal(loaded.begin() + at, loaded.end(), fresh.begin() + at));  // the head, as it was
}

BOOST_AUTO_TEST_CASE(models_checkpoint_and_resume_round_trip) {
  kiln::test::TempDir dir;
  kiln::nn::Model<LeNetNet, Image> model(0);
  kiln::optim::Adam opt(model, {.lr = 1e-3});
  const auto x = random_batch<Image>(2, 6);
  const auto y = random_labels(2, 10, 7);
  model.backward(kiln::nn::CrossEntropyLoss{}.backward(model.forward(x), y));
  opt.step();
  in_temp_dir(dir, [&] {
    {
#include "models.checkpoint.inc"
      BOOST_TEST(rest.empty());  // parameters only
    }
    {
#include "models.resume.inc"
    }
  });
  BOOST_TEST(std::filesystem::exists(dir.file("lenet.safetensors")));
  BOOST_TEST(std::filesystem::exists(dir.file("run.safetensors")));
  BOOST_TEST(opt.step_count() == 1);  // restored from run.safetensors
}

BOOST_AUTO_TEST_CASE(models_mlp_with_clipping) {
  using S13 = Shape<dyn, 13>;
  const auto batches = two_batches(random_batch<S13>(8, 8), random_batch<Shape<dyn, 1>>(8, 9));
  double moved = 0;
  {
#include "models.mlp.inc"
    kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 13>> fresh(0);
    moved = param_change(fresh.parameters().to_vector(), model.parameters().to_vector());
  }
  BOOST_TEST(moved > 0.0);
}

BOOST_AUTO_TEST_CASE(models_param_groups_step_and_schedule_every_group) {
  const auto x = random_batch<Shape<dyn, 13>>(8, 10);
  const auto y = random_batch<Shape<dyn, 1>>(8, 11);
#include "models.param_groups.inc"
  BOOST_TEST(opt.param_group_count() == 3u);
  BOOST_TEST((opt.group_parameter_names(1) == std::vector<std::string>{"0.bias", "2.bias"}));
  BOOST_TEST((opt.group_parameter_names(2) == std::vector<std::string>{"2.weight"}));
  BOOST_TEST((opt.group_parameter_names(0) == std::vector<std::string>{"0.weight"}));
  BOOST_TEST(opt.group_weight_decay(1) == 0.0);
  BOOST_TEST(opt.group_weight_decay(2) == 0.05);
  opt.zero_grad();
  model.backward(kiln::nn::MSELoss{}.backward(model.forward(x), y));
  opt.step();
  sched.step();
  // Each group from its own lr down the same cosine: group 2 from 1e-2, groups 0 and 1 from 1e-3.
  const double cosine = (1.0 + std::cos(std::numbers::pi / 100.0)) / 2.0;
  BOOST_TEST(opt.group_lr(2) == 1e-5 + (1e-2 - 1e-5) * cosine, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(opt.group_lr(1) == 1e-5 + (1e-3 - 1e-5) * cosine, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(opt.group_lr(0) == opt.group_lr(1));
  BOOST_TEST(sched.get_last_lr(2) == opt.group_lr(2));
}

// models.md's fine-tuning recipe: the summary it prints, and a step that leaves the frozen convolution
// and moves the head.
BOOST_AUTO_TEST_CASE(models_freeze_holds_the_backbone) {
  std::ostringstream printed;
  std::streambuf* was = std::cout.rdbuf(printed.rdbuf());
  struct Restore {
    std::streambuf* was;
    ~Restore() { std::cout.rdbuf(was); }
  } restore{was};
#include "models.freeze.inc"
  std::cout.rdbuf(was);
  const std::string summary = printed.str();
  BOOST_TEST(summary.ends_with("trainable parameters: 2410 (frozen: 40, in layers 0 to 3)\n"), summary);
  BOOST_TEST(model.frozen_parameter_count() == 40);
  const auto start = model.parameters().to_vector();
  const auto x = random_batch<Shape<dyn, 1, 8, 8>>(4, 12);
  const std::vector<std::int64_t> labels{1, 3, 5, 7};
  const auto y = kiln::test::make_tensor<kiln::Cpu>(labels, kiln::Extents<Shape<dyn>>(4));
  opt.zero_grad();
  model.backward(kiln::nn::CrossEntropyLoss{}.backward(model.forward(x), y));
  opt.step();
  const auto p = model.parameters().to_vector();
  BOOST_TEST((std::vector<float>(p.begin(), p.begin() + 40) == std::vector<float>(start.begin(), start.begin() + 40)));
  BOOST_TEST((std::vector<float>(p.begin() + 40, p.end()) != std::vector<float>(start.begin() + 40, start.end())));
}

BOOST_AUTO_TEST_CASE(models_schedule_ends_at_eta_min) {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<2, 1>>;
  kiln::nn::Model<Net, Shape<dyn, 2>> model(0);
  int epochs_trained = 0;
  const auto train_one_epoch = [&](auto&, auto&) { ++epochs_trained; };
  double last = 0;
  {
#include "models.schedule.inc"
    last = sched.get_last_lr();
  }
  BOOST_TEST(epochs_trained == 100);
  BOOST_TEST(std::abs(last - 1e-4) < 1e-12);  // 5 warm-up epochs, then 95 of cosine down to eta_min
}

BOOST_AUTO_TEST_CASE(models_plateau_halves_the_lr_on_a_flat_validation_loss) {
  // The page's loop with a validation loss that improves for 5 epochs, then stays flat: the lr halves
  // after the 3rd flat epoch and every 3 epochs after that (patience 2, no cooldown).
  using Net = kiln::nn::Sequential<kiln::nn::Linear<2, 1>>;
  kiln::nn::Model<Net, Shape<dyn, 2>> model(0);
  kiln::optim::Adam opt(model, {.lr = 1e-3});
  int epoch_seen = 0;
  const auto train_one_epoch = [&](auto&, auto&) { ++epoch_seen; };
  const auto validation_loss = [&](auto&) { return epoch_seen <= 5 ? 1.0 / epoch_seen : 0.2; };
  {
#include "models.plateau.inc"
    BOOST_TEST(sched.last_epoch() == 20);
  }
  // Flat from epoch 6: reductions after epochs 8, 11, 14, 17 and 20.
  BOOST_TEST(opt.lr() == 1e-3 / 32.0);
}

// The page's plateau checkpoint: a scheduler and optimizer restored from it continue as the ones that
// saved it (the same lr and bad-epoch count after more flat epochs), and the epoch comes back.
BOOST_AUTO_TEST_CASE(models_scheduler_state_resumes_a_schedule_built_after_the_optimizer_was_loaded) {
  // The page's block saves `sched`'s state and loads it into another StepLR, built on an optimizer already
  // at the decayed lr (its base lr the wrong one until the load).
  kiln::test::TempDir dir;
  using Net = kiln::nn::Sequential<kiln::nn::Linear<2, 1>>;
  kiln::nn::Model<Net, Shape<dyn, 2>> model(0);
  kiln::optim::SGD opt(model, {.lr = 0.1}), other_opt(model, {.lr = 0.1});
  kiln::optim::StepLR saved(opt, 2, 0.5);
  for (int e = 0; e < 5; ++e) {
    opt.step();
    saved.step();
  }
  other_opt.set_lr(opt.lr());  // 0.025
  kiln::optim::StepLR loaded(other_opt, 2, 0.5);
  BOOST_TEST(loaded.base_lr() == 0.025);
  struct SaveOneLoadAnother {
    kiln::optim::StepLR<kiln::optim::SGD<float, kiln::Cpu>>& saves;
    kiln::optim::StepLR<kiln::optim::SGD<float, kiln::Cpu>>& loads;
    auto state(std::string_view prefix) const { return saves.state(prefix); }
    void check_state(const std::map<std::string, std::string>& m, std::string_view prefix) const {
      loads.check_state(m, prefix);
    }
    void load_state(const std::map<std::string, std::string>& m, std::string_view prefix) {
      loads.load_state(m, prefix);
    }
  } sched{saved, loaded};
  const int epoch = 5;
  in_temp_dir(dir, [&] {
#include "models.scheduler_state.inc"
    BOOST_TEST(read.at("scheduler.last_epoch") == "5");
  });
  BOOST_TEST(loaded.base_lr() == 0.1);
  BOOST_TEST(loaded.last_epoch() == 5);
  BOOST_TEST(other_opt.lr() == opt.lr());
  other_opt.step();
  loaded.step();
  BOOST_TEST(other_opt.lr() == 0.0125);  // epoch 6: 0.1 * 0.5^3
}

BOOST_AUTO_TEST_CASE(models_plateau_resume_restores_scheduler_optimizer_and_epoch) {
  kiln::test::TempDir dir;
  using Net = kiln::nn::Sequential<kiln::nn::Linear<2, 1>>;
  kiln::nn::Model<Net, Shape<dyn, 2>> model(0), other(1);
  kiln::optim::Adam opt(model, {.lr = 1e-3}), other_opt(other, {.lr = 1e-3});
  kiln::optim::ReduceLROnPlateau sched(opt, {.factor = 0.5, .patience = 1});
  kiln::optim::ReduceLROnPlateau other_sched(other_opt, {.factor = 0.5, .patience = 1});
  for (const double loss : {1.0, 0.5, 0.6, 0.7, 0.65}) {  // a reduction, then one bad epoch
    opt.step();
    sched.step(loss);
  }
  const int epoch = 4;
  int resumed_at = 0;
  in_temp_dir(dir, [&] {
    {
#include "models.plateau_save.inc"
    }
    {  // loaded into (other, other_opt, other_sched)
      auto& model = other;
      auto& opt = other_opt;
      auto& sched = other_sched;
#include "models.plateau_resume.inc"
      resumed_at = start;
    }
  });
  BOOST_TEST(resumed_at == 5);
  BOOST_TEST(other_opt.lr() == opt.lr());
  BOOST_TEST((other.parameters().to_vector() == model.parameters().to_vector()));
  for (const double loss : {0.66, 0.67, 0.4}) {
    sched.step(loss);
    other_sched.step(loss);
    BOOST_TEST(other_sched.get_last_lr() == sched.get_last_lr());
    BOOST_TEST(other_sched.num_bad_epochs() == sched.num_bad_epochs());
  }
}

BOOST_AUTO_TEST_CASE(models_batch_norm_trains_then_evaluates_by_its_running_statistics) {
  // The page's lines: one training forward moves the running statistics (and counts the batch), the
  // evaluation forward reads them (so it repeats exactly, whatever the batch), the buffers are named.
  const auto images = random_batch<Shape<dyn, 3, 32, 32>>(4, 21);
  {
#include "models.batch_norm.inc"
    BOOST_TEST(logits.size(0) == 4);
    BOOST_TEST(logits.to_vector() == net.forward(images).to_vector(), boost::test_tools::per_element());
    BOOST_REQUIRE_EQUAL(names.size(), 3u);
    BOOST_TEST(names[0].name == "1.running_mean");
    BOOST_TEST(names[2].name == "1.num_batches_tracked");
    const auto b = net.buffers().to_vector();
    BOOST_TEST(b[32] == 1.0f);  // one training batch
    bool moved = false;
    for (int c = 0; c < 16; ++c) moved = moved || b[static_cast<std::size_t>(c)] != 0.0f;
    BOOST_TEST(moved);
  }
}

BOOST_AUTO_TEST_CASE(models_layer_norm_and_group_norm_normalise_each_sample_apart) {
  // The page's lines: the names the comment lists, and (what the comments say) each row's 64 hidden
  // features and each image's groups are normalised apart: a sample alone gives what it gave in its batch.
  const auto features = random_batch<Shape<dyn, 13>>(3, 22);
  const auto images = random_batch<Shape<dyn, 3, 32, 32>>(2, 23);
  {
#include "models.layer_norm.inc"
    BOOST_TEST(y.size(0) == 3);
    BOOST_REQUIRE_EQUAL(names.size(), 6u);
    BOOST_TEST(names[2].name == "1.weight");
    BOOST_TEST(names[2].shape == (std::vector<kiln::index_t>{64}), boost::test_tools::per_element());
    BOOST_TEST(names[5].name == "3.bias");
    BOOST_TEST(logits.size(0) == 2);
    const auto first = features.to_vector();
    const auto alone = regressor.forward(Tensor<float, Shape<dyn, 13>, kiln::Cpu>::from(
        std::span<const float>(first.data(), 13), Extents<Shape<dyn, 13>>(1)));
    const float y0 = y.to_vector()[0];  // a GEMM of 1 row and of 3 may round differently
    BOOST_TEST(std::abs(alone.to_vector()[0] - y0) <= 1e-5f * (1 + std::abs(y0)));
    const auto pixels = images.to_vector();
    const auto image = cnn.forward(Tensor<float, Shape<dyn, 3, 32, 32>, kiln::Cpu>::from(
        std::span<const float>(pixels.data() + 3 * 32 * 32, 3 * 32 * 32), Extents<Shape<dyn, 3, 32, 32>>(1)));
    const auto all = logits.to_vector(), one = image.to_vector();
    for (std::size_t k = 0; k < 10; ++k)
      BOOST_TEST(std::abs(one[k] - all[10 + k]) <= 1e-5f * (1 + std::abs(all[10 + k])));
  }
}

BOOST_AUTO_TEST_CASE(models_generator_maps_images_to_images_in_tanh_range) {
  // The page's generator: 32 x 32 images back to 32 x 32 (down by the strided Conv2d, up by the
  // ConvTranspose2d), every value in (-1, 1) (Tanh), and each image's output its own (InstanceNorm2d
  // normalises each image apart).
  const auto images = random_batch<Shape<dyn, 3, 32, 32>>(2, 24);
#include "models.generator.inc"
  static_assert(std::is_same_v<decltype(fake), Tensor<float, Shape<dyn, 3, 32, 32>, kiln::Cpu>>);
  BOOST_TEST(fake.size(0) == 2);
  const auto all = fake.to_vector();
  for (float v : all) BOOST_TEST((v > -1.0f && v < 1.0f));
  const auto pixels = images.to_vector();
  const auto second = generator.forward(Tensor<float, Shape<dyn, 3, 32, 32>, kiln::Cpu>::from(
      std::span<const float>(pixels.data() + 3 * 32 * 32, 3 * 32 * 32), Extents<Shape<dyn, 3, 32, 32>>(1)));
  const auto one = second.to_vector();
  for (std::size_t k = 0; k < one.size(); k += 97)
    BOOST_TEST(std::abs(one[k] - all[3 * 32 * 32 + k]) <= 1e-5f * (1 + std::abs(one[k])));
}

BOOST_AUTO_TEST_CASE(models_resnet_downsamples_through_its_shortcuts) {
  // The page's ResNet: 32 x 32 images to 10 logits through two blocks that halve the resolution, the
  // parameter the comment names the first shortcut's convolution, and one training step that moves it.
  const auto images = random_batch<Shape<dyn, 3, 32, 32>>(2, 25);
#include "models.resnet.inc"
  static_assert(std::is_same_v<decltype(logits), Tensor<float, Shape<dyn, 10>, kiln::Cpu>>);
  BOOST_TEST(logits.size(0) == 2);
  const auto params = resnet.named_parameters();
  const auto shortcut =
      std::find_if(params.begin(), params.end(), [](const auto& p) { return p.name == "3.1.0.weight"; });
  BOOST_REQUIRE(shortcut != params.end());
  BOOST_TEST((shortcut->shape == std::vector<kiln::index_t>{32, 16, 1, 1}), boost::test_tools::per_element());
  const auto before = resnet.parameters().to_vector();
  kiln::optim::SGD opt(resnet, {.lr = 0.1});
  const auto labels = random_labels(2, 10, 26);
  kiln::nn::CrossEntropyLoss ce;
  resnet.zero_grad();
  resnet.backward(ce.backward(logits, labels));
  opt.step();
  const auto after = resnet.parameters().to_vector();
  BOOST_TEST(after[shortcut->offset] != before[shortcut->offset]);
}

BOOST_AUTO_TEST_CASE(models_one_cycle_ends_at_its_floor_with_the_momentum_back_up) {
  // The page's loop, 4 epochs of 5 batches: every batch steps; the last batch (step 19) trains with
  // max_lr / 25 / 1e4 and the momentum back at max_momentum, after the peak (0.5, and 0.85) at step
  // 0.3 * 20 - 1 = 5. The 20th step, allowed, sets the lr past the floor, which no batch uses.
  using Net = kiln::nn::Sequential<kiln::nn::Linear<2, 1>>;
  kiln::nn::Model<Net, Shape<dyn, 2>> model(0);
  const int epochs = 4, batches = 5;
  int steps = 0;
  double peak_lr = 0, low_momentum = 1;
  const auto train_one_batch = [&](auto&, auto& o) {
    ++steps;
    peak_lr = std::max(peak_lr, static_cast<double>(o.lr()));
    low_momentum = std::min(low_momentum, static_cast<double>(o.momentum()));
  };
  {
#include "models.one_cycle.inc"
    BOOST_TEST(sched.last_epoch() == 20);
    BOOST_TEST(sched.lr_at(19) == 0.5 / 25 / 1e4, boost::test_tools::tolerance(1e-9));
    BOOST_TEST(sched.momentum_at(19) == 0.95, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(sched.get_last_lr() > sched.lr_at(19));
  }
  BOOST_TEST(steps == 20);
  BOOST_TEST(peak_lr == 0.5);
  BOOST_TEST(low_momentum == 0.85);
}

BOOST_AUTO_TEST_CASE(data_fashion_mnist_five_epochs,
                     *boost::unit_test::precondition(fashion_mnist_installed)) {
  struct CountingModel {  // the page's `model`: counts the samples it sees
    std::int64_t samples = 0;
    int forward(const Tensor<float, Shape<dyn, 1, 28, 28>>& x) {
      samples += x.size(0);
      return 0;
    }
  } model;
  {
#include "data.fashion_mnist.inc"
  }
  BOOST_TEST(model.samples == 5 * 60000);
}

BOOST_AUTO_TEST_CASE(data_cifar10_sample_and_class_name) {
  kiln::test::TempDir dir;
  std::vector<std::uint8_t> records;
  for (int r = 0; r < 3; ++r) {  // labels 7, 8, 9; pixels r
    records.push_back(static_cast<std::uint8_t>(7 + r));
    records.insert(records.end(), 3072, static_cast<std::uint8_t>(r));
  }
  dir.write("test_batch.bin", records);
  const std::string root = dir.path().string();
  {
#include "data.cifar10.inc"
    BOOST_TEST(e.x.size() == 3072u);
    BOOST_TEST(std::string(name) == "truck");  // class 9
  }
}

BOOST_AUTO_TEST_CASE(data_csv_and_split) {
  kiln::test::TempDir dir;
  {
    std::ofstream out(dir.file("boston.csv"));
    out << "CRIM,ZN,INDUS,CHAS,NOX,RM,AGE,DIS,RAD,TAX,PTRATIO,B,LSTAT,MEDV\n";
    for (int r = 0; r < 5; ++r) {
      for (int c = 0; c < 13; ++c) out << r + c * 0.5 << ',';
      out << 20 + r << '\n';
    }
  }
  {
    const std::string path = dir.file("boston.csv");
#include "data.csv.inc"
    BOOST_TEST(boston.size() == 5);
    BOOST_TEST(same.size() == 5);
  }
  {
    std::ofstream out(dir.file("table.csv"));
    out << "a,b,MEDV\n";
    for (int r = 0; r < 10; ++r) out << r << ',' << 2 * r << ',' << r % 3 << '\n';
  }
  {
    const std::string path = dir.file("table.csv");
#include "data.split.inc"
    BOOST_TEST(parts[0].size() == 8);  // the page: 8 + 2
    BOOST_TEST(parts[1].size() == 2);
  }
}

BOOST_AUTO_TEST_CASE(data_skip_a_broken_batch) {
  // Samples 5 and 6 cannot be read (batch 1 of 4 and, with the page's loop, nothing else): the loop
  // skips batch 1 with its message and reads the other two, with and without workers.
  struct Broken {
    using sample_shape = Shape<2>;
    using target_type = std::int64_t;
    using target_shape = Shape<>;
    kiln::index_t size() const { return 10; }
    void read(kiln::index_t i, std::span<float> x, std::span<std::int64_t> y) const {
      if (i == 5 || i == 6)
        throw kiln::data::DataError("broken.bin", "record " + std::to_string(i), "torn", "a whole record");
      x[0] = x[1] = static_cast<float>(i);
      y[0] = i;
    }
  };
  const Broken ds;
  for (int workers : {0, 2}) {
    kiln::data::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    kiln::index_t seen = 0;
    std::ostringstream said;
    std::streambuf* cerr = std::cerr.rdbuf(said.rdbuf());
#include "data.skip_a_broken_batch.inc"
    std::cerr.rdbuf(cerr);
    BOOST_TEST(seen == 6);  // batches 0 (4 samples) and 2 (2)
    BOOST_TEST(said.str().find("skipped batch: ") == 0u);
    BOOST_TEST(said.str().find("record 5") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(parallel_data_parallel_step) {
  const auto x = random_batch<Shape<dyn, 13>>(6, 10);
  const auto y = random_batch<Shape<dyn, 1>>(6, 11);
  double value = 0;
  {
#include "parallel.data_parallel.inc"
    value = loss;
  }
  BOOST_TEST(std::isfinite(value));
  BOOST_TEST(value > 0.0);
}

#if KILN_WITH_MPI
// Compiled, not called: it needs mpiexec (tests/mpi runs the same calls over 2 ranks).
[[maybe_unused]] void parallel_ddp_compiles() {
  using Mlp = kiln::nn::Sequential<kiln::nn::Linear<13, 16>, kiln::nn::ReLU, kiln::nn::Linear<16, 1>>;
  const kiln::data::TensorDataset<Shape<13>, float, Shape<1>> train(std::vector<float>(4 * 13, 0.5f),
                                                                    std::vector<float>(4, 1.0f));
  const int epochs = 1;
  kiln::nn::MSELoss mse;
#include "parallel.ddp.inc"
}

// Compiled, not called (a collective needs mpiexec): the conversion is checked as a type.
[[maybe_unused]] void parallel_sync_batch_norm_compiles() {
  kiln::parallel::ProcessGroup<kiln::Mpi> group;
#include "parallel.sync_batch_norm.inc"
  static_assert(
      std::is_same_v<SyncNet, kiln::nn::Sequential<kiln::nn::Conv2d<3, 16, 3, 1, 1, 1, 1, false>,
                                                   kiln::nn::SyncBatchNorm<16>, kiln::nn::ReLU,
                                                   kiln::nn::Flatten, kiln::nn::Linear<16 * 32 * 32, 10>>>);
  (void)ddp;
}
#endif

BOOST_AUTO_TEST_CASE(precision_unscale_clip_on_the_cpu) {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 8>, kiln::nn::ReLU, kiln::nn::Linear<8, 3>>;
  kiln::nn::Model<Net, Shape<dyn, 4>> model(0);
  const auto x = random_batch<Shape<dyn, 4>>(6, 12);
  const auto y = random_labels(6, 3, 13);
  const auto start = model.parameters().to_vector();
  {
#include "precision.unscale_clip.inc"
    BOOST_TEST(scaler.scale() == 65536.0);  // a finite step: no back-off
  }
  BOOST_TEST(param_change(start, model.parameters().to_vector()) > 0.0);
}

BOOST_AUTO_TEST_CASE(precision_scaler_state_in_a_checkpoint) {
  kiln::test::TempDir dir;
  using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 3>>;
  kiln::nn::Model<Net, Shape<dyn, 4>> model(0);
  using Scaler = kiln::optim::GradScaler<kiln::Cpu>;
  // A trained scaler whose three numbers all differ from a new one's: a step skipped for an inf gradient
  // (scale 1024 -> 512, one skipped step), then a finite step (growth tracker 1).
  Scaler trained({.init_scale = 1024.0});
  kiln::optim::SGD sgd(model, {.lr = 0.1});
  model.gradients().fill(std::numeric_limits<float>::infinity());
  BOOST_TEST(!trained.step(sgd));
  trained.update();
  model.gradients().fill(1.0f);
  BOOST_TEST(trained.step(sgd));
  trained.update();
  BOOST_TEST(trained.scale() == 512.0);
  BOOST_TEST(trained.growth_tracker() == 1);
  BOOST_TEST(trained.skipped_steps() == 1);
  // The page saves and resumes in one block: here `scaler` saves `trained`'s state and loads into
  // `resumed`, built anew with another scale (as a resumed run builds its own), so that a load that
  // restored nothing leaves scale 1, growth tracker 0 and no skipped steps.
  Scaler resumed({.init_scale = 1.0});
  struct SaveOneLoadAnother {
    Scaler& saves;
    Scaler& loads;
    auto state(std::string_view prefix) const { return saves.state(prefix); }
    void check_state(const std::map<std::string, std::string>& state, std::string_view prefix) const {
      loads.check_state(state, prefix);
    }
    void load_state(const std::map<std::string, std::string>& state, std::string_view prefix) {
      loads.load_state(state, prefix);
    }
  } scaler{trained, resumed};
  const int epoch = 3;
  const std::string path = dir.file("run.safetensors");
  std::map<std::string, kiln::SafetensorsEntry> extra;
  {
#include "precision.scaler_state.inc"
    BOOST_TEST(read.at("epoch") == "3");
    BOOST_TEST(read.at("grad_scaler.scale") == "512");
  }
  BOOST_TEST(resumed.scale() == 512.0);
  BOOST_TEST(resumed.growth_tracker() == 1);
  BOOST_TEST(resumed.skipped_steps() == 1);
  // A checkpoint without the scaler's state (a disabled scaler's, as an fp32 run's): the check refuses
  // it, naming the file and the key (before the model is written: load_checkpoint's check).
  Scaler off({.enabled = false}), fresh;
  auto resume = [&, scaler = SaveOneLoadAnother{off, fresh}]() mutable {
#include "precision.scaler_state.inc"
  };
  BOOST_CHECK_EXCEPTION(resume(), kiln::CheckpointError, [&](const kiln::CheckpointError& e) {
    const std::string what = e.what();
    return what.find("run.safetensors") != std::string::npos &&
           what.find("grad_scaler.scale") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(benchmarks_counters_of_a_forward) {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 8>, kiln::nn::ReLU, kiln::nn::Linear<8, 3>>;
  kiln::nn::Model<Net, Shape<dyn, 4>> model(0);
  const auto x = random_batch<Shape<dyn, 4>>(2, 14);
  {
#include "benchmarks.counters.inc"
    BOOST_TEST(step.passes > 0u);
    BOOST_TEST(step.bytes > 0u);
  }
}

BOOST_AUTO_TEST_SUITE_END()
