/// DataParallel's CUDA replicas (one process, one GPU per replica): a stream per GPU and NCCL
/// communicators from ncclCommInitAll; the gradients are summed by one grouped ncclAllReduce. Include it
/// (and link kiln::nccl) to use kiln::parallel::DataParallel<Net, In, Prec, kiln::Cuda>.
#pragma once
#include <nccl.h>

#include <string>
#include <type_traits>
#include <vector>

#include "kiln/backend/cuda/device.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/parallel/data_parallel.hpp"

namespace kiln::parallel {

namespace detail {
/// NCCL's name for the element type E.
template <class E>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<E, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<E, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<E, half>) return ncclFloat16;
  else if constexpr (std::is_same_v<E, bfloat16>) return ncclBfloat16;
  else static_assert(sizeof(E) == 0, "kiln::parallel: no NCCL datatype for this element type (float, double, half, bfloat16)");
}

/// DataParallel's CUDA replicas: replica r on GPU r with a stream of its own (its thread's current
/// stream, so its forward, backward and optimizer step queue there), and one NCCL communicator per GPU
/// from ncclCommInitAll; the gradient sum is one grouped ncclAllReduce issued on the replicas' streams.
/// The streams come from kiln::cuda::pooled_stream and outlive the DataParallel: the caller's cuBLAS
/// handle stays bound to replica 0's stream after a call, and freed blocks stay keyed by it.
template <>
struct ReplicaDevices<Cuda> {
  explicit ReplicaDevices(int n) : comms(static_cast<std::size_t>(n), nullptr) {
    const int visible = cuda::device_count();
    if (n > visible)
      throw ValueError("kiln::parallel::DataParallel: " + std::to_string(n) + " CUDA replicas need " + std::to_string(n) +
                       " GPUs, but " + std::to_string(visible) + " are visible (one replica per GPU)");
    std::vector<int> devices(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      devices[static_cast<std::size_t>(r)] = r;
      streams.push_back(&cuda::pooled_stream(r));
    }
    check(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  }
  ~ReplicaDevices() {
    for (ncclComm_t c : comms)
      if (c != nullptr) (void)ncclCommDestroy(c);
  }
  ReplicaDevices(const ReplicaDevices&) = delete;
  ReplicaDevices& operator=(const ReplicaDevices&) = delete;

  void bind_worker(int r) {
    KILN_CUDA_CHECK(cudaSetDevice(r));
    cuda::set_current_stream(streams[static_cast<std::size_t>(r)]->get(), r);
  }
  /// Replica 0's GPU and stream current on the calling thread for a scope.
  cuda::StreamGuard caller_scope() { return cuda::StreamGuard(*streams.front()); }
  /// Replica r's GPU and stream current on the calling thread for a scope (kernels launch on the
  /// current device: work for replica r's memory must run there).
  cuda::StreamGuard scope(int r) { return cuda::StreamGuard(*streams[static_cast<std::size_t>(r)]); }
  void finish(int r) { streams[static_cast<std::size_t>(r)]->synchronize(); }
  void synchronize() {
    for (int r = 0; r < static_cast<int>(comms.size()); ++r) {
      cuda::DeviceGuard guard(r);
      KILN_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  /// Sums grads[r] (count elements on GPU r) over the replicas into every one, then waits.
  template <class E>
  void all_reduce(const std::vector<E*>& grads, index_t count) {
    check(ncclGroupStart(), "ncclGroupStart");
    for (std::size_t r = 0; r < grads.size(); ++r) {
      const ncclResult_t rc = ncclAllReduce(grads[r], grads[r], static_cast<std::size_t>(count), nccl_type<E>(), ncclSum,
                                            comms[r], streams[r]->get());
      if (rc != ncclSuccess) {
        (void)ncclGroupEnd();
        check(rc, "ncclAllReduce");
      }
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    for (std::size_t r = 0; r < grads.size(); ++r) finish(static_cast<int>(r));
  }
  /// Throws naming the call, NCCL's words for rc and its last error message (the cause: a topology, a
  /// shared-memory segment; NCCL_DEBUG=WARN prints more).
  static void check(ncclResult_t rc, const char* call) {
    if (rc == ncclSuccess) return;
    const char* last = ncclGetLastError(nullptr);
    throw BackendError(std::string("kiln::parallel::DataParallel: ") + call + " failed: " +
                       ncclGetErrorString(rc) + (last && *last ? std::string(" (") + last + ")" : ""));
  }

  std::vector<const cuda::Stream*> streams;  // pooled: never destroyed
  std::vector<ncclComm_t> comms;
};
}  // namespace detail

}  // namespace kiln::parallel
