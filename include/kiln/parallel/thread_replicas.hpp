/// ThreadReplicaGroup: the replicas of one process, each driven by its own host thread (DataParallel's),
/// as the layers that synchronise across replicas (SyncBatchNorm) see them: an nn::ReplicaGroup per
/// replica, exchanging through host memory.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/nn/replica_group.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::parallel {

/// n replicas' collectives through host memory: replica r publishes its values into slot r (copied
/// from its device for GPU replicas), every replica waits for all the slots, reads them in rank order
/// (so every replica computes the same sums), and waits again before the slots are reused. Collectives
/// run only inside a step (begin_step() .. end_step()), where every replica's thread takes part; one
/// made outside (a training forward of one replica alone) is an Error instead of a wait for replicas
/// that never come. A replica that fails outside a collective calls abandon(): the others' collectives
/// throw Abandoned instead of waiting forever. A replica whose part of the step ends without error calls
/// leave(): a collective that the replicas left can no longer join (replicas in different modes, say)
/// is an Error on the replicas waiting in it, and so are replicas whose calls disagree on the count.
template <class D>
class ThreadReplicaGroup {
 public:
  /// What a replica waiting in a collective throws when another replica has failed instead of joining.
  struct Abandoned : Error {
    using Error::Error;
  };

  explicit ThreadReplicaGroup(int n) : slots_(static_cast<std::size_t>(n)) {
    for (int r = 0; r < n; ++r) views_.emplace_back(*this, r);
  }
  ThreadReplicaGroup(const ThreadReplicaGroup&) = delete;  // the views point here
  ThreadReplicaGroup& operator=(const ThreadReplicaGroup&) = delete;

  int size() const { return static_cast<int>(slots_.size()); }
  /// Replica r's view: give it to replica r's model (Model::set_replica_group).
  nn::ReplicaGroup& group(int r) { return views_.at(static_cast<std::size_t>(r)); }
  /// Every replica's thread is about to run its part of a step (no collective is in flight).
  void begin_step() {
    const std::lock_guard lock(mutex_);
    arrived_ = 0, left_ = 0, abandoned_ = false, in_step_ = true;
  }
  /// The step's threads have all returned.
  void end_step() {
    const std::lock_guard lock(mutex_);
    in_step_ = false;
  }
  /// A replica failed outside a collective: the others' collectives in this step throw Abandoned.
  void abandon() {
    const std::lock_guard lock(mutex_);
    abandoned_ = true;
    wake_.notify_all();
  }
  /// A replica's part of the step ended without error: it makes no more collectives in this step.
  void leave() {
    const std::lock_guard lock(mutex_);
    ++left_;
    wake_.notify_all();
  }
  /// How many collectives the replicas have made together.
  long collectives() const {
    const std::lock_guard lock(mutex_);
    return collectives_;
  }

 private:
  class View final : public nn::ReplicaGroup {
   public:
    View(ThreadReplicaGroup& owner, int rank) : owner_(&owner), rank_(rank) {}
    int size() const override { return owner_->size(); }
    int rank() const override { return rank_; }
    void all_gather(const double* send, double* recv, index_t count, const std::string& what) override {
      owner_->publish(rank_, send, count, what);
      std::vector<double> all;
      for (const auto& s : owner_->slots_) all.insert(all.end(), s.begin(), s.end());
      owner_->finish(rank_, what);
      store(recv, all);
    }
    void all_reduce_sum(double* data, index_t count, const std::string& what) override {
      owner_->publish(rank_, data, count, what);
      std::vector<double> sum(static_cast<std::size_t>(count), 0.0);
      for (const auto& s : owner_->slots_)  // in rank order: the same sum on every replica
        for (std::size_t i = 0; i < sum.size() && i < s.size(); ++i) sum[i] += s[i];
      owner_->finish(rank_, what);
      store(data, sum);
    }

   private:
    static void store(double* p, const std::vector<double>& v) {
      auto t = Tensor<double, Shape<dyn>, D>::from_blob(p, Extents<Shape<dyn>>(static_cast<index_t>(v.size())));
      t.copy_from(std::span<const double>(v));
    }
    ThreadReplicaGroup* owner_;
    int rank_;
  };

  /// Replica r's values into its slot; returns when every replica's are there.
  void publish(int r, const double* p, index_t count, const std::string& what) {
    {
      const std::lock_guard lock(mutex_);
      if (!in_step_)
        throw Error("kiln::parallel::ThreadReplicaGroup: " + what + " on replica " + std::to_string(r) +
                    " outside a step of all " + std::to_string(size()) + " replicas (a training forward of one "
                    "replica alone with SyncBatchNorm); evaluate in eval(), or train through the DataParallel");
    }
    const auto t = Tensor<double, Shape<dyn>, D>::from_blob(const_cast<double*>(p), Extents<Shape<dyn>>(count));
    slots_[static_cast<std::size_t>(r)] = t.to_vector();
    arrive_and_wait(r, what);
    for (std::size_t k = 0; k < slots_.size(); ++k)  // every replica sees the same sizes, so all throw
      if (slots_[k].size() != slots_[0].size())
        throw Error("kiln::parallel::ThreadReplicaGroup: " + what + ": replica " + std::to_string(k) + " sent " +
                    std::to_string(slots_[k].size()) + " values and replica 0 " + std::to_string(slots_[0].size()) +
                    " (the replicas run different layers: the same network and mode on each)");
  }
  /// Every replica has read the slots (they may be written again); replica 0 counts the collective.
  void finish(int r, const std::string& what) {
    arrive_and_wait(r, what);
    if (r == 0) {
      const std::lock_guard lock(mutex_);
      ++collectives_;
    }
  }
  /// A barrier of all replicas, which a failed replica can abandon.
  void arrive_and_wait(int r, const std::string& what) {
    std::unique_lock lock(mutex_);
    const long generation = generation_;
    if (!abandoned_ && ++arrived_ == size()) {
      arrived_ = 0;
      ++generation_;
      wake_.notify_all();
      return;
    }
    wake_.notify_all();  // when replicas have left, this arrival makes the barrier unreachable: all re-check
    wake_.wait(lock, [&] { return generation_ != generation || abandoned_ || arrived_ + left_ >= size(); });
    if (generation_ != generation) return;
    if (abandoned_)
      throw Abandoned("kiln::parallel::ThreadReplicaGroup: " + what + " on replica " + std::to_string(r) +
                      ": another replica failed instead of joining");
    throw Error("kiln::parallel::ThreadReplicaGroup: " + what + " on replica " + std::to_string(r) + ": " +
                std::to_string(left_) + " replica(s) ended the step without it (replicas in different modes? switch "
                "them together: DataParallel::train() / eval())");
  }

  std::vector<std::vector<double>> slots_;
  std::vector<View> views_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  long generation_ = 0;
  long collectives_ = 0;
  int arrived_ = 0;
  int left_ = 0;  // replicas whose part of this step has ended
  bool abandoned_ = false;
  bool in_step_ = false;
};

}  // namespace kiln::parallel
