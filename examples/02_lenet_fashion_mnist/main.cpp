// lenet_fashion_mnist: kiln's main job. Trains the seeds' LeNet, adapted to 1 x 28 x 28 images, on
// Fashion-MNIST and reports the test accuracy after every epoch.
//
// What it shows:
//   1. A network is a type: the seeds' LeNet with the first convolution padded by 2, so that 28 x 28
//      images reach the same 16 x 5 x 5 features as CIFAR-10's 32 x 32 ones.
//   2. Data: Debian's dataset-fashion-mnist (the IDX .gz files in /usr/share/datasets/fashion-mnist),
//      decoded once into memory, Normalize(0.5, 0.5), shuffled with a seed every epoch, collated by
//      worker threads ahead of the training step (DataLoader).
//   3. Training: Adam(1e-3), cross entropy, batch 128, optional gradient accumulation (--accumulate K:
//      K micro-batches, one step); each epoch ends with an evaluation without gradients (NoGrad +
//      eval()), a JSON line in --metrics and an atomic checkpoint in --checkpoint (--resume continues).
//
// Run (./scripts/demo does all of it on a fresh Debian 12 machine):
//   ./build/cpu/examples/lenet_fashion_mnist                      # 5 epochs, CPU, about 87-89 %
//   ./build/cpu/examples/lenet_fashion_mnist --epochs 1 --limit 2048 --metrics m.jsonl
// Flags: --help. The last line is `result: test_accuracy=... epochs=... seconds=... ok=1`.
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#else
#include <kiln/kiln.hpp>
#endif
#include <kiln/data/data.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/checkpoint.hpp"
#include "../common/cli.hpp"
#include "../common/report.hpp"

#if KILN_HAS_OPENMP
#include <omp.h>
#endif

namespace {
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;

using LeNet = Sequential<Conv2d<1, 6, 5, 1, 2>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, ReLU, MaxPool2d<2>, Flatten,
                         Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
using Image = Shape<dyn, 1, 28, 28>;
constexpr const char* program = "lenet_fashion_mnist";

/// The batch's tensor on device D (the CPU batch itself on the CPU).
template <class D, class T, class S>
auto on(const kiln::Tensor<T, S, kiln::Cpu>& t) {
  if constexpr (std::is_same_v<D, kiln::Cpu>) return t;
  else return t.template to<D>(0, true);
}

/// Test loss (mean) and accuracy, without gradients.
template <class Model, class Loader>
std::pair<double, double> evaluate(Model& model, Loader& loader) {
  using D = typename Model::D;
  model.eval();
  NoGrad guard(model);
  CrossEntropyLoss ce;
  double loss = 0;
  long long correct = 0, seen = 0;
  for (const auto& b : loader) {
    const auto logits = model.forward(on<D>(b.x));
    const auto y = on<D>(b.y);
    loss += static_cast<double>(ce(logits, y).item()) * static_cast<double>(b.size());
    const auto l = logits.to_vector();
    const auto labels = b.y.to_vector();
    for (kiln::index_t i = 0; i < b.size(); ++i) {
      const float* row = l.data() + i * 10;
      int best = 0;
      for (int c = 1; c < 10; ++c)
        if (row[c] > row[best]) best = c;
      correct += best == labels[static_cast<std::size_t>(i)];
    }
    seen += b.size();
  }
  model.train();
  return {loss / static_cast<double>(seen), static_cast<double>(correct) / static_cast<double>(seen)};
}

template <class D>
int run(const examples::TrainOptions& o, const std::string& device) {
  using P = kiln::Policy<kiln::Fp32, D>;
  const auto t_start = examples::Clock::now();
  const kiln::data::FashionMnist train(o.data, true, o.limit), test(o.data, false);
  const kiln::data::Normalize normalize{{0.5f}, {0.5f}};
  const bool pin = std::is_same_v<D, kiln::Cuda>;
  kiln::data::DataLoader train_loader(train,
                                      {.batch_size = o.batch_size, .shuffle = true, .num_workers = o.workers,
                                       .pin_memory = pin, .seed = o.seed},
                                      normalize);
  kiln::data::DataLoader test_loader(test, {.batch_size = 1000, .num_workers = o.workers, .pin_memory = pin}, normalize);

  Model<LeNet, Image, P> model(o.seed);
  kiln::optim::Adam opt(model, {.lr = static_cast<float>(o.lr)});
  CrossEntropyLoss ce;
  int start = 0;
  if (o.resume) start = examples::load_training_state(o.checkpoint, model, opt);
  int threads = 1;
#if KILN_HAS_OPENMP
  threads = omp_get_max_threads();
#endif
  std::printf("%s: Fashion-MNIST %lld train / %lld test images from %s; LeNet (%lld parameters) on %s (%d thread%s), "
              "batch %d x %d, Adam(lr=%g), %d loader worker%s\n",
              program, static_cast<long long>(train.size()), static_cast<long long>(test.size()), o.data.c_str(),
              static_cast<long long>(model.parameter_count), device.c_str(), threads, threads == 1 ? "" : "s",
              o.batch_size, o.accumulate, o.lr, o.workers, o.workers == 1 ? "" : "s");
  if (start > 0) std::printf("resumed from %s after epoch %d\n", o.checkpoint.c_str(), start);

  double test_loss = NAN, test_accuracy = NAN, train_loss = NAN, last_rate = 0;
  bool finite = true;
  for (int epoch = start; epoch < o.epochs; ++epoch) {
    const auto t0 = examples::Clock::now();
    train_loader.set_epoch(static_cast<std::uint64_t>(epoch));
    examples::Progress progress(epoch + 1, o.epochs, train_loader.size());
    double loss_sum = 0;
    long long samples = 0, batches = 0;
    opt.zero_grad();
    for (const auto& b : train_loader) {
      const auto x = on<D>(b.x);
      const auto y = on<D>(b.y);
      const auto logits = model.forward(x);
      loss_sum += static_cast<double>(ce(logits, y).item()) * static_cast<double>(b.size());
      model.backward(ce.backward(logits, y, 1.0 / o.accumulate));
      if (++batches % o.accumulate == 0 || batches == train_loader.size()) {
        opt.step();
        opt.zero_grad();
      }
      samples += b.size();
      progress.update(batches, loss_sum / static_cast<double>(samples), samples);
    }
    progress.finish();
    const double train_seconds = examples::seconds_since(t0);
    train_loss = loss_sum / static_cast<double>(samples);
    std::tie(test_loss, test_accuracy) = evaluate(model, test_loader);
    finite = finite && std::isfinite(train_loss) && std::isfinite(test_loss);
    last_rate = static_cast<double>(samples) / train_seconds;
    std::printf("epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.0f samples/s, %.1f s\n",
                epoch + 1, o.epochs, train_loss, test_loss, 100.0 * test_accuracy, last_rate, train_seconds);
    std::fflush(stdout);
    examples::append_metrics(o.metrics, {{"epoch", epoch + 1},
                                         {"train_loss", train_loss},
                                         {"test_loss", test_loss},
                                         {"test_accuracy", test_accuracy},
                                         {"lr", opt.lr()},
                                         {"samples_per_s", last_rate},
                                         {"seconds", train_seconds}});
    if (!o.checkpoint.empty()) examples::save_training_state(o.checkpoint, model, opt, epoch + 1);
  }
  // ok: the losses stayed finite and the model beats chance (10 classes) clearly.
  const bool ok = finite && test_accuracy > 0.2;
  std::printf("result: test_accuracy=%.4f test_loss=%.4f train_loss=%.4f epochs=%d seconds=%.1f samples_per_s=%.0f "
              "device=%s ok=%d\n",
              test_accuracy, test_loss, train_loss, o.epochs, examples::seconds_since(t_start), last_rate,
              device.c_str(), ok ? 1 : 0);
  return ok ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains LeNet on Fashion-MNIST (kiln's main job)", program};
  examples::TrainOptions o;
  o.data = "/usr/share/datasets/fashion-mnist";
  examples::add_train_options(app, o);
  CLI11_PARSE(app, argc, argv);
  try {
    bool cuda_available = false;
#if KILN_CUDA_COMPILER
    cuda_available = kiln::cuda::is_available();
#endif
    const std::string device = examples::check_buildable(program, o, cuda_available);
    if (device.empty()) return 2;
#if KILN_CUDA_COMPILER
    if (device == "cuda") return run<kiln::Cuda>(o, device);
#endif
    return run<kiln::Cpu>(o, device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}
