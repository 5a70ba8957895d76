/// ProcessGroup<Nccl>: one process per GPU, started by mpirun; gradients averaged by NCCL on a stream of
/// their own. MPI starts the ranks, passes rank 0's ncclUniqueId and carries the host-side checks;
/// NCCL moves the tensors. Every NCCL, CUDA and MPI return code is checked.
#pragma once
#include <nccl.h>

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kiln/backend/cuda/device.hpp"
#include "kiln/core/half.hpp"
#include "kiln/parallel/nccl_replicas.hpp"
#include "kiln/parallel/mpi.hpp"
#include "kiln/parallel/process_group.hpp"
#include "kiln/parallel/watchdog.hpp"
#include "kiln/policy/policy.hpp"

namespace kiln::parallel {

/// The job's ranks, one GPU each (device local_rank(), or 0 where a rank sees one GPU; made the current
/// device), over a non-blocking NCCL communicator, so that
/// every wait can give up: a collective that has not finished within the timeout, or an asynchronous
/// NCCL error (a peer gone), aborts the communicator (ncclCommAbort; if that blocks past the timeout
/// too, the rank exits with status 1) and throws DistributedError; the job is then aborted when the rank
/// exits, so mpirun ends the others.
template <>
class ProcessGroup<Nccl> {
 public:
  explicit ProcessGroup(ProcessGroupOptions o = {}) : mpi_(o) {
    // Every rank needs its GPU before any of them enters NCCL.
    const int visible = cuda::device_count();
    std::string problem;
    // One visible GPU: a launcher gave each rank its own (SLURM --gpus-per-task=1, a CUDA_VISIBLE_DEVICES
    // per rank), so it is device 0 whatever the local rank; if the ranks share it, NCCL says so.
    if (visible != 1 && local_rank() >= visible)
      problem = "local rank " + std::to_string(local_rank()) + " needs GPU " + std::to_string(local_rank()) + " but " +
                std::to_string(visible) + " are visible (one rank per GPU: mpirun -np <GPUs per node>)";
    mpi_.agree(problem, "finding this rank's GPU");
    device_ = visible == 1 ? 0 : local_rank();
    KILN_CUDA_CHECK(cudaSetDevice(device_));  // the rank's GPU is its current device from here on
    stream_.emplace(device_);

    ncclUniqueId id{};
    if (mpi_.is_main()) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi_.broadcast(reinterpret_cast<char*>(&id), static_cast<index_t>(sizeof id), 0, "passing the NCCL id");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return at once; settle() waits for them with the timeout
    ncclResult_t rc = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
    if (rc != ncclInProgress) check(rc, "ncclCommInitRankConfig");
    settle("creating the NCCL communicator");
    mpi_.agree("", "creating the NCCL communicator");
  }
  /// Finalizes the communicator (waiting, within the timeout, for its outstanding work; ncclCommDestroy
  /// on a non-blocking communicator then never blocks) or, after a failure or a timeout, aborts it and
  /// marks the job failed (the rank's exit then aborts the job instead of hanging in MPI_Finalize).
  ~ProcessGroup() {
    if (comm_ == nullptr) return;
    if (failed_ || std::uncaught_exceptions() > uncaught_exceptions_) {  // a failure, or an exception ending the rank
      abort_communicator();
      return;
    }
    if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
    const auto deadline = std::chrono::steady_clock::now() + mpi_.options().timeout;
    ncclResult_t rc = ncclCommFinalize(comm_), state = rc;
    while (rc == ncclSuccess || rc == ncclInProgress) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
      if (state != ncclInProgress || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if ((rc == ncclSuccess || rc == ncclInProgress) && state == ncclSuccess) {
      (void)ncclCommDestroy(comm_);
    } else {
      detail::MpiRuntime::get().failed = true;
      abort_communicator();
    }
  }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return mpi_.rank(); }
  int size() const { return mpi_.size(); }
  int local_rank() const { return mpi_.local_rank(); }
  bool is_main() const { return mpi_.is_main(); }
  /// This rank's GPU.
  int device() const { return device_; }
  ncclComm_t communicator() const { return comm_; }
  /// The MPI group underneath (host-side collectives).
  ProcessGroup<Mpi>& host() { return mpi_; }
  /// ProcessGroup<Mpi>::left_by_exception; the communicator is then aborted when the group goes.
  void left_by_exception(int before) {
    mpi_.left_by_exception(before);
    if (mpi_.failed()) failed_ = true;
  }

  void barrier(const std::string& what = "a barrier") { mpi_.barrier(what); }
  template <class E>
  auto all_gather(E value, const std::string& what) {
    return mpi_.all_gather(value, what);
  }
  void agree(const std::string& problem, const std::string& what) { mpi_.agree(problem, what); }

  /// Copies `count` elements of device memory at `data` from rank `root` to every rank, then waits.
  template <class E>
  void broadcast(E* data, index_t count, int root, const std::string& what) {
    cuda::DeviceGuard guard(device_);
    after_compute();
    enqueue(ncclBroadcast(data, data, static_cast<std::size_t>(count), detail::nccl_type<E>(), root, comm_, *stream_),
            what);
    wait_all_named(what);
  }
  /// Every rank's `count` elements of device memory at `send`, by rank (recv[r * count + i]), on the
  /// group's stream after the current stream's work; waits, and later work on the current stream comes
  /// after it.
  template <class E>
  void all_gather(const E* send, E* recv, index_t count, const std::string& what) {
    cuda::DeviceGuard guard(device_);
    after_compute();
    enqueue(ncclAllGather(send, recv, static_cast<std::size_t>(count), detail::nccl_type<E>(), comm_, *stream_), what);
    wait_all_named(what);
  }
  /// `count` elements of device memory at `data` summed over the ranks, in place (ncclSum), ordered and
  /// waited for as all_gather (after any averages already started on the group's stream).
  template <class E>
  void all_reduce_sum(E* data, index_t count, const std::string& what) {
    cuda::DeviceGuard guard(device_);
    after_compute();
    enqueue(ncclAllReduce(data, data, static_cast<std::size_t>(count), detail::nccl_type<E>(), ncclSum, comm_, *stream_),
            what);
    wait_all_named(what);
  }
  /// Starts averaging `count` elements of device memory at `data` over the ranks (ncclAvg), on the
  /// group's stream once the work queued so far on the current stream (the backward that wrote them)
  /// is done. wait_all() makes the current stream wait for it.
  template <class E, device_policy D>
  void start_average(E* data, index_t count, const std::string& what) {
    static_assert(std::is_same_v<D, Cuda>, "kiln::parallel::ProcessGroup<Nccl> reduces GPU memory: CPU models use Mpi");
    cuda::DeviceGuard guard(device_);
    after_compute();
    enqueue(ncclAllReduce(data, data, static_cast<std::size_t>(count), detail::nccl_type<E>(), ncclAvg, comm_, *stream_),
            what);
    last_what_ = what;
  }
  void progress() {}
  /// Waits (with the timeout, watching for NCCL errors) for every started average; later work on the
  /// current stream comes after them.
  void wait_all() {
    if (last_what_.empty()) return;
    cuda::DeviceGuard guard(device_);
    wait_all_named(last_what_);
    last_what_.clear();
  }
  bool failed() const { return failed_; }

 private:
  /// ncclCommAbort, which can block when a peer died inside a collective (NCCL issue #863): past the
  /// group's timeout this rank ends (exit status 1) and mpirun ends the others, instead of a hang.
  void abort_communicator() {
    detail::run_or_exit([&] { (void)ncclCommAbort(comm_); }, mpi_.options().timeout,
                        detail::rank_prefix(rank(), size()), "ncclCommAbort");
  }
  /// The group's stream waits for what the current stream has queued so far.
  void after_compute() {
    ready_.record(cuda::current_stream(device_));
    stream_->wait(ready_);
  }
  void enqueue(ncclResult_t rc, const std::string& what) {
    if (rc != ncclInProgress) check(rc, what);
    settle(what);
  }
  void wait_all_named(const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + mpi_.options().timeout;
    try {  // a CUDA error here fails the job too (abort, not a hang in the other ranks)
      done_.record(stream_->get());
      for (long spins = 0; !done_.query(); ++spins) {
        ncclResult_t async = ncclSuccess;
        check(ncclCommGetAsyncError(comm_, &async), what);
        if (async != ncclSuccess && async != ncclInProgress) check(async, what);
        if (std::chrono::steady_clock::now() >= deadline) fail(timeout_message(what));
        if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      KILN_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(device_), done_.get(), 0));
    } catch (const DistributedError&) {  // already failed (the abort is done): as it is
      throw;
    } catch (const BackendError& e) {
      fail(what + ": " + e.what());
    }
  }
  /// A non-blocking communicator's call has returned ncclInProgress until it is issued: wait for that.
  void settle(const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + mpi_.options().timeout;
    for (long spins = 0;; ++spins) {
      ncclResult_t state = ncclInProgress;
      check(ncclCommGetAsyncError(comm_, &state), what);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) check(state, what);
      if (std::chrono::steady_clock::now() >= deadline) fail(timeout_message(what));
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  std::string timeout_message(const std::string& what) const {
    return what + " did not complete within " + detail::seconds_text(mpi_.options().timeout) +
           ": another rank has died, hangs, or runs different code (NCCL communicator aborted)";
  }
  void check(ncclResult_t rc, const std::string& what) {
    if (rc == ncclSuccess) return;
    const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    fail(what + ": NCCL failed: " + ncclGetErrorString(rc) + (last && *last ? std::string(" (") + last + ")" : ""));
  }
  [[noreturn]] void fail(const std::string& message) {
    detail::MpiRuntime::get().failed = true;
    if (!failed_ && comm_ != nullptr) abort_communicator();
    comm_ = nullptr;
    failed_ = true;
    throw DistributedError(detail::rank_prefix(rank(), size()) + message);
  }

  ProcessGroup<Mpi> mpi_;
  int device_ = 0;
  std::optional<cuda::Stream> stream_;  // created on this rank's GPU once it is known
  cuda::Event ready_{false}, done_{false};  // ordering only: no timestamps
  ncclComm_t comm_ = nullptr;
  std::string last_what_;
  bool failed_ = false;
  int uncaught_exceptions_ = std::uncaught_exceptions();  // at construction: more at destruction is unwinding
};

}  // namespace kiln::parallel
