/// A reference implementation (PyTorch's side of a bench) as a child process that times one sample of
/// a case when asked, so that its cases run in the harness's rounds beside kiln's: round-robin, a noisy
/// minute on a shared machine slows both sides alike, where a block of torch steps after kiln's would
/// catch it on one side only.
///
/// The child speaks lines: its first is a JSON object saying what it is ({"torch": "1.13.1", "threads":
/// 2, "batch": 128, ...}), or {"skipped": "why"} when it cannot measure (no torch: the bench reports
/// the ratios as skipped and exits 0). Then each line it reads is a request: a case's name, answered by
/// that sample's seconds, or "info NAME", answered by a JSON value. Anything else from it (it crashed,
/// printed a traceback: its stderr is the bench's) ends the bench with exit status 1, naming it.
///
/// Example:
///   auto torch = kiln::bench::Reference::start({"/usr/bin/python3", "torch_step.py", "--serve"}, "PyTorch");
///   if (torch.available()) h.add_timed("torch_lenet_step", 0, "PyTorch eager", [&] { return torch.time("lenet"); });
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace kiln::bench {

class Reference {
 public:
  /// The pause around each sample (see time()).
  static constexpr std::chrono::milliseconds quiet{50};

  /// Starts `argv` with pipes to its stdin and stdout and reads its first line. `who` names it in
  /// messages ("PyTorch"). A program that cannot be started, or exits before saying anything with status
  /// 127 (the shell's "not found"), is skipped; one that says something else than JSON ends the bench.
  static Reference start(const std::vector<std::string>& argv, std::string who) {
    Reference r;
    r.who_ = std::move(who);
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0) r.die(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(from_child, O_CLOEXEC) != 0) r.die(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);  // (dup2 clears O_CLOEXEC on 0 and 1)
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = ::posix_spawnp(&r.pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(to_child[0]);
    ::close(from_child[1]);
    if (rc != 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      r.pid_ = -1;
      r.skipped_ = "cannot run " + argv[0] + ": " + std::strerror(rc);
      return r;
    }
    r.in_ = ::fdopen(to_child[1], "w");
    r.out_ = ::fdopen(from_child[0], "r");
    if (!r.in_ || !r.out_) r.die(std::string("fdopen: ") + std::strerror(errno));
    std::string first;
    if (!r.read_line(first)) {
      const int status = r.wait();
      if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        r.skipped_ = "cannot run " + argv[0];
        return r;
      }
      r.die("exited (" + describe(status) + ") before it said what it is");
    }
    try {
      r.hello_ = nlohmann::json::parse(first);
    } catch (const nlohmann::json::exception&) {
      r.die("said '" + first + "' where a JSON object was expected");
    }
    if (!r.hello_.is_object()) r.die("said '" + first + "' where a JSON object was expected");
    if (r.hello_.contains("skipped")) {
      r.skipped_ = r.hello_["skipped"].is_string() ? r.hello_["skipped"].get<std::string>() : r.hello_["skipped"].dump();
      r.wait();
    }
    return r;
  }

  Reference(Reference&& o) noexcept { *this = std::move(o); }
  Reference& operator=(Reference&& o) noexcept {
    std::swap(who_, o.who_);
    std::swap(pid_, o.pid_);
    std::swap(in_, o.in_);
    std::swap(out_, o.out_);
    std::swap(hello_, o.hello_);
    std::swap(skipped_, o.skipped_);
    return *this;
  }
  Reference(const Reference&) = delete;
  Reference& operator=(const Reference&) = delete;
  /// Closes its stdin (the child's loop ends there) and waits for it.
  ~Reference() { (void)wait(); }

  /// Whether it runs and measures (else skipped() says why).
  bool available() const { return skipped_.empty() && pid_ > 0; }
  const std::string& skipped() const { return skipped_; }
  /// Its first line: what it is.
  const nlohmann::json& hello() const { return hello_; }

  /// The seconds of one sample of `name` (the child times it). A pause of `quiet` before and after it:
  /// an OpenMP runtime's idle threads spin for a while after a parallel region (libgomp's default
  /// GOMP_SPINCOUNT, milliseconds), and spinning on the cores the other side is being timed on slowed
  /// kiln's LeNet step after PyTorch's ResNet sample by half; the pauses let both sides' threads sleep.
  double time(const std::string& name) {
    pause();
    const std::string reply = request(name);
    pause();
    char* end = nullptr;
    const double s = std::strtod(reply.c_str(), &end);
    if (end == reply.c_str() || *end != '\0' || !(s >= 0))
      die("answered '" + reply + "' to '" + name + "' where seconds were expected");
    return s;
  }
  /// The JSON answer to "info NAME" (a measurement that is not a time: memory, say).
  nlohmann::json info(const std::string& name) {
    const std::string reply = request("info " + name);
    try {
      return nlohmann::json::parse(reply);
    } catch (const nlohmann::json::exception&) {
      die("answered '" + reply + "' to 'info " + name + "' where JSON was expected");
    }
  }

  /// Checks that the child reports `key` = `want` in its first line (the thread count, the batch it
  /// built), else ends the bench: a ratio of different work is no ratio.
  void expect(const std::string& key, const nlohmann::json& want) const {
    if (!hello_.contains(key) || hello_[key] != want)
      die("reports " + key + " = " + (hello_.contains(key) ? hello_[key].dump() : std::string("nothing")) +
          ", expected " + want.dump() + " (the same work as kiln's side)");
  }

 private:
  Reference() = default;

  std::string request(const std::string& line) {
    if (!available()) die("was asked '" + line + "' but is not running");
    if (std::fprintf(in_, "%s\n", line.c_str()) < 0 || std::fflush(in_) != 0)
      die("cannot be asked '" + line + "' (" + std::strerror(errno) + ")");
    std::string reply;
    if (!read_line(reply)) die("stopped answering at '" + line + "' (" + describe(wait()) + ")");
    return reply;
  }
  bool read_line(std::string& line) {
    line.clear();
    char* buf = nullptr;
    std::size_t cap = 0;
    const ::ssize_t n = ::getline(&buf, &cap, out_);
    if (n > 0) line.assign(buf, static_cast<std::size_t>(n));
    std::free(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return n > 0;
  }
  /// Closes the pipes and reaps the child; its wait status (0 when there was none).
  int wait() {
    if (in_) std::fclose(in_);
    if (out_) std::fclose(out_);
    in_ = out_ = nullptr;
    int status = 0;
    if (pid_ > 0) {
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    return status;
  }
  static void pause() { std::this_thread::sleep_for(quiet); }
  static std::string describe(int status) {
    if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("killed by ") + ::strsignal(WTERMSIG(status));
    return "status " + std::to_string(status);
  }
  [[noreturn]] void die(const std::string& what) const {
    std::fprintf(stderr, "%s's side of the bench %s; its ratios cannot be measured\n", who_.c_str(), what.c_str());
    std::exit(1);
  }

  std::string who_;
  ::pid_t pid_ = -1;
  std::FILE* in_ = nullptr;
  std::FILE* out_ = nullptr;
  nlohmann::json hello_;
  std::string skipped_;
};

}  // namespace kiln::bench
