/// What every process group (one process per device: ProcessGroup<Mpi>, ProcessGroup<Nccl>) shares: its
/// options, its error, and the launcher's environment variables.
#pragma once
#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "kiln/core/errors.hpp"

namespace kiln::parallel {

/// A collective that did not complete in time (a rank died or hangs), ranks that disagree (world size,
/// model shapes), or a communicator that failed. Every rank that sees it ends with an error; none hangs.
class DistributedError : public BackendError {
 public:
  using BackendError::BackendError;
};

struct ProcessGroupOptions {
  /// How long a collective may take before the group gives up (torch.distributed's `timeout`): the
  /// rank throws DistributedError and, when it exits, aborts the job so that the other ranks end too.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  /// The world size the job must have (0: any); a job launched with another ends on every rank.
  int expected_world_size = 0;
};

/// ProcessGroup<Backend>: the ranks of a job launched by mpirun, one per device (kiln/parallel/mpi.hpp,
/// kiln/parallel/nccl.hpp).
template <class Backend>
class ProcessGroup;

namespace detail {
/// An integer environment variable (RANK, WORLD_SIZE, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK), if set;
/// one that is set but not a number is an error naming it.
inline std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20)
    throw ValueError(std::string("kiln::parallel: environment variable ") + name + "=\"" + v +
                     "\" is not a rank or a size (expected a non-negative integer)");
  return static_cast<int>(x);
}

/// "2 s", "0.5 s": a timeout as the messages show it.
inline std::string seconds_text(std::chrono::milliseconds t) {
  std::ostringstream os;
  os << static_cast<double>(t.count()) / 1000.0 << " s";
  return os.str();
}

/// "rank 1 of 2: " — every distributed message starts with who says it.
inline std::string rank_prefix(int rank, int size) {
  return "kiln::parallel: rank " + std::to_string(rank) + " of " + std::to_string(size) + ": ";
}
}  // namespace detail

}  // namespace kiln::parallel
