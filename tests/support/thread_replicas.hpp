// A replica group for tests: n replicas of a model, each driven by its own host thread, exchanging
// SyncBatchNorm's statistics through host memory (device memory is copied through the host). It lets the
// CPU and CUDA unit tests run SyncBatchNorm's collectives in one process; DistributedDataParallel's
// process groups are tested under mpirun (tests/mpi).
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <kiln/nn/replica_group.hpp>
#include <kiln/tensor/tensor.hpp>

namespace kiln::test {

template <class D>
class ThreadReplicas {
 public:
  /// What a replica waiting in a collective throws when another replica's f threw instead of joining.
  struct Abandoned : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  explicit ThreadReplicas(int n) : slots_(static_cast<std::size_t>(n)) {
    for (int r = 0; r < n; ++r) views_.emplace_back(*this, r);
  }
  ThreadReplicas(const ThreadReplicas&) = delete;
  ThreadReplicas& operator=(const ThreadReplicas&) = delete;

  int size() const { return static_cast<int>(slots_.size()); }
  /// Replica r's view: give it to replica r's model (Model::set_replica_group).
  nn::ReplicaGroup& group(int r) { return views_[static_cast<std::size_t>(r)]; }
  /// Runs f(r) for every replica on a thread of its own and rethrows, after all end, the first
  /// exception by rank that was not Abandoned: a replica that throws outside a collective abandons the
  /// others' next one (they throw Abandoned instead of waiting forever).
  void run(const std::function<void(int)>& f) {
    arrived_ = 0, abandoned_ = false;
    std::vector<std::exception_ptr> errors(slots_.size()), abandoned(slots_.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r)
      threads.emplace_back([&, r] {
        try {
          f(r);
        } catch (const Abandoned&) {
          abandoned[static_cast<std::size_t>(r)] = std::current_exception();
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          abandon();
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (const auto& e : abandoned)
      if (e) std::rethrow_exception(e);
  }
  /// How many collectives each replica has made.
  int collectives() const { return collectives_; }

 private:
  class View final : public nn::ReplicaGroup {
   public:
    View(ThreadReplicas& owner, int rank) : owner_(&owner), rank_(rank) {}
    int size() const override { return owner_->size(); }
    int rank() const override { return rank_; }
    void all_gather(const double* send, double* recv, index_t count, const std::string&) override {
      owner_->publish(rank_, send, count);
      std::vector<double> all;
      for (const auto& s : owner_->slots_) all.insert(all.end(), s.begin(), s.end());
      owner_->done(rank_);
      store(recv, all);
    }
    void all_reduce_sum(double* data, index_t count, const std::string&) override {
      owner_->publish(rank_, data, count);
      std::vector<double> sum(static_cast<std::size_t>(count), 0.0);
      for (const auto& s : owner_->slots_)  // in rank order: the same sum on every replica
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += s[i];
      owner_->done(rank_);
      store(data, sum);
    }

   private:
    static void store(double* p, const std::vector<double>& v) {
      auto t = Tensor<double, Shape<dyn>, D>::from_blob(p, Extents<Shape<dyn>>(static_cast<index_t>(v.size())));
      t.copy_from(std::span<const double>(v));
    }
    ThreadReplicas* owner_;
    int rank_;
  };

  /// Replica r's values into its slot; returns when every replica's are there.
  void publish(int r, const double* p, index_t count) {
    const auto t = Tensor<double, Shape<dyn>, D>::from_blob(const_cast<double*>(p), Extents<Shape<dyn>>(count));
    slots_[static_cast<std::size_t>(r)] = t.to_vector();
    arrive_and_wait();
  }
  /// Every replica has read the slots: they may be written again.
  void done(int r) {
    if (r == 0) ++collectives_;
    arrive_and_wait();
  }
  /// A barrier of all replicas that a failed replica can abandon.
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    const long generation = generation_;
    if (!abandoned_ && ++arrived_ == size()) {
      arrived_ = 0;
      ++generation_;
      wake_.notify_all();
      return;
    }
    wake_.wait(lock, [&] { return generation_ != generation || abandoned_; });
    if (generation_ == generation) throw Abandoned("kiln::test::ThreadReplicas: another replica failed instead of joining this collective");
  }
  void abandon() {
    const std::lock_guard lock(mutex_);
    abandoned_ = true;
    wake_.notify_all();
  }

  std::vector<std::vector<double>> slots_;
  std::vector<View> views_;
  std::mutex mutex_;
  std::condition_variable wake_;
  long generation_ = 0;
  int arrived_ = 0;
  bool abandoned_ = false;
  int collectives_ = 0;
};

}  // namespace kiln::test
