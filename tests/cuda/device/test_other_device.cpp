// Work on a GPU that is not the current one (PyTorch's model.to("cuda:1") without set_device): a model,
// its loss, Adam and an expression on the last GPU, with GPU 0 current, train as on the CPU and leave
// GPU 0 current. With one GPU both are cuda:0 and the switch itself is not exercised (the log says so).
#include <kiln/cuda.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {
using kiln::Cuda;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
namespace kc = kiln::cuda;
namespace knn = kiln::nn;
}  // namespace

BOOST_AUTO_TEST_SUITE(device)

BOOST_AUTO_TEST_CASE(a_model_trains_on_a_gpu_that_is_not_current) {
  const int other = kc::device_count() - 1;
  if (other == 0) BOOST_TEST_MESSAGE("one GPU: cuda:0 is both; the device switch needs two GPUs to be exercised");
  using Net = knn::Sequential<knn::Linear<4, 8>, knn::ReLU, knn::Linear<8, 3>>;
  using In = Shape<dyn, 4>;
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, kiln::Cpu>> cpu(7);
  kc::DeviceGuard current(0);
  knn::Model<Net, In, kiln::Policy<kiln::Fp32, Cuda>> gpu(7, other);
  BOOST_TEST(gpu.parameters().device_index() == other);
  kiln::optim::Adam oc(cpu, {.lr = 1e-2f});
  kiln::optim::Adam og(gpu, {.lr = 1e-2f});
  std::vector<float> xv(32 * 4);
  std::vector<std::int64_t> yv(32);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.7f * static_cast<float>(i));
  for (std::size_t i = 0; i < yv.size(); ++i) yv[i] = static_cast<std::int64_t>(i % 3);
  Tensor<float, In, kiln::Cpu> xh(32);
  Tensor<std::int64_t, Shape<dyn>, kiln::Cpu> yh(32);
  xh.copy_from(xv);
  yh.copy_from(yv);
  const auto x = xh.to<Cuda>(other);
  const auto y = yh.to<Cuda>(other);
  knn::CrossEntropyLoss ce;
  for (int step = 0; step < 3; ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      oc.zero_grad();
      og.zero_grad();
      const auto pc = cpu.forward(xh);
      const auto pg = gpu.forward(x);
      BOOST_TEST(pg.device_index() == other);
      BOOST_TEST(ce(pg, y).item() == ce(pc, yh).item(), boost::test_tools::tolerance(1e-5f));
      cpu.backward(ce.backward(pc, yh));
      gpu.backward(ce.backward(pg, y));
      oc.step();
      og.step();
      BOOST_TEST(kc::current_device() == 0);
    }
  }
  const auto a = cpu.parameters().to_vector(), b = gpu.parameters().to_vector();
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
  BOOST_TEST(diff < 1e-5);

  // An expression assigned to a tensor of the other GPU runs there.
  Tensor<float, Shape<dyn>, Cuda> v(Extents<Shape<dyn>>(1000), other), w(Extents<Shape<dyn>>(1000), other);
  v.fill(1.5f);
  w = v * 2.0f + 1.0f;
  const auto got = w.to_vector();
  BOOST_TEST(std::all_of(got.begin(), got.end(), [](float f) { return f == 4.0f; }));
  BOOST_TEST(kc::current_device() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
