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
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/fusion.hpp>
#include <kiln/nn/nn.hpp>
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
  Stats seconds;                 ///< per step
  std::uint64_t passes = 0;      ///< passes over memory in one step (kiln::passes())
};

/// What a registered model runs: `measure(device, precision, batch, mode, fused, warmup, repeat)`, and
/// `agreement(device, precision, batch)`: the largest difference of one backward's gradients fused and
/// unfused from the same start, relative to the largest gradient.
struct Entry {
  std::string name;
  std::string description;
  std::function<StepResult(const std::string&, const std::string&, index_t, const std::string&, bool, int, int)> measure;
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

/// StepCase (bench/train_step/step_case.hpp) on kiln-bench's fixed inputs (a deterministic ramp in
/// [-1, 1]) and the registered targets.
template <class Net, class In, class Prec, class D, class Loss, class Y, class SY>
struct Bench : StepCase<Net, In, Prec, D, Loss, Y, SY> {
  Bench(index_t batch, const std::function<std::vector<Y>(index_t)>& targets)
      : StepCase<Net, In, Prec, D, Loss, Y, SY>(inputs(batch), labels(batch, targets)) {}
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
                          bool fused, int warmup, int repeat) {
      return dispatch(device, precision, [&]<class Prec, class D>() {
        return measure_one<Net, In, Prec, D, Loss, Y, SY>(targets, batch, mode, fused, warmup, repeat);
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
  /// disagree beyond the precision's tolerance, 2 on a bad option).
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
                                const std::string& mode, bool fused, int warmup, int repeat) {
    detail::Bench<Net, In, Prec, D, Loss, Y, SY> b(batch, targets);
    const bool train = mode == "train";
    const auto once = [&] {
      if (train) b.train_step();
      else b.infer_step();
    };
    std::optional<Unfused> off;
    if (!fused) off.emplace();
    // At least one untimed step, so that the pass count is a steady one (the first forward of a mixed-
    // precision model also converts the working copy).
    for (int w = 0; w < std::max(warmup, 1); ++w) once();
    detail::synchronize<D>();
    const auto p0 = passes();
    once();
    detail::synchronize<D>();
    StepResult r;
    r.passes = passes() - p0;
    std::vector<double> samples;
    for (int k = 0; k < repeat; ++k) {
      const double t0 = detail::now_seconds();
      once();
      detail::synchronize<D>();
      samples.push_back(detail::now_seconds() - t0);
    }
    r.seconds = summarize(samples);
    r.batch = batch;
    r.mode = mode;
    r.fused = fused;
    r.device = std::is_same_v<D, Cpu> ? "cpu" : "cuda";
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
}  // namespace detail

/// Step time against batch size, fused and unfused, one SVG per model, precision and mode, drawn with
/// gnuplot when it is installed (Debian: gnuplot-nox); the data and the script are written either way.
inline int write_plots(const nlohmann::json& out, const std::string& dir, const char* program) {
  std::filesystem::create_directories(dir);
  // "model.prec.mode" -> batch -> {kiln fused, kiln unfused, torch eager, torch compile} ms (NaN: none)
  std::map<std::string, std::map<long long, std::array<double, 4>>> series;
  for (const auto& r : out["rows"]) {
    const std::string name =
        r["model"].get<std::string>() + "." + r["precision"].get<std::string>() + "." + r["mode"].get<std::string>();
    auto& cell = series[name].try_emplace(r["batch"].get<long long>(), std::array<double, 4>{NAN, NAN, NAN, NAN})
                     .first->second;
    const bool torch = r.value("framework", "kiln") == "torch";
    const std::size_t col = torch ? (r.value("variant", "eager") == "eager" ? 2 : 3) : (r["fused"].get<bool>() ? 0 : 1);
    cell[col] = r["median_ms"].get<double>();
  }
  std::ofstream gp(dir + "/kiln-bench.gp");
  gp << "# kiln-bench plots: gnuplot kiln-bench.gp (in this folder)\nset terminal svg size 640,400\n"
        "set logscale xy\nset xlabel 'batch size'\nset ylabel 'step time (ms)'\nset key top left\n"
        "set datafile missing 'nan'\n";
  const char* titles[4] = {"kiln fused", "kiln unfused", "PyTorch eager", "PyTorch torch.compile"};
  for (const auto& [name, by_batch] : series) {
    std::ofstream dat(dir + "/" + name + ".dat");
    dat << "# batch kiln_fused_ms kiln_unfused_ms torch_eager_ms torch_compile_ms\n";
    std::array<bool, 4> present{};
    for (const auto& [b, t] : by_batch) {
      dat << b;
      for (std::size_t c = 0; c < 4; ++c) {
        dat << ' ' << (std::isnan(t[c]) ? std::string("nan") : std::to_string(t[c]));
        present[c] = present[c] || !std::isnan(t[c]);
      }
      dat << '\n';
    }
    gp << "set output '" << name << ".svg'\nset title '" << name << " (" << out["device"].get<std::string>() << ")'\nplot ";
    bool first = true;
    for (std::size_t c = 0; c < 4; ++c)
      if (present[c]) {
        gp << (first ? "" : ", ") << "'" << name << ".dat' using 1:" << c + 2 << " with linespoints title '" << titles[c] << "'";
        first = false;
      }
    gp << '\n';
  }
  gp.close();
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    std::printf("plots: wrote %s/kiln-bench.gp and its data; gnuplot is not installed (apt-get install gnuplot-nox) to draw them\n",
                dir.c_str());
    return 0;
  }
  const std::string cmd = "cd '" + dir + "' && gnuplot kiln-bench.gp";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "%s: gnuplot failed on %s/kiln-bench.gp\n", program, dir.c_str());
    return 1;
  }
  std::printf("plots: %zu SVG files in %s\n", series.size(), dir.c_str());
  return 0;
}

/// PyTorch on the same models, batches and precisions (bench/kiln_bench/torch_bench.py through Debian's
/// /usr/bin/python3 and its python3-torch; eager, and torch.compile where torch has it): a second table,
/// torch's rows in the JSON, and ratios kiln_over_torch_<variant>.<model>.<precision>.<batch>.<mode> =
/// torch's time / kiln's fused time. Models the script does not know are left out.
inline void compare_with_torch(nlohmann::json& out, nlohmann::json& rows, nlohmann::json& ratios,
                               const std::vector<std::string>& models, const std::vector<index_t>& batches,
                               const std::vector<std::string>& precisions, const std::string& device, int warmup,
                               int repeat) {
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
  const std::string cmd = "/usr/bin/python3 " + std::string(KILN_BENCH_DIR) + "/kiln_bench/torch_bench.py --models " +
                          join(models) + " --batches " + join(batches) + " --precisions " + join(precisions) +
                          " --device " + device + " --warmup " + std::to_string(warmup) + " --repeat " +
                          std::to_string(repeat) + " 2>/dev/null";
  const nlohmann::json t = run_json(cmd);
  if (!t.contains("rows")) {
    std::printf("PyTorch: not measured (/usr/bin/python3 with torch not found, or the script failed)\n");
    out["torch"] = {{"error", "not measured"}};
    return;
  }
  out["torch"] = {{"version", t.value("torch", "")}, {"skipped", t.value("skipped", nlohmann::json::array())}};
  std::map<std::string, double> kiln_fused;  // model.prec.batch.mode -> ms
  for (const auto& r : rows)
    if (r["fused"].get<bool>())
      kiln_fused[r["model"].get<std::string>() + "." + r["precision"].get<std::string>() + "." +
                 std::to_string(r["batch"].get<long long>()) + "." + r["mode"].get<std::string>()] = r["median_ms"];
  std::printf("\nagainst PyTorch %s (same models, batches, precisions; autocast for fp16/bf16)\n",
              t.value("torch", "?").c_str());
  std::printf("%-10s %-5s %6s %-6s %-8s %12s %12s %10s\n", "model", "prec", "batch", "mode", "torch", "torch ms",
              "kiln ms", "kiln is");
  for (const auto& r : t["rows"]) {
    const std::string key = r["model"].get<std::string>() + "." + r["precision"].get<std::string>() + "." +
                            std::to_string(r["batch"].get<long long>()) + "." + r["mode"].get<std::string>();
    const auto it = kiln_fused.find(key);
    if (it == kiln_fused.end()) continue;
    const double torch_ms = r["median_ms"].get<double>(), ratio = torch_ms / it->second;
    std::printf("%-10s %-5s %6lld %-6s %-8s %12.3f %12.3f %9.2fx\n", r["model"].get<std::string>().c_str(),
                r["precision"].get<std::string>().c_str(), r["batch"].get<long long>(), r["mode"].get<std::string>().c_str(),
                r["variant"].get<std::string>().c_str(), torch_ms, it->second, ratio);
    ratios["kiln_over_torch_" + r["variant"].get<std::string>() + "." + key] = ratio;
    nlohmann::json row = r;
    row["framework"] = "torch";
    rows.push_back(row);
  }
  for (const auto& s : t.value("skipped", nlohmann::json::array())) std::printf("  (not measured: %s)\n", s.get<std::string>().c_str());
  std::fflush(stdout);
#else
  (void)out, (void)rows, (void)ratios, (void)models, (void)batches, (void)precisions, (void)device, (void)warmup, (void)repeat;
  std::printf("PyTorch: not measured (built without KILN_BENCH_DIR)\n");
#endif
}

inline int Suite::main(int argc, char** argv) {
  std::vector<std::string> models, precisions{"fp32"};
  std::vector<index_t> batches{32, 128, 512};
  std::string device = "cpu", json_path, plot_dir, torch = "yes";
  int repeat = 10, warmup = 2;
  for (const auto& e : entries_) models.push_back(e.name);
  const auto usage = [&](FILE* f) {
    std::fprintf(f,
                 "usage: %s [--models a,b] [--batches 32,128,512] [--precisions fp32,bf16,fp16] [--device cpu|cuda]\n"
                 "          [--repeat 10] [--warmup 2] [--json FILE] [--plot DIR] [--torch yes|no]\n"
                 "Times a training step and an inference step of each model, fused (kiln's default) and unfused\n"
                 "(kiln::Unfused: one pass per operation), and checks that both give the same parameters.\nmodels:",
                 argv[0]);
    for (const auto& e : entries_) std::fprintf(f, "  %s (%s)", e.name.c_str(), e.description.c_str());
    std::fprintf(f, "\n");
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    try {
      if (a == "--models") models = detail::split_list(v);
      else if (a == "--precisions") precisions = detail::split_list(v);
      else if (a == "--device") device = v;
      else if (a == "--json") json_path = v;
      else if (a == "--plot") plot_dir = v;
      else if (a == "--torch") torch = v;
      else if (a == "--repeat") repeat = std::stoi(v);
      else if (a == "--warmup") warmup = std::stoi(v);
      else if (a == "--batches") {
        batches.clear();
        for (const auto& b : detail::split_list(v)) batches.push_back(std::stoll(b));
      } else {
        std::fprintf(stderr, "%s: unknown option %s (--help lists them)\n", argv[0], a.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "%s: %s %s: not a number\n", argv[0], a.c_str(), v.c_str());
      return 2;
    }
  }
  for (const auto& p : precisions)
    if (p != "fp32" && p != "fp16" && p != "bf16") {
      std::fprintf(stderr, "%s: --precisions: unknown precision '%s' (fp32, fp16, bf16)\n", argv[0], p.c_str());
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
  if (repeat < 1 || warmup < 0 || batches.empty()) {
    std::fprintf(stderr, "%s: --repeat must be >= 1, --warmup >= 0, --batches not empty\n", argv[0]);
    return 2;
  }
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

  nlohmann::json out;
  out["tool"] = "kiln-bench";
  out["date"] = utc_now();
  out["machine"] = machine_info();
  out["threads"] = omp_threads();
  out["device"] = device;
  out["config"] = {{"repeat", repeat}, {"warmup", warmup}};
  nlohmann::json rows = nlohmann::json::array(), ratios = nlohmann::json::object();
  int status = 0;
  std::printf("kiln-bench on %s (%d thread%s): median step time, passes over memory per step; unfused = one pass per operation\n",
              device.c_str(), omp_threads(), omp_threads() == 1 ? "" : "s");
  std::printf("%-10s %-5s %6s %-6s %12s %12s %8s %8s %9s %11s\n", "model", "prec", "batch", "mode", "fused ms",
              "unfused ms", "passes", "unfused", "speedup", "agreement");
  for (const Entry* e : chosen)
    for (const auto& p : precisions)
      for (const index_t b : batches) {
        const double agree = e->agreement(device, p, b);
        const bool ok = agree <= detail::tolerance_of(p);
        if (!ok) status = 1;
        for (const std::string mode : {"train", "infer"}) {
          const StepResult f = e->measure(device, p, b, mode, true, warmup, repeat);
          const StepResult u = e->measure(device, p, b, mode, false, warmup, repeat);
          const double speedup = u.seconds.median / f.seconds.median;
          std::printf("%-10s %-5s %6lld %-6s %12.3f %12.3f %8llu %8llu %8.2fx %10.1e%s\n", e->name.c_str(), p.c_str(),
                      static_cast<long long>(b), mode.c_str(), f.seconds.median * 1e3, u.seconds.median * 1e3,
                      static_cast<unsigned long long>(f.passes), static_cast<unsigned long long>(u.passes), speedup, agree,
                      ok ? "" : " DISAGREE");
          for (const StepResult* r : {&f, &u})
            rows.push_back({{"framework", "kiln"},
                            {"model", e->name},
                            {"precision", p},
                            {"batch", b},
                            {"mode", mode},
                            {"fused", r->fused},
                            {"median_ms", r->seconds.median * 1e3},
                            {"min_ms", r->seconds.min * 1e3},
                            {"max_ms", r->seconds.max * 1e3},
                            {"passes", r->passes},
                            {"samples_per_s", static_cast<double>(b) / r->seconds.median}});
          const std::string key = e->name + "." + p + "." + std::to_string(b) + "." + mode;
          ratios["fused_over_unfused_step." + key] = speedup;
          ratios["unfused_over_fused_passes." + key] =
              static_cast<double>(u.passes) / static_cast<double>(std::max<std::uint64_t>(f.passes, 1));
        }
        ratios["fused_unfused_agreement." + e->name + "." + p + "." + std::to_string(b)] = agree;
      }
  std::fflush(stdout);
  if (torch == "yes") compare_with_torch(out, rows, ratios, models, batches, precisions, device, warmup, repeat);
  out["rows"] = rows;
  out["ratios"] = ratios;
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(2) << '\n';
    if (!f) {
      std::fprintf(stderr, "%s: cannot write %s\n", argv[0], json_path.c_str());
      return 1;
    }
  }
  if (!plot_dir.empty()) status = std::max(status, write_plots(out, plot_dir, argv[0]));
  if (status == 1) std::fprintf(stderr, "%s: fused and unfused training disagree beyond the tolerance (DISAGREE rows)\n", argv[0]);
  return status;
}

}  // namespace kiln::bench
