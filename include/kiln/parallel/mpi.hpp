/// ProcessGroup<Mpi>: the ranks of a job started by `mpirun -np N`, one process per device, talking MPI
/// (Open MPI). Distributed<Mpi> training reduces its CPU gradients through it; ProcessGroup<Nccl> uses it
/// to start and to pass the NCCL id. Every MPI call's return code is checked.
#pragma once
// The C API only: Open MPI's deprecated C++ bindings warn under -Wextra.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kiln/core/index.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/parallel/process_group.hpp"
#include "kiln/policy/parallel.hpp"
#include "kiln/policy/policy.hpp"

namespace kiln::parallel {

namespace detail {
/// Throws BackendError "file:line: MPI_Xxx(...) failed: <MPI's message>" unless rc is MPI_SUCCESS.
inline void mpi_check(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = std::snprintf(text, sizeof text, "error %d", rc);
  throw BackendError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                     std::string(text, static_cast<std::size_t>(length)));
}

/// MPI as kiln starts it: MPI_Init_thread on first use (unless the program initialised MPI itself), and
/// at exit MPI_Finalize, or MPI_Abort once a collective has failed: MPI_Finalize could wait forever on
/// a dead rank, and the abort makes mpirun end the other ranks.
struct MpiRuntime {
  bool owned = false;
  bool failed = false;
  bool exit_registered = false;

  static MpiRuntime& get() {
    static MpiRuntime r;
    return r;
  }
  void ensure_initialized() {
    int initialized = 0;
    mpi_check(MPI_Initialized(&initialized), "MPI_Initialized", __FILE__, __LINE__);
    // At exit: MPI_Abort once a collective failed, whoever initialised MPI (a rank of a program that did
    // would otherwise leave the others waiting until their timeout); MPI_Finalize where kiln did.
    if (!exit_registered) std::atexit(&at_exit);
    exit_registered = true;
    if (initialized) return;  // the program's own MPI_Init(_thread): its thread level is its choice
    int provided = 0;  // FUNNELED: only the main thread calls MPI (OpenMP threads compute)
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", __FILE__, __LINE__);
    owned = true;
    // Open MPI reports a failed non-blocking collective (MPI_ERR_TRUNCATE where the ranks passed
    // different counts) on MPI_COMM_WORLD, whatever its communicator: with the default fatal handler it
    // would abort the job with its own message before the group could name the collective. (A program
    // that initialised MPI itself keeps its handler: such an error then aborts the job, as MPI says.)
    mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", __FILE__, __LINE__);
    if (provided < MPI_THREAD_FUNNELED)
      throw DistributedError("kiln: MPI_Init_thread gave thread level " + std::to_string(provided) +
                             ", below MPI_THREAD_FUNNELED, which kiln needs (OpenMP threads run beside the main "
                             "thread's MPI calls); use an MPI built with thread support (Debian's Open MPI is)");
  }
  static void at_exit() {
    MpiRuntime& r = get();
    int finalized = 1;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
    if (r.failed) {
      std::fflush(nullptr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    } else if (r.owned) {
      MPI_Finalize();
    }
  }
};

template <class E>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<E, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<E, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<E, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<E, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<E, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<E, std::uint8_t> || std::is_same_v<E, char>) return MPI_BYTE;
  else static_assert(sizeof(E) == 0, "kiln::parallel::ProcessGroup<Mpi>: no MPI datatype for this element type");
}
}  // namespace detail

#define KILN_MPI_CHECK(call) ::kiln::parallel::detail::mpi_check((call), #call, __FILE__, __LINE__)

/// The job's ranks over MPI. Construct one per process after mpirun started it (a program run without
/// mpirun is a job of one). Ranks come from MPI; RANK and WORLD_SIZE, where the launcher sets them, must
/// agree; the local rank (which GPU) is LOCAL_RANK, else Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, else the
/// rank among the processes sharing this node.
///
/// Every collective is non-blocking underneath and waited for with the group's timeout: past it the
/// rank throws DistributedError (naming the collective) instead of hanging, and aborts the job when it
/// exits, so that mpirun ends every rank.
template <>
class ProcessGroup<Mpi> {
 public:
  explicit ProcessGroup(ProcessGroupOptions o = {}) : options_(o) {
    detail::MpiRuntime::get().ensure_initialized();
    try {
      start();
    } catch (...) {
      // A group that could not be made is never destroyed: unless every rank threw this error together
      // (agree()), this rank's exit must abort the job, as ~ProcessGroup would have it do.
      if (agreed_unwinding_ != std::uncaught_exceptions() + 1) {
        failed_ = true;
        detail::MpiRuntime::get().failed = true;
      } else if (comm_ != MPI_COMM_NULL) {
        (void)MPI_Comm_free(&comm_);
      }
      throw;
    }
  }
  /// Destroyed by an exception that ends this rank (one of the program's own, not a collective's): the
  /// job is marked failed, so that this rank's exit aborts it (mpirun then ends every rank) rather than
  /// waiting in MPI_Finalize for ranks that wait in a collective for it until their timeout. An error
  /// every rank throws together (agree(): a failed checkpoint write, a bad launch) ends them all cleanly.
  ~ProcessGroup() {
    const int unwinding = std::uncaught_exceptions();
    if (unwinding > uncaught_exceptions_ && unwinding != agreed_unwinding_) {
      failed_ = true;
      detail::MpiRuntime::get().failed = true;
    }
    if (comm_ != MPI_COMM_NULL && !failed_) (void)MPI_Comm_free(&comm_);
  }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

 private:
  /// The constructor's work: the ranks, the group's communicator, the local rank and the launch checks.
  void start() {
    KILN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    KILN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    // The group's own communicator, made within the timeout too (MPI_Comm_dup would wait for a rank that
    // never comes).
    MPI_Request req = MPI_REQUEST_NULL;
    KILN_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &req));
    wait(&req, 1, "creating the group's communicator");
    KILN_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));  // codes come back to be checked

    // Launch checks: every rank learns whether any failed, so all end together (an environment variable
    // that is not a number, on one rank or all, included).
    std::string problem;
    try {
      local_rank_ = find_local_rank();
      if (const auto r = detail::env_int("RANK"); r && *r != rank_)
        problem = "RANK=" + std::to_string(*r) + " but MPI says rank " + std::to_string(rank_) +
                  " (kiln's ranks are started by mpirun; torchrun's MASTER_ADDR/MASTER_PORT rendezvous is not "
                  "supported)";
      else if (const auto w = detail::env_int("WORLD_SIZE"); w && *w != size_)
        problem = "WORLD_SIZE=" + std::to_string(*w) + " but mpirun started " + std::to_string(size_) +
                  (size_ == 1 ? " rank" : " ranks") +
                  " (kiln's ranks are started by mpirun; torchrun's MASTER_ADDR/MASTER_PORT rendezvous is not "
                  "supported)";
      else if (options_.expected_world_size > 0 && options_.expected_world_size != size_)
        problem = "the job needs " + std::to_string(options_.expected_world_size) +
                  " ranks but mpirun started " + std::to_string(size_) + " (mpirun -np " +
                  std::to_string(options_.expected_world_size) + ")";
    } catch (const ValueError& e) {
      problem = e.what();
    }
    agree(problem, "checking the launch");
  }

 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  bool is_main() const { return rank_ == 0; }
  const ProcessGroupOptions& options() const { return options_; }
  MPI_Comm communicator() const { return comm_; }

  /// Every rank waits here for the others (within the timeout).
  void barrier(const std::string& what = "a barrier") {
    main_thread_only(what);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &req), what);
    wait(&req, 1, what);
  }
  /// Copies `count` elements at `data` from rank `root` to every rank.
  template <class E>
  void broadcast(E* data, index_t count, int root, const std::string& what) {
    main_thread_only(what);
    std::vector<MPI_Request> reqs;
    for_chunks<E>(count, what, [&](index_t off, int n) {
      reqs.push_back(MPI_REQUEST_NULL);
      check(MPI_Ibcast(data + off, n, detail::mpi_type<E>(), root, comm_, &reqs.back()), what);
    });
    wait(reqs.data(), static_cast<int>(reqs.size()), what);
  }
  /// Every rank's `value`, by rank.
  template <class E>
  std::vector<E> all_gather(E value, const std::string& what) {
    main_thread_only(what);
    std::vector<E> all(static_cast<std::size_t>(size_));
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Iallgather(&value, 1, detail::mpi_type<E>(), all.data(), 1, detail::mpi_type<E>(), comm_, &req), what);
    wait(&req, 1, what);
    return all;
  }
  std::vector<std::int64_t> all_gather(int value, const std::string& what) {
    return all_gather(static_cast<std::int64_t>(value), what);
  }
  /// Every rank's `count` elements at `send` (host memory), by rank: recv[r * count + i].
  template <class E>
  void all_gather(const E* send, E* recv, index_t count, const std::string& what) {
    main_thread_only(what);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Iallgather(send, mpi_count(count, what), detail::mpi_type<E>(), recv, mpi_count(count, what),
                         detail::mpi_type<E>(), comm_, &req),
          what);
    wait(&req, 1, what);
  }
  /// `count` elements at `data` (host memory) summed over the ranks, in place, then waited for (a
  /// collective of its own, beside any started averages).
  template <class E>
  void all_reduce_sum(E* data, index_t count, const std::string& what) {
    main_thread_only(what);
    std::vector<MPI_Request> reqs;
    for_chunks<E>(count, what, [&](index_t off, int n) {
      reqs.push_back(MPI_REQUEST_NULL);
      check(MPI_Iallreduce(MPI_IN_PLACE, data + off, n, detail::mpi_type<E>(), MPI_SUM, comm_, &reqs.back()), what);
    });
    wait(reqs.data(), static_cast<int>(reqs.size()), what);
  }
  /// Every rank says whether its part of `what` went well ("" or what went wrong); if any rank failed,
  /// every rank throws DistributedError naming the ranks that failed and the reason: its own on a rank
  /// that failed, the first failing rank's on the others (broadcast from there).
  void agree(const std::string& problem, const std::string& what) {
    const auto ok = all_gather(std::int64_t{problem.empty() ? 1 : 0}, what);
    std::string bad;
    int first = -1;
    for (int r = 0; r < size_; ++r)
      if (!ok[static_cast<std::size_t>(r)]) {
        bad += (bad.empty() ? "" : ", ") + std::to_string(r);
        if (first < 0) first = r;
      }
    if (bad.empty()) return;
    std::int64_t length = rank_ == first ? static_cast<std::int64_t>(problem.size()) : 0;
    broadcast(&length, 1, first, what);
    std::string reason = rank_ == first ? problem : std::string(static_cast<std::size_t>(length), '\0');
    broadcast(reason.data(), length, first, what);
    agreed_unwinding_ = std::uncaught_exceptions() + 1;  // every rank throws this one: no abort for it
    const std::string& why = problem.empty() ? reason : problem;
    throw DistributedError(detail::rank_prefix(rank_, size_) + what + " failed on rank" +
                           (bad.find(',') == std::string::npos ? " " : "s ") + bad + (why.empty() ? "" : ": " + why));
  }

  /// Starts averaging `count` elements at `data` (host memory) over the ranks, in place: scaled by
  /// 1 / size, then summed (torch DDP divides before its all-reduce). The memory must not be touched
  /// until wait_all() returns.
  template <class E, device_policy D>
  void start_average(E* data, index_t count, const std::string& what) {
    static_assert(std::is_same_v<D, Cpu>,
                  "kiln::parallel::ProcessGroup<Mpi> reduces host memory: train CUDA models with Distributed<Nccl>");
    main_thread_only(what);
    if (size_ > 1) {  // one kiln pass (OpenMP), not a serial loop: a bucket is up to 25 MiB
      auto bucket = Tensor<E, Shape<dyn>, Cpu>::from_blob(data, Extents<Shape<dyn>>(count));
      kiln::assign(bucket, bucket * (E(1) / static_cast<E>(size_)));
    }
    for_chunks<E>(count, what, [&](index_t off, int n) {
      pending_.push_back(MPI_REQUEST_NULL);
      pending_what_.push_back(what);
      check(MPI_Iallreduce(MPI_IN_PLACE, data + off, n, detail::mpi_type<E>(), MPI_SUM, comm_, &pending_.back()), what);
    });
  }
  /// Lets MPI move the started reductions along (Open MPI progresses them inside MPI calls); never waits.
  void progress() {
    if (pending_.empty()) return;
    main_thread_only(pending_what_.front());
    (void)test_all(pending_.data(), static_cast<int>(pending_.size()), pending_what_.front(), &pending_what_);
  }
  /// Waits for every started reduction (within the timeout).
  void wait_all() {
    if (pending_.empty()) return;
    main_thread_only(pending_what_.front());
    const std::string what = pending_what_.size() == 1 ? pending_what_.front()
                                                       : pending_what_.front() + " .. " + pending_what_.back();
    wait(pending_.data(), static_cast<int>(pending_.size()), what, &pending_what_);
    pending_.clear();
    pending_what_.clear();
  }
  /// Whether a collective of this group failed or timed out (the job will be aborted at exit).
  bool failed() const { return failed_; }
  /// For what trains with this group (DistributedDataParallel), destroyed while an exception made since
  /// it was built (`before`: std::uncaught_exceptions() then) unwinds it, one of this rank's own (not an
  /// error every rank throws together, agree()'s): the job is marked failed, so that this rank's exit
  /// aborts it, as ~ProcessGroup does. A program that catches the error and returns would otherwise
  /// leave the other ranks waiting in a collective for this one until their timeout.
  void left_by_exception(int before) {
    const int unwinding = std::uncaught_exceptions();
    if (unwinding > before && unwinding != agreed_unwinding_) {
      failed_ = true;
      detail::MpiRuntime::get().failed = true;
    }
  }

 private:
  /// Under MPI_THREAD_FUNNELED (kiln's level when it initialises MPI) only the thread that initialised MPI
  /// may call it: from another thread (a loader worker, a checkpoint thread) a collective is undefined
  /// behaviour, so it throws DistributedError instead. A program that initialised MPI itself with
  /// MPI_THREAD_SERIALIZED or MULTIPLE may call from any thread (serialising the calls is then its job).
  void main_thread_only(const std::string& what) const {
    int level = MPI_THREAD_SINGLE, is_main = 1;
    if (MPI_Query_thread(&level) != MPI_SUCCESS || level > MPI_THREAD_FUNNELED) return;  // (unknown: no check)
    if (MPI_Is_thread_main(&is_main) == MPI_SUCCESS && !is_main)
      throw DistributedError(detail::rank_prefix(rank_, size_) + what +
                             ": called from a thread other than the one that initialised MPI, which "
                             "MPI_THREAD_FUNNELED (kiln's level) does not allow; make the group's calls on "
                             "that thread, or initialise MPI yourself with MPI_THREAD_SERIALIZED or MULTIPLE");
  }
  int find_local_rank() {
    // The ranks before this one on the same host (by MPI_Get_processor_name; gathered within the
    // timeout, where MPI_Comm_split_type would block). Gathered on every rank whatever the environment
    // says, so that ranks where only some have LOCAL_RANK set still make the same collectives.
    const int by_host = local_rank_by_host();
    if (const auto l = detail::env_int("LOCAL_RANK")) return *l;
    if (const auto l = detail::env_int("OMPI_COMM_WORLD_LOCAL_RANK")) return *l;
    return by_host;
  }
  int local_rank_by_host() {
    std::vector<char> name(MPI_MAX_PROCESSOR_NAME + 1, '\0');
    int length = 0;
    KILN_MPI_CHECK(MPI_Get_processor_name(name.data(), &length));
    std::vector<char> all(name.size() * static_cast<std::size_t>(size_));
    all_gather(name.data(), all.data(), static_cast<index_t>(name.size()), "finding the ranks on this host");
    int local = 0;
    for (int r = 0; r < rank_; ++r)
      if (std::equal(name.begin(), name.end(), all.begin() + static_cast<std::ptrdiff_t>(name.size()) * r)) ++local;
    return local;
  }
  /// A count MPI takes in one call (an int), else a ValueError naming the collective.
  int mpi_count(index_t count, const std::string& what) const {
    if (count < 0 || count > index_t{1} << 30)
      throw ValueError(detail::rank_prefix(rank_, size_) + what + ": " + std::to_string(count) +
                       " elements per rank, more than one MPI call takes (2^30)");
    return static_cast<int>(count);
  }
  /// MPI counts are int: calls f(offset, n) for chunks of at most 2^30 bytes of E (Open MPI before 4.1.3
  /// computed count x extent in an int in its non-blocking reductions: chunks under 2^31 bytes are safe).
  template <class E, class F>
  void for_chunks(index_t count, const std::string& what, F&& f) const {
    if (count < 0)
      throw ValueError(detail::rank_prefix(rank_, size_) + what + ": a count of " + std::to_string(count) +
                       " elements; expected 0 or more");
    constexpr index_t chunk = (index_t{1} << 30) / static_cast<index_t>(sizeof(E));
    for (index_t off = 0; off < count; off += chunk) f(off, static_cast<int>(std::min(chunk, count - off)));
  }
  static std::string error_text(int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = std::snprintf(text, sizeof text, "error %d", rc);
    return std::string(text, static_cast<std::size_t>(length));
  }
  void check(int rc, const std::string& what) {
    if (rc == MPI_SUCCESS) return;
    fail(what + ": MPI failed: " + error_text(rc));
  }
  /// MPI_Testall over n requests; whether all completed. A request that failed (MPI_ERR_IN_STATUS) is
  /// reported by its own error, as `names[i]` where given (the collective each request belongs to):
  /// MPI_ERR_TRUNCATE, say, where the ranks passed different counts to one collective.
  bool test_all(MPI_Request* reqs, int n, const std::string& what, const std::vector<std::string>* names = nullptr) {
    statuses_.resize(static_cast<std::size_t>(n));
    int done = 0;
    const int rc = MPI_Testall(n, reqs, &done, statuses_.data());
    if (rc != MPI_ERR_IN_STATUS) {
      check(rc, what);
      return done != 0;
    }
    std::string failed;
    bool truncated = false, unnamed = false;
    for (int i = 0; i < n; ++i) {
      const int e = statuses_[static_cast<std::size_t>(i)].MPI_ERROR;
      if (e == MPI_SUCCESS || e == MPI_ERR_PENDING) continue;
      // Open MPI's non-blocking collectives give MPI_ERR_TRUNCATE where the ranks' counts differ, or,
      // under load, its internal -1, which no MPI call names.
      int error_class = MPI_ERR_OTHER;
      const bool named = MPI_Error_class(e, &error_class) == MPI_SUCCESS;
      truncated = truncated || (named && error_class == MPI_ERR_TRUNCATE);
      unnamed = unnamed || !named;
      failed += (failed.empty() ? "" : "; ") +
                (names != nullptr ? (*names)[static_cast<std::size_t>(i)]
                                  : "request " + std::to_string(i + 1) + " of " + std::to_string(n)) +
                ": " + (named ? error_text(e) : "error code " + std::to_string(e) + ", which MPI does not name");
    }
    const char* same = "different counts to the same collective: every rank must make the same collectives, in "
                       "the same order, with the same sizes)";
    fail(what + ": MPI failed: " + (failed.empty() ? error_text(rc) : failed) +
         (truncated ? std::string(" (the ranks passed ") + same
          : unnamed ? std::string(" (one cause of such an error: ranks that pass ") + same
                    : std::string()));
  }
  void wait(MPI_Request* reqs, int n, const std::string& what, const std::vector<std::string>* names = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + options_.timeout;
    for (long spins = 0;; ++spins) {
      if (test_all(reqs, n, what, names)) {
        agreed_unwinding_ = -1;  // an error every rank threw together is over: a later one is this rank's own
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline)
        fail(what + " did not complete within " + detail::seconds_text(options_.timeout) +
             ": another rank has died, hangs, or runs different code (a different number of batches or "
             "steps, a collective only some ranks make) (the job is aborted)");
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  [[noreturn]] void fail(const std::string& message) {
    failed_ = true;
    detail::MpiRuntime::get().failed = true;
    throw DistributedError(detail::rank_prefix(rank_, size_) + message);
  }

  ProcessGroupOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  bool failed_ = false;
  int uncaught_exceptions_ = std::uncaught_exceptions();  // at construction: more at destruction is unwinding
  int agreed_unwinding_ = -1;  // the exception count while agree()'s error, which every rank throws, is in flight
  std::vector<MPI_Request> pending_;
  std::vector<std::string> pending_what_;
  std::vector<MPI_Status> statuses_;  // test_all's
};

}  // namespace kiln::parallel
