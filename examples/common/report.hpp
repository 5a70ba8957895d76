// What a training example prints and writes: a progress bar on a terminal (else one line per epoch),
// JSON metrics lines, and the closing `result: key=value ...` line.
#pragma once
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <kiln/core/errors.hpp>
#include <kiln/io/atomic_file.hpp>

namespace examples {

/// Whether this process is a --parallel ddp rank other than 0: its standard output goes to /dev/null
/// (with_distributed), and what every rank would repeat on stderr (ok=0's reason) is left to rank 0.
inline bool& secondary_rank() {
  static bool secondary = false;
  return secondary;
}

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// v for printf: a NaN without its sign bit, which printf shows as "-nan" (a diverged loss: torch and
/// Python print nan, and the metrics file has null).
inline double shown(double v) { return std::isnan(v) ? std::fabs(v) : v; }

/// " key=value" (`digits` after the point) for the `result:` line, or "" when the run trained no epoch:
/// a resumed run with nothing left to train measured no train loss and no speed.
inline std::string trained_key(const char* key, int digits, int trained, double value) {
  if (trained == 0) return {};
  char text[64];
  std::snprintf(text, sizeof text, " %s=%.*f", key, digits, shown(value));
  return text;
}

/// This process's rank and its job's size, where mpirun started it (Open MPI's OMPI_COMM_WORLD_RANK and
/// _SIZE, MPICH's PMI_RANK and PMI_SIZE), as the launcher wrote them.
struct LaunchedRank {
  std::string rank, size;
};
inline std::optional<LaunchedRank> mpirun_rank() {
  for (const auto& [r, s] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"}})
    if (const char *rank = std::getenv(r), *size = std::getenv(s); rank != nullptr && size != nullptr)
      return LaunchedRank{rank, size};
  return std::nullopt;
}

/// Whether this process prints the job's one-off lines: not started by mpirun, or its rank 0.
inline bool printing_rank() {
  const auto launched = mpirun_rank();
  return !launched || launched->rank == "0";
}

/// Whether standard output is a terminal a person watches: a terminal, and not one mpirun made (Open
/// MPI hands every rank a pseudo-terminal, even when the job's output goes to a file). Progress bars
/// and per-epoch lines on a terminal only.
inline bool progress_terminal() { return isatty(STDOUT_FILENO) == 1 && !mpirun_rank(); }
/// The terminal's width in columns (80 where it does not say).
inline int terminal_columns() {
  struct winsize w {};
  return ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? w.ws_col : 80;
}

/// "[=====>     ] 234/469 loss 0.4321 5210 samples/s ETA 12s", redrawn in place on a terminal (cut to
/// its width: a line that wraps cannot be redrawn).
class Progress {
 public:
  Progress(int epoch, int epochs, long long batches)
      : epoch_(epoch), epochs_(epochs), batches_(batches), tty_(progress_terminal()), t0_(Clock::now()) {}
  void update(long long done, double mean_loss, long long samples) {
    if (!tty_ || (done != batches_ && done % 5 != 0)) return;
    const double s = seconds_since(t0_), rate = s > 0 ? samples / s : 0.0;
    const double eta = done > 0 ? s / done * (batches_ - done) : 0.0;
    constexpr int width = 24;
    const int filled = batches_ > 0 ? static_cast<int>(width * done / batches_) : width;
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < width) bar += '>' + std::string(static_cast<std::size_t>(width - filled - 1), ' ');
    char line[256];
    std::snprintf(line, sizeof line, "epoch %d/%d [%s] %lld/%lld loss %.4f %.0f samples/s ETA %.0fs", epoch_, epochs_,
                  bar.c_str(), done, batches_, shown(mean_loss), rate, eta);
    std::string text = line;
    const auto fits = static_cast<std::size_t>(std::max(terminal_columns() - 1, 1));
    if (text.size() > fits) text.resize(fits);
    std::printf("\r%s\033[K", text.c_str());  // (ESC [ K: erase the rest of a longer line drawn before)
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\r\033[K");
  }

 private:
  int epoch_, epochs_;
  long long batches_;
  bool tty_;
  Clock::time_point t0_;
};

/// "cannot <what> the metrics file <path>: <the system's reason>" after a stream operation failed (errno,
/// cleared before it, as the failed call left it: "No space left on device" for /dev/full).
inline kiln::Error metrics_error(const char* what, const std::string& path) {
  const int error = errno;
  return kiln::Error(std::string("cannot ") + what + " the metrics file " + path +
                     (error != 0 ? std::string(": ") + std::strerror(error) : std::string()));
}

/// Starts the metrics file of a run: keeps the lines of its first `epochs` epochs (the checkpoint's when
/// resuming, so a line written past the checkpoint just before a kill goes), rewritten through a
/// temporary file and a rename (kiln::write_file_atomically). A fresh run (`epochs` 0) leaves the file as
/// it is until its first epoch's line replaces it (append_metrics), so a run stopped in its first epoch
/// loses no earlier run's history. Anything else than a regular file (a FIFO, /dev/stdout) takes the
/// lines as they come. Fails here, before any training, when the file cannot be written.
inline void keep_metrics(const std::string& path, int epochs) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  std::error_code ec;
  const auto status = fs::status(path, ec);  // through links
  // A fresh run, or a resumed one whose file is not there (its first line makes it: a run with nothing
  // left to train leaves no empty file behind).
  if (epochs == 0 || fs::is_directory(status) || !fs::exists(status)) {
    if (const auto why = kiln::why_unwritable(path); !why.empty())
      throw kiln::Error("cannot write the metrics file " + path + ": " + why);
    return;
  }
  if (!fs::is_regular_file(status)) return;
  const std::string target = fs::canonical(path).string();
  std::string kept;
  {
    std::ifstream in(target);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer() &&
          j["epoch"].get<long long>() <= epochs)
        kept += line + '\n';
    }
  }
  if (kept.empty()) {  // nothing to keep: empty it in place
    errno = 0;
    std::ofstream out(target, std::ios::trunc);
    if (!out) throw metrics_error("write", path);
    return;
  }
  kiln::write_file_atomically(target, kept);
}

/// The stream of a metrics path that is not a regular file (a FIFO, a terminal, /dev/stdout), opened once
/// and held for the run: reopened every epoch, a FIFO's reader would see its end after the first line,
/// and the next open would wait for a reader for ever. Null for a regular file (or none yet).
inline std::ofstream* held_metrics_stream(const std::string& path) {
  static std::map<std::string, std::ofstream> held;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);  // through links
  if (!std::filesystem::exists(status) || std::filesystem::is_regular_file(status)) return nullptr;
  std::ofstream& out = held[path];
  if (!out.is_open()) out.open(path, std::ios::app);
  return &out;
}

/// Appends one JSON object per line to `path` (nothing when path is empty); `first` (a fresh run's first
/// epoch) replaces the file with the line instead, atomically.
inline void append_metrics(const std::string& path, const nlohmann::json& line, bool first = false) {
  if (path.empty()) return;
  errno = 0;  // (for metrics_error's reason; a successful call leaves it)
  if (std::ofstream* held = held_metrics_stream(path)) {
    if (*held) *held << line.dump() << '\n' << std::flush;
    if (!*held) throw metrics_error("write", path);
    return;
  }
  if (first) {
    kiln::write_file_atomically(path, line.dump() + '\n');
    return;
  }
  std::ofstream out(path, std::ios::app);
  if (!out) throw metrics_error("open for appending", path);
  out << line.dump() << '\n' << std::flush;  // (flushed here, so that a full disk is an error, not lost)
  if (!out) throw metrics_error("write", path);
}

}  // namespace examples
