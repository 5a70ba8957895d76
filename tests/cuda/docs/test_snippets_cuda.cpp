// The GPU snippets of the docs (see tests/unit/docs/test_snippets.cpp), compiled by nvcc in every CUDA
// build and run where there is a device: each case declares what its page leaves to the reader.
#include <kiln/cuda.hpp>
#include <kiln/data/data.hpp>
#include <kiln/io/safetensors.hpp>
#include <kiln/kiln.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <vector>

#include "support/reference.hpp"

namespace {
using kiln::Cuda;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

template <class T, class S>
Tensor<T, S, Cuda> random_on_gpu(kiln::index_t n, std::uint32_t stream) {
  const auto ext = Extents<S>(n);
  const auto v = kiln::test::random_values<float>(static_cast<std::size_t>(ext.numel()), -1.0, 1.0, stream);
  std::vector<T> t(v.begin(), v.end());
  return Tensor<T, S, Cuda>::from(std::span<const T>(t), ext);
}

Tensor<std::int64_t, Shape<dyn>, Cuda> labels_on_gpu(kiln::index_t n, int classes, std::uint32_t stream) {
  const auto v = kiln::test::random_integers<std::int64_t>(static_cast<std::size_t>(n), 0, classes - 1, stream);
  return Tensor<std::int64_t, Shape<dyn>, Cuda>::from(std::span<const std::int64_t>(v), Extents<Shape<dyn>>(n));
}

/// Precondition of the cases that read Fashion-MNIST: Boost.Test reports them skipped, with this reason,
/// where it is not installed (scripts/install-deps installs it).
boost::test_tools::assertion_result fashion_mnist_installed(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result installed(std::filesystem::exists("/usr/share/datasets/fashion-mnist"));
  installed.message() << "no /usr/share/datasets/fashion-mnist "
                         "(Debian: apt-get install dataset-fashion-mnist)";
  return installed;
}

// (a template and a function, at namespace scope; tests/unit/docs runs its CPU branch)
#include "tensors.pick_device.inc"
}  // namespace

BOOST_AUTO_TEST_SUITE(docs_cuda)

BOOST_AUTO_TEST_CASE(tensors_pick_device_trains_on_the_gpu) {
  BOOST_TEST(kiln::cuda::is_available());  // (the cases here run only where there is a device)
  BOOST_TEST(fit_a_line_where_it_runs_best() < 1e-6f);  // the CUDA branch: this file is CUDA
  BOOST_TEST(fit_a_line<kiln::Cuda>(0) < 1e-6f);
}

BOOST_AUTO_TEST_CASE(models_declare_the_same_lenet_on_both_devices) {
#include "models.declare.inc"
  BOOST_TEST(gpu.parameters().to_vector() == model.parameters().to_vector());  // one seed, one initialisation
}

BOOST_AUTO_TEST_CASE(precision_fp16_step) {
  const auto x = random_on_gpu<kiln::half, Shape<dyn, 13>>(8, 1);
  const auto y = random_on_gpu<kiln::half, Shape<dyn, 1>>(8, 2);
  std::vector<float> before, after;
  double scale = 0;
  {
#include "precision.fp16.inc"
    after = model.parameters().to_vector();
    kiln::nn::Model<Net, kiln::Shape<kiln::dyn, 13>, kiln::Policy<kiln::MixedFp16, kiln::Cuda>> fresh(0);
    before = fresh.parameters().to_vector();
    scale = scaler.scale();
  }
  BOOST_TEST(scale == 65536.0);  // a finite first step: no back-off
  BOOST_TEST(before != after);
}

BOOST_AUTO_TEST_CASE(precision_cuda_graph_replays_a_training_step) {
  using Net = kiln::nn::Sequential<kiln::nn::Linear<13, 16>, kiln::nn::ReLU, kiln::nn::Linear<16, 3>>;
  kiln::nn::Model<Net, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, Cuda>> model(0);
  kiln::nn::CrossEntropyLoss ce;
  auto x = random_on_gpu<float, Shape<dyn, 13>>(8, 3);
  auto y = labels_on_gpu(8, 3, 4);
  struct Batch {
    Tensor<float, Shape<dyn, 13>, Cuda> x;
    Tensor<std::int64_t, Shape<dyn>, Cuda> y;
  };
  std::vector<Batch> loader;
  for (std::uint32_t s = 0; s < 3; ++s) loader.push_back({random_on_gpu<float, Shape<dyn, 13>>(8, 10 + s), labels_on_gpu(8, 3, 20 + s)});
  std::int64_t steps = 0;
  {
#include "precision.cuda_graph.inc"
    steps = opt.step_count();
  }
  BOOST_TEST(steps == 4);  // the eager warm-up and three replays (capturable Adam counts on the device)
}

// Needs Fashion-MNIST (Debian: dataset-fashion-mnist); one epoch through a DeviceLoader.
BOOST_AUTO_TEST_CASE(data_device_loader_epoch, *boost::unit_test::precondition(fashion_mnist_installed)) {
  const kiln::data::FashionMnist train("/usr/share/datasets/fashion-mnist", /*train=*/true);
  struct CountingModel {  // the page's `model`: counts the samples it sees
    std::int64_t samples = 0;
    int forward(const Tensor<float, Shape<dyn, 1, 28, 28>, Cuda>& x) {
      samples += x.size(0);
      return 0;
    }
  } model;
  {
#include "data.device_loader.inc"
  }
  BOOST_TEST(model.samples == 60000);
}

BOOST_AUTO_TEST_CASE(tensors_devices_round_trip) {
  auto x = Tensor<float, Shape<dyn, 3>>::from(std::span<const float>(std::vector<float>{-1, 2, -3, 4, -5, 6}),
                                              Extents<Shape<dyn, 3>>(2));
  Tensor<float, Shape<dyn, 3>> back;
#include "tensors.devices.inc"
  BOOST_TEST(back.to_vector() == (std::vector<float>{0, 4, 0, 8, 0, 12}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
