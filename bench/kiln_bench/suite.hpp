// kiln-bench's suite: models registered by name, each measured for a training step and an inference
// step, fused (kiln's default) and unfused (kiln::Unfused: one pass per operation), over batch sizes and
// precisions. A registered model is a kiln network type, its input shape, its loss and how to make its
// targets; bench/kiln_bench/main.cpp registers the built-in ones, and a user's program registers its own
// the same way (docs/benchmarks.md):
//
//   #include "kiln_bench/suite.hpp"
//   using MyNet = kiln::nn::Sequential<kiln::nn::Linear<64, 256>, kiln::nn::GELU, kiln::nn::Linear<256, 10>>;
//   int main(int argc, char** argv) {
//     kiln::bench::Suite suite;
//     suite.add_classifier<MyNet, kiln::Shape<kiln::dyn, 64>>("my_net", /*classes=*/10);
//     return suite.main(argc, argv);
//   }
#pragma once
#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <cstring>
#include <kiln/core/counters.hpp>
#include <kiln/core/fusion.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/adam.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#endif
#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "train_step/step_case.hpp"

namespace kiln::bench {

/// One measurement: a model's training or inference step at one batch size and precision, fused or not.
struct StepResult {
  std::string model, precision, device, mode;  // mode: "train" or "infer"
  index_t batch = 0;
  bool fused = true;
  bool graph = false;  ///< the step was captured once and replayed as a CUDA graph (kiln::cuda::Graph)
  Stats seconds;   ///< per step (CUDA events on the GPU)
  std::vector<double> samples;  ///< the timed steps `seconds` summarises
  Counters work;   ///< passes, bytes and operations of one step (kiln::counters(), kiln/core/counters.hpp)
  /// The time one step would take if memory were its only limit (its bytes at the measured copy
  /// bandwidth, bytes per second) over the time it took: 1 = as fast as copying its bytes.
  double fraction_of_bw_limit(double copy_bandwidth) const {
    return seconds.median > 0 && copy_bandwidth > 0 ? static_cast<double>(work.bytes) / copy_bandwidth / seconds.median : 0;
  }
};

/// What a registered model runs: `measure(device, precision, batch, mode, fused, graph, warmup, repeat)`
/// (graph: replay the fused step as a CUDA graph where it can be captured), and
/// `agreement(device, precision, batch)`: the largest difference of one backward's gradients fused and
/// unfused from the same start, relative to the largest gradient.
struct Entry {
  std::string name;
  std::string description;
  std::function<StepResult(const std::string&, const std::string&, index_t, const std::string&, bool, bool, int, int)>
      measure;
  std::function<double(const std::string&, const std::string&, index_t)> agreement;
};

namespace detail {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class D>
void synchronize() {
#if KILN_CUDA_COMPILER
  if constexpr (std::is_same_v<D, Cuda>) kiln::cuda::synchronize();
#endif
}

/// Seconds f() takes: the host clock around f() on the CPU; CUDA events on kiln's current stream around
/// it on the GPU (the launches are asynchronous; the events time the work, not the host's queueing).
template <class D, class F>
double time_once(F&& f) {
#if KILN_CUDA_COMPILER
  if constexpr (std::is_same_v<D, Cuda>) {
    kiln::cuda::Event start(true), stop(true);
    start.record();
    f();
    stop.record();
    stop.synchronize();
    return static_cast<double>(start.elapsed_ms(stop)) * 1e-3;
  }
#endif
  const double t0 = now_seconds();
  f();
  synchronize<D>();
  return now_seconds() - t0;
}

/// The machine's copy bandwidth in bytes per second (read + written, as kiln::counters() counts a copy):
/// the best of `repeat` copies of `bytes` between two buffers after one untimed copy of each kind, over
/// two kinds: the platform's copy (on the CPU std::memcpy over 1 MiB slices spread over the OpenMP
/// threads, on the GPU cudaMemcpyAsync device to device) and kiln's own copy pass (b = a). The best, not
/// the median: it is the limit the fraction is measured against.
template <class D>
double copy_bandwidth(std::size_t bytes, int repeat) {
  const index_t n = static_cast<index_t>(bytes / sizeof(float));
  Tensor<float, Shape<dyn>, D> a(n), b(n);
  a.fill(1.0f);  // first touch by the threads that copy (and no lazily mapped pages in the timing)
  b.fill(0.0f);
  const auto platform_copy = [&] {
#if KILN_CUDA_COMPILER
    if constexpr (std::is_same_v<D, Cuda>) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), static_cast<std::size_t>(n) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, kiln::cuda::current_stream()));
      return;
    }
#endif
    constexpr index_t slice = (1 << 20) / sizeof(float);
    const index_t slices = (n + slice - 1) / slice;
    float* dst = b.data();
    const float* src = a.data();
    KILN_PRAGMA_OMP(parallel for schedule(static))
    for (index_t k = 0; k < slices; ++k)
      std::memcpy(dst + k * slice, src + k * slice, static_cast<std::size_t>(std::min(slice, n - k * slice)) * sizeof(float));
  };
  const auto kiln_copy = [&] { kiln::assign(b, a); };
  double best = 0;
  for (const auto& copy : {std::function<void()>(platform_copy), std::function<void()>(kiln_copy)}) {
    time_once<D>(copy);
    for (int k = 0; k < std::max(repeat, 1); ++k)
      best = std::max(best, 2.0 * static_cast<double>(n) * sizeof(float) / time_once<D>(copy));
  }
  return best;
}

/// `more`'s samples added to `r`'s (the same case measured again later), its statistics recomputed.
inline void merge_samples(StepResult& r, const StepResult& more) {
  r.samples.insert(r.samples.end(), more.samples.begin(), more.samples.end());
  r.seconds = summarize(r.samples);
}

/// A fused and an unfused measurement taken in the order A B B A (each half of `repeat`): a machine
/// that slows down or speeds up over the pair slows both alike, where all of A then all of B would put
/// the drift into their ratio. measure(fused, repeat) measures one of them.
template <class M>
std::pair<StepResult, StepResult> abba(M&& measure, int repeat) {
  const int first = (repeat + 1) / 2, second = repeat - first;
  std::pair<StepResult, StepResult> r{measure(true, first), measure(false, first)};
  if (second > 0) {
    merge_samples(r.second, measure(false, second));
    merge_samples(r.first, measure(true, second));
  }
  return r;
}

/// Times f fused or unfused: warm-up, the counters of one run, then `repeat` timed runs.
template <class D, class F>
StepResult measure_pass(F&& f, bool fused, int warmup, int repeat) {
  std::optional<Unfused> off;
  if (!fused) off.emplace();
  for (int w = 0; w < std::max(warmup, 1); ++w) f();
  synchronize<D>();
  StepResult r;
  const auto c0 = counters();
  f();
  synchronize<D>();
  r.work = counters() - c0;
  std::vector<double> samples;
  for (int k = 0; k < repeat; ++k) samples.push_back(time_once<D>(f));
  r.seconds = summarize(samples);
  r.samples = std::move(samples);
  r.fused = fused;
  r.device = std::is_same_v<D, Cpu> ? "cpu" : "cuda";
  return r;
}

/// n values spread over [-1, 1] (the elementwise rows' input).
template <class T>
std::vector<T> ramp(index_t n) {
  std::vector<T> h(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) h[static_cast<std::size_t>(i)] = static_cast<T>(static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f);
  return h;
}

/// Elementwise work alone, where memory is the only limit: `chain` is y = relu(1.5 x - 0.25) 2 + 0.5
/// over n values of the precision's storage type (one pass fused, five unfused: bench_fusion's
/// chain); `adam` is an Adam step over n fp32 parameters (one pass fused; torch's single-tensor order
/// unfused).
template <class Prec, class D>
StepResult measure_elementwise(const std::string& workload, index_t n, bool fused, int warmup, int repeat) {
  StepResult r;
  if (workload == "adam") {
    Tensor<float, Shape<dyn>, D> p(n), g(n);
    p.fill(0.5f);
    g.fill(0.01f);
    optim::Adam<float, D> adam(p, g, {.lr = 1e-3});
    r = measure_pass<D>([&] { adam.step(); }, fused, warmup, repeat);
  } else {
    using T = typename Prec::storage;
    Tensor<T, Shape<dyn>, D> x(n), y(n);
    x.copy_from(std::span<const T>(ramp<T>(n)));
    r = measure_pass<D>([&] { kiln::assign(y, kiln::relu(x * 1.5f - 0.25f) * 2.0f + 0.5f); }, fused, warmup, repeat);
  }
  r.model = workload;
  r.mode = "pass";
  r.batch = n;
  r.precision = workload == "adam" ? "fp32" : std::string(Prec::name);
  return r;
}

/// measure_elementwise's work done once fused and once unfused from the same start: the largest
/// difference of the results (chain: y; adam: the parameters after one step) relative to the largest
/// value, so that a broken kernel shows as DISAGREE rather than as fast.
template <class Prec, class D>
double elementwise_agreement(const std::string& workload, index_t n) {
  const auto once = [&](bool fused) -> std::vector<double> {
    std::optional<Unfused> off;
    if (!fused) off.emplace();
    if (workload == "adam") {
      Tensor<float, Shape<dyn>, D> p(n), g(n);
      const std::vector<float> hp = ramp<float>(n);
      std::vector<float> hg(hp.size());
      for (index_t i = 0; i < n; ++i) hg[static_cast<std::size_t>(i)] = static_cast<float>((i * 104729) % 1999) / 1e5f - 0.01f;
      p.copy_from(std::span<const float>(hp));
      g.copy_from(std::span<const float>(hg));
      optim::Adam<float, D> adam(p, g, {.lr = 1e-3});
      adam.step();
      const auto v = p.to_vector();
      return {v.begin(), v.end()};
    }
    using T = typename Prec::storage;
    Tensor<T, Shape<dyn>, D> x(n), y(n);
    x.copy_from(std::span<const T>(ramp<T>(n)));
    kiln::assign(y, kiln::relu(x * 1.5f - 0.25f) * 2.0f + 0.5f);
    std::vector<double> out;
    for (const T v : y.to_vector()) out.push_back(static_cast<double>(static_cast<float>(v)));
    return out;
  };
  const auto a = once(true), b = once(false);
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(a[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

/// StepCase (bench/train_step/step_case.hpp) on kiln-bench's fixed inputs (a deterministic ramp in
/// [-1, 1]) and the registered targets.
template <class Net, class In, class Prec, class D, class Loss, class Y, class SY>
struct Bench : StepCase<Net, In, Prec, D, Loss, Y, SY> {
  Bench(index_t batch, const std::function<std::vector<Y>(index_t)>& targets, bool capturable = false)
      : StepCase<Net, In, Prec, D, Loss, Y, SY>(inputs(batch), labels(batch, targets), capturable) {}
  void train_step() { this->step(); }

 private:
  static Tensor<float, In, D> inputs(index_t batch) {
    Tensor<float, In> xh{Extents<In>(batch)};
    for (index_t i = 0; i < xh.numel(); ++i) xh[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
    return xh.template to<D>();
  }
  static Tensor<Y, SY, D> labels(index_t batch, const std::function<std::vector<Y>(index_t)>& targets) {
    const auto values = targets(batch);
    Extents<SY> e = {};
    e[0] = batch;
    Tensor<Y, SY> yh{e};
    for (index_t i = 0; i < yh.numel(); ++i) yh[i] = values[static_cast<std::size_t>(i)];
    return yh.template to<D>();
  }
};

}  // namespace detail

class Suite {
 public:
  /// Registers a classifier: cross entropy over `classes`, labels i % classes.
  template <class Net, class In>
  void add_classifier(const std::string& name, int classes, const std::string& description = "") {
    add<Net, In, nn::CrossEntropyLoss, std::int64_t, Shape<dyn>>(name, description, [classes](index_t n) {
      std::vector<std::int64_t> v(static_cast<std::size_t>(n));
      for (index_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i % classes;
      return v;
    });
  }
  /// Registers a regression model: MSE against targets in [-1, 1], `outputs` per sample.
  template <class Net, class In, index_t Outputs = 1>
  void add_regression(const std::string& name, const std::string& description = "") {
    add<Net, In, nn::MSELoss, float, Shape<dyn, Outputs>>(name, description, [](index_t n) {
      std::vector<float> v(static_cast<std::size_t>(n * Outputs));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 200) / 100.0f - 1.0f;
      return v;
    });
  }
  /// Any loss: `targets(n)` gives the n samples' targets (Y values of shape SY, batch first).
  template <class Net, class In, class Loss, class Y, class SY>
  void add(const std::string& name, const std::string& description, std::function<std::vector<Y>(index_t)> targets) {
    Entry e;
    e.name = name;
    e.description = description.empty() ? name : description;
    e.measure = [targets](const std::string& device, const std::string& precision, index_t batch, const std::string& mode,
                          bool fused, bool graph, int warmup, int repeat) {
      return dispatch(device, precision, [&]<class Prec, class D>() {
        return measure_one<Net, In, Prec, D, Loss, Y, SY>(targets, batch, mode, fused, graph, warmup, repeat);
      });
    };
    e.agreement = [targets](const std::string& device, const std::string& precision, index_t batch) {
      return dispatch(device, precision, [&]<class Prec, class D>() {
        return agreement_of<Net, In, Prec, D, Loss, Y, SY>(targets, batch);
      });
    };
    entries_.push_back(std::move(e));
  }

  const std::vector<Entry>& entries() const { return entries_; }

  /// The command line: --models a,b --batches 32,128 --precisions fp32,bf16 --device cpu|cuda
  /// --repeat N --warmup N --json FILE --plot DIR. Returns the exit status (1 when fused and unfused
  /// disagree beyond the precision's tolerance, PyTorch's side fails, or an output cannot be written;
  /// 2 on a bad option).
  int main(int argc, char** argv);

 private:
  /// Calls run.template operator()<Prec, D>() for the named precision and device.
  template <class Run>
  static auto dispatch(const std::string& device, const std::string& precision, Run run) {
    const auto on = [&]<class D>() {
      if (precision == "fp16") return run.template operator()<MixedFp16, D>();
      if (precision == "bf16") return run.template operator()<MixedBf16, D>();
      return run.template operator()<Fp32, D>();
    };
#if KILN_CUDA_COMPILER
    if (device == "cuda") return on.template operator()<Cuda>();
#endif
    (void)device;
    return on.template operator()<Cpu>();
  }

  template <class Net, class In, class Prec, class D, class Loss, class Y, class SY>
  static StepResult measure_one(const std::function<std::vector<Y>(index_t)>& targets, index_t batch,
                                const std::string& mode, bool fused, bool graph, int warmup, int repeat) {
    const bool train = mode == "train";
    // A CUDA graph for the fused step on the GPU, not unfused (one launch per operation is what that
    // measures); the training step with Adam and the GradScaler in their capturable forms.
    graph = graph && fused && std::is_same_v<D, Cuda>;
    detail::Bench<Net, In, Prec, D, Loss, Y, SY> b(batch, targets, /*capturable=*/graph && train);
    const auto once = [&] {
      if (train) b.train_step();
      else b.infer_step();
    };
    StepResult r;
#if KILN_CUDA_COMPILER
    kiln::cuda::Graph g;
    if constexpr (std::is_same_v<D, Cuda>) {
      if (graph) {
        for (int w = 0; w < std::max(warmup, 1); ++w) once();  // plans, workspaces, the working copy
        try {
          g.capture(once);
        } catch (const kiln::Error& e) {  // a library call that cannot be captured: time it op by op
          std::fprintf(stderr, "kiln-bench: %s %s batch %lld: CUDA graph capture failed, timed without: %s\n",
                       mode.c_str(), std::string(Prec::name).c_str(), static_cast<long long>(batch), e.what());
        }
      }
    }
    if (g.captured()) {
      r = detail::measure_pass<D>([&] { g.replay(); }, true, warmup, repeat);
      r.graph = true;
    }
#endif
    // At least one untimed step, so that the counts are steady ones (the first forward of a mixed-
    // precision model also converts the working copy).
    if (!r.graph) r = detail::measure_pass<D>(once, fused, warmup, repeat);
    r.batch = batch;
    r.mode = mode;
    r.precision = std::string(Prec::name);
    return r;
  }

  /// The gradients of one forward + backward fused and unfused from the same model and batch: their
  /// largest difference relative to the largest gradient. (Parameters after Adam steps would not do: Adam
  /// moves a parameter by about lr whatever the size of its gradient, so a near-zero gradient whose sign
  /// rounds differently moves it the other way; the optimizers' unfused steps have their own tests.)
  template <class Net, class In, class Prec, class D, class Loss, class Y, class SY>
  static double agreement_of(const std::function<std::vector<Y>(index_t)>& targets, index_t batch) {
    detail::Bench<Net, In, Prec, D, Loss, Y, SY> a(batch, targets), b(batch, targets);
    const auto grads = [](auto& bench) {
      bench.model.zero_grad();
      bench.model.backward(bench.loss.backward(bench.model.forward(bench.x), bench.y));
      return bench.model.gradients().to_vector();
    };
    const auto ga = grads(a);
    std::vector<float> gb;
    {
      Unfused off;
      gb = grads(b);
    }
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < ga.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(ga[i]) - gb[i]));
      scale = std::max(scale, std::abs(static_cast<double>(ga[i])));
    }
    return scale > 0 ? diff / scale : diff;
  }

  std::vector<Entry> entries_;
};

namespace detail {
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}
/// The largest relative gradient difference fused and unfused may show: rounding of the storage type
/// (an unfused run stores every intermediate, rounded; sums are taken in other orders).
inline double tolerance_of(const std::string& precision) {
  if (precision == "fp16") return 1e-2;
  if (precision == "bf16") return 5e-2;
  return 1e-4;
}
/// Whether a measurement's repeats spread too wide for its median to mean much: its slowest step took
/// over 1.5x its fastest.
inline bool spread_wide(const Stats& s) { return s.max > 1.5 * s.min; }
/// Whether the timings of a fused / unfused pair do not resolve its speed-up: either side's spread is
/// wide, or their [min, max] ranges overlap.
inline bool noisy(const Stats& fused, const Stats& unfused) {
  return spread_wide(fused) || spread_wide(unfused) || (fused.min <= unfused.max && unfused.min <= fused.max);
}
}  // namespace detail

/// Per model, precision and mode: step time against batch size (kiln fused, kiln unfused, PyTorch eager,
/// torch.compile) and the fraction of the memory-bound limit against batch size (kiln fused and unfused;
/// PyTorch's bytes are not counted), one SVG each, drawn with gnuplot when it is installed (Debian:
/// gnuplot-nox); the data and the script are written either way.
inline int write_plots(const nlohmann::json& out, const std::string& dir, const char* program) {
  std::error_code made;
  std::filesystem::create_directories(dir, made);  // (checked before the run: this fails only if that changed)
  if (made) {
    std::fprintf(stderr, "%s: --plot %s: %s\n", program, dir.c_str(), made.message().c_str());
    return 1;
  }
  // "model.prec.mode" -> batch -> {kiln fused ms, kiln unfused ms, torch eager ms, torch compile ms,
  // kiln fused fraction, kiln unfused fraction} (NaN: none)
  constexpr std::size_t columns = 6;
  std::map<std::string, std::map<long long, std::array<double, columns>>> series;
  for (const auto& r : out["rows"]) {
    if (r["mode"] == "pass") continue;       // the elementwise workloads have one size
    if (r.value("launched", false)) continue;  // a graph's fused step launched op by op: in the table only
    const std::string name =
        r["model"].get<std::string>() + "." + r["precision"].get<std::string>() + "." + r["mode"].get<std::string>();
    auto& cell = series[name].try_emplace(r["batch"].get<long long>(), std::array<double, columns>{NAN, NAN, NAN, NAN, NAN, NAN})
                     .first->second;
    const bool torch = r.value("framework", "kiln") == "torch";
    const std::size_t col = torch ? (r.value("variant", "eager") == "eager" ? 2 : 3) : (r["fused"].get<bool>() ? 0 : 1);
    cell[col] = r["median_ms"].get<double>();
    if (!torch) cell[col + 4] = r["fraction_of_bw_limit"].get<double>();
  }
  std::ofstream gp(dir + "/kiln-bench.gp");
  gp << "# kiln-bench plots: gnuplot kiln-bench.gp (in this folder)\nset terminal svg size 640,400\n"
        "set xlabel 'batch size'\nset key top left\nset datafile missing 'nan'\n";
  const char* titles[columns] = {"kiln fused", "kiln unfused", "PyTorch eager", "PyTorch torch.compile", "kiln fused",
                                 "kiln unfused"};
  const std::string where = out["device"].get<std::string>();
  for (const auto& [name, by_batch] : series) {
    std::ofstream dat(dir + "/" + name + ".dat");
    dat << "# batch kiln_fused_ms kiln_unfused_ms torch_eager_ms torch_compile_ms kiln_fused_fraction_of_bw_limit "
           "kiln_unfused_fraction_of_bw_limit\n";
    std::array<bool, columns> present{};
    for (const auto& [b, t] : by_batch) {
      dat << b;
      for (std::size_t c = 0; c < columns; ++c) {
        dat << ' ' << (std::isnan(t[c]) ? std::string("nan") : std::to_string(t[c]));
        present[c] = present[c] || !std::isnan(t[c]);
      }
      dat << '\n';
    }
    const auto plot = [&](const std::string& file, const char* ylabel, const char* scale, std::size_t c0, std::size_t c1) {
      gp << "set output '" << file << "'\nset title '" << name << " (" << where << ")'\nset ylabel '" << ylabel << "'\n"
         << scale << "\nplot ";
      bool first = true;
      for (std::size_t c = c0; c < c1; ++c)
        if (present[c]) {
          gp << (first ? "" : ", ") << "'" << name << ".dat' using 1:" << c + 2 << " with linespoints title '" << titles[c] << "'";
          first = false;
        }
      gp << '\n';
    };
    plot(name + ".svg", "step time (ms)", "set logscale xy\nset yrange [*:*]", 0, 4);
    plot(name + ".bw.svg", "fraction of the memory-bound limit", "unset logscale y\nset logscale x\nset yrange [0:*]", 4, 6);
  }
  gp.close();
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    std::printf("plots: wrote %s/kiln-bench.gp and its data; gnuplot is not installed (apt-get install gnuplot-nox) to draw them\n",
                dir.c_str());
    return 0;
  }
  std::string quoted = "'";  // the folder in single quotes for the shell, each ' as '\''
  for (const char c : dir) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  const std::string cmd = "cd " + quoted + "' && gnuplot kiln-bench.gp";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "%s: gnuplot failed on %s/kiln-bench.gp\n", program, dir.c_str());
    return 1;
  }
  std::printf("plots: %zu SVG files in %s\n", 2 * series.size(), dir.c_str());
  return 0;
}

/// PyTorch on the same models, batches and precisions (bench/kiln_bench/torch_bench.py through Debian's
/// /usr/bin/python3 and its python3-torch; eager, and torch.compile where torch has it): a second table,
/// torch's rows in the JSON, and ratios kiln_over_torch_<variant>.<model>.<precision>.<batch>.<mode> =
/// torch's time / kiln's fused time. Models the script does not know are left out. False when PyTorch's
/// side failed (a traceback, another thread count): the run then exits 1; true when it measured, or was
/// skipped for want of torch.
inline bool compare_with_torch(nlohmann::json& out, nlohmann::json& rows, nlohmann::json& ratios,
                               const std::vector<std::string>& models, const std::vector<index_t>& batches,
                               const std::vector<std::string>& precisions, const std::string& device, int warmup,
                               int repeat, index_t elements) {
#ifdef KILN_BENCH_DIR
  const auto join = [](const auto& v) {
    std::string s;
    for (const auto& x : v) {
      std::ostringstream os;
      os << x;
      s += (s.empty() ? "" : ",") + os.str();
    }
    return s;
  };
  // The interpreter with torch: $KILN_TORCH_PYTHON, else Debian's /usr/bin/python3 on the CPU (the only one
  // its python3-torch imports from) and the `python3` on PATH on the GPU (the GPU machines' CUDA torch).
  const char* chosen = std::getenv("KILN_TORCH_PYTHON");
  const std::string python = chosen && *chosen ? chosen : device == "cuda" ? "python3" : "/usr/bin/python3";
  const std::string cmd = python + " " + std::string(KILN_BENCH_DIR) + "/kiln_bench/torch_bench.py --models " +
                          join(models) + " --batches " + join(batches) + " --precisions " + join(precisions) +
                          " --device " + device + " --warmup " + std::to_string(warmup) + " --repeat " +
                          std::to_string(repeat) + " --elements " + std::to_string(elements) + " --threads " +
                          std::to_string(omp_threads());
  const nlohmann::json t = run_json(cmd);  // (the script's stderr is ours: a traceback shows)
  if (t.contains("skipped") && t["skipped"].is_string()) {  // no torch for that interpreter
    std::printf("PyTorch: not measured (%s; KILN_TORCH_PYTHON picks another interpreter)\n",
                t["skipped"].get<std::string>().c_str());
    out["torch"] = {{"error", "not measured: " + t["skipped"].get<std::string>()}};
    return true;
  }
  if (!t.contains("rows") || t.contains("error")) {
    const std::string why = t.contains("error") ? t["error"].dump() : "it printed no rows";
    std::fprintf(stderr, "kiln-bench: PyTorch's side failed (%s: %s)\n", cmd.c_str(), why.c_str());
    out["torch"] = {{"error", "failed: " + why}};
    return false;
  }
  // The same work on both sides: torch on this process's thread count (CPU).
  if (device == "cpu" && t.value("threads", -1) != omp_threads()) {
    std::fprintf(stderr, "kiln-bench: PyTorch ran on %d thread(s), kiln on %d: no ratio of different work\n",
                 t.value("threads", -1), omp_threads());
    out["torch"] = {{"error", "thread counts differ"}};
    return false;
  }
  out["torch"] = {{"version", t.value("torch", "")}, {"skipped", t.value("skipped", nlohmann::json::array())}};
  std::map<std::string, double> kiln_fused;  // model.prec.batch.mode -> ms
  for (const auto& r : rows)
    if (r["fused"].get<bool>() && !r.value("launched", false))
      kiln_fused[r["model"].get<std::string>() + "." + r["precision"].get<std::string>() + "." +
                 std::to_string(r["batch"].get<long long>()) + "." + r["mode"].get<std::string>()] = r["median_ms"];
  std::printf("\nagainst PyTorch %s (same models, batches, precisions; autocast for fp16/bf16)\n",
              t.value("torch", "?").c_str());
  std::printf("%-10s %-5s %8s %-6s %-8s %12s %12s %10s\n", "model", "prec", "batch", "mode", "torch", "torch ms",
              "kiln ms", "kiln is");
  for (const auto& r : t["rows"]) {
    const std::string key = r["model"].get<std::string>() + "." + r["precision"].get<std::string>() + "." +
                            std::to_string(r["batch"].get<long long>()) + "." + r["mode"].get<std::string>();
    const auto it = kiln_fused.find(key);
    if (it == kiln_fused.end()) continue;
    const double torch_ms = r["median_ms"].get<double>(), ratio = torch_ms / it->second;
    std::printf("%-10s %-5s %8lld %-6s %-8s %12.3f %12.3f %9.2fx\n", r["model"].get<std::string>().c_str(),
                r["precision"].get<std::string>().c_str(), r["batch"].get<long long>(), r["mode"].get<std::string>().c_str(),
                r["variant"].get<std::string>().c_str(), torch_ms, it->second, ratio);
    ratios["kiln_over_torch_" + r["variant"].get<std::string>() + "." + key] = ratio;
    nlohmann::json row = r;
    row["framework"] = "torch";
    rows.push_back(row);
  }
  for (const auto& s : t.value("skipped", nlohmann::json::array())) std::printf("  (not measured: %s)\n", s.get<std::string>().c_str());
  std::fflush(stdout);
  return true;
#else
  (void)out, (void)rows, (void)ratios, (void)models, (void)batches, (void)precisions, (void)device, (void)warmup, (void)repeat,
      (void)elements;
  std::printf("PyTorch: not measured (built without KILN_BENCH_DIR)\n");
  return true;
#endif
}

/// Issue #7's goals for an H200, checked against this run's ratios (the worst matching one of each):
/// the fused elementwise chain at >= 90 % of the copy bandwidth, the MLP's fused training step >= 3x as
/// fast as its unfused one, and LeNet's >= 3x as fast as PyTorch eager and >= 1.5x as torch.compile.
/// Returned for the JSON; printed as OK / MISS (not an error: a CPU is not an H200) when the run measured
/// at least one of them (a run of other models measures none).
inline nlohmann::json report_goals(const nlohmann::json& ratios, const std::string& device) {
  struct Goal {
    const char* name;
    const char* prefix;  // ratio keys that start with this ...
    const char* suffix;  // ... and end with this count
    double target;
  };
  const Goal goals[] = {
      {"fused chain: fraction of the copy bandwidth", "fused_fraction_of_bw_limit.chain.", ".pass", 0.90},
      {"MLP training: fused speed-up (unfused time / fused time)", "fused_over_unfused_step.mlp.", ".train", 3.0},
      {"LeNet training: kiln speed-up (PyTorch eager time / kiln time)", "kiln_over_torch_eager.lenet.", ".train", 3.0},
      {"LeNet training: kiln speed-up (torch.compile time / kiln time)", "kiln_over_torch_compile.lenet.", ".train", 1.5},
  };
  nlohmann::json out = nlohmann::json::array();
  bool measured = false;
  for (const Goal& g : goals) {
    double worst = INFINITY;
    std::string where;
    for (const auto& [key, value] : ratios.items()) {
      const std::string p = g.prefix, sfx = g.suffix;
      if (key.rfind(p, 0) == 0 && key.size() >= p.size() + sfx.size() && key.compare(key.size() - sfx.size(), sfx.size(), sfx) == 0 &&
          value.get<double>() < worst)
        worst = value.get<double>(), where = key;
    }
    if (where.empty()) {
      out.push_back({{"goal", g.name}, {"target", g.target}, {"status", "not measured"}});
      continue;
    }
    measured = true;
    const bool ok = worst >= g.target;
    out.push_back({{"goal", g.name}, {"target", g.target}, {"worst", worst}, {"at", where}, {"status", ok ? "OK" : "MISS"}});
  }
  if (!measured) return out;
  std::printf("\nissue #7's goals (set for an H200; this run is on %s): the worst matching ratio of each\n", device.c_str());
  for (const auto& g : out) {
    const std::string name = g["goal"];
    if (g["status"] == "not measured")
      std::printf("  %-63s >= %4.2f  not measured\n", name.c_str(), g["target"].get<double>());
    else
      std::printf("  %-63s >= %4.2f  %6.2f  %-4s (%s)\n", name.c_str(), g["target"].get<double>(), g["worst"].get<double>(),
                  g["status"].get<std::string>().c_str(), g["at"].get<std::string>().c_str());
  }
  std::fflush(stdout);
  return out;
}

inline int Suite::main(int argc, char** argv) {
  std::vector<std::string> models, precisions{"fp32"};
  std::vector<index_t> batches{32, 128, 512};
  std::string device = "cpu", json_path, plot_dir, torch = "yes", graphs = "yes";
  int repeat = 10, warmup = 2;
  index_t elements = -1;  // -1: 2^24 on the CPU, 2^26 on the GPU
  index_t copy_mib = 256;
  for (const auto& e : entries_) models.push_back(e.name);
  const auto usage = [&](FILE* f) {
    std::fprintf(f,
                 "usage: %s [--models a,b] [--batches 32,128,512] [--precisions fp32,bf16,fp16] [--device cpu|cuda]\n"
                 "          [--repeat 10] [--warmup 2] [--json FILE] [--plot DIR] [--torch yes|no]\n"
                 "          [--elements 2^24 (GPU: 2^26); 0: none] [--copy-mib 256] [--graphs yes|no]\n"
                 "Times a training step and an inference step of each model, fused (kiln's default) and unfused\n"
                 "(kiln::Unfused: one pass per operation), counts their passes, bytes and operations, measures\n"
                 "the copy bandwidth, and checks that both give the same gradients. On the GPU the fused step\n"
                 "is captured once and replayed as a CUDA graph (--graphs no: launched op by op).\nmodels:",
                 argv[0]);
    for (const auto& e : entries_) std::fprintf(f, "  %s (%s)", e.name.c_str(), e.description.c_str());
    std::fprintf(f, "\n");
  };
  // A whole decimal number or 2^K in [least, most]: all of v (std::stoll would take "12x" as 12).
  constexpr long long int_max = std::numeric_limits<int>::max(), any = std::numeric_limits<long long>::max();
  const auto whole_number = [](const std::string& v, long long least, long long most) {
    const bool power = v.rfind("2^", 0) == 0;
    const char* begin = v.data() + (power ? 2 : 0);
    long long x = 0;
    const auto [end, ec] = std::from_chars(begin, v.data() + v.size(), x);
    if (ec != std::errc() || end != v.data() + v.size() || x < 0 || (power && x > 62))
      throw std::invalid_argument(v);
    if (power) x = 1ll << x;
    if (x < least || x > most) throw std::invalid_argument(v);
    return x;
  };
  // What each numeric option takes, as its message says when given something else.
  const std::map<std::string, const char*> expected = {
      {"--repeat", "a whole number from 1 to 2^31-1 (timed steps per measurement)"},
      {"--warmup", "a whole number from 0 to 2^31-1 (untimed steps first)"},
      {"--elements", "a whole number >= 0 or 2^K (0: no elementwise rows)"},
      {"--copy-mib", "a whole number >= 1 (MiB copied to measure the bandwidth)"},
      {"--batches", "batch sizes >= 1, comma-separated (32,128,512)"}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    }
    std::string v;
    if (const auto eq = a.find('='); a.starts_with("--") && eq != std::string::npos) {  // --option=value too
      v = a.substr(eq + 1);
      a.resize(eq);
    } else if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], a.c_str());
      return 2;
    } else {
      v = argv[++i];
    }
    try {
      if (a == "--models") models = detail::split_list(v);
      else if (a == "--precisions") precisions = detail::split_list(v);
      else if (a == "--device") device = v;
      else if (a == "--json") json_path = v;
      else if (a == "--plot") plot_dir = v;
      else if (a == "--torch") torch = v;
      else if (a == "--graphs") graphs = v;
      else if (a == "--repeat") repeat = static_cast<int>(whole_number(v, 1, int_max));
      else if (a == "--warmup") warmup = static_cast<int>(whole_number(v, 0, int_max));
      else if (a == "--elements") elements = whole_number(v, 0, any);
      else if (a == "--copy-mib") copy_mib = whole_number(v, 1, any);
      else if (a == "--batches") {
        batches.clear();
        for (const auto& b : detail::split_list(v)) batches.push_back(whole_number(b, 1, any));
      } else {
        std::fprintf(stderr, "%s: unknown option %s (--help lists them)\n", argv[0], a.c_str());
        return 2;
      }
    } catch (const std::invalid_argument&) {  // only the numeric options throw it
      std::fprintf(stderr, "%s: %s %s: expected %s\n", argv[0], a.c_str(), v.c_str(), expected.at(a));
      return 2;
    }
  }
  for (const auto& p : precisions)
    if (p != "fp32" && p != "fp16" && p != "bf16") {
      std::fprintf(stderr, "%s: --precisions: unknown precision '%s' (fp32, fp16, bf16)\n", argv[0], p.c_str());
      return 2;
    }
  if (torch != "yes" && torch != "no") {
    std::fprintf(stderr, "%s: --torch %s: give yes or no\n", argv[0], torch.c_str());
    return 2;
  }
  if (models.empty()) {
    std::fprintf(stderr, "%s: --models names no model\n", argv[0]);
    return 2;
  }
  if (precisions.empty()) {
    std::fprintf(stderr, "%s: --precisions names no precision (fp32, fp16, bf16)\n", argv[0]);
    return 2;
  }
  if (!plot_dir.empty()) {  // a folder, made now: an error after the whole run would lose it
    std::error_code made;
    std::filesystem::create_directories(plot_dir, made);
    const auto why = made ? made.message() : kiln::why_unwritable(std::filesystem::path(plot_dir) / "kiln-bench.gp");
    if (!why.empty()) {
      std::fprintf(stderr, "%s: --plot %s: %s\n", argv[0], plot_dir.c_str(), why.c_str());
      return 2;
    }
  }
  if (const auto why = json_path.empty() ? "" : kiln::why_unwritable(json_path); !why.empty()) {
    std::fprintf(stderr, "%s: --json %s: %s\n", argv[0], json_path.c_str(), why.c_str());
    return 2;
  }
  if (graphs != "yes" && graphs != "no") {
    std::fprintf(stderr, "%s: --graphs %s: give yes or no\n", argv[0], graphs.c_str());
    return 2;
  }
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "%s: --device %s: give cpu or cuda\n", argv[0], device.c_str());
    return 2;
  }
#if KILN_CUDA_COMPILER
  if (device == "cuda" && !kiln::cuda::is_available()) {
    std::printf("no CUDA device: skipped\n");
    return 0;
  }
#else
  if (device == "cuda") {
    std::fprintf(stderr, "%s: --device cuda: this build has no CUDA (build it with nvcc: the ci preset)\n", argv[0]);
    return 2;
  }
#endif
  if (batches.empty()) {
    std::fprintf(stderr, "%s: --batches names no batch size\n", argv[0]);
    return 2;
  }
  if (elements < 0) elements = device == "cuda" ? index_t(1) << 26 : index_t(1) << 24;
  std::vector<const Entry*> chosen;
  for (const auto& m : models) {
    const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == m; });
    if (it == entries_.end()) {
      std::fprintf(stderr, "%s: --models: no model named '%s'\n", argv[0], m.c_str());
      usage(stderr);
      return 2;
    }
    chosen.push_back(&*it);
  }

  if (!optimized_build()) std::fprintf(stderr, "%s: %s\n", argv[0], unoptimized_build_warning);
  nlohmann::json out;
  out["tool"] = "kiln-bench";
  out["date"] = utc_now();
  out["build"] = build_info();
  out["machine"] = machine_info();
  out["threads"] = omp_threads();
  out["device"] = device;
  out["config"] = {{"repeat", repeat}, {"warmup", warmup}, {"elements", elements}, {"graphs", graphs == "yes"}};
  // The copy bandwidth is measured before and after the steps, and the better of the two is the limit:
  // on a shared machine one measurement can land in a busy moment (seen: 33 and 66 GB/s minutes apart).
  // The table is printed once both are known.
  const auto measure_bandwidth = [&] {
    return dispatch(device, "fp32", [&]<class, class D>() {
      return detail::copy_bandwidth<D>(static_cast<std::size_t>(copy_mib) << 20, std::max(repeat, 3));
    });
  };
  const double bw_before = measure_bandwidth();
  double bw = bw_before;
  nlohmann::json rows = nlohmann::json::array(), ratios = nlohmann::json::object();
  const auto row_of = [&](const StepResult& r) {
    return nlohmann::json{{"framework", "kiln"},
                          {"model", r.model},
                          {"precision", r.precision},
                          {"batch", r.batch},
                          {"mode", r.mode},
                          {"fused", r.fused},
                          {"graph", r.graph},
                          {"median_ms", r.seconds.median * 1e3},
                          {"min_ms", r.seconds.min * 1e3},
                          {"max_ms", r.seconds.max * 1e3},
                          {"passes", r.work.passes},
                          {"bytes", r.work.bytes},
                          {"ops", r.work.ops},
                          {"fraction_of_bw_limit", r.fraction_of_bw_limit(bw)},
                          {"samples_per_s", static_cast<double>(r.batch) / r.seconds.median}};
  };
  // The ratios of one fused / unfused pair under `key` (fused_over_unfused_step: the fused speed-up,
  // unfused time / fused time).
  const auto pair_ratios = [&](const StepResult& f, const StepResult& u, const std::string& key) {
    ratios["fused_over_unfused_step." + key] = u.seconds.median / f.seconds.median;
    ratios["unfused_over_fused_passes." + key] =
        static_cast<double>(u.work.passes) / static_cast<double>(std::max<std::uint64_t>(f.work.passes, 1));
    ratios["unfused_over_fused_bytes." + key] =
        static_cast<double>(u.work.bytes) / static_cast<double>(std::max<std::uint64_t>(f.work.bytes, 1));
    ratios["fused_fraction_of_bw_limit." + key] = f.fraction_of_bw_limit(bw);
    ratios["unfused_fraction_of_bw_limit." + key] = u.fraction_of_bw_limit(bw);
  };
  const auto print_pair = [&](const StepResult& f, const StepResult& u, const std::string& tail) {
    std::printf("%-10s %-5s %8lld %-5s %10.3f %10.3f %7.2fx %5llu/%-5llu %9.3f/%-9.3f %9.1f %5.1f%% %5.1f%%%s\n",
                f.model.c_str(), f.precision.c_str(), static_cast<long long>(f.batch), f.mode.c_str(), f.seconds.median * 1e3,
                u.seconds.median * 1e3, u.seconds.median / f.seconds.median, static_cast<unsigned long long>(f.work.passes),
                static_cast<unsigned long long>(u.work.passes), static_cast<double>(f.work.bytes) * 1e-6,
                static_cast<double>(u.work.bytes) * 1e-6, static_cast<double>(f.work.ops) * 1e-6,
                100 * f.fraction_of_bw_limit(bw), 100 * u.fraction_of_bw_limit(bw), tail.c_str());
  };
  int status = 0;
  bool disagree = false;  // a DISAGREE row (status 1 has other causes too)
  struct Pair {
    StepResult fused, unfused;
    std::string tail;                   // the agreement column
    std::optional<StepResult> launched;  // fused, op by op, when `fused` is a graph replay
  };
  std::vector<Pair> pairs;
  for (const Entry* e : chosen)
    for (const auto& p : precisions)
      for (const index_t b : batches) {
        std::fprintf(stderr, "kiln-bench: %s %s batch %lld\n", e->name.c_str(), p.c_str(), static_cast<long long>(b));
        const double agree = e->agreement(device, p, b);
        const bool ok = agree <= detail::tolerance_of(p);
        if (!ok) status = 1, disagree = true;
        char tail[64];
        std::snprintf(tail, sizeof tail, " %9.1e%s", agree, ok ? "" : " DISAGREE");
        for (const std::string mode : {"train", "infer"}) {
          auto [fused, unfused] = detail::abba(
              [&](bool f, int n) { return e->measure(device, p, b, mode, f, f && graphs == "yes", warmup, n); }, repeat);
          Pair pr{std::move(fused), std::move(unfused), tail, std::nullopt};
          pr.fused.model = pr.unfused.model = e->name;
          if (pr.fused.graph) {  // what the graph buys: the same fused step launched op by op
            pr.launched = e->measure(device, p, b, mode, true, false, warmup, repeat);
            pr.launched->model = e->name;
            char g[48];
            std::snprintf(g, sizeof g, " graph (%.2fx launched)", pr.launched->seconds.median / pr.fused.seconds.median);
            pr.tail += g;
          }
          pairs.push_back(std::move(pr));
        }
        ratios["fused_unfused_agreement." + e->name + "." + p + "." + std::to_string(b)] = agree;
      }
  const std::size_t model_pairs = pairs.size();
  if (elements > 0)
    for (const std::string w : {"chain", "adam"})
      for (const auto& p : precisions) {
        if (w == "adam" && p != precisions.front()) continue;  // fp32 master weights whatever the precision
        std::fprintf(stderr, "kiln-bench: %s %s, %lld elements\n", w.c_str(), p.c_str(), static_cast<long long>(elements));
        auto [f, u] = dispatch(device, p, [&]<class Prec, class D>() {
          return detail::abba([&](bool fused, int n) { return detail::measure_elementwise<Prec, D>(w, elements, fused, warmup, n); },
                              repeat);
        });
        // The results fused and unfused (on at most 2^16 elements: the same kernels as the timed ones).
        const std::string prec = w == "adam" ? "fp32" : p;
        const double agree = dispatch(device, p, [&]<class Prec, class D>() {
          return detail::elementwise_agreement<Prec, D>(w, std::min<index_t>(elements, index_t(1) << 16));
        });
        const bool ok = agree <= detail::tolerance_of(prec);
        if (!ok) status = 1, disagree = true;
        char tail[64];
        std::snprintf(tail, sizeof tail, " %9.1e%s", agree, ok ? "" : " DISAGREE");
        pairs.push_back({std::move(f), std::move(u), tail, std::nullopt});
      }
  const double bw_after = measure_bandwidth();
  bw = std::max(bw_before, bw_after);
  out["copy_bandwidth_GBps"] = bw * 1e-9;
  out["copy_bandwidth_measurements_GBps"] = {bw_before * 1e-9, bw_after * 1e-9};

  std::printf("kiln-bench on %s (%d thread%s), copy bandwidth %.1f GB/s (the better of %.1f before and %.1f after):\n"
              "median step time; passes, MB moved (fused/unfused) and Mop (fused) per step counted from the operands;\n"
              "%%bw: the time the step's bytes take at copy bandwidth over its time (100%% = memory-bound at copy\n"
              "speed); unfused = one pass per operation; graph: the fused step replayed as a CUDA graph (and\n"
              "how much faster that is than the same fused step launched op by op)\n",
              device.c_str(), omp_threads(), omp_threads() == 1 ? "" : "s", bw * 1e-9, bw_before * 1e-9, bw_after * 1e-9);
  if (!optimized_build()) std::printf("%s\n", unoptimized_build_warning);
  const char* header = "%-10s %-5s %8s %-5s %10s %10s %8s %11s %19s %9s %6s %6s %s\n";
  std::printf(header, "model", "prec", "batch", "mode", "fused ms", "unfused ms", "speedup", "passes", "MB moved",
              "Mop", "%bw f", "%bw u", "agreement");
  bool any_noisy = false;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& [f, u, tail, launched] = pairs[i];
    if (i == model_pairs)
      std::printf("\nelementwise work alone (batch = elements): chain = relu(1.5 x - 0.25) 2 + 0.5, adam = an Adam step\n");
    const bool noisy = detail::noisy(f.seconds, u.seconds);
    any_noisy = any_noisy || noisy;
    print_pair(f, u, tail + (noisy ? " noisy" : ""));
    for (const StepResult* r : {&f, &u}) {
      auto row = row_of(*r);
      row["noisy"] = noisy;
      rows.push_back(std::move(row));
    }
    const std::string key = f.model + "." + f.precision + "." + std::to_string(f.batch) + "." + f.mode;
    pair_ratios(f, u, key);
    if (launched) {
      auto row = row_of(*launched);
      row["launched"] = true;  // the fused step without its graph, for graph_over_launched_step
      row["noisy"] = detail::spread_wide(launched->seconds);
      rows.push_back(std::move(row));
      ratios["graph_over_launched_step." + key] = launched->seconds.median / f.seconds.median;
    }
  }
  if (any_noisy)
    std::printf("noisy: the slowest of a row's fused or unfused steps took over 1.5x its fastest, or the fused and\n"
                "unfused [min, max] ranges overlap: its speed-up is within the noise (a busy machine, or fusion buys\n"
                "less than the spread); rerun with more --repeat and OMP_NUM_THREADS at most the idle cores\n");
  std::fflush(stdout);
  if (torch == "yes" && !compare_with_torch(out, rows, ratios, models, batches, precisions, device, warmup, repeat, elements))
    status = 1;
  out["goals"] = report_goals(ratios, device);
  out["rows"] = rows;
  out["ratios"] = ratios;
  if (!json_path.empty()) {
    try {
      kiln::write_file_atomically(json_path, out.dump(2) + '\n');
    } catch (const kiln::FileError& e) {
      std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
      return 1;
    }
  }
  if (!plot_dir.empty()) status = std::max(status, write_plots(out, plot_dir, argv[0]));
  if (disagree) std::fprintf(stderr, "%s: fused and unfused training disagree beyond the tolerance (DISAGREE rows)\n", argv[0]);
  return status;
}

}  // namespace kiln::bench
