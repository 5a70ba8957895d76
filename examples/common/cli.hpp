// The command line every training example shares (CLI11), and the checks of what this build can run.
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>

#include <kiln/backend/cpu/blas_kernels.hpp>
#include <kiln/core/config.hpp>
#if KILN_CUDA_COMPILER
#include <kiln/cuda.hpp>
#endif
#include <kiln/io/atomic_file.hpp>
#include <kiln/policy/device.hpp>
#include <kiln/policy/precision.hpp>

#include "message.hpp"
#include "report.hpp"

namespace examples {

/// Whether this build links MPI (kiln::mpi: --parallel ddp) and NCCL with CUDA (ddp on GPUs).
#if KILN_WITH_MPI
inline constexpr bool built_with_mpi = true;
#else
inline constexpr bool built_with_mpi = false;
#endif
#if KILN_WITH_NCCL && KILN_CUDA_COMPILER
inline constexpr bool built_with_nccl = true;
#else
inline constexpr bool built_with_nccl = false;
#endif

struct TrainOptions {
  std::string data;
  int epochs = 5;
  int batch_size = 128;
  double lr = 1e-3;
  bool lr_given = false;          // --lr on the command line: it replaces a resumed checkpoint's lr
  double weight_decay = 0;        // Adam's L2 penalty (torch's weight_decay)
  int lr_step_size = 0;           // StepLR every N epochs (0: the lr stays)
  double lr_gamma = 0.1;          // StepLR's factor
  std::string device = "auto";    // cpu | cuda | auto
  std::string precision = "fp32"; // fp32 | fp16 | bf16
  std::string parallel = "single";// single | dp | ddp
  int devices = 0;                // --parallel dp: replicas (0: 2); ddp: the world size required (0: any)
  int workers = 2;
  int accumulate = 1;
  int freeze = 0;                 // the network's first K layers frozen (torch's model[:K].requires_grad_(False))
  int freeze_epochs = 0;          // --freeze for the first E epochs only (0: every epoch)
  std::uint64_t seed = 0;
  long long limit = -1;           // first N training samples (-1: all)
  std::string checkpoint;
  bool resume = false;
  std::string weights;            // start from these parameters (torch's model.load_state_dict), fresh optimizer
  std::string metrics;
  std::string target;             // regression examples: the target column
  // Not a flag: what the example read from --data (row counts; a CSV's columns and a checksum of its
  // values), set once the data is loaded. Checkpoints record it, and a resume on other data is refused
  // (checkpoint.hpp run_settings); "" records nothing.
  std::string data_summary;
};

/// A flag's number checked before CLI11 converts it into a T, with a message that says what it expects
/// (CLI11's PositiveNumber says "Value 0 not in range 0.000000 to 1797...", and nothing about integers):
///   --epochs: expected an integer from 1 to 2147483647, got 'abc'
/// `why`, if given, follows the range: "--freeze: expected an integer from 1 to 12 (the network's
/// layers), got '13'". Decimal digits only (CLI11 would read a leading 0 as octal: 010 epochs would be 8).
template <class T>
CLI::Validator integer_in(T least, T most, const std::string& why = {}) {
  const std::string expected = "an integer from " + std::to_string(least) + " to " + std::to_string(most) +
                               (why.empty() ? "" : " (" + why + ")");
  return CLI::Validator(
      [least, most, expected](std::string& text) -> std::string {
        T v{};
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, v);
        const bool octal_looking = text.size() > 1 && text[0] == '0';
        if (ec != std::errc{} || at != end || v < least || v > most || octal_looking)
          return "expected " + expected + ", got '" + text + "'";
        return {};
      },
      "INT in [" + std::to_string(least) + ", " + std::to_string(most) + "]");
}
template <class T>
CLI::Validator integer_at_least(T least) {
  return integer_in(least, std::numeric_limits<T>::max()).description("INT>=" + std::to_string(least));
}
/// A number that is finite once rounded to float (fp32 and mixed precision step in float) and passes
/// `ok`; else "expected <what> that fits in a float, got '<text>'".
template <class Ok>
CLI::Validator float_flag(Ok ok, const std::string& what, const std::string& name) {
  return CLI::Validator(
      [ok, what](std::string& text) -> std::string {
        float v = 0;
        const char* end = text.data() + text.size();
        const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);  // +0.1, as strtod reads it
        const auto [at, ec] = std::from_chars(begin, end, v);
        if (ec != std::errc{} || at != end || !std::isfinite(v) || !ok(v))
          return "expected " + what + " that fits in a float, got '" + text + "'";
        if (v == 0) text = "0";  // -0 is 0 (under ->transform: a checkpoint records 0, not "-0")
        return {};
      },
      name);
}
/// A learning rate or a factor, e.g. --lr: expected a number > 0 that fits in a float, got '1e39'.
inline CLI::Validator positive_float() {
  return float_flag([](float v) { return v > 0; }, "a number > 0", "REAL>0");
}
/// A weight decay, e.g. --weight-decay: expected a number >= 0 that fits in a float, got '-1' (torch:
/// "Invalid weight_decay value").
inline CLI::Validator non_negative_float() {
  return float_flag([](float v) { return v >= 0; }, "a number >= 0", "REAL>=0");
}

/// A file or folder flag (or another name: --target's column): an empty name (`--weights ""`, a shell
/// variable left unset) is refused, not taken as the flag left out:
/// `--weights: expected a file name, got ''`.
inline CLI::Validator path_flag(const char* what = "a file name") {
  const std::string expected = std::string("expected ") + what + ", got ''";
  return CLI::Validator([expected](std::string& text) { return text.empty() ? expected : std::string(); }, "PATH");
}

/// Adds the shared flags to `app` with the example's defaults already in `o`; `layers`, the network's
/// (its Sequential's layer_count), bounds --freeze.
inline void add_train_options(CLI::App& app, TrainOptions& o, std::size_t layers) {
  // A flag given twice takes its last value (scripts/demo passes defaults first, then the user's flags).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--data", o.data, "dataset directory or file")
      ->capture_default_str()
      ->check(path_flag("a dataset directory or file"));
  app.add_option("--epochs", o.epochs, "training epochs")->capture_default_str()->check(integer_at_least(1));
  app.add_option("--batch-size", o.batch_size,
                 "samples per forward/backward (per micro-batch with --accumulate, per rank with ddp)")->capture_default_str()->check(integer_at_least(1));
  app.add_option("--lr", o.lr, "learning rate (with --resume: replaces the checkpoint's)")
      ->capture_default_str()
      ->check(positive_float())
      ->each([&o](const std::string&) { o.lr_given = true; });
  app.add_option("--weight-decay", o.weight_decay, "Adam's L2 penalty (torch's weight_decay)")
      ->capture_default_str()
      ->transform(non_negative_float());  // (transform: --weight-decay -0 is read as 0)
  auto* step_size = app.add_option("--lr-step-size", o.lr_step_size,
                                   "multiply the lr by --lr-gamma every N epochs (torch's StepLR; default: the "
                                   "lr stays)")
                        ->check(integer_at_least(1));
  app.add_option("--lr-gamma", o.lr_gamma, "StepLR's factor (needs --lr-step-size)")
      ->capture_default_str()
      ->check(positive_float())
      ->needs(step_size);  // alone it would change nothing: "--lr-gamma requires --lr-step-size"
  app.add_option("--device", o.device, "cpu, cuda or auto")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--precision", o.precision, "fp32, fp16 or bf16")->capture_default_str()->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--parallel", o.parallel, "single, dp or ddp")->capture_default_str()->check(CLI::IsMember({"single", "dp", "ddp"}));
  app.add_option("--devices", o.devices,
                 "--parallel dp: replicas (default: 2 on the CPU, every GPU on cuda); --parallel ddp: the number "
                 "of ranks mpirun must start (default: any)")
      ->check(integer_at_least(1));
  app.add_option("--workers", o.workers, "loader worker threads (0: load on the training thread)")->capture_default_str()->check(integer_at_least(0));
  app.add_option("--accumulate", o.accumulate, "micro-batches per optimizer step")->capture_default_str()->check(integer_at_least(1));
  auto* freeze = app.add_option("--freeze", o.freeze,
                                "keep the network's first K layers as they are (torch's "
                                "model[:K].requires_grad_(False)): fine-tuning a trained network's head")
                     ->check(integer_in(1, static_cast<int>(layers), "the network's layers"));
  app.add_option("--freeze-epochs", o.freeze_epochs,
                 "--freeze for the first E epochs only, then every layer trains (default: every epoch)")
      ->check(integer_at_least(1))
      ->needs(freeze);
  app.add_option("--seed", o.seed, "initialisation and shuffling seed (and the data split where an example makes one)")
      ->capture_default_str()
      ->check(integer_at_least<std::uint64_t>(0));
  app.add_option("--limit", o.limit, "use only the first N training samples")->check(integer_at_least<long long>(1));
  app.add_option("--checkpoint", o.checkpoint, "safetensors file written (atomically) after every epoch")
      ->check(path_flag());
  auto* resume = app.add_flag("--resume", o.resume, "continue from --checkpoint (parameters, optimizer state, epoch)");
  app.add_option("--weights", o.weights,
                 "start from the parameters in FILE (a --checkpoint of this example, or a model's weights alone: "
                 "torch's state_dict through scripts/safetensors_torch.py), with a fresh optimizer at epoch 1")
      ->check(path_flag())
      ->excludes(resume);
  app.add_option("--metrics", o.metrics,
                 "one JSON line per epoch in this file (a fresh run starts it; --resume keeps the checkpoint's "
                 "epochs)")
      ->check(path_flag());
}

/// CLI11's parse, its errors in the examples' form: --help as CLI11 prints it (exit status 0); a flag it
/// refuses is one line, `<program>: <CLI11's words> (see --help)` (arguments it does not know:
/// `<program>: unexpected arguments: -e 3 (see --help)`), and exit status 2. -1 when parsed.
inline int parse_options(CLI::App& app, int argc, char** argv, const char* program) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ExtrasError&) {  // in command-line order (CLI11's own text lists them backwards)
    std::string extras;
    for (const std::string& a : app.remaining()) extras += (extras.empty() ? "" : " ") + a;
    std::fprintf(stderr, "%s: unexpected argument%s: %s (see --help)\n", program,
                 app.remaining().size() == 1 ? "" : "s", extras.c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program, e.what());
    return 2;
  }
}

/// Exit status 2 with a one-line reason when the options ask for a part kiln does not have yet.
/// Returns the device to use ("cpu" or "cuda"), or "" after printing why it cannot run.
inline std::string check_buildable(const char* program, const TrainOptions& o, bool cuda_available) {
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", program, why.c_str());
    return std::string();
  };
  // No CUDA at all first: it is the reason, whatever --parallel asks of it (NCCL, below).
  if (o.device == "cuda" && !KILN_CUDA_COMPILER)
    return fail("--device cuda: this build has no CUDA (configure with the cuda or cuda-native preset and "
                "nvcc)");
  if (o.device == "cuda" && !cuda_available) {
    std::string why = "--device cuda: no CUDA device is available";
#if KILN_CUDA_COMPILER
    why += " (" + kiln::cuda::unavailable_reason() + ")";
#endif
    return fail(why);
  }
  if (o.parallel == "ddp" && !built_with_mpi)
    return fail("--parallel ddp: this build has no MPI (apt-get install libopenmpi-dev openmpi-bin, then reconfigure)");
  if (o.parallel == "ddp" && o.device != "cpu" && cuda_available && !built_with_nccl)
    return fail("--parallel ddp on GPUs needs NCCL, which this build lacks; use --device cpu");
  if (o.parallel == "dp" && o.device == "cuda" && !built_with_nccl)
    return fail("--parallel dp --device cuda needs NCCL, which this build lacks; use --device cpu");
  if (o.resume && o.checkpoint.empty()) return fail("--resume needs --checkpoint FILE");
  if (o.resume) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o.checkpoint, ec))
      return fail("--resume: --checkpoint " + o.checkpoint + ": " +
                  (std::filesystem::exists(o.checkpoint, ec) ? "not a file" : "no such file") +
                  "; expected the training state a run of this example wrote with --checkpoint (leave "
                  "--resume out to start from epoch 1)");
  }
  if (o.devices != 0 && o.parallel == "single")
    return fail("--devices applies to --parallel dp or ddp; this run is --parallel single");
  if (o.parallel == "dp" && o.devices > o.batch_size)
    return fail("--devices " + std::to_string(o.devices) + ": --parallel dp splits each batch of " +
                std::to_string(o.batch_size) + " over its replicas, at least one sample each; use --devices " +
                std::to_string(o.batch_size) + " or fewer");
  // Two outputs (or an output and the data) in one file would overwrite each other. (Made absolute
  // first: weakly_canonical leaves a relative path none of whose parts exists relative, so a new
  // `x.st` would not equal `/here/x.st`.)
  const auto same_file = [](const std::string& a, const std::string& b) {
    std::error_code ec1, ec2, ec3, ec4;
    const auto full = [](const std::string& p, std::error_code& e1, std::error_code& e2) {
      return std::filesystem::weakly_canonical(std::filesystem::absolute(p, e1), e2);
    };
    return !a.empty() && !b.empty() && full(a, ec1, ec2) == full(b, ec3, ec4) && !ec1 && !ec2 && !ec3 && !ec4;
  };
  if (same_file(o.checkpoint, o.metrics)) return fail("--checkpoint and --metrics name the same file, " + o.metrics);
  if (same_file(o.checkpoint, o.weights))
    return fail("--weights and --checkpoint name the same file, " + o.weights +
                ": the first epoch would overwrite the weights; give --checkpoint another file");
  if (same_file(o.metrics, o.weights))
    return fail("--weights and --metrics name the same file, " + o.weights +
                ": the first epoch would overwrite the weights; give --metrics another file");
  if (!o.weights.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o.weights, ec))
      return fail("--weights " + o.weights + ": " +
                  (std::filesystem::exists(o.weights, ec) ? "not a file" : "no such file") +
                  "; expected a safetensors file (a --checkpoint of this example, or a model's weights)");
  }
  for (const auto* output : {&o.checkpoint, &o.metrics}) {
    const std::string flag = output == &o.checkpoint ? "--checkpoint" : "--metrics";
    if (same_file(*output, o.data)) {
      std::error_code ec;
      return fail(flag + " " + *output + " is the --data " +
                  (std::filesystem::is_directory(o.data, ec) ? "folder" : "file"));
    }
    // A dataset folder's files (CIFAR-10's test_batch.bin, MNIST's) are not named here: an output
    // straight in that folder could be one of them.
    std::error_code ec;
    if (!output->empty() && !o.data.empty() && std::filesystem::is_directory(o.data, ec) &&
        same_file(std::filesystem::absolute(*output, ec).parent_path().string(), o.data))
      return fail(flag + " " + *output + " is in the --data folder " + o.data +
                  ": it could overwrite the dataset's files; write it to another folder");
  }
  // An output that cannot be written fails now, not after the first epoch: an existing --metrics file
  // (or /dev/stdout) must be writable, else its folder, and neither output may be a directory
  // (kiln::why_unwritable); a checkpoint is written through a temporary file in its folder. A
  // resumed run checks its checkpoint once it knows whether it has epochs left (start_outputs in
  // epoch.hpp), and under ddp rank 0 checks both there and tells every rank.
  const auto cannot_write = [](const char* flag, const std::string& path, bool new_file_only) -> std::string {
    const std::string why = path.empty() ? std::string() : kiln::why_unwritable(path, new_file_only);
    return why.empty() ? why : std::string(flag) + " " + path + ": " + why;
  };
  if (o.parallel != "ddp") {
    if (const auto why = cannot_write("--checkpoint", o.resume ? "" : o.checkpoint, true); !why.empty())
      return fail(why);
    if (const auto why = cannot_write("--metrics", o.metrics, false); !why.empty()) return fail(why);
  }
  if (o.device == "cpu" || (o.parallel == "dp" && !built_with_nccl)) return "cpu";
#if KILN_CUDA_COMPILER
  // A CUDA build that finds no GPU says why it trains on the CPU (a missing driver, a busy device).
  if (!cuda_available)
    std::printf("(--device auto: no usable GPU (%s); running on the CPU)\n", kiln::cuda::unavailable_reason().c_str());
#endif
  return cuda_available ? "cuda" : "cpu";
}

/// Calls `run.template operator()<Precision>()` with the precision policy --precision names (fp32:
/// kiln::Fp32, fp16: kiln::MixedFp16, bf16: kiln::MixedBf16) and returns what it returns.
template <class Run>
int with_precision(const TrainOptions& o, Run&& run) {
  if (o.precision == "fp16") return run.template operator()<kiln::MixedFp16>();
  if (o.precision == "bf16") return run.template operator()<kiln::MixedBf16>();
  return run.template operator()<kiln::Fp32>();
}

/// "[rank R] " for a process that mpirun started as one of several (each rank prints its own error, as
/// torchrun's ranks do), else "". A message that names this rank already (kiln::parallel's "rank R of N:
/// ...") gets none.
inline std::string rank_prefix(const char* message) {
  const auto launched = mpirun_rank();
  if (!launched || launched->size == "1" ||
      std::strstr(message, ("rank " + launched->rank + " of " + launched->size + ": ").c_str()) != nullptr)
    return {};
  return "[rank " + launched->rank + "] ";
}

/// A line where OpenBLAS runs older kernels than this CPU has (it did not recognise the CPU: Debian 12's
/// 0.3.21 on CPUs newer than it), saying what to set; printed by the first rank only.
inline void note_blas_kernels() {
  const std::string better = kiln::backend::cpu::better_blas_coretype();
  if (better.empty() || !printing_rank()) return;
  std::printf("note: %s on this CPU, which it did not recognise; OPENBLAS_CORETYPE=%s runs its GEMMs several "
              "times faster (README, Requirements)\n",
              kiln::backend::cpu::blas_description().c_str(), better.c_str());
  std::fflush(stdout);  // (before any error line on stderr)
}

/// What main() of every training example does once its options are parsed: checks what this build can
/// run (exit status 2 and one line if not), picks the device and the precision policy, returns
/// `run.template operator()<Device, Precision>(device)`, and turns an exception into one line
/// `<program>: error: ...` (under mpirun, `[rank R] <program>: error: ...`) and exit status 1.
template <class Run>
int run_training(const char* program, const TrainOptions& o, Run run) {
  try {
    bool cuda_available = false;
#if KILN_CUDA_COMPILER
    cuda_available = kiln::cuda::is_available();
#endif
    const std::string device = check_buildable(program, o, cuda_available);
    if (device.empty()) return 2;
    if (device == "cpu") note_blas_kernels();
#if KILN_CUDA_COMPILER
    if (device == "cuda")
      return with_precision(o, [&]<class Precision>() { return run.template operator()<kiln::Cuda, Precision>(device); });
#endif
    return with_precision(o, [&]<class Precision>() { return run.template operator()<kiln::Cpu, Precision>(device); });
  } catch (const std::exception& e) {
    const char* message = message_of(e);
    std::fprintf(stderr, "%s%s: error: %s\n", rank_prefix(message).c_str(), program, message);
    return 1;
  }
}

}  // namespace examples
