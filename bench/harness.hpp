/// A tiny benchmark harness: warm-up, round-robin repeated timing (median, min, max), a table, target
/// ratios marked PASS/MISS, and `--json FILE` output. A miss never fails the run: benches are not tests.
///
/// Example:
///   kiln::bench::Harness h("bench_fusion", argc, argv, {.n = 1 << 24, .repeat = 20});
///   h.add("fused", 8.0 * h.n(), "1 pass", [&] { y = kiln::relu(a * x + b) * c + d; });
///   h.add("copy", 8.0 * h.n(), "1 pass", [&] { y = x; });
///   h.run();
///   h.ratio("fused_over_copy_bw", h.bandwidth("fused") / h.bandwidth("copy"), 0.85);
///   return h.finish();
///
/// Options every bench understands: --n N (problem size; N or 2^K), --repeat R, --warmup W,
/// --json FILE, --help. A bench may accept more through `extra` (name -> help), read with option().
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <array>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <kiln/backend/cpu/blas_kernels.hpp>
#include <kiln/io/atomic_file.hpp>

namespace kiln::bench {

/// Median, min, max and mean of a set of samples (seconds).
struct Stats {
  double median = 0, min = 0, max = 0, mean = 0;
};

inline Stats summarize(std::vector<double> s) {
  Stats r;
  if (s.empty()) return r;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  r.median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  r.min = s.front();
  r.max = s.back();
  double sum = 0;
  for (double v : s) sum += v;
  r.mean = sum / static_cast<double>(n);
  return r;
}

/// One measured case: its samples (seconds per iteration) and the bytes one iteration moves.
struct Case {
  std::string name;
  std::string note;
  double bytes = 0;                    ///< read + written per iteration; 0: no bandwidth column
  std::function<double()> timed_once;  ///< runs one iteration, returns its duration in seconds
  std::vector<double> seconds;
  Stats stats;
  /// Effective bandwidth at the median, GB/s (1e9 bytes per second).
  double gbps() const { return stats.median > 0 && bytes > 0 ? bytes / stats.median * 1e-9 : 0.0; }
};

/// A figure compared with its target (value >= target passes).
struct Ratio {
  std::string name;
  double value = 0;
  double target = 0;
  std::string note;
  bool pass() const { return value >= target; }
};

/// Defaults of the common options; benches pass their own.
struct Config {
  std::int64_t n = 1 << 24;  ///< problem size (elements)
  int repeat = 20;           ///< timed rounds (each round times every case once)
  int warmup = 3;            ///< untimed iterations of each case before the first round
};

/// Hostname, CPU model (/proc/cpuinfo), logical core count.
inline nlohmann::json machine_info() {
  nlohmann::json m;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  m["hostname"] = host;
  std::string model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        model = line.substr(colon + 1);
        model.erase(0, model.find_first_not_of(" \t"));
      }
      break;
    }
  }
  m["cpu"] = model;
  m["cores"] = std::thread::hardware_concurrency();
  // (which kernels OpenBLAS runs decides CPU GEMM times: compare runs that ran the same)
  m["blas"] = kiln::backend::cpu::blas_description();
  return m;
}

/// Whether this bench was compiled with optimisation (-O1 and up: __OPTIMIZE__); an unoptimised build's
/// ratios mean little (a -O0 fused chain runs at a fifth of a copy's bandwidth, at -O3 at par).
inline constexpr bool optimized_build() {
#if defined(__OPTIMIZE__)
  return true;
#else
  return false;
#endif
}

/// What a bench prints, on its table and on stderr, when !optimized_build().
inline constexpr const char* unoptimized_build_warning =
    "WARNING: built without optimisation (no -O): these timings and ratios are not the library's; "
    "build with preset cpu or cuda, not ci";

/// What the numbers come from: optimised or not, assertions on or off, the compiler.
inline nlohmann::json build_info() {
  nlohmann::json b;
  b["optimized"] = optimized_build();
#if defined(NDEBUG)
  b["ndebug"] = true;
#else
  b["ndebug"] = false;
#endif
#if defined(__VERSION__)
  b["compiler"] = __VERSION__;
#endif
  return b;
}

/// OpenMP's max threads (1 without OpenMP).
inline int omp_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// Runs a shell command (a reference implementation, e.g. PyTorch's side of a bench; its stderr is the
/// bench's, so a traceback shows) and parses what it prints as one JSON object; {"error": why} when it
/// cannot start, exits with a status other than 0, or prints something else. A script without its
/// library says {"skipped": why} and exits 0 (bench/reference.hpp's convention).
inline nlohmann::json run_json(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (!p) return {{"error", "cannot run " + command}};
  std::string out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int status = pclose(p);
  if (status != 0)
    return {{"error", command + " failed (" +
                          (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : "killed") + ")"}};
  try {
    auto j = nlohmann::json::parse(out);
    if (j.is_object()) return j;
  } catch (const nlohmann::json::exception&) {
  }
  return {{"error", command + " printed '" + out.substr(0, 200) + "', not one JSON object"}};
}

/// "2024-05-01T12:34:56Z"
inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// argv without --json FILE / --json=FILE: a distributed bench's ranks other than 0 run silently.
inline std::vector<char*> without_json(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  for (std::size_t i = 1; i < args.size();) {
    const std::string a = args[i];
    if (a == "--json" && i + 1 < args.size())
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
    else if (a.rfind("--json=", 0) == 0)
      args.erase(args.begin() + static_cast<long>(i));
    else
      ++i;
  }
  return args;
}

class Harness {
 public:
  /// Parses the common options (and `extra`: "--name" -> help text, each taking one value). Prints the
  /// usage and exits 0 on --help; exits 2 on an unknown option or a bad value.
  Harness(std::string title, int argc, char** argv, Config defaults = {},
          std::map<std::string, std::string> extra = {})
      : title_(std::move(title)), defaults_(defaults), config_(defaults), extra_help_(std::move(extra)) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      std::string value;
      bool has_value = false;
      if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_value = true;
      }
      if (arg == "--help" || arg == "-h") {
        usage(stdout);
        std::exit(0);
      }
      const bool known = arg == "--n" || arg == "--repeat" || arg == "--warmup" || arg == "--json" ||
                         extra_help_.count(arg) != 0;
      if (!known) fail("unknown option " + arg);
      if (!has_value) {
        if (i + 1 >= argc) fail(arg + " needs a value");
        value = argv[++i];
      }
      if (arg == "--n")
        config_.n = parse_size(arg, value);
      else if (arg == "--repeat")
        config_.repeat = parse_int(arg, value);
      else if (arg == "--warmup")
        config_.warmup = parse_int(arg, value);
      else if (arg == "--json")
        json_path_ = value;
      else
        extra_[arg] = value;
    }
    if (config_.n < 1) fail("--n must be >= 1");
    if (config_.repeat < 1) fail("--repeat must be >= 1");
    if (config_.warmup < 0) fail("--warmup must be >= 0");
    if (const auto why = json_path_.empty() ? "" : kiln::why_unwritable(json_path_); !why.empty())
      fail("--json " + json_path_ + ": " + why);
  }

  std::int64_t n() const { return config_.n; }
  int repeat() const { return config_.repeat; }
  int warmup() const { return config_.warmup; }
  /// The value of an extra option, if given.
  std::optional<std::string> option(const std::string& name) const {
    if (auto it = extra_.find(name); it != extra_.end()) return it->second;
    return std::nullopt;
  }
  /// An extra yes/no option (anything else exits 2 naming it), or `fallback` when it was not given.
  bool yes_no_option(const std::string& name, bool fallback) const {
    const auto v = option(name);
    if (!v) return fallback;
    if (*v != "yes" && *v != "no") fail(name + ": give yes or no, got " + *v);
    return *v == "yes";
  }
  /// An extra option as a count in [least, most] ("1000", "2^24"; anything else exits 2 naming it), or
  /// `fallback` when it was not given.
  std::int64_t size_option(const std::string& name, std::int64_t fallback, std::int64_t least = 1,
                           std::int64_t most = std::numeric_limits<std::int64_t>::max()) const {
    const auto v = option(name);
    if (!v) return fallback;
    const std::int64_t x = parse_size(name, *v);
    if (x < least || x > most)
      fail(name + " must be in [" + std::to_string(least) + ", " + std::to_string(most) + "], got " + *v);
    return x;
  }

  /// A case timed with the host's steady clock (work that has finished when f returns). `bytes`: read +
  /// written by one iteration (0: no GB/s column); `note`: shown beside the timings.
  template <class F>
  void add(std::string name, double bytes, std::string note, F f) {
    add_timed(std::move(name), bytes, std::move(note), [f = std::move(f)]() mutable {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      const auto t1 = std::chrono::steady_clock::now();
      return std::chrono::duration<double>(t1 - t0).count();
    });
  }
  /// A case that times itself: f runs one iteration and returns its seconds (e.g. from CUDA events).
  template <class F>
  void add_timed(std::string name, double bytes, std::string note, F f) {
    Case c;
    c.name = std::move(name);
    c.bytes = bytes;
    c.note = std::move(note);
    c.timed_once = std::move(f);
    cases_.push_back(std::move(c));
  }

  /// Warm-up, then `repeat` rounds; each round runs every case once, in order, so slow drifts of a noisy
  /// machine hit all cases alike and the ratios stay fair.
  void run() {
    for (auto& c : cases_)
      for (int w = 0; w < config_.warmup; ++w) (void)c.timed_once();
    for (auto& c : cases_) c.seconds.reserve(static_cast<std::size_t>(config_.repeat));
    for (int r = 0; r < config_.repeat; ++r)
      for (auto& c : cases_) c.seconds.push_back(c.timed_once());
    for (auto& c : cases_) c.stats = summarize(c.seconds);
  }

  const Case& result(const std::string& name) const {
    for (const auto& c : cases_)
      if (c.name == name) return c;
    throw std::out_of_range("kiln::bench: no case named " + name);
  }
  /// Median seconds of a case.
  double median(const std::string& name) const { return result(name).stats.median; }
  /// GB/s of a case at its median.
  double bandwidth(const std::string& name) const { return result(name).gbps(); }

  /// Records a figure with its target (value >= target: PASS).
  void ratio(std::string name, double value, double target, std::string note = "") {
    ratios_.push_back({std::move(name), value, target, std::move(note)});
  }
  /// Extra facts for the JSON "config" object (n, element type, pass counts...).
  void info(const std::string& key, nlohmann::json value) { info_[key] = std::move(value); }
  /// The GPU the numbers come from (goes to "machine").
  void gpu(std::string name) { gpu_ = std::move(name); }

  /// Prints the table and the ratios, writes --json FILE; returns the exit status (0, or 1 when the
  /// JSON file cannot be written). Misses do not change it.
  int finish() const {
    print_table(stdout);
    print_ratios(stdout);
    if (json_path_.empty()) return 0;
    try {
      kiln::write_file_atomically(json_path_, to_json().dump(2) + '\n');
    } catch (const kiln::FileError& e) {
      std::fprintf(stderr, "%s: %s\n", title_.c_str(), e.what());
      return 1;
    }
    std::printf("wrote %s\n", json_path_.c_str());
    return 0;
  }

  nlohmann::json to_json() const {
    nlohmann::json j;
    j["bench"] = title_;
    j["date"] = utc_now();
    j["threads"] = omp_threads();
    j["machine"] = machine_info();
    j["build"] = build_info();
    if (!gpu_.empty()) j["machine"]["gpu"] = gpu_;
    nlohmann::json config = info_;
    config["n"] = config_.n;
    config["repeat"] = config_.repeat;
    config["warmup"] = config_.warmup;
    j["config"] = config;
    nlohmann::json ratios = nlohmann::json::object();
    nlohmann::json targets = nlohmann::json::object();
    for (const auto& r : ratios_) {
      ratios[r.name] = r.value;
      targets[r.name] = {{"target", r.target}, {"pass", r.pass()}, {"note", r.note}};
    }
    j["ratios"] = ratios;
    j["targets"] = targets;
    nlohmann::json timings = nlohmann::json::object();
    for (const auto& c : cases_) {
      timings[c.name] = {{"median_s", c.stats.median}, {"min_s", c.stats.min}, {"max_s", c.stats.max},
                         {"mean_s", c.stats.mean},     {"bytes", c.bytes},     {"gbps", c.gbps()},
                         {"samples_s", c.seconds}};
      if (!c.note.empty()) timings[c.name]["note"] = c.note;
    }
    j["timings"] = timings;
    return j;
  }

  void print_table(std::FILE* f) const {
    std::fprintf(f, "\n%s: n = %lld, %d rounds after %d warm-up, %d OpenMP thread(s)%s%s\n", title_.c_str(),
                 static_cast<long long>(config_.n), config_.repeat, config_.warmup, omp_threads(),
                 gpu_.empty() ? "" : ", GPU ", gpu_.c_str());
    if (!optimized_build()) std::fprintf(f, "  %s\n", unoptimized_build_warning);
    // (OpenBLAS that did not recognise the CPU: CPU GEMM times are its fallback kernels', README)
    if (const std::string better = kiln::backend::cpu::better_blas_coretype(); !better.empty())
      std::fprintf(f, "  CPU BLAS: %s, older than this CPU's (OPENBLAS_CORETYPE=%s runs its own)\n",
                   kiln::backend::cpu::blas_description().c_str(), better.c_str());
    std::fprintf(f, "  %-22s %12s %12s %12s %10s  %s\n", "case", "median ms", "min ms", "max ms", "GB/s", "");
    for (const auto& c : cases_) {
      char bw[32] = "-";
      if (c.bytes > 0) std::snprintf(bw, sizeof bw, "%.1f", c.gbps());
      std::fprintf(f, "  %-22s %12.3f %12.3f %12.3f %10s  %s\n", c.name.c_str(), c.stats.median * 1e3,
                   c.stats.min * 1e3, c.stats.max * 1e3, bw, c.note.c_str());
    }
  }

  void print_ratios(std::FILE* f) const {
    if (ratios_.empty()) return;
    std::fprintf(f, "\n  %-22s %10s %10s  %-5s %s\n", "ratio", "value", "target", "", "");
    for (const auto& r : ratios_)
      std::fprintf(f, "  %-22s %10.3f %8s%-6.4g %-5s %s\n", r.name.c_str(), r.value, ">= ", r.target,
                   r.pass() ? "PASS" : "MISS", r.note.c_str());
    std::fprintf(f, "  (a MISS is reported, not fatal: timings on shared machines are noisy)\n");
  }

  /// A bad command line: the reason and the usage on stderr, exit status 2.
  [[noreturn]] void fail(const std::string& what) const {
    std::fprintf(stderr, "%s: %s\n", title_.c_str(), what.c_str());
    usage(stderr);
    std::exit(2);
  }

 private:
  void usage(std::FILE* f) const {
    std::fprintf(f, "usage: %s [--n N] [--repeat R] [--warmup W] [--json FILE]", title_.c_str());
    for (const auto& [name, help] : extra_help_) std::fprintf(f, " [%s X]", name.c_str());
    std::fprintf(f,
                 "\n  --n N        problem size in elements, a number or 2^K (default %lld)\n"
                 "  --repeat R   timed rounds; the table shows median, min and max (default %d)\n"
                 "  --warmup W   untimed iterations of each case first (default %d)\n"
                 "  --json FILE  also write ratios, timings, machine, threads and date as JSON\n",
                 static_cast<long long>(defaults_.n), defaults_.repeat, defaults_.warmup);
    for (const auto& [name, help] : extra_help_)
      std::fprintf(f, "  %-12s %s\n", (name + " X").c_str(), help.c_str());
  }
  /// parse_size's number as an int, or exit 2 naming the option (no silent wrap of 2^32 to 0).
  int parse_int(const std::string& opt, const std::string& v) const {
    const std::int64_t x = parse_size(opt, v);
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      fail(opt + " " + v + " does not fit in an int");
    return static_cast<int>(x);
  }
  /// "1000", "2^24"
  std::int64_t parse_size(const std::string& opt, const std::string& v) const {
    try {
      std::size_t used = 0;
      if (v.rfind("2^", 0) == 0) {
        const long k = std::stol(v.substr(2), &used);
        if (used + 2 != v.size() || k < 0 || k > 62) throw std::invalid_argument(v);
        return std::int64_t{1} << k;
      }
      const long long x = std::stoll(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
      return x;
    } catch (const std::exception&) {
      fail(opt + " expects a number or 2^K, got '" + v + "'");
    }
  }

  std::string title_;
  Config defaults_;
  Config config_;
  std::map<std::string, std::string> extra_help_;
  std::map<std::string, std::string> extra_;
  std::string json_path_;
  std::string gpu_;
  std::vector<Case> cases_;
  std::vector<Ratio> ratios_;
  nlohmann::json info_ = nlohmann::json::object();
};

}  // namespace kiln::bench
