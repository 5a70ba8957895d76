// CUDA graphs (kiln::cuda::Graph): a capture records without running and a replay runs; new input copied
// into the captured tensor gives new output; the capture's private pool keeps its blocks from later
// allocations until reset(); a copy between GPU tensors is captured (no host wait); a model's inference
// step and a training step with a capturable Adam (fp32, and fp16 with a capturable GradScaler; fp32
// clipping its gradients by norm on the device, and by value) replay to the same numbers as eager steps; a
// captured cross entropy recounts its ignored labels on every replay; what a graph cannot hold (a
// synchronisation, Dropout in training) is refused with an error and leaves the allocator able to capture
// again.
#include <kiln/cuda.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace {
using kiln::Cuda;
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kc = kiln::cuda;
namespace nn = kiln::nn;
using Vec = Shape<dyn>;

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f);
  return v;
}

using Mlp = nn::Sequential<nn::Linear<13, 16>, nn::ReLU, nn::Linear<16, 32>, nn::ReLU, nn::Linear<32, 1>>;
using MlpModel = nn::Model<Mlp, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, Cuda>>;
using Batch = Tensor<float, Shape<dyn, 13>, Cuda>;
using Targets = Tensor<float, Shape<dyn, 1>, Cuda>;

Batch batch(index_t n, float scale) {
  return Batch::from(std::span<const float>(ramp(static_cast<std::size_t>(n) * 13, scale)), Extents<Shape<dyn, 13>>(n));
}

/// One training step as a user writes it; Adam capturable so that replays advance its step count.
struct Trainer {
  MlpModel model{7};
  kiln::optim::Adam<float, Cuda> opt{model, {.lr = 1e-2, .capturable = true}};
  nn::MSELoss loss{};
  void step(const Batch& x, const Targets& y) {
    opt.zero_grad();
    const auto pred = model.forward(x);
    model.backward(loss.backward(pred, y));
  }
  void train_step(const Batch& x, const Targets& y) {
    step(x, y);
    opt.step();
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(graph)

BOOST_AUTO_TEST_CASE(a_capture_records_and_a_replay_runs_on_new_input) {
  const index_t n = 100000;
  auto x = Tensor<float, Vec, Cuda>::from(std::span<const float>(ramp(n, 1.0f)), Extents<Vec>(n));
  Tensor<float, Vec, Cuda> y(n);
  y.fill(-7.0f);
  kc::Graph g;
  BOOST_TEST(!g.captured());
  BOOST_CHECK_THROW(g.replay(), kiln::ValueError);
  const auto before = kiln::counters();
  g.capture([&] { kiln::assign(y, kiln::relu(x * 2.0f) + 1.0f); });
  BOOST_TEST(g.captured());
  BOOST_TEST(g.nodes() == 1u);  // one fused kernel
  BOOST_TEST(g.work().passes == 1u);
  BOOST_TEST(g.work().bytes == 2u * n * sizeof(float));
  BOOST_TEST(y.to_vector() == std::vector<float>(n, -7.0f), boost::test_tools::per_element());  // not run yet

  const auto check = [&](float scale) {
    const auto xv = ramp(n, scale);
    const auto got = y.to_vector();
    for (std::size_t i = 0; i < xv.size(); ++i)
      if (got[i] != (xv[i] * 2.0f > 0.0f ? xv[i] * 2.0f : 0.0f) + 1.0f) return false;
    return true;
  };
  g.replay();
  BOOST_TEST(check(1.0f));
  x.copy_from(std::span<const float>(ramp(n, -3.0f)));  // new data into the captured input
  g.replay();
  BOOST_TEST(check(-3.0f));
  BOOST_TEST(kiln::counters().passes - before.passes == 3u, "the capture and two replays each count one pass");
}

BOOST_AUTO_TEST_CASE(a_copy_between_tensors_on_the_gpu_is_captured_not_waited_for) {
  // torch never waits on the host for a copy between GPU tensors (non_blocking or not): a capture holds it.
  const index_t n = 4096;
  auto x = Tensor<float, Vec, Cuda>::from(std::span<const float>(ramp(n, 1.0f)), Extents<Vec>(n));
  Tensor<float, Vec, Cuda> y(n);
  kc::Graph g;
  g.capture([&] {
    const auto copy = x.to<Cuda>();
    kiln::assign(y, copy + 1.0f);
  });
  x.copy_from(std::span<const float>(ramp(n, 2.0f)));
  g.replay();
  const auto xv = ramp(n, 2.0f);
  const auto got = y.to_vector();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) wrong += got[i] != xv[i] + 1.0f;
  BOOST_TEST(wrong == 0u);
}

BOOST_AUTO_TEST_CASE(the_pool_keeps_the_graphs_blocks_until_reset) {
  auto& alloc = kiln::caching_allocator<Cuda>();
  alloc.empty_cache();
  const index_t n = 1 << 20;
  Tensor<float, Vec, Cuda> x(n);
  x.fill(1.0f);
  Tensor<float, Vec, Cuda> y;
  void* freed_inside = nullptr;
  void* scratch = nullptr;
  kc::Graph g;
  {
    Tensor<float, Vec, Cuda> before_capture(n);  // freed during the capture: the graph keeps it
    freed_inside = before_capture.data();
    g.capture([&, t = std::move(before_capture)]() mutable {
      Tensor<float, Vec, Cuda> tmp(n);
      kiln::assign(tmp, x * 3.0f);
      scratch = tmp.data();
      y = Tensor<float, Vec, Cuda>(n);
      kiln::assign(y, tmp + 1.0f);
      t = Tensor<float, Vec, Cuda>();
    });
  }
  BOOST_TEST(g.pool_bytes() >= 3u * n * sizeof(float));
  Tensor<float, Vec, Cuda> later(n);  // after the capture: never one of the graph's blocks
  BOOST_TEST(static_cast<void*>(later.data()) != freed_inside);
  BOOST_TEST(static_cast<void*>(later.data()) != static_cast<void*>(y.data()));
  g.replay();
  BOOST_TEST(y.to_vector() == std::vector<float>(n, 4.0f), boost::test_tools::per_element());
  g.reset();
  BOOST_TEST(g.pool_bytes() == 0u);
  Tensor<float, Vec, Cuda> reused(n);  // the released blocks serve everyone again
  BOOST_TEST((static_cast<void*>(reused.data()) == freed_inside || static_cast<void*>(reused.data()) == scratch));
}

BOOST_AUTO_TEST_CASE(an_inference_step_replays_to_the_eager_output) {
  MlpModel model(3);
  model.eval();
  nn::NoGrad no_grad(model);
  Batch x = batch(256, 1.0f);
  (void)model.forward(x);  // warm-up: cuBLASLt plans, workspaces
  Tensor<float, Shape<dyn, 1>, Cuda> y;
  kc::Graph g;
  g.capture([&] { y = model.forward(x); });
  for (float scale : {0.5f, -2.0f}) {
    const Batch fresh = batch(256, scale);
    const auto want = model.forward(fresh).to_vector();
    kiln::assign(x, fresh);  // new data into the captured input
    g.replay();
    BOOST_TEST(y.to_vector() == want, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(a_training_step_with_a_capturable_adam_replays_the_eager_steps) {
  Trainer eager, graphed;
  const Batch x = batch(128, 1.0f);
  const auto yv = ramp(128, 0.5f);
  const auto y = Targets::from(std::span<const float>(yv), Extents<Shape<dyn, 1>>(128));
  for (int s = 0; s < 6; ++s) eager.train_step(x, y);

  graphed.train_step(x, y);  // warm-up step, eager
  kc::Graph g;
  g.capture([&] { graphed.train_step(x, y); });
  for (int s = 1; s < 6; ++s) g.replay();
  BOOST_TEST(graphed.opt.step_count() == 6, "the step count advanced on the device");
  const auto a = eager.model.parameters().to_vector(), b = graphed.model.parameters().to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i] - b[i])));
  // Not bit for bit: the captured GEMMs run on the capture's stream, where cuBLAS may choose another
  // algorithm (its reproducibility holds per stream). A step lost or doubled would differ by ~lr = 1e-2.
  BOOST_TEST(worst <= 1e-5, "largest parameter difference " << worst);
  graphed.opt.set_lr(0.0);  // a new learning rate reaches the replays: lr 0 leaves the parameters alone
  g.replay();
  BOOST_TEST(graphed.model.parameters().to_vector() == b, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_captured_step_clips_its_gradients_on_the_device) {
  // clip_grad_norm_capturable inside the graph: every replay clips as the eager step with clip_grad_norm
  // does, and each replay's norm is on the device, in the graph's tensor. max_norm 0.01 is below every
  // step's norm (a CPU replay of these steps: 0.091, 0.078, 0.018, 0.051, 0.022, 0.037), so every step
  // clips; the eager norms are checked to be above it below, so a change of the model or data that makes
  // a step not clip fails here rather than comparing two unclipped runs.
  constexpr double max_norm = 0.01;
  constexpr int steps = 6;
  Trainer eager, graphed;
  const Batch x = batch(128, 1.0f);
  const auto yv = ramp(128, 0.5f);
  const auto y = Targets::from(std::span<const float>(yv), Extents<Shape<dyn, 1>>(128));
  std::vector<double> eager_norms;
  for (int s = 0; s < steps; ++s) {
    eager.step(x, y);
    eager_norms.push_back(kiln::optim::clip_grad_norm(eager.model, max_norm));
    eager.opt.step();
  }
  for (int s = 0; s < steps; ++s)
    BOOST_TEST(eager_norms[s] > max_norm, "step " << s << " clips: its norm " << eager_norms[s]);
  graphed.step(x, y);  // warm-up step, eager
  const auto first = kiln::optim::clip_grad_norm_capturable(graphed.model, max_norm);
  BOOST_TEST(static_cast<double>(first.item()) == eager_norms[0], boost::test_tools::tolerance(1e-4));
  graphed.opt.step();
  kc::Graph g;
  Tensor<float, Shape<>, Cuda> norm;
  g.capture([&] {
    graphed.step(x, y);
    norm = kiln::optim::clip_grad_norm_capturable(graphed.model, max_norm);
    graphed.opt.step();
  });
  for (int s = 1; s < steps; ++s) {
    g.replay();
    BOOST_TEST_INFO("replay " << s << "'s norm, against eager step " << s << "'s");
    BOOST_TEST(static_cast<double>(norm.item()) == eager_norms[s], boost::test_tools::tolerance(1e-4));
  }
  // The last replay's gradients were rescaled to max_norm (torch's coefficient max_norm / (norm + 1e-6)).
  double clipped = 0;
  for (float v : graphed.model.gradients().to_vector()) clipped += static_cast<double>(v) * v;
  BOOST_TEST(std::sqrt(clipped) == max_norm * eager_norms[steps - 1] / (eager_norms[steps - 1] + 1e-6),
             boost::test_tools::tolerance(1e-4));
  const auto a = eager.model.parameters().to_vector(), b = graphed.model.parameters().to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i] - b[i])));
  BOOST_TEST(worst <= 1e-5, "largest parameter difference " << worst);
}

BOOST_AUTO_TEST_CASE(a_captured_step_clamps_its_gradients_by_value) {
  // clip_grad_value reads nothing back: inside the graph, replays clamp as eager steps do.
  Trainer eager, graphed;
  const Batch x = batch(128, 1.0f);
  const auto yv = ramp(128, 0.5f);
  const auto y = Targets::from(std::span<const float>(yv), Extents<Shape<dyn, 1>>(128));
  for (int s = 0; s < 6; ++s) {
    eager.step(x, y);
    if (s == 0) {
      double largest = 0;
      for (float v : eager.model.gradients().to_vector()) largest = std::max(largest, std::abs(static_cast<double>(v)));
      BOOST_TEST(largest > 0.01, "the steps clamp");
    }
    kiln::optim::clip_grad_value(eager.model, 0.01);
    eager.opt.step();
  }
  graphed.step(x, y);  // warm-up step, eager
  kiln::optim::clip_grad_value(graphed.model, 0.01);
  graphed.opt.step();
  kc::Graph g;
  g.capture([&] {
    graphed.step(x, y);
    kiln::optim::clip_grad_value(graphed.model, 0.01);
    graphed.opt.step();
  });
  for (int s = 1; s < 6; ++s) g.replay();
  for (float v : graphed.model.gradients().to_vector()) BOOST_TEST(std::abs(v) <= 0.01f);
  const auto a = eager.model.parameters().to_vector(), b = graphed.model.parameters().to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i] - b[i])));
  BOOST_TEST(worst <= 1e-5, "largest parameter difference " << worst);
}

BOOST_AUTO_TEST_CASE(a_captured_cross_entropy_recounts_its_ignored_labels_on_every_replay) {
  // The rows CrossEntropyLoss divides by (those not labelled ignore_index) are counted by a reduction on
  // the device, inside the graph: a replay with other labels in the captured tensor uses their count.
  constexpr index_t n = 64, c = 5;
  using Logits = Tensor<float, Shape<dyn, c>, Cuda>;
  using Labels = Tensor<std::int64_t, Vec, Cuda>;
  const Logits logits = Logits::from(std::span<const float>(ramp(n * c, 3.0f)), Extents<Shape<dyn, c>>(n));
  std::vector<std::int64_t> first(n), second(n);
  for (index_t i = 0; i < n; ++i) {
    first[static_cast<std::size_t>(i)] = i % 3 == 0 ? -100 : i % c;         // 22 ignored
    second[static_cast<std::size_t>(i)] = i % 4 == 1 ? (i * 3) % c : -100;  // 48 ignored
  }
  Labels labels = Labels::from(std::span<const std::int64_t>(first), Extents<Vec>(n));
  const nn::CrossEntropyLoss ce;
  (void)ce(logits, labels);  // warm-up, eager
  (void)ce.backward(logits, labels);
  Tensor<float, Shape<>, Cuda> loss;
  Logits grad;
  kc::Graph g;
  g.capture([&] {
    loss = ce(logits, labels);
    grad = ce.backward(logits, labels);
  });
  for (const auto* chosen : {&second, &first}) {
    const Labels fresh = Labels::from(std::span<const std::int64_t>(*chosen), Extents<Vec>(n));
    const float want_loss = ce(logits, fresh).item();
    const auto want_grad = ce.backward(logits, fresh).to_vector();
    kiln::assign(labels, fresh);  // new labels into the captured tensor
    g.replay();
    BOOST_TEST(loss.item() == want_loss, boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(grad.to_vector() == want_grad, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(an_fp16_training_step_with_a_capturable_scaler_replays_the_eager_steps) {
  using Model16 = nn::Model<Mlp, Shape<dyn, 13>, kiln::Policy<kiln::MixedFp16, Cuda>>;
  struct Fp16Trainer {
    Model16 model{7};
    kiln::optim::Adam<float, Cuda, kiln::half> opt{model, {.lr = 1e-2, .capturable = true}};
    kiln::optim::GradScaler<Cuda> scaler{{.init_scale = 1024.0, .growth_interval = 2, .capturable = true}};
    nn::MSELoss loss{};
    Tensor<kiln::half, Shape<dyn, 13>, Cuda> x;
    Tensor<kiln::half, Shape<dyn, 1>, Cuda> y;
    void step() {
      opt.zero_grad();
      const auto pred = model.forward(x);
      model.backward(loss.backward(pred, y, scaler.loss_scale()));
      scaler.step(opt);
      scaler.update();
    }
  };
  const Batch x32 = batch(64, 1.0f);
  const auto y32 = Targets::from(std::span<const float>(ramp(64, 0.5f)), Extents<Shape<dyn, 1>>(64));
  Fp16Trainer eager, graphed;
  for (Fp16Trainer* t : {&eager, &graphed}) {
    t->x = Tensor<kiln::half, Shape<dyn, 13>, Cuda>(x32.extents());
    kiln::assign(t->x, kiln::cast<kiln::half>(x32));
    t->y = Tensor<kiln::half, Shape<dyn, 1>, Cuda>(y32.extents());
    kiln::assign(t->y, kiln::cast<kiln::half>(y32));
  }
  for (int s = 0; s < 5; ++s) eager.step();
  graphed.step();  // warm-up
  kc::Graph g;
  g.capture([&] { graphed.step(); });
  for (int s = 1; s < 5; ++s) g.replay();
  BOOST_TEST(graphed.opt.step_count() == eager.opt.step_count());
  BOOST_TEST(graphed.scaler.scale() == eager.scaler.scale(), "the scale grew on the device as on the host");
  BOOST_TEST(eager.scaler.scale() == 4096.0);
  const auto a = eager.model.parameters().to_vector(), b = graphed.model.parameters().to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i] - b[i])));
  // fp16 activations: another GEMM algorithm on the capture's stream may move one by a half-precision
  // step (~5e-4 relative), an Adam update by ~lr x 1e-3; a lost or skipped step would move ~lr = 1e-2.
  BOOST_TEST(worst <= 1e-4, "largest parameter difference " << worst);
}

BOOST_AUTO_TEST_CASE(what_a_graph_cannot_hold_is_refused_and_capturing_works_after) {
  Tensor<float, Vec, Cuda> x(1000);
  x.fill(1.0f);
  kc::Graph g;
  BOOST_CHECK_THROW(g.capture([&] {
    kiln::assign(x, x + 1.0f);
    kc::synchronize_stream();
  }),
                    kiln::BackendError);
  BOOST_TEST(!g.captured());

  using Dropped = nn::Sequential<nn::Linear<13, 8>, nn::Dropout<0.5f>, nn::Linear<8, 1>>;
  nn::Model<Dropped, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, Cuda>> model(1);
  const Batch xb = batch(16, 1.0f);
  (void)model.forward(xb);
  BOOST_CHECK_THROW(g.capture([&] { (void)model.forward(xb); }), kiln::ValueError);
  BOOST_TEST(!kc::is_capturing());

  g.capture([&] { kiln::assign(x, x * 2.0f); });  // the allocator and the stream are usable again
  g.replay();
  BOOST_TEST(g.captured());
  (void)x.to_vector();

  Trainer unfused;  // a capturable step with fusion off reads its step count back: refused, clearly
  const auto yv = ramp(16, 0.5f);
  const auto y = Targets::from(std::span<const float>(yv), Extents<Shape<dyn, 1>>(16));
  unfused.train_step(xb, y);
  {
    kiln::Unfused off;
    BOOST_CHECK_THROW(g.capture([&] { unfused.opt.step(); }), kiln::ValueError);
  }
  BOOST_TEST(!kc::is_capturing());
}

BOOST_AUTO_TEST_CASE(empty_cache_during_a_capture_frees_nothing_and_the_capture_holds) {
  Tensor<float, Vec, Cuda> x(1 << 16);
  x.fill(1.0f);
  { Tensor<float, Vec, Cuda> cached(1 << 18); }  // a cached block that empty_cache() would free
  const std::size_t reserved = kc::memory_reserved();
  kc::Graph g;
  std::size_t during = 0;
  g.capture([&] {
    kiln::assign(x, x + 1.0f);
    kc::empty_cache();  // a cudaFree here would end the capture
    during = kc::memory_reserved();
  });
  BOOST_TEST(g.captured());
  BOOST_TEST(during >= reserved);
  g.replay();
  const auto v = x.to_vector();
  BOOST_TEST(v.front() == 2.0f);
  BOOST_TEST(v.back() == 2.0f);
}

BOOST_AUTO_TEST_SUITE_END()
