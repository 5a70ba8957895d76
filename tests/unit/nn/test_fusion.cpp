// Epilogue fusion: in a Sequential, Linear or Conv2d followed by ReLU, Sigmoid, Tanh, GELU, SiLU,
// LeakyReLU or ELU runs as one layer (GEMM + one pass; backward: one pass + the GEMMs). The fused pairs match finite differences in
// float64 and the unfused modules run one by one; a Linear-ReLU step has a fixed number of passes; with
// fusion switched off (kiln::Unfused) the pairs run as separate layers and give the same results.
#include <boost/test/unit_test.hpp>
#include <kiln/core/fusion.hpp>
#include <kiln/nn/nn.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "support/model_gradcheck.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;
namespace knn = kiln::nn;

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// Runs the model fused (model.forward / backward_input) and its modules one by one (unfused), from the
/// same parameters, and compares outputs, input gradients and parameter gradients.
template <class Net, class In, class D>
void check_fused_matches_unfused(const Extents<In>& ext, std::uint32_t seed) {
  using Model = knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>>;
  Model fused(seed), plain(seed);
  const auto x =
      kt::make_tensor<D>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -2, 2, seed), ext);
  const auto y = fused.forward(x);
  const auto r = kt::make_tensor<D>(kt::random_values<float>(static_cast<std::size_t>(y.numel()), -1, 1, seed + 1),
                                    y.extents());
  const auto dx = fused.backward_input(r);

  auto& l0 = plain.net().template layer<0>();
  auto& l1 = plain.net().template layer<1>();
  const knn::Context ctx{};
  const auto y_plain = l1.forward(l0.forward(x, ctx), ctx);
  const auto dx_plain = l0.backward(l1.backward(r));
  BOOST_TEST(kt::all_close(y.to_vector(), widen(y_plain.to_vector()), 1e-6, 1e-6));
  BOOST_TEST(kt::all_close(dx.to_vector(), widen(dx_plain.to_vector()), 1e-5, 1e-5));
  BOOST_TEST(kt::all_close(fused.gradients().to_vector(), widen(plain.gradients().to_vector()), 1e-5, 1e-5));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(fusion)

BOOST_AUTO_TEST_CASE(linear_and_conv_fuse_the_activation_that_follows) {
  using Net = knn::Sequential<knn::Conv2d<1, 2, 3>, knn::ReLU, knn::MaxPool2d<2>, knn::Flatten, knn::Linear<8, 4>,
                              knn::GELU, knn::Linear<4, 3>, knn::Sigmoid, knn::Tanh, knn::Dropout<>>;
  using M = Net::module<Shape<dyn, 1, 6, 6>, kiln::Policy<>>;
  static_assert(M::fused_with_next<0> && M::fused_into_previous<1>);  // Conv2d + ReLU
  static_assert(!M::fused_with_next<1> && !M::fused_with_next<2> && !M::fused_with_next<3>);
  static_assert(M::fused_with_next<4> && M::fused_with_next<6>);  // Linear + GELU, Linear + Sigmoid
  static_assert(!M::fused_with_next<7> && !M::fused_into_previous<8>);  // Tanh after Sigmoid: on its own
  knn::Model<Net, Shape<dyn, 1, 6, 6>> model;
  const std::string s = model.summary(2);
  BOOST_TEST(s.find("ReLU() [fused into 0]") != std::string::npos, s);
  BOOST_TEST(s.find("GELU(approximate='none') [fused into 4]") != std::string::npos, s);
  BOOST_TEST(s.find("Tanh() [fused") == std::string::npos, s);
  using More = knn::Sequential<knn::Linear<4, 4>, knn::SiLU, knn::Linear<4, 4>, knn::LeakyReLU<0.2f>, knn::Linear<4, 4>,
                               knn::ELU<>, knn::SiLU>;
  using MM = More::module<Shape<dyn, 4>, kiln::Policy<>>;
  static_assert(MM::fused_with_next<0> && MM::fused_with_next<2> && MM::fused_with_next<4>);
  static_assert(!MM::fused_into_previous<6>);  // SiLU after ELU: on its own
  knn::Model<More, Shape<dyn, 4>> more;
  const std::string t = more.summary(2);
  BOOST_TEST(t.find("LeakyReLU(negative_slope=0.2) [fused into 2]") != std::string::npos, t);
}

// torch's Net1 of the seeds: each Linear in an nn.Sequential of its own, F.relu after it. The activation
// after a nested Sequential runs in its last layer's epilogue, as it would after the Linear itself.
using NestedNet = knn::Sequential<knn::Sequential<knn::Linear<13, 16>>, knn::ReLU,
                                  knn::Sequential<knn::Sequential<knn::Linear<16, 8>>>, knn::Tanh, knn::Linear<8, 1>>;
using FlatNet = knn::Sequential<knn::Linear<13, 16>, knn::ReLU, knn::Linear<16, 8>, knn::Tanh, knn::Linear<8, 1>>;

BOOST_AUTO_TEST_CASE(a_nested_sequential_fuses_the_activation_after_it) {
  using M = NestedNet::module<Shape<dyn, 13>, kiln::Policy<>>;
  static_assert(M::fused_with_next<0> && M::fused_into_previous<1>);  // its Linear runs the ReLU
  static_assert(M::fused_with_next<2> && M::fused_into_previous<3>);  // two levels down, the Tanh
  static_assert(!knn::fuses_epilogue<knn::Sequential<knn::Linear<4, 4>, knn::ReLU>::module<Shape<dyn, 4>,
                                                                                           kiln::Policy<>>>);
  knn::Model<NestedNet, Shape<dyn, 13>> model;
  const std::string s = model.summary(2);
  // The nested layers are listed under their Sequential, numbered as their state_dict names.
  BOOST_TEST(s.find("ReLU() [fused into 0]") != std::string::npos, s);
  BOOST_TEST(s.find("Tanh() [fused into 2]") != std::string::npos, s);
  const auto row = [&](const std::string& index, const std::string& layer) {
    std::istringstream lines(s);
    for (std::string line; std::getline(lines, line);)
      if (line.starts_with(index + " ") && line.find(layer) != std::string::npos) return true;
    return false;
  };
  BOOST_TEST(row("0.0", "  Linear(in_features=13, out_features=16, bias=True)"), s);  // indented under 0
  BOOST_TEST(row("2.0", "  Sequential"), s);
  BOOST_TEST(row("2.0.0", "    Linear(in_features=16, out_features=8, bias=True)"), s);
  BOOST_TEST(row("4", "Linear(in_features=8, out_features=1, bias=True)"), s);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_nested_sequential_trains_as_the_flat_one, D, kiln::test::devices) {
  kt::check_model_gradients<NestedNet, Shape<dyn, 13>, D>(Extents<Shape<dyn, 13>>(3), -2, 2, 0, 31);
  // One seed, the same layers in the same order: the same weights, so the same outputs and gradients,
  // fused and with fusion off, and with the first layer frozen.
  for (const bool fuse : {true, false})
    for (const int frozen : {0, 1}) {
      std::optional<kiln::Unfused> off;
      if (!fuse) off.emplace();
      knn::Model<NestedNet, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, D>> nested(5);
      knn::Model<FlatNet, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, D>> flat(5);
      BOOST_TEST_REQUIRE(nested.parameters().to_vector() == flat.parameters().to_vector());
      nested.freeze(frozen), flat.freeze(frozen);
      const auto x = kt::make_tensor<D>(kt::random_values<float>(39, -2, 2, 32), Extents<Shape<dyn, 13>>(3));
      const auto dy = kt::make_tensor<D>(kt::random_values<float>(3, -1, 1, 33), Extents<Shape<dyn, 1>>(3));
      const auto y1 = nested.forward(x), y2 = flat.forward(x);
      nested.zero_grad(), flat.zero_grad();
      nested.backward(dy), flat.backward(dy);
      BOOST_TEST(y1.to_vector() == y2.to_vector(), boost::test_tools::per_element());
      BOOST_TEST(nested.gradients().to_vector() == flat.gradients().to_vector(), boost::test_tools::per_element());
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fused_linear_backward_matches_numeric, D, kiln::test::devices) {
  kt::check_model_gradients<knn::Sequential<knn::Linear<6, 5>, knn::ReLU>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(4), -2, 2, 0, 21);
  kt::check_model_gradients<knn::Sequential<knn::Linear<6, 5>, knn::GELU>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(4), -2, 2, 0, 22);
  kt::check_model_gradients<knn::Sequential<knn::Linear<6, 5, false>, knn::Sigmoid>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(4), -2, 2, 0, 23);
  kt::check_model_gradients<knn::Sequential<knn::Linear<6, 5>, knn::Tanh, knn::Linear<5, 2>>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(4), -2, 2, 0, 24);
  kt::check_model_gradients<knn::Sequential<knn::Linear<6, 5>, knn::SiLU>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(4), -2, 2, 0, 25);
  // A negative slope keeps the pre-activation (the output's sign no longer tells the branch).
  kt::check_model_gradients<knn::Sequential<knn::Linear<6, 5>, knn::LeakyReLU<-0.5f>>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(4), -2, 2, 0, 26);
  kt::check_model_gradients<knn::Sequential<knn::Linear<6, 5, false>, knn::ELU<0.5f>>, Shape<dyn, 6>, D>(
      Extents<Shape<dyn, 6>>(4), -2, 2, 0, 27);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fused_conv_backward_matches_numeric, D, kiln::test::devices) {
  using In = Shape<dyn, 2, 7, 6>;
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3, 2, 1>, knn::ReLU>, In, D>(Extents<In>(3), -2, 2, 0, 31);
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3>, knn::GELU>, In, D>(Extents<In>(3), -2, 2, 0, 32);
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1, 1, 1, false>, knn::Tanh>, In, D>(
      Extents<In>(2), -2, 2, 0, 33);
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 4, 3, 3, 2>, knn::Sigmoid>, In, D>(Extents<In>(2), -2, 2,
                                                                                              0, 34);
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3>, knn::ELU<>>, In, D>(Extents<In>(2), -2, 2, 0, 35);
  kt::check_model_gradients<knn::Sequential<knn::Conv2d<2, 3, 3, 1, 1>, knn::LeakyReLU<>>, In, D>(Extents<In>(2), -2, 2,
                                                                                                 0, 36);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fused_pairs_match_the_modules_run_one_by_one, D, kiln::test::devices) {
  check_fused_matches_unfused<knn::Sequential<knn::Linear<13, 16>, knn::ReLU>, Shape<dyn, 13>, D>(
      Extents<Shape<dyn, 13>>(33), 41);
  check_fused_matches_unfused<knn::Sequential<knn::Linear<13, 16>, knn::GELU>, Shape<dyn, 13>, D>(
      Extents<Shape<dyn, 13>>(33), 42);
  using Img = Shape<dyn, 3, 12, 10>;
  check_fused_matches_unfused<knn::Sequential<knn::Conv2d<3, 6, 5>, knn::ReLU>, Img, D>(Extents<Img>(5), 43);
  check_fused_matches_unfused<knn::Sequential<knn::Conv2d<3, 6, 3, 2, 1>, knn::GELU>, Img, D>(Extents<Img>(5), 44);
  check_fused_matches_unfused<knn::Sequential<knn::Linear<13, 16>, knn::SiLU>, Shape<dyn, 13>, D>(
      Extents<Shape<dyn, 13>>(33), 45);
  check_fused_matches_unfused<knn::Sequential<knn::Linear<13, 16>, knn::LeakyReLU<0.2f>>, Shape<dyn, 13>, D>(
      Extents<Shape<dyn, 13>>(33), 46);
  check_fused_matches_unfused<knn::Sequential<knn::Conv2d<3, 6, 5>, knn::ELU<>>, Img, D>(Extents<Img>(5), 47);
}

namespace {
/// y = act(x Wᵀ + b) of a model's first Linear, in double on the host from its parameters.
template <class Model>
std::vector<double> linear_reference(Model& model, const std::vector<float>& x, kiln::index_t n, bool relu) {
  auto& lin = model.net().template layer<0>();
  const auto w = lin.weight().to_vector(), b = lin.bias().to_vector();
  const std::size_t out = b.size(), in = w.size() / out;
  std::vector<double> y(static_cast<std::size_t>(n) * out);
  for (std::size_t r = 0; r < static_cast<std::size_t>(n); ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double z = b[o];
      for (std::size_t i = 0; i < in; ++i) z += static_cast<double>(x[r * in + i]) * w[o * in + i];
      y[r * out + o] = relu ? (z < 0 ? 0.0 : z) : z;
    }
  return y;
}
}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_forward_matches_a_double_reference_with_and_without_relu, D, kiln::test::devices) {
  // On CUDA a float Linear with a bias runs as one cuBLASLt call (BIAS or RELU_BIAS epilogue): its
  // operand layout, the axis the bias runs along and the activation, against the host in double, for
  // batch sizes that each need a new plan.
  using Row = Shape<dyn, 13>;
  knn::Model<knn::Sequential<knn::Linear<13, 16>>, Row, kiln::Policy<kiln::Fp32, D>> plain(3);
  knn::Model<knn::Sequential<knn::Linear<13, 16>, knn::ReLU>, Row, kiln::Policy<kiln::Fp32, D>> relu(3);
  for (const kiln::index_t n : {1, 3, 33, 3}) {
    const auto xv = kt::random_values<float>(static_cast<std::size_t>(n) * 13, -2, 2, 60 + static_cast<std::uint32_t>(n));
    const auto x = kt::make_tensor<D>(xv, Extents<Row>(n));
    BOOST_TEST(kt::all_close(plain.forward(x).to_vector(), linear_reference(plain, xv, n, false), 1e-6, 1e-6));
    BOOST_TEST(kt::all_close(relu.forward(x).to_vector(), linear_reference(relu, xv, n, true), 1e-6, 1e-6));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_nan_input_stays_nan_through_linear_and_relu_as_in_torch, D, kiln::test::devices) {
  // torch.relu(nan) is nan: a diverging run must show in the loss, fused (on CUDA: cuBLASLt's
  // RELU_BIAS epilogue) or not.
  using Row = Shape<dyn, 13>;
  knn::Model<knn::Sequential<knn::Linear<13, 16>, knn::ReLU>, Row, kiln::Policy<kiln::Fp32, D>> model(3);
  auto xv = kt::random_values<float>(4 * 13, -2, 2, 70);
  xv[2 * 13 + 5] = std::numeric_limits<float>::quiet_NaN();  // row 2
  const auto x = kt::make_tensor<D>(xv, Extents<Row>(4));
  for (const bool fused : {true, false}) {
    std::vector<float> y;
    if (fused) {
      y = model.forward(x).to_vector();
    } else {
      kiln::Unfused off;
      y = model.forward(x).to_vector();
    }
    for (std::size_t o = 0; o < 16; ++o) {
      BOOST_TEST(std::isnan(y[2 * 16 + o]), "fused " << fused << ": output " << o << " of the NaN row is " << y[2 * 16 + o]);
      BOOST_TEST(!std::isnan(y[1 * 16 + o]));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_nan_row_stays_nan_through_a_large_linear_and_relu, D, kiln::test::devices) {
  // The same at a layer's size: on CUDA the device is asked once, with a small matmul, whether the RELU_BIAS
  // epilogue keeps NaN; cuBLASLt's heuristic picks other kernels (split-K, Hopper's) for large shapes,
  // whose epilogue must keep it too.
  constexpr kiln::index_t n = 512, width = 1024;
  using Row = Shape<dyn, width>;
  knn::Model<knn::Sequential<knn::Linear<width, width>, knn::ReLU>, Row, kiln::Policy<kiln::Fp32, D>> model(5);
  auto xv = kt::random_values<float>(static_cast<std::size_t>(n * width), -1, 1, 71);
  constexpr kiln::index_t bad = 300;
  xv[static_cast<std::size_t>(bad * width + 7)] = std::numeric_limits<float>::quiet_NaN();
  const auto y = model.forward(kt::make_tensor<D>(xv, Extents<Row>(n))).to_vector();
  std::size_t nan_in_bad = 0, nan_elsewhere = 0;
  for (kiln::index_t r = 0; r < n; ++r)
    for (kiln::index_t o = 0; o < width; ++o)
      if (std::isnan(y[static_cast<std::size_t>(r * width + o)])) ++(r == bad ? nan_in_bad : nan_elsewhere);
  BOOST_TEST(nan_in_bad == static_cast<std::size_t>(width));
  BOOST_TEST(nan_elsewhere == 0u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_relu_step_pass_count, D, kiln::test::devices) {
  // Forward: the GEMM and one epilogue pass (bias + ReLU) on the CPU; on CUDA one cuBLASLt call with the
  // RELU_BIAS epilogue. Backward: one pass for ReLU's derivative and the bias gradient, the weight-gradient
  // GEMM, and the input-gradient GEMM only when asked for.
  // On CUDA a long batch splits the backward pass's rows into chunks, whose bias-gradient sums a second
  // small pass adds (epilogue_grad_splits).
  unsigned forward_passes = std::is_same_v<D, kiln::Cpu> ? 2u : 1u, chunk_passes = 0;
#if KILN_WITH_CUDA
  // cuBLASLt's RELU_BIAS only where it keeps NaN as torch's ReLU does; else the GEMM and kiln's pass.
  if (std::is_same_v<D, kiln::Cuda> && !kiln::cuda::relu_epilogue_keeps_nan(0)) forward_passes = 2;
  if constexpr (std::is_same_v<D, kiln::Cuda>)
    chunk_passes = knn::detail::epilogue_grad_splits(64, 16, kiln::detail::executor<D>::resident_threads(0)) > 1 ? 1u : 0u;
#endif
  knn::Model<knn::Sequential<knn::Linear<8, 16>, knn::ReLU>, Shape<dyn, 8>, kiln::Policy<kiln::Fp32, D>> model(1);
  Tensor<float, Shape<dyn, 8>, D> x(64);
  x.fill(0.5f);
  Tensor<float, Shape<dyn, 16>, D> dy(64);
  dy.fill(1.0f);
  auto before = kiln::passes();
  (void)model.forward(x);
  BOOST_TEST(kiln::passes() - before == forward_passes);
  before = kiln::passes();
  model.backward(dy);
  BOOST_TEST(kiln::passes() - before == 2u + chunk_passes);
  (void)model.forward(x);
  before = kiln::passes();
  (void)model.backward_input(dy);
  BOOST_TEST(kiln::passes() - before == 3u + chunk_passes);
}

BOOST_AUTO_TEST_CASE(chunked_activation_backward_matches_one_pass_per_column) {
  // The GPU's activation backward (a thread per chunk of rows and column, then the chunks' sums added in
  // order) run on the CPU: dz is the same bit for bit as the CPU's column blocks, the bias gradient the
  // same sums in another order. And how many chunks a shape gets.
  BOOST_TEST(knn::detail::epilogue_grad_splits(255, 16, 1 << 18) == 1);  // shorter than 8 chunks of 32 rows
  BOOST_TEST(knn::detail::epilogue_grad_splits(256, 16, 1 << 18) == 8);  // chunks of at least 32 rows
  BOOST_TEST(knn::detail::epilogue_grad_splits(4096, 1024, 1 << 18) == 128);
  BOOST_TEST(knn::detail::epilogue_grad_splits(4096, 1 << 16, 1 << 18) == 4);
  BOOST_TEST(knn::detail::epilogue_grad_splits(4096, (1 << 16) + 1, 1 << 18) == 1);  // a quarter of the device
  BOOST_TEST(knn::detail::epilogue_grad_splits(1000, 0, 1 << 18) == 1);
  using E = knn::epilogue::Relu;
  using Exec = kiln::detail::executor<kiln::Cpu>;
  const std::tuple<index_t, index_t, index_t> shapes[] = {{300, 37, 1 << 12}, {257, 5, 1 << 18}, {97, 5, 1 << 18}, {31, 8, 64}};
  for (const auto& [rows, cols, resident] : shapes) {
    BOOST_TEST_CONTEXT(rows << " x " << cols << ", " << resident << " resident threads") {
      const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
      const auto dy = kt::random_values<float>(n, -1, 1, 91), saved = kt::random_values<float>(n, -1, 1, 92);
      const auto db0 = kt::random_values<float>(static_cast<std::size_t>(cols), -1, 1, 93);
      std::vector<float> dz_ref(n), db_ref = db0, dz(n), db = db0;
      using Blocks = knn::detail::EpilogueGradColumnBlocks<float, float, E>;
      Exec::for_each(Blocks::count(cols), Blocks{dy.data(), saved.data(), dz_ref.data(), db_ref.data(), rows, cols});
      const index_t chunks = knn::detail::epilogue_grad_splits(rows, cols, resident);
      const index_t chunk = (rows + chunks - 1) / chunks;
      std::vector<float> part(static_cast<std::size_t>(chunks * cols));
      float* p = chunks > 1 ? part.data() : nullptr;
      Exec::for_each(chunks * cols,
                     knn::detail::EpilogueGradChunks<float, float, E>{dy.data(), saved.data(), dz.data(), db.data(), p, rows, cols, chunk});
      if (p) Exec::for_each(cols, knn::detail::AddChunkSums<float, float>{p, db.data(), chunks, cols});
      BOOST_TEST(dz == dz_ref);
      std::vector<double> db_exact(db0.begin(), db0.end());  // the float64 sums
      for (std::size_t i = 0; i < n; ++i)
        db_exact[i % static_cast<std::size_t>(cols)] += dz_ref[i];
      for (std::size_t j = 0; j < static_cast<std::size_t>(cols); ++j) {
        // up to 300 float additions of terms below 1 (absolute: a sum near 0 has no relative accuracy)
        BOOST_TEST(std::abs(db[j] - db_exact[j]) < 1e-4);
        BOOST_TEST(std::abs(db[j] - db_ref[j]) < 1e-4f);
      }
      if (chunks > 1) {  // the sums really went through the chunks: chunk 0's sum is its rows' alone
        double first = 0;
        for (index_t r = 0; r < chunk; ++r) first += dz_ref[static_cast<std::size_t>(r * cols)];
        BOOST_TEST(part[0] == first, boost::test_tools::tolerance(1e-5));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fusion_saves_bytes_not_arithmetic, D, kiln::test::devices) {
  // Linear + ReLU forward: the same operations fused and unfused (2 m n k, the bias add, the ReLU);
  // unfused, the pre-activation is written and read once more (on the CPU exactly that: 2 x 64 x 16
  // floats; on CUDA the fused forward is one cuBLASLt call, which moves less still).
  knn::Model<knn::Sequential<knn::Linear<8, 16>, knn::ReLU>, Shape<dyn, 8>, kiln::Policy<kiln::Fp32, D>> model(1);
  Tensor<float, Shape<dyn, 8>, D> x(64);
  x.fill(0.5f);
  const auto forward = [&] {
    const auto before = kiln::counters();
    (void)model.forward(x);
    return kiln::counters() - before;
  };
  const auto fused = forward();
  kiln::Counters unfused;
  {
    kiln::Unfused off;
    unfused = forward();
  }
  BOOST_TEST(fused.ops == unfused.ops);
  BOOST_TEST(fused.ops == 64u * 16u * (2u * 8u + 2u));
  BOOST_TEST(unfused.bytes > fused.bytes);
  if constexpr (std::is_same_v<D, kiln::Cpu>) BOOST_TEST(unfused.bytes - fused.bytes == 2u * 64u * 16u * sizeof(float));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv_relu_pool_forward_counts_the_arithmetic_on_every_device, D, kiln::test::devices) {
  // Conv2d<3, 6, 5> + ReLU on [4, 3, 12, 12]: 4 x 6 x 8 x 8 outputs, each 2 x 3 x 5 x 5 operations of the
  // convolution, the bias add and the ReLU (one fused pass on the CPU; cuDNN's call and the epilogue
  // pass on CUDA: the same count); MaxPool2d<2>: 2 x 2 comparisons per output.
  using Img = Shape<dyn, 3, 12, 12>;
  knn::Model<knn::Sequential<knn::Conv2d<3, 6, 5>, knn::ReLU, knn::MaxPool2d<2>>, Img, kiln::Policy<kiln::Fp32, D>> model(3);
  const Extents<Img> ext(4);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 71), ext);
  (void)model.forward(x);  // the first forward may plan (cuDNN's algorithms)
  const auto before = kiln::counters();
  (void)model.forward(x);
  const auto w = kiln::counters() - before;
  constexpr std::uint64_t conv_outputs = 4 * 6 * 8 * 8, pooled = 4 * 6 * 4 * 4;
  BOOST_TEST(w.ops == conv_outputs * (2 * 3 * 5 * 5 + 2) + pooled * 4);
  // At least the input, the weights and the output once each.
  BOOST_TEST(w.bytes >= (ext.numel() + 6 * 75 + conv_outputs) * sizeof(float));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_entropy_backward_unfused_runs_as_autograd_does, D, kiln::test::devices) {
  // Fused: one pass. Unfused: log_softmax, nll_loss's backward and log_softmax's backward, three passes
  // with the same gradient. (On the GPU each after a reduction that counts the labels not ignored.)
  constexpr kiln::index_t n = 9, c = 7;
  const auto logits = kt::make_tensor<D>(kt::random_values<float>(n * c, -4, 4, 61), Extents<Shape<dyn, c>>(n));
  std::vector<std::int64_t> labels_h(n);
  for (kiln::index_t i = 0; i < n; ++i) labels_h[static_cast<std::size_t>(i)] = (i * 3) % c;
  const auto labels = kt::make_tensor<D>(labels_h, Extents<Shape<dyn>>(n));
  const knn::CrossEntropyLoss ce;
  const unsigned counting = std::is_same_v<D, kiln::Cpu> ? 0u : 1u;  // the GPU counts the rows not ignored
  auto before = kiln::passes();
  const auto fused = ce.backward(logits, labels, 2.0);
  BOOST_TEST(kiln::passes() - before == 1u + counting);
  kiln::Unfused off;
  before = kiln::passes();
  const auto unfused = ce.backward(logits, labels, 2.0);
  BOOST_TEST(kiln::passes() - before == 3u + counting);
  BOOST_TEST(kt::all_close(unfused.to_vector(), kt::to_doubles(fused.to_vector()), 1e-6, 1e-7));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unfused_cross_entropy_of_bf16_logits_keeps_the_log_softmax_in_fp32, D, kiln::test::devices) {
  // Autocast runs log_softmax and nll_loss in fp32: the unfused backward keeps its intermediates in the
  // compute type too and rounds once, like the fused pass. (In bf16 they lost up to 4 % of a small
  // softmax probability: lsm = -10 stored with 8 bits.)
  constexpr kiln::index_t n = 16, c = 10;
  const auto v = kt::random_values<float>(n * c, -12, 4, 62);
  std::vector<kiln::bfloat16> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = kiln::from_compute<kiln::bfloat16>(v[i]);
  const auto logits = kt::make_tensor<D>(b, Extents<Shape<dyn, c>>(n));
  std::vector<std::int64_t> labels_h(n);
  for (kiln::index_t i = 0; i < n; ++i) labels_h[static_cast<std::size_t>(i)] = (i * 7) % c;
  const auto labels = kt::make_tensor<D>(labels_h, Extents<Shape<dyn>>(n));
  const knn::CrossEntropyLoss ce;
  const auto fused = ce.backward(logits, labels).to_vector();
  std::vector<kiln::bfloat16> unfused;
  {
    kiln::Unfused off;
    unfused = ce.backward(logits, labels).to_vector();
  }
  double worst = 0;  // in units of the fused value's bf16 spacing (2^-7 relative at most)
  for (std::size_t i = 0; i < fused.size(); ++i) {
    const double f = kiln::to_compute(fused[i]), u = kiln::to_compute(unfused[i]);
    worst = std::max(worst, std::abs(u - f) / (std::abs(f) * 0x1p-7 + 1e-30));
  }
  BOOST_TEST(worst <= 1.0, "largest difference " << worst << " bf16 spacings");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(backward_without_input_grad_gives_the_same_parameter_gradients, D,
                              kiln::test::devices) {
  using Net = knn::Sequential<knn::Conv2d<3, 4, 3, 1, 1>, knn::ReLU, knn::Flatten, knn::Linear<256, 5>>;
  using In = Shape<dyn, 3, 8, 8>;
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> a(5), b(5);
  const Extents<In> ext(6);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 51), ext);
  Tensor<float, Shape<dyn, 5>, D> dy(6);
  dy.fill(0.25f);
  (void)a.forward(x);
  a.backward(dy);
  (void)b.forward(x);
  const auto dx = b.backward_input(dy);
  BOOST_TEST(dx.size(0) == 6);
  if constexpr (std::is_same_v<D, kiln::Cpu>) {
    BOOST_TEST(a.gradients().to_vector() == b.gradients().to_vector());
  } else {  // cuDNN's backward-filter algorithm may add in another order from run to run
    BOOST_TEST(kt::all_close(a.gradients().to_vector(), widen(b.gradients().to_vector()), 1e-6, 1e-6));
  }
}

#if KILN_WITH_CUDNN
BOOST_AUTO_TEST_CASE(deterministic_cudnn_gives_the_same_gradients_run_to_run) {
  // kiln::cuda::set_cudnn_deterministic(true), as torch.backends.cudnn.deterministic: bit for bit.
  struct Restore {
    bool was = kiln::cuda::cudnn_deterministic();
    ~Restore() { kiln::cuda::set_cudnn_deterministic(was); }
  } restore;
  kiln::cuda::set_cudnn_deterministic(true);
  using Net = knn::Sequential<knn::Conv2d<3, 8, 3, 1, 1>, knn::ReLU, knn::Flatten, knn::Linear<8 * 16 * 16, 5>>;
  using In = Shape<dyn, 3, 16, 16>;
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, kiln::Cuda>> a(5), b(5);
  const Extents<In> ext(32);
  const auto x = kt::make_tensor<kiln::Cuda>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 52), ext);
  Tensor<float, Shape<dyn, 5>, kiln::Cuda> dy(32);
  dy.fill(0.25f);
  (void)a.forward(x);
  a.backward(dy);
  (void)b.forward(x);
  b.backward(dy);
  BOOST_TEST(a.gradients().to_vector() == b.gradients().to_vector());
}
#endif

BOOST_AUTO_TEST_CASE_TEMPLATE(fusion_off_runs_each_layer_alone_with_the_same_results, D, kiln::test::devices) {
  // kiln::Unfused: the Conv2d-ReLU and Linear-ReLU pairs run as two layers each (more passes), and a
  // LeNet-like step gives the fused step's loss, input gradient and parameter gradients.
  using Net = knn::Sequential<knn::Conv2d<3, 4, 3, 1, 1>, knn::ReLU, knn::MaxPool2d<2>, knn::Flatten,
                              knn::Linear<64, 16>, knn::ReLU, knn::Linear<16, 5>>;
  using In = Shape<dyn, 3, 8, 8>;
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, D>> fused(7), unfused(7);
  const Extents<In> ext(6);
  const auto x = kt::make_tensor<D>(kt::random_values<float>(static_cast<std::size_t>(ext.numel()), -1, 1, 61), ext);
  const auto y = kt::make_tensor<D>(std::vector<std::int64_t>{0, 1, 2, 3, 4, 0}, Extents<Shape<dyn>>(6));
  knn::CrossEntropyLoss ce;
  auto before = kiln::passes();
  const auto pf = fused.forward(x);
  const auto dxf = fused.backward_input(ce.backward(pf, y));
  const auto fused_passes = kiln::passes() - before;
  std::uint64_t unfused_passes = 0;
  Tensor<float, In, D> dxu;
  Tensor<float, Shape<dyn, 5>, D> pu;
  {
    kiln::Unfused off;
    before = kiln::passes();
    pu = unfused.forward(x);
    dxu = unfused.backward_input(ce.backward(pu, y));
    unfused_passes = kiln::passes() - before;
  }
  BOOST_TEST_MESSAGE("step passes: fused " << fused_passes << ", unfused " << unfused_passes);
  BOOST_TEST(unfused_passes >= fused_passes + 4);  // two activations forward and backward on their own
  BOOST_TEST(kt::all_close(pu.to_vector(), widen(pf.to_vector()), 1e-5, 1e-6));
  BOOST_TEST(kt::all_close(dxu.to_vector(), widen(dxf.to_vector()), 1e-5, 1e-6));
  BOOST_TEST(kt::all_close(unfused.gradients().to_vector(), widen(fused.gradients().to_vector()), 1e-5, 1e-6));
  // The model switches back: a fused forward after an unfused one, and the other way round.
  (void)unfused.forward(x);
  {
    kiln::Unfused off;
    (void)fused.forward(x);
    fused.zero_grad();
    fused.backward(ce.backward(fused.forward(x), y));
  }
  unfused.zero_grad();
  unfused.backward(ce.backward(unfused.forward(x), y));
  BOOST_TEST(kt::all_close(unfused.gradients().to_vector(), widen(fused.gradients().to_vector()), 1e-5, 1e-6));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
