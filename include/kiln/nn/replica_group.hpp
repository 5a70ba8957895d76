/// ReplicaGroup: the replicas of one model that train together (the ranks of a DistributedDataParallel
/// job), as the layers that synchronise across them (SyncBatchNorm) see it.
#pragma once
#include <string>

#include "kiln/core/index.hpp"

namespace kiln::nn {

/// The collectives a layer may make across the replicas during its forward and backward passes, on
/// memory of the model's device (host memory for a CPU model, the GPU's for a CUDA one). Every replica
/// makes the same calls in the same order; each returns once its result is in place (or throws: a rank
/// that died, a timeout). DistributedDataParallel hands the model one (Model::set_replica_group); torch's
/// counterpart is the process group a SyncBatchNorm reduces over.
class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  /// How many replicas, and which one this is.
  virtual int size() const = 0;
  virtual int rank() const = 0;
  /// Every replica's `count` values at `send`, by rank: recv[r * count + i] = replica r's send[i].
  virtual void all_gather(const double* send, double* recv, index_t count, const std::string& what) = 0;
  /// `count` values at `data` summed over the replicas, in place.
  virtual void all_reduce_sum(double* data, index_t count, const std::string& what) = 0;
};

}  // namespace kiln::nn
