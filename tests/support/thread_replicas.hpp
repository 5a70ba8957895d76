// Replicas of a model on threads of their own for the unit tests: kiln::parallel::ThreadReplicaGroup
// (what DataParallel's replicas synchronise SyncBatchNorm through) with a run(f) that starts a thread per
// replica, so that the CPU and CUDA unit tests run SyncBatchNorm's collectives in one process;
// DistributedDataParallel's process groups are tested under mpirun (tests/mpi).
#pragma once
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include <kiln/parallel/thread_replicas.hpp>

namespace kiln::test {

template <class D>
class ThreadReplicas {
 public:
  using Abandoned = typename parallel::ThreadReplicaGroup<D>::Abandoned;

  explicit ThreadReplicas(int n) : group_(n) {}
  int size() const { return group_.size(); }
  /// Replica r's view: give it to replica r's model (Model::set_replica_group).
  nn::ReplicaGroup& group(int r) { return group_.group(r); }
  /// How many collectives the replicas have made together.
  long collectives() const { return group_.collectives(); }
  /// Runs f(r) for every replica on a thread of its own and rethrows, after all end, the first
  /// exception by rank that was not Abandoned: a replica that throws outside a collective abandons the
  /// others' next one (they throw Abandoned instead of waiting forever), and one that returns leaves the
  /// step (a collective the others then wait in is an Error).
  void run(const std::function<void(int)>& f) {
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size())), abandoned(errors.size());
    std::vector<std::thread> threads;
    group_.begin_step();
    for (int r = 0; r < size(); ++r)
      threads.emplace_back([&, r] {
        try {
          f(r);
          group_.leave();
        } catch (const Abandoned&) {
          abandoned[static_cast<std::size_t>(r)] = std::current_exception();
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          group_.abandon();
        }
      });
    for (auto& t : threads) t.join();
    group_.end_step();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (const auto& e : abandoned)
      if (e) std::rethrow_exception(e);
  }

 private:
  parallel::ThreadReplicaGroup<D> group_;
};

}  // namespace kiln::test
