// BatchNorm1d and BatchNorm2d: finite-difference gradients in float64 (training, through the batch's
// statistics; evaluation, through the running ones), PyTorch parity (tests/parity/fixtures/batchnorm.json:
// three training forwards, the running statistics and num_batches_tracked after them, the last backward,
// then an evaluation forward and backward; a small network trained three SGD steps), torch's edge cases
// (one value per channel, an empty batch, no_grad), the buffer arena, checkpoints with buffers both
// ways (batchnorm_state.safetensors, written by torch), and fp16 and bf16 activations against fp32.
#include <boost/test/unit_test.hpp>
#include <limits>
#include <cstring>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <kiln/io/safetensors.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include "support/fused_activation.hpp"
#include "support/gradcheck.hpp"
#include "support/model_gradcheck.hpp"
#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/temp_dir.hpp"

namespace {
namespace parity = kiln::test::parity;
namespace knn = kiln::nn;
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
using nlohmann::json;

constexpr double rtol = 1e-5;
/// The parameters after three SGD steps (lr 0.1, momentum 0.9) through two BatchNorms, whose backward
/// subtracts nearly equal terms: float rounding in another summation order (OpenBLAS picks its GEMM
/// kernels by CPU) moves them by 1.2e-5 on an Intel Xeon with AVX-512 (under 1e-5 on an AMD EPYC);
/// a wrong formula moves them by far more than 1e-3.
constexpr double trained_rtol = 5e-5;

const json& fixture() {
  static const json j = parity::load("batchnorm.json");
  return j;
}
const json& bn_case(const std::string& name) {
  for (const auto& c : fixture().at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("batchnorm.json: no case " + name);
}

void check(const std::vector<float>& got, const json& want, const std::string& what, double tolerance = rtol) {
  const auto w = parity::values(want);
  const auto d = parity::compare(std::span<const float>(got), std::span<const float>(w),
                                 parity::scale_floor(std::span<const float>(w)));
  BOOST_TEST(d.max_rel <= tolerance, what << ": " << parity::describe(d));
}

/// The parameters named in a state_dict fixture into the model's arena (buffers keep their values).
template <class Model>
void load_parameters(Model& m, const json& sd) {
  std::vector<float> host(static_cast<std::size_t>(m.parameters().numel()));
  for (const auto& p : m.named_parameters()) {
    const auto v = parity::values(sd.at(p.name));
    BOOST_REQUIRE_EQUAL(static_cast<kiln::index_t>(v.size()), p.count);
    std::copy(v.begin(), v.end(), host.begin() + p.offset);
  }
  m.parameters().copy_from(std::span<const float>(host));
}

/// Each named parameter slice against the fixture's {name: tensor}.
template <class Model>
void check_named(const Model& m, const std::vector<float>& arena, const json& want, const std::string& what) {
  BOOST_TEST(m.named_parameters().size() == want.size());
  for (const auto& p : m.named_parameters()) {
    const auto first = arena.begin() + p.offset;
    check(std::vector<float>(first, first + p.count), want.at(p.name), what + " " + p.name);
  }
}

/// The buffers against a state_dict fixture: running statistics within rtol, num_batches_tracked exactly.
template <class Model>
void check_buffers(const Model& m, const json& state) {
  const auto b = m.buffers().to_vector();
  std::size_t seen = 0;
  for (const auto& info : m.named_buffers()) {
    BOOST_TEST_CONTEXT("buffer " << info.name) {
      BOOST_REQUIRE(state.contains(info.name));
      ++seen;
      if (info.integer) {
        BOOST_TEST(static_cast<std::int64_t>(b[static_cast<std::size_t>(info.offset)]) ==
                   state.at(info.name).template get<std::int64_t>());
      } else {
        const auto first = b.begin() + info.offset;
        check(std::vector<float>(first, first + info.count), state.at(info.name), info.name);
      }
    }
  }
  std::size_t buffers_in_state = 0;
  for (const auto& [k, v] : state.items())
    if (k.ends_with("running_mean") || k.ends_with("running_var") || k.ends_with("num_batches_tracked")) ++buffers_in_state;
  BOOST_TEST(seen == buffers_in_state);
}

template <class S, class D>
Tensor<float, S, D> tensor_of(const json& t) {
  const auto v = parity::values(t);
  return Tensor<float, S, D>::from(std::span<const float>(v), Extents<S>(parity::shape(t)[0]));
}

/// A one-layer model against case `name`: three training forwards, the last one's backward, the buffers
/// after them, then evaluation forward and backward.
template <class Layer, class In, class D>
void check_case(const std::string& name) {
  BOOST_TEST_CONTEXT("case " << name) {
    const json& c = bn_case(name);
    knn::Model<knn::Sequential<Layer>, In, kiln::Policy<kiln::Fp32, D>> m(0);
    BOOST_TEST(m.net().template layer<0>().name() == c.at("torch").get<std::string>());
    load_parameters(m, c.at("state_dict"));
    const auto& train = c.at("train");
    for (std::size_t step = 0; step < train.size(); ++step) {
      const auto y = m.forward(tensor_of<In, D>(train[step].at("input")));
      check(y.to_vector(), train[step].at("output"), "training output " + std::to_string(step));
      if (step + 1 == train.size()) {
        const auto dx = m.backward_input(tensor_of<In, D>(train[step].at("grad_output")));
        check(dx.to_vector(), train[step].at("grad_input"), "training grad_input");
        check_named(m, m.gradients().to_vector(), train[step].at("grad"), "training grad");
      }
    }
    check_buffers(m, c.at("state_after"));
    m.eval();
    m.zero_grad();
    const auto& e = c.at("eval");
    const auto y = m.forward(tensor_of<In, D>(e.at("input")));
    check(y.to_vector(), e.at("output"), "evaluation output");
    const auto dx = m.backward_input(tensor_of<In, D>(e.at("grad_output")));
    check(dx.to_vector(), e.at("grad_input"), "evaluation grad_input");
    check_named(m, m.gradients().to_vector(), e.at("grad"), "evaluation grad");
    check_buffers(m, c.at("state_after"));  // evaluation leaves them as they were
  }
}

/// The evaluation-mode backward against finite differences, after training forwards have moved the
/// running statistics away from 0 and 1.
template <class Net, class In, class D>
void check_evaluation_gradients(const Extents<In>& ext, std::uint32_t stream) {
  using Model = knn::Model<Net, In, kiln::Policy<kt::Fp64, D>>;
  Model model(stream);
  const auto n = static_cast<std::size_t>(ext.numel());
  for (std::uint32_t k = 0; k < 3; ++k)
    (void)model.forward(kt::make_tensor<D>(kt::random_values<double>(n, -1, 3, stream + 10 + k), ext));
  model.eval();
  const auto x = kt::make_tensor<D>(kt::random_values<double>(n, -2, 2, stream), ext);
  const auto y = model.forward(x);
  const auto r = kt::make_tensor<D>(kt::random_values<double>(static_cast<std::size_t>(y.numel()), -1, 1, stream + 1),
                                    y.extents());
  model.zero_grad();
  const auto dx = model.backward_input(r);
  const auto f = [&](const Tensor<double, In, D>& in) { return kiln::sum(model.forward(in) * r).item(); };
  BOOST_TEST(kt::gradcheck(f, x, dx, kt::tight));
  const auto theta = model.parameters().clone();
  const auto grads = model.gradients().clone();
  const auto g = [&](const typename Model::arena_type& p) {
    model.parameters() = p;
    return kiln::sum(model.forward(x) * r).item();
  };
  BOOST_TEST(kt::gradcheck(g, theta, grads, kt::tight));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(batch_norm)

BOOST_AUTO_TEST_CASE_TEMPLATE(training_backward_matches_finite_differences, D, kiln::test::devices) {
  // Through the batch's mean and variance: every output depends on every input of its channel.
  kt::check_model_gradients<knn::Sequential<knn::BatchNorm1d<4>>, Shape<dyn, 4>, D>(Extents<Shape<dyn, 4>>(5), -2, 2, 0, 60);
  kt::check_model_gradients<knn::Sequential<knn::BatchNorm1d<3>>, Shape<dyn, 3, 5>, D>(Extents<Shape<dyn, 3, 5>>(2), -2, 2,
                                                                                      0, 61);
  kt::check_model_gradients<knn::Sequential<knn::BatchNorm2d<3>>, Shape<dyn, 3, 4, 5>, D>(
      Extents<Shape<dyn, 3, 4, 5>>(2), -2, 2, 0, 62);
  kt::check_model_gradients<knn::Sequential<knn::BatchNorm2d<2, 1e-3f, 0.1f, false>>, Shape<dyn, 2, 3, 3>, D>(
      Extents<Shape<dyn, 2, 3, 3>>(3), -2, 2, 0, 63);
  // Between other layers, so dx feeds the weights before it.
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::BatchNorm2d<3>, knn::Tanh, knn::Flatten,
                                            knn::Linear<27, 4>, knn::BatchNorm1d<4>>,
                            Shape<dyn, 2, 3, 3>, D>(Extents<Shape<dyn, 2, 3, 3>>(3), -2, 2, 0, 64);
  // Inside a Residual: x + BN(x) through the branch.
  kt::check_model_gradients<knn::Sequential<knn::Residual<knn::BatchNorm2d<2>, knn::Tanh>, knn::BatchNorm2d<2>>,
                            Shape<dyn, 2, 2, 3>, D>(Extents<Shape<dyn, 2, 2, 3>>(3), -2, 2, 0, 65);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(evaluation_backward_matches_finite_differences, D, kiln::test::devices) {
  check_evaluation_gradients<knn::Sequential<knn::BatchNorm2d<3>>, Shape<dyn, 3, 2, 3>, D>(Extents<Shape<dyn, 3, 2, 3>>(4),
                                                                                           70);
  check_evaluation_gradients<knn::Sequential<knn::Linear<5, 4>, knn::BatchNorm1d<4, 1e-5f, knn::cumulative_average>>,
                             Shape<dyn, 5>, D>(Extents<Shape<dyn, 5>>(6), 71);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(layers_match_pytorch_in_training_and_evaluation, D, kiln::test::devices) {
  check_case<knn::BatchNorm1d<4>, Shape<dyn, 4>, D>("batch_norm1d");
  check_case<knn::BatchNorm1d<3>, Shape<dyn, 3, 6>, D>("batch_norm1d_length");
  check_case<knn::BatchNorm2d<3>, Shape<dyn, 3, 5, 6>, D>("batch_norm2d");
  check_case<knn::BatchNorm2d<3, 1e-5f, 0.1f, false>, Shape<dyn, 3, 4, 4>, D>("batch_norm2d_no_affine");
  check_case<knn::BatchNorm2d<2, 1e-3f, knn::cumulative_average>, Shape<dyn, 2, 4, 4>, D>("batch_norm2d_cumulative");
  check_case<knn::BatchNorm2d<2, 1e-5f, 0.1f, true, false>, Shape<dyn, 2, 4, 4>, D>("batch_norm2d_untracked");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_network_with_batch_norm_trains_like_pytorch, D, kiln::test::devices) {
  using Net = knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::BatchNorm2d<3>, knn::ReLU, knn::Flatten, knn::Linear<75, 4>,
                              knn::BatchNorm1d<4, 1e-5f, knn::cumulative_average>>;
  using In = Shape<dyn, 2, 5, 5>;
  const json& f = fixture().at("model");
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> m(0);
  load_parameters(m, f.at("state_dict"));
  kiln::optim::SGD opt(m, {.lr = 0.1, .momentum = 0.9});
  knn::MSELoss mse;
  const auto x = tensor_of<In, D>(f.at("input"));
  const auto target = tensor_of<Shape<dyn, 4>, D>(f.at("target"));
  const auto losses = f.at("losses").get<std::vector<double>>();
  for (std::size_t step = 0; step < losses.size(); ++step) {
    opt.zero_grad();
    const auto pred = m.forward(x);
    const double loss = static_cast<double>(mse(pred, target).item());
    BOOST_TEST(std::abs(loss - losses[step]) <= rtol * std::abs(losses[step]), "step " << step << ": " << loss);
    m.backward(mse.backward(pred, target));
    opt.step();
  }
  std::vector<float> host = m.parameters().to_vector();
  for (const auto& p : m.named_parameters()) {
    const auto first = host.begin() + p.offset;
    check(std::vector<float>(first, first + p.count), f.at("state_after").at(p.name), "parameter " + p.name, trained_rtol);
  }
  check_buffers(m, f.at("state_after"));
  m.eval();
  const knn::NoGrad no_grad(m);
  check(m.forward(x).to_vector(), f.at("eval_output"), "evaluation output");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_running_statistics_follow_torchs_rules, D, kiln::test::devices) {
  using Net = knn::Sequential<knn::BatchNorm1d<2>>;
  knn::Model<Net, Shape<dyn, 2>, kiln::Policy<kiln::Fp32, D>> m(0);
  static_assert(decltype(m)::buffer_count == 5 && decltype(m)::parameter_count == 4);
  BOOST_TEST(m.buffers().to_vector() == (std::vector<float>{0, 0, 1, 1, 0}), boost::test_tools::per_element());
  const auto names = m.named_buffers();
  BOOST_REQUIRE_EQUAL(names.size(), 3u);
  BOOST_TEST(names[0].name == "0.running_mean");
  BOOST_TEST(names[1].name == "0.running_var");
  BOOST_TEST(names[2].name == "0.num_batches_tracked");
  BOOST_TEST(names[2].integer);
  BOOST_TEST(names[2].shape.empty());

  // One value per channel: torch's ValueError, and nothing changes (torch has already counted the batch).
  const auto one = kt::make_tensor<D>(std::vector<float>{1, 2}, Extents<Shape<dyn, 2>>(1));
  BOOST_CHECK_EXCEPTION((void)m.forward(one), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("expected more than 1 value per channel when training, got input [1, 2]") !=
           std::string::npos;
  });
  BOOST_TEST(m.buffers().to_vector() == (std::vector<float>{0, 0, 1, 1, 0}), boost::test_tools::per_element());
  // An empty batch: an empty output, the batch counted, the statistics unchanged (as torch).
  const auto empty = kt::make_tensor<D>(std::vector<float>{}, Extents<Shape<dyn, 2>>(0));
  BOOST_TEST(m.forward(empty).numel() == 0);
  BOOST_TEST(m.buffers().to_vector() == (std::vector<float>{0, 0, 1, 1, 1}), boost::test_tools::per_element());
  // A training forward under no_grad still updates them (torch: train() decides, not no_grad).
  const auto x = kt::make_tensor<D>(std::vector<float>{1, 10, 3, 20}, Extents<Shape<dyn, 2>>(2));
  {
    const knn::NoGrad no_grad(m);
    (void)m.forward(x);
  }
  // mean (2, 15), unbiased variance (2, 50): 0.9 · initial + 0.1 · batch
  const auto b = m.buffers().to_vector();
  const std::vector<float> want{0.2f, 1.5f, 0.9f + 0.2f, 0.9f + 5.0f, 2};
  for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(b[i] == want[i], boost::test_tools::tolerance(1e-6f));
  // Evaluation reads them and leaves them alone; the one-row batch is fine there.
  m.eval();
  const auto y = m.forward(one).to_vector();
  BOOST_TEST(y[0] == (1 - 0.2f) / std::sqrt(1.1f + 1e-5f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(y[1] == (2 - 1.5f) / std::sqrt(5.9f + 1e-5f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(m.buffers().to_vector() == b, boost::test_tools::per_element());
  m.reset_buffers();
  BOOST_TEST(m.buffers().to_vector() == (std::vector<float>{0, 0, 1, 1, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(large_batches_merge_their_chunks_exactly, D, kiln::test::devices) {
  // 4551 values per channel: several chunks on every device (merged by Chan's formula; on the CPU
  // blocks of 2048 that end inside an image), around 1000 with a spread of 1, where a one-pass sum of
  // squares in fp32 would lose the variance.
  using In = Shape<dyn, 2, 37, 41>;
  constexpr std::size_t plane = 37 * 41;
  knn::Model<knn::Sequential<knn::BatchNorm2d<2>>, In, kiln::Policy<kiln::Fp32, D>> m(0);
  auto v = kt::random_values<float>(3 * 2 * plane, -1, 1, 90);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] += (i / plane) % 2 ? 1000.0f : -3.0f;
  const auto y = m.forward(kt::make_tensor<D>(v, Extents<In>(3))).to_vector();
  const auto b = m.buffers().to_vector();
  for (std::size_t c = 0; c < 2; ++c) {
    double s = 0, q = 0, ys = 0, yq = 0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      if ((i / plane) % 2 == c) s += v[i], ys += y[i], yq += static_cast<double>(y[i]) * y[i], ++n;
    const double mean = s / static_cast<double>(n);
    for (std::size_t i = 0; i < v.size(); ++i)
      if ((i / plane) % 2 == c) q += (v[i] - mean) * (v[i] - mean);
    BOOST_TEST_CONTEXT("channel " << c) {
      BOOST_TEST(b[c] == 0.1 * mean, boost::test_tools::tolerance(1e-6));
      BOOST_TEST(b[2 + c] == 0.9 + 0.1 * q / static_cast<double>(n - 1), boost::test_tools::tolerance(1e-6));
      BOOST_TEST(std::abs(ys / static_cast<double>(n)) < 1e-5);
      BOOST_TEST(yq / static_cast<double>(n) == q / (q + 1e-5 * static_cast<double>(n)), boost::test_tools::tolerance(1e-5));
    }
  }
}

BOOST_AUTO_TEST_CASE(every_chunk_layout_gives_the_same_statistics) {
  // The GPU's layouts (interleaved chunks; chunk-major calls for [N, C]) run here through the CPU
  // executor: for any number of chunks, every element is taken once and the merged mean and
  // 1 / sqrt(var + eps) match a float64 reference.
  namespace kd = kiln::nn::detail;
  for (const auto& [n, c, l] : {std::tuple<kiln::index_t, kiln::index_t, kiln::index_t>{5, 3, 1}, {3, 2, 7}, {1, 4, 9}}) {
    const auto v = kt::random_values<float>(static_cast<std::size_t>(n * c * l), -2, 5, 95);
    for (const bool interleaved : {false, true}) {
      for (kiln::index_t chunks = 1; chunks <= n * l; ++chunks) {
        BOOST_TEST_CONTEXT("[" << n << ", " << c << ", " << l << "], " << chunks << " chunks, interleaved " << interleaved) {
          const kd::ChannelChunks cc{n * l, chunks, c, l, interleaved};
          std::vector<int> seen(v.size(), 0);
          for (kiln::index_t i = 0; i < c * chunks; ++i) {
            BOOST_TEST(cc.call(cc.channel_of(i), cc.chunk_of(i)) == i);
            for (kiln::index_t t = 0; t < cc.size(cc.chunk_of(i)); ++t)
              ++seen[static_cast<std::size_t>(cc.at(cc.channel_of(i), cc.chunk_of(i), t))];
          }
          BOOST_TEST(std::count(seen.begin(), seen.end(), 1) == static_cast<long>(seen.size()));
          std::vector<double> part(static_cast<std::size_t>(2 * c * chunks)), stats(static_cast<std::size_t>(2 * c));
          kiln::detail::executor<kiln::Cpu>::for_each(c * chunks, kd::BatchNormStatsChunks<float>{v.data(), part.data(), cc});
          kiln::detail::executor<kiln::Cpu>::for_each(
              c, kd::BatchNormStatsMerge<float>{part.data(), stats.data(), nullptr, cc, 1e-5, 0.1});
          for (kiln::index_t ch = 0; ch < c; ++ch) {
            double s = 0, q = 0;
            for (kiln::index_t b = 0; b < n; ++b)
              for (kiln::index_t j = 0; j < l; ++j) s += v[static_cast<std::size_t>((b * c + ch) * l + j)];
            const double mean = s / static_cast<double>(n * l);
            for (kiln::index_t b = 0; b < n; ++b)
              for (kiln::index_t j = 0; j < l; ++j) {
                const double d = v[static_cast<std::size_t>((b * c + ch) * l + j)] - mean;
                q += d * d;
              }
            BOOST_TEST(stats[static_cast<std::size_t>(ch)] == mean, boost::test_tools::tolerance(1e-12));
            BOOST_TEST(stats[static_cast<std::size_t>(c + ch)] == 1 / std::sqrt(q / static_cast<double>(n * l) + 1e-5),
                       boost::test_tools::tolerance(1e-12));
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(per_element_and_per_plane_passes_agree) {
  // The GPU's one call per element and the CPU's one call per [n, c] plane give the same y and dx, bit
  // for bit, in training (batch statistics) and evaluation (running ones), with and without weights.
  namespace kd = kiln::nn::detail;
  const kiln::index_t n = 3, c = 2, l = 5, total = n * c * l;
  const auto x = kt::random_values<float>(total, -2, 3, 96), dy = kt::random_values<float>(total, -1, 1, 97);
  const std::vector<double> stats{0.3, -0.7, 1.7, 0.4}, coef{0.05, -0.02, 0.3, 0.11};
  const std::vector<float> weight{1.3f, 0.6f, -0.2f, 0.9f};  // weight [2], then bias [2]
  for (const bool affine : {false, true}) {
    for (const bool batch : {false, true}) {
      std::vector<float> y_e(total), y_p(total), dx_e(total), dx_p(total);
      const float* w = affine ? weight.data() : nullptr;
      const float* b = affine ? weight.data() + 2 : nullptr;
      const double* k = batch ? coef.data() : nullptr;
      using Apply = kd::BatchNormApply<float, float>;
      using GradInput = kd::BatchNormGradInput<float, float>;
      using run = kiln::detail::executor<kiln::Cpu>;
      run::for_each(total, Apply{x.data(), y_e.data(), nullptr, stats.data(), w, b, nullptr, c, l, false});
      run::for_each(n * c, Apply{x.data(), y_p.data(), nullptr, stats.data(), w, b, nullptr, c, l, true});
      run::for_each(total, GradInput{dy.data(), nullptr, x.data(), dx_e.data(), stats.data(), k, w, c, l, false});
      run::for_each(n * c, GradInput{dy.data(), nullptr, x.data(), dx_p.data(), stats.data(), k, w, c, l, true});
      BOOST_TEST_CONTEXT("affine " << affine << ", batch statistics " << batch) {
        BOOST_TEST(y_e == y_p, boost::test_tools::per_element());
        BOOST_TEST(dx_e == dx_p, boost::test_tools::per_element());
        // element 13: n = 1, c = 0, l = 3
        const double want = (x[13] - 0.3) * 1.7 * (affine ? 1.3 : 1.0) + (affine ? -0.2 : 0.0);
        BOOST_TEST(y_e[13] == want, boost::test_tools::tolerance(1e-6));
        const double g = (batch ? dy[13] - 0.05 - (x[13] - 0.3) * 0.3 : dy[13]) * 1.7 * (affine ? 1.3 : 1.0);
        BOOST_TEST(dx_e[13] == g, boost::test_tools::tolerance(1e-5));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_wrong_channel_count_is_a_shape_error, D, kiln::test::devices) {
  knn::Model<knn::Sequential<knn::BatchNorm2d<3>>, Shape<dyn, dyn, 2, 2>, kiln::Policy<kiln::Fp32, D>> m(0);
  const auto x = kt::make_tensor<D>(std::vector<float>(16, 1.0f), Extents<Shape<dyn, dyn, 2, 2>>(2, 2));
  BOOST_CHECK_EXCEPTION((void)m.forward(x), kiln::ShapeError, [](const kiln::ShapeError& e) {
    return std::string(e.what()).find("BatchNorm2d<3>: input [2, 2, 2, 2] has 2 channels, expected 3") !=
           std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(residual_and_summary_carry_the_buffers, D, kiln::test::devices) {
  using Net = knn::Sequential<knn::Conv2d<1, 2, 3, 1, 1>, knn::Residual<knn::BatchNorm2d<2>, knn::ReLU>,
                              knn::BatchNorm2d<2, 1e-5f, 0.1f, true, false>, knn::Flatten, knn::Linear<8, 3>,
                              knn::BatchNorm1d<3>>;
  knn::Model<Net, Shape<dyn, 1, 2, 2>, kiln::Policy<kiln::Fp32, D>> m(0);
  static_assert(decltype(m)::buffer_count == 5 + 7);
  std::vector<std::string> names;
  for (const auto& b : m.named_buffers()) names.push_back(b.name + "@" + std::to_string(b.offset));
  BOOST_TEST(names == (std::vector<std::string>{"1.0.running_mean@0", "1.0.running_var@2", "1.0.num_batches_tracked@4",
                                                "5.running_mean@5", "5.running_var@8", "5.num_batches_tracked@11"}),
             boost::test_tools::per_element());
  const std::string s = m.summary(4);
  BOOST_TEST(s.find("BatchNorm2d(2, eps=1e-05, momentum=0.1, affine=True, track_running_stats=False)") != std::string::npos, s);
  BOOST_TEST(s.find("buffers: 12 (48 bytes as float32; running statistics, not trained)") != std::string::npos, s);
  (void)m.forward(kt::make_tensor<D>(kt::random_values<float>(16, -1, 1, 3), Extents<Shape<dyn, 1, 2, 2>>(4)));
  const auto b = m.buffers().to_vector();
  BOOST_TEST(b[4] == 1.0f);
  BOOST_TEST(b[11] == 1.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pytorch_batch_norm_checkpoints_load_with_their_buffers, D, kiln::test::devices) {
  // torch's state_dict (F32 running statistics, I64 num_batches_tracked) into kiln: the same evaluation output.
  using Net = knn::Sequential<knn::Conv2d<3, 4, 3>, knn::BatchNorm2d<4>, knn::ReLU, knn::Flatten, knn::Linear<64, 5>,
                              knn::BatchNorm1d<5>>;
  using In = Shape<dyn, 3, 6, 6>;
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> m(0);
  (void)kiln::load_checkpoint(parity::fixture_path("batchnorm_state.safetensors"), m);
  BOOST_TEST(m.buffers().to_vector()[8] == 5.0f);  // 1.num_batches_tracked
  const json out = parity::load("batchnorm_output.json");
  const auto xs = out.at("input").get<std::vector<float>>();
  m.eval();
  const auto y = m.forward(kt::make_tensor<D>(xs, Extents<In>(2))).to_vector();
  const auto want = out.at("output").get<std::vector<float>>();
  const auto d = parity::compare(std::span<const float>(y), std::span<const float>(want),
                                 parity::scale_floor(std::span<const float>(want)));
  BOOST_TEST(d.max_rel <= rtol, parity::describe(d));

  // kiln's own checkpoint keeps them, int64 on disk, and a missing buffer is named.
  kt::TempDir dir;
  const std::string path = dir.file("bn.safetensors");
  kiln::save_checkpoint(path, m);
  const auto entries = kiln::read_safetensors(path);
  BOOST_TEST(entries.at("5.num_batches_tracked").dtype == "I64");
  BOOST_TEST(entries.at("5.running_var").dtype == "F32");
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> back(7);
  (void)kiln::load_checkpoint(path, back);
  BOOST_TEST(back.buffers().to_vector() == m.buffers().to_vector(), boost::test_tools::per_element());
  auto old_style = entries;  // torch before 0.4.1 had no num_batches_tracked: it loads as 0
  old_style.erase("1.num_batches_tracked");
  kiln::write_safetensors(path, old_style, {});
  (void)kiln::load_checkpoint(path, back);
  BOOST_TEST(back.buffers().to_vector()[8] == 0.0f);
  BOOST_TEST(back.buffers().to_vector()[19] == m.buffers().to_vector()[19]);  // 5.num_batches_tracked
  auto wrong = entries;
  wrong.at("1.num_batches_tracked").dtype = "F64";
  kiln::write_safetensors(path, wrong, {});
  BOOST_CHECK_EXCEPTION(kiln::load_checkpoint(path, back), kiln::CheckpointError, [](const kiln::CheckpointError& e) {
    return std::string(e.what()).find("buffer '1.num_batches_tracked' is F64, expected I64") != std::string::npos;
  });
  // A count is held in the float arena, exact to 2^24: int64's largest comes back as itself when saved
  // (the float 2^63 saturates; a plain conversion would be undefined).
  auto huge = entries;
  const std::vector<std::int64_t> most{std::numeric_limits<std::int64_t>::max()};
  huge.at("1.num_batches_tracked") = kiln::make_entry<std::int64_t>(most, std::vector<kiln::index_t>{});
  kiln::write_safetensors(path, huge, {});
  (void)kiln::load_checkpoint(path, back);
  kiln::save_checkpoint(path, back);
  std::int64_t saved = 0;
  std::memcpy(&saved, kiln::read_safetensors(path).at("1.num_batches_tracked").bytes.data(), sizeof saved);
  BOOST_TEST(saved == most[0]);
  auto partial = entries;
  partial.erase("1.running_var");
  kiln::write_safetensors(path, partial, {});
  BOOST_CHECK_EXCEPTION(kiln::load_checkpoint(path, back), kiln::CheckpointError, [](const kiln::CheckpointError& e) {
    return std::string(e.what()).find("missing buffer '1.running_var' (shape [4])") != std::string::npos;
  });
  // ... and a buffer the model does not have is refused like an unknown parameter.
  knn::Model<knn::Sequential<knn::Conv2d<3, 4, 3>>, In, kiln::Policy<kiln::Fp32, D>> conv_only(0);
  BOOST_CHECK_EXCEPTION(kiln::load_checkpoint(parity::fixture_path("batchnorm_state.safetensors"), conv_only),
                        kiln::CheckpointError, [](const kiln::CheckpointError& e) {
                          return std::string(e.what()).find("'1.running_mean' [4]") != std::string::npos;
                        });
}

/// Prec's 16-bit activations against fp32 on the same (rounded) inputs: the output within `tolerance`
/// relative (a few of the storage type's rounding steps), the running statistics within 1e-3, and dx
/// within `tolerance` of the largest |dx| (its sums cancel, so small elements carry others' rounding).
template <class D, class Prec>
void check_mixed_against_fp32(float tolerance) {
  using H = typename Prec::storage;
  using Net = knn::Sequential<knn::BatchNorm2d<3>>;
  using In = Shape<dyn, 3, 4, 4>;
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> full(0);
  knn::Model<Net, In, kiln::Policy<Prec, D>> mixed(0);
  const auto [x, xh] = kt::rounded_to<H>(kt::random_values<float>(96, -3, 5, 80));
  const auto y = full.forward(kt::make_tensor<D>(x, Extents<In>(2))).to_vector();
  const auto yh = mixed.forward(kt::make_tensor<D>(xh, Extents<In>(2))).to_vector();
  for (std::size_t i = 0; i < y.size(); ++i)
    BOOST_TEST(kiln::to_compute(yh[i]) == y[i], boost::test_tools::tolerance(tolerance));
  const auto b = full.buffers().to_vector(), bh = mixed.buffers().to_vector();
  for (std::size_t i = 0; i < b.size(); ++i) BOOST_TEST(bh[i] == b[i], boost::test_tools::tolerance(1e-3f));
  const auto [dy, dyh] = kt::rounded_to<H>(kt::random_values<float>(96, -1, 1, 81));
  const auto dx = full.backward_input(kt::make_tensor<D>(dy, Extents<In>(2))).to_vector();
  const auto dxh = mixed.backward_input(kt::make_tensor<D>(dyh, Extents<In>(2))).to_vector();
  const auto [worst, largest] = kt::worst_and_largest(dxh, dx);
  BOOST_TEST(worst <= tolerance * largest, Prec::name << ": dx differs by " << worst << " (largest |dx| " << largest << ")");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mixed_precision_normalises_in_fp32, D, kiln::test::devices) {
  // half and bf16 activations, fp32 weights and statistics: within the storage type's rounding of fp32.
  check_mixed_against_fp32<D, kiln::MixedFp16>(4e-3f);   // 8 steps of half's 2^-11
  check_mixed_against_fp32<D, kiln::MixedBf16>(3.2e-2f);  // 8 steps of bf16's 2^-8
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_activation_after_batch_norm_runs_in_its_passes, D, kiln::test::devices) {
  using Img = Shape<dyn, 3, 5, 6>;
  using Flat = Shape<dyn, 4>;
  using knn::Sequential, knn::BatchNorm2d, kiln::Fp32;
  constexpr bool in_passes = true;  // a derivative of the output in BatchNorm's two backward passes
  // ReLU's derivative reads the output, GELU's and SiLU's the normalised input (kept apart)
  kt::check_fused_with_activation<Sequential<BatchNorm2d<3>, knn::ReLU>, Img, Fp32, D>(Extents<Img>(4), 90,
                                                                                      in_passes);
  kt::check_fused_with_activation<Sequential<BatchNorm2d<3>, knn::GELU>, Img, Fp32, D>(Extents<Img>(4), 91,
                                                                                      in_passes);
  kt::check_fused_with_activation<Sequential<knn::BatchNorm1d<4>, knn::SiLU>, Flat, Fp32, D>(Extents<Flat>(7), 92,
                                                                                            in_passes);
  // planes longer than the CPU's pieces of 256 (normalised, then activated, a piece at a time), and not
  // a multiple of them
  using Wide = Shape<dyn, 2, 17, 19>;
  kt::check_fused_with_activation<Sequential<BatchNorm2d<2>, knn::ReLU>, Wide, Fp32, D>(Extents<Wide>(3), 98,
                                                                                       in_passes);
  kt::check_fused_with_activation<Sequential<BatchNorm2d<2>, knn::SiLU>, Wide, Fp32, D>(Extents<Wide>(3), 99,
                                                                                       in_passes);
  // without affine parameters or running statistics (evaluation then normalises by the batch's)
  kt::check_fused_with_activation<Sequential<BatchNorm2d<3, 1e-5f, 0.1f, false, false>, knn::Tanh>, Img, Fp32, D>(
      Extents<Img>(4), 93, in_passes);
  // bf16 and half activations: rounded to the storage type between the normalisation and the activation
  kt::check_fused_with_activation<Sequential<BatchNorm2d<3>, knn::GELU>, Img, kiln::MixedBf16, D>(
      Extents<Img>(4), 94, in_passes);
  kt::check_fused_with_activation<Sequential<BatchNorm2d<3>, knn::Sigmoid>, Img, kiln::MixedFp16, D>(
      Extents<Img>(4), 95, in_passes);
  // the summary marks the activation, and a BatchNorm runs it in a double-precision gradient check too
  knn::Model<knn::Sequential<knn::Conv2d<3, 4, 3>, knn::BatchNorm2d<4>, knn::ReLU>, Img> model;
  const std::string s = model.summary(2);
  BOOST_TEST(s.find("ReLU() [fused into 1]") != std::string::npos, s);
  kt::check_model_gradients<knn::Sequential<knn::BatchNorm2d<3>, knn::GELU>, Img, D>(Extents<Img>(2), -2, 2, 0, 96,
                                                                                     true);
  kt::check_model_gradients<knn::Sequential<knn::BatchNorm1d<4>, knn::ReLU>, Flat, D>(Extents<Flat>(6), -2, 2, 0, 97,
                                                                                      true);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
