/// DataParallel: one process, N replicas of a model (CPU replicas, or one per GPU), each batch split across
/// them, every replica on its own host thread, gradients summed across replicas, every replica stepping.
#pragma once
#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/backend/cpu/blas.hpp"
#include "kiln/backend/cpu/threads.hpp"
#include "kiln/core/config.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/nn/loss.hpp"
#include "kiln/nn/model.hpp"
#include "kiln/nn/sync_batchnorm.hpp"
#include "kiln/optim/param_groups.hpp"
#include "kiln/parallel/thread_replicas.hpp"
#include "kiln/policy/policy.hpp"
#include "kiln/tensor/tensor.hpp"

#if KILN_HAS_OPENMP
#include <omp.h>
#endif

namespace kiln::parallel {

/// How a batch of n samples is split over k replicas: torch.chunk's rule (chunks of ceil(n / k), the last
/// ones smaller, trailing replicas possibly empty), as torch.nn.DataParallel scatters.
struct Split {
  std::vector<index_t> offset;  ///< first sample of each replica's chunk
  std::vector<index_t> count;   ///< samples in it (0: the replica sits this batch out)

  static Split of(index_t n, int k) {
    Split s;
    const index_t chunk = k > 0 ? (n + k - 1) / k : 0;
    for (int r = 0; r < k; ++r) {
      const index_t begin = std::min<index_t>(n, r * chunk);
      s.offset.push_back(begin);
      s.count.push_back(std::min<index_t>(n, begin + chunk) - begin);
    }
    return s;
  }
  /// "128 = 43 + 43 + 42" (what the examples log once).
  std::string describe() const {
    index_t n = 0;
    std::string parts;
    for (std::size_t r = 0; r < count.size(); ++r) {
      n += count[r];
      parts += (r ? " + " : "") + std::to_string(count[r]);
    }
    return std::to_string(n) + " = " + parts;
  }
};

namespace detail {
/// Threads for replicas 1..n-1, kept for the replicas' lifetime (a step does not pay for creating them):
/// run(f) runs f(r) on replica r's thread for every r > 0 and f(0) on the caller, waits for all, and
/// rethrows the first exception. `setup(r)` runs once on each thread when it starts (its OpenMP share,
/// its GPU and stream).
class ReplicaPool {
 public:
  ReplicaPool(int n, std::function<void(int)> setup) : setup_(std::move(setup)) {
    try {
      for (int r = 1; r < n; ++r) threads_.emplace_back([this, r] { work(r); });
    } catch (...) {  // a thread that could not start (std::system_error): stop and join those that did
      stop();
      throw;
    }
  }
  ~ReplicaPool() { stop(); }
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  void run(const std::function<void(int)>& f) {
    {
      std::lock_guard<std::mutex> lock(m_);
      job_ = &f;
      pending_ = static_cast<int>(threads_.size());
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    guarded(f, 0);
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void stop() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void work(int r) {
    std::exception_ptr setup_error;  // reported by every job, instead of running it
    try {
      setup_(r);
    } catch (...) {
      setup_error = std::current_exception();
    }
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(m_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      if (setup_error) {
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = setup_error;
      } else {
        guarded(*job, r);
      }
      {
        std::lock_guard<std::mutex> lock(m_);
        --pending_;
      }
      done_.notify_one();
    }
  }
  void guarded(const std::function<void(int)>& f, int r) {
    try {
      f(r);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      if (!error_) error_ = std::current_exception();
    }
  }

  std::function<void(int)> setup_;
  std::mutex m_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int pending_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

/// How the replicas of device D reach their devices and sum their gradients. CPU replicas: nothing to
/// bind, a shared-memory all-reduce (in DataParallel). CUDA replicas: kiln/parallel/nccl_replicas.hpp
/// specialises it (one stream per GPU, ncclCommInitAll, grouped ncclAllReduce).
template <class D>
struct ReplicaDevices {
  static_assert(sizeof(D) == 0,
                "kiln::parallel::DataParallel on CUDA replicas: #include <kiln/parallel/nccl_replicas.hpp> and link kiln::nccl");
};
template <>
struct ReplicaDevices<Cpu> {
  explicit ReplicaDevices(int) {}
  void bind_worker(int) {}                     // once, on replica r's thread: its device and stream
  struct Scope {};
  Scope caller_scope() { return {}; }          // replica 0's device and stream on the caller, for a call
  Scope scope(int) { return {}; }              // replica r's device and stream on the caller, for a scope
  void finish(int) {}                          // replica r's queued work is done
  void synchronize() {}                        // every replica's is
};
}  // namespace detail

/// N replicas of Net (input shape In, precision Prec) on device D: CPU replicas (in one address space,
/// for tests and for CPUs with many cores) or one per GPU (devices 0..N-1). They are created once from
/// one seed, so they start identical, and stay identical: every step gives each the same summed gradient
/// and each runs the same optimizer update. Unlike torch.nn.DataParallel, nothing is gathered onto the
/// first device and the parameters are never re-broadcast.
///
/// A step, for a loss such as CrossEntropyLoss or MSELoss:
///   kiln::parallel::DataParallel<Net, kiln::Shape<kiln::dyn, 13>> dp(/*replicas=*/2, /*seed=*/0);
///   auto opt = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-3}); });
///   opt.zero_grad();
///   double loss = dp.train_step(x, y, mse);  // split, forward + backward per replica, gradients summed
///   opt.step();                              // every replica steps
/// For a mean-reduced loss (the default; KLDivLoss's batchmean too) replica r's loss gradient is weighted
/// by its share of the batch (count_r / n; for CrossEntropyLoss and NLLLoss, of the rows they do not
/// ignore), so the summed gradient is the full batch's mean gradient, whatever the split; for a
/// `reduction` of `sum` each weighs 1, and the summed gradient is the full batch's sum's. Dropout draws
/// its mask from each replica's own element indices, so a model with Dropout does not reproduce
/// single-device training mask for mask, and replicas' chunks of one size get the same masks (as in
/// torch's DataParallel, whose GPUs torch.manual_seed seeds alike). Buffers (BatchNorm's running statistics) are copied from
/// replica 0 to the others at the start of every train_step, as torch's replicate() does each forward:
/// each replica normalises its chunk by that chunk's statistics, and replica 0's running statistics are
/// the ones that last (what module() evaluates and a checkpoint of it saves). With SyncBatchNorm layers
/// (nn::convert_sync_batchnorm_t) the replicas normalise by their chunks' statistics together, through
/// a ThreadReplicaGroup: the step then gives one device's result on the whole batch, every replica takes
/// part (an empty chunk too), and a training forward of one replica alone is an Error (use eval()).
template <class Net, class In, precision_policy Prec = Fp32, device_policy D = Cpu>
class DataParallel {
 public:
  using model_type = nn::Model<Net, In, Policy<Prec, D>>;
  using T = typename model_type::T;
  using M = typename model_type::M;
  using output_shape = typename model_type::output_shape;

  /// `replicas` models initialised from `seed` (identically). On the CPU each replica's OpenMP loops use
  /// an equal share of the threads (at least one); on CUDA replica r lives on device r.
  explicit DataParallel(int replicas, std::uint64_t seed = 0) : devices_(check_count(replicas)) {
    for (int r = 0; r < replicas; ++r) {
      [[maybe_unused]] const auto on = devices_.scope(r);  // its kernels (zeroing the gradients) on its GPU
      models_.push_back(std::make_unique<model_type>(seed, std::is_same_v<D, Cpu> ? -1 : r));
    }
    if constexpr (synchronised) {  // SyncBatchNorm: the replicas' statistics together, through host memory
      if (replicas > 1) {
        sync_ = std::make_unique<ThreadReplicaGroup<D>>(replicas);
        for (int r = 0; r < replicas; ++r) replica(r).set_replica_group(&sync_->group(r));
      }
    }
    devices_.synchronize();  // the initialisation is done before the replicas' threads start
#if KILN_HAS_OPENMP
    threads_per_replica_ = std::max(1, omp_get_max_threads() / replicas);
#endif
    pool_ = std::make_unique<detail::ReplicaPool>(replicas, [this](int r) {
#if KILN_HAS_OPENMP
      omp_set_num_threads(threads_per_replica_);
#endif
      devices_.bind_worker(r);
    });
    pool_->run([](int) {});  // a replica thread that could not set up (its GPU) fails here, not in a step
  }

  DataParallel(const DataParallel&) = delete;  // the replica threads and optimizers point at this
  DataParallel& operator=(const DataParallel&) = delete;

  int size() const { return static_cast<int>(models_.size()); }
  model_type& replica(int r) { return *models_.at(static_cast<std::size_t>(r)); }
  const model_type& replica(int r) const { return *models_.at(static_cast<std::size_t>(r)); }
  /// Replica 0: what checkpoints save and evaluation runs (all replicas hold the same parameters).
  model_type& module() { return replica(0); }

  /// One optimizer per replica, each made by `make(replica)`; steps, zero_grad and the learning rate go to
  /// all of them (a scheduler can drive the bundle like one optimizer).
  template <class Make>
  auto make_optimizers(Make make) {
    using Opt = std::invoke_result_t<Make&, model_type&>;
    std::vector<std::unique_ptr<Opt>> opts;
    for (int r = 0; r < size(); ++r) {
      [[maybe_unused]] const auto on = devices_.scope(r);  // its state is created (zeroed) on its GPU
      opts.push_back(std::make_unique<Opt>(make(replica(r))));
    }
    devices_.synchronize();
    return Optimizers<Opt>(this, std::move(opts));
  }

  /// Forward and backward of one global batch: x [n, ...] and its targets (labels [n] or values [n, ...]),
  /// on the host for CUDA replicas (each replica's chunk is copied to its device). Each replica computes
  /// its chunk's loss on its own host thread and accumulates its parameter gradients; then the
  /// gradients are summed across replicas (in place, on every replica). As on one device, gradients
  /// accumulate over train_steps until zero_grad (gradient accumulation). Returns the batch's loss (its
  /// mean, or its sum for a sum-reduced loss).
  /// `scale` multiplies every loss gradient (a GradScaler's scale).
  template <class Y, class SY, class Loss>
  double train_step(const Tensor<T, In, Cpu>& x, const Tensor<Y, SY, Cpu>& y, const Loss& loss, double scale = 1.0) {
    return step_on(x, y, loss, scale);
  }
  /// x of another type where a model's forward takes it: a static batch, float into a half or bfloat16
  /// model (cast first); anything else is Model::forward's compile error (model_input_mismatch).
  template <class U, class S, class Y, class SY, class Loss>
  double train_step(const Tensor<U, S, Cpu>& x, const Tensor<Y, SY, Cpu>& y, const Loss& loss, double scale = 1.0) {
    return step_on(nn::detail::as_model_input<T, In, Cpu>(x), y, loss, scale);
  }

 private:
  /// Runs replica r's share of a step; kiln's errors come out of it as the same type with the replica
  /// and its rows in front (torch's "Caught ValueError in replica 2 on device 2"): the rows it was given
  /// are not the batch the caller passed (a BatchNorm given one row of a batch of 5 over 4 replicas).
  template <class F>
  static void in_replica(int r, index_t off, index_t count, const Split& split, F&& f) {
    const auto where = [&](const std::exception& e) {
      return "kiln::parallel::DataParallel: in replica " + std::to_string(r) + " (rows " +
             std::to_string(off) + " .. " + std::to_string(off + count - 1) + " of the batch split " +
             split.describe() + "): " + e.what();
    };
    try {
      f();
    } catch (const typename ThreadReplicaGroup<D>::Abandoned&) {
      throw;  // as it is: the step's job drops it, for the error of the replica that failed
    } catch (const ShapeError& e) {
      throw ShapeError(where(e));
    } catch (const ValueError& e) {
      throw ValueError(where(e));
    } catch (const IndexError& e) {
      throw IndexError(where(e));
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError(where(e));
    } catch (const BackendError& e) {
      throw BackendError(where(e));
    } catch (const FileError& e) {
      throw FileError(where(e));
    } catch (const Error& e) {
      throw Error(where(e));
    }
  }

  template <class Y, class SY, class Loss>
  double step_on(const Tensor<T, In, Cpu>& x, const Tensor<Y, SY, Cpu>& y, const Loss& loss, double scale) {
    if (x.size(0) != y.size(0))
      throw ShapeError("kiln::parallel::DataParallel::train_step: " + std::to_string(x.size(0)) + " inputs but " +
                       std::to_string(y.size(0)) + " targets");
    if (!replica(0).grad_enabled())
      throw Error("kiln::parallel::DataParallel::train_step: gradients are disabled (a NoGrad over the "
                  "model): train_step runs backward; to evaluate, run dp.module().forward(x) under NoGrad "
                  "(torch's dp(x) under no_grad(); kiln's replicas exist to train)");
    for (int r = 1; r < size(); ++r) {  // replica 0's mode on every replica (torch's replicate copies it)
      replica(r).train(replica(0).training());
      replica(r).set_grad_enabled(replica(0).grad_enabled());
      replica(r).set_training_forwards(replica(0).training_forwards());  // (a checkpoint loads replica 0's)
    }
    check_replicas_agree();
    const index_t n = x.size(0);
    const Split split = Split::of(n, size());
    const bool summed = sums(loss);
    const double counted = counted_rows(loss, y);
    std::vector<double> losses(models_.size(), 0.0);
    if constexpr (model_type::buffer_count > 0) broadcast_buffers();
    run_replicas([&](int r) {
      // Replica 0 holds the running sum of the steps since zero_grad (every replica did, after the last
      // all-reduce); the others start from zero so that the all-reduce adds this step's gradients to it
      // once: train_steps without zero_grad accumulate, as torch's .grad does.
      if (r > 0) replica(r).gradients().fill(M(0));
      const index_t count = split.count[static_cast<std::size_t>(r)];
      if (count == 0 && !sync_) return;  // with SyncBatchNorm an empty share still takes part
      const index_t off = split.offset[static_cast<std::size_t>(r)];
      in_replica(r, off, count, split, [&] {
        const auto yh = rows(y, off, count);
        const double mine = counted_rows(loss, yh);
        const auto xr = to_replica(rows(x, off, count), r);
        const auto yr = to_replica(yh, r);
        model_type& m = replica(r);
        const auto pred = m.forward(xr);
        // (0 / 0 = NaN when nothing in the batch counts: rows that weigh 0 then get NaN, as on one device,
        // and ignored rows 0, which never read it)
        const double share = summed ? 1.0 : mine / counted;
        if (mine > 0)
          losses[static_cast<std::size_t>(r)] = share * static_cast<double>(loss(pred, yr).item());
        m.backward(loss.backward(pred, yr, scale * share));
      });
    });
    all_reduce_gradients();
    if (counted == 0 && !summed) return std::numeric_limits<double>::quiet_NaN();  // torch's mean over no rows
    double total = 0;
    for (double l : losses) total += l;
    return total;
  }

 public:
  /// Whether the loss sums its terms (its reduction's `sum`: Reduction::sum, KLDivReduction::sum) rather
  /// than averaging them over the elements or the rows.
  template <class Loss>
  static bool sums(const Loss& loss) {
    if constexpr (requires { loss.reduction == decltype(loss.reduction)::sum; })
      return loss.reduction == decltype(loss.reduction)::sum;
    else
      return false;
  }

  /// The rows a mean-reduced loss divides by: the labels it does not ignore for a loss that says
  /// (CrossEntropyLoss's and NLLLoss's ignore_index), else every row.
  template <class Loss, class Y, class SY>
  static double counted_rows(const Loss& loss, const Tensor<Y, SY, Cpu>& y) {
    if constexpr (requires { loss.counted(y); })
      return static_cast<double>(loss.counted(y));
    else
      return static_cast<double>(y.size(0));
  }

  /// Sums the gradient arenas of all replicas, element by element, into every one (a shared-memory
  /// all-reduce: replica thread r sums slice r of the arena over all replicas and writes it back to all).
  void all_reduce_gradients() {
    if (size() == 1) return;
    if constexpr (std::is_same_v<D, Cpu>) {
      const index_t count = model_type::parameter_count;
      const index_t per = (count + size() - 1) / size();
      run_replicas([&](int r) {
        const index_t begin = std::min<index_t>(count, r * per), end = std::min<index_t>(count, begin + per);
        std::vector<M*> g;
        for (auto& m : models_) g.push_back(m->gradients().data());
        for (index_t i = begin; i < end; ++i) {
          M s = g[0][i];
          for (std::size_t k = 1; k < g.size(); ++k) s += g[k][i];
          for (M* gk : g) gk[i] = s;
        }
      });
    } else {
      std::vector<M*> g;
      for (auto& m : models_) g.push_back(m->gradients().data());
      devices_.all_reduce(g, model_type::parameter_count);  // grouped ncclAllReduce, one stream per GPU
    }
  }

  /// Replica 0's parameters and buffers into every other replica (through the host), so that they step
  /// as one again: after a checkpoint was loaded into module() (torch's DataParallel copies its module to
  /// the devices at every forward, so loading it there is enough; kiln's replicas stay where they are). An
  /// optimizer's state is its replica's own: load it into each (opts.replica(r)).
  void broadcast_parameters() {
    if (size() == 1) return;
    devices_.synchronize();
    const std::vector<M> host = std::as_const(replica(0)).parameters().to_vector();
    for (int r = 1; r < size(); ++r) {
      [[maybe_unused]] const auto on = devices_.scope(r);
      replica(r).parameters().copy_from(std::span<const M>(host.data(), host.size()));
    }
    devices_.synchronize();
    if constexpr (model_type::buffer_count > 0) broadcast_buffers();
  }

  /// Replica 0's buffers into every other replica (through the host: a few values per layer).
  void broadcast_buffers() {
    if (size() == 1) return;
    devices_.synchronize();
    const std::vector<M> host = replica(0).buffers().to_vector();
    for (int r = 1; r < size(); ++r) {
      [[maybe_unused]] const auto on = devices_.scope(r);
      replica(r).buffers().copy_from(std::span<const M>(host.data(), host.size()));
    }
    devices_.synchronize();
  }

  /// Throws Error when a replica's parameters differ from replica 0's at a few sampled elements (the first,
  /// the middle, the last; bit for bit, so NaN weights compare equal): replicas that drifted apart (an
  /// optimizer made on module() alone, which steps replica 0 only; weights loaded into module() without
  /// broadcast_parameters()) would otherwise train on silently, each step summing gradients taken at
  /// different weights. train_step calls it first: 3 values read per replica (on GPUs, 3 small copies).
  void check_replicas_agree() {
    if (size() == 1) return;
    for (int r = 1; r < size(); ++r)
      if (replica(r).frozen_layers() != replica(0).frozen_layers())
        throw Error("kiln::parallel::DataParallel::train_step: replica " + std::to_string(r) + " has " +
                    std::to_string(replica(r).frozen_layers()) + " frozen layers, replica 0 " +
                    std::to_string(replica(0).frozen_layers()) + ": freeze every replica with dp.freeze(k), "
                    "not dp.module().freeze(k) (replica 0 alone)");
    const index_t n = replica(0).parameters().numel();
    if (n == 0) return;
    devices_.synchronize();  // every replica's queued optimizer step is done
    if constexpr (std::is_same_v<D, Cpu>) {  // every parameter: one read of each arena, no copy
      const M* first = std::as_const(replica(0)).parameters().data();
      for (int r = 1; r < size(); ++r) {
        const M* other = std::as_const(replica(r)).parameters().data();
        if (std::memcmp(first, other, static_cast<std::size_t>(n) * sizeof(M)) == 0) continue;
        index_t k = 0;
        while (std::memcmp(first + k, other + k, sizeof(M)) == 0) ++k;
        throw replicas_differ(r, k, other[k], first[k]);
      }
      return;
    }
    const std::array<index_t, 3> at{0, n / 2, n - 1};
    const auto sample = [&](int r, std::size_t k) {  // (const: a mixed-precision working copy stays fresh)
      [[maybe_unused]] const auto on = devices_.scope(r);
      const auto& p = std::as_const(replica(r)).parameters();
      M v{};
      kiln::detail::device_copy<Cpu, D>::run(&v, 0, p.data() + at[k], p.device_index(), sizeof(M), false);
      return v;
    };
    for (std::size_t k = 0; k < at.size(); ++k) {
      const M first = sample(0, k);
      for (int r = 1; r < size(); ++r) {
        const M other = sample(r, k);
        if (std::memcmp(&first, &other, sizeof(M)) != 0) throw replicas_differ(r, at[k], other, first);
      }
    }
  }
  static Error replicas_differ(int r, index_t k, M other, M first) {
    return Error("kiln::parallel::DataParallel::train_step: replica " + std::to_string(r) +
                 "'s parameters differ from replica 0's (element " + std::to_string(k) + ": " +
                 std::to_string(static_cast<double>(other)) + " against " +
                 std::to_string(static_cast<double>(first)) +
                 "): make the optimizer with dp.make_optimizers(...), not on dp.module() alone (it steps "
                 "replica 0 only), and call dp.broadcast_parameters() after loading weights into "
                 "dp.module() or changing them there in place (torch's DataParallel copies the module to "
                 "every replica at each forward; kiln's replicas keep their own)");
  }

  /// Whether every replica holds the same parameters, bit for bit (they should, after any number of steps).
  bool in_sync() {
    devices_.synchronize();
    const auto p0 = replica(0).parameters().to_vector();
    for (int r = 1; r < size(); ++r)
      if (replica(r).parameters().to_vector() != p0) return false;
    return true;
  }

  void train(bool on = true) {
    for (auto& m : models_) m->train(on);
  }
  void eval() { train(false); }
  /// Every replica's first `layers` layers frozen (Model::freeze): the optimizers made for them skip
  /// those parameters.
  void freeze(std::ptrdiff_t layers) {
    devices_.synchronize();  // no replica's queued backward or all-reduce still writes the gradients
    for (int r = 0; r < size(); ++r) {
      [[maybe_unused]] const auto on = devices_.scope(r);  // the frozen gradients zeroed on its GPU
      replica(r).freeze(layers);
    }
    devices_.synchronize();
  }
  void unfreeze() { freeze(0); }
  std::size_t frozen_layers() const { return models_.front()->frozen_layers(); }

  /// One optimizer per replica, driven together.
  template <class Opt>
  class Optimizers {
   public:
    Optimizers(DataParallel* dp, std::vector<std::unique_ptr<Opt>> opts) : dp_(dp), opts_(std::move(opts)) {}
    /// Every replica's step, on its own thread (and stream).
    void step() {
      dp_->run_replicas([&](int r) { opts_[static_cast<std::size_t>(r)]->step(); });
    }
    void zero_grad() {
      dp_->run_replicas([&](int r) { opts_[static_cast<std::size_t>(r)]->zero_grad(); });
    }
    double lr() const { return opts_.front()->lr(); }
    void set_lr(double lr) {
      for (auto& o : opts_) o->set_lr(lr);
    }
    /// The replicas' step() calls (they step together): a scheduler's order check.
    std::int64_t step_calls() const { return opts_.front()->step_calls(); }
    void count_skipped_step() {
      for (auto& o : opts_) o->count_skipped_step();
    }
    /// The momentum (SGD) or betas (Adam) of every replica's optimizer, for OneCycleLR.
    double momentum() const
      requires requires(const Opt& o) { o.momentum(); }
    {
      return opts_.front()->momentum();
    }
    void set_momentum(double m)
      requires requires(Opt& o, double v) { o.set_momentum(v); }
    {
      for (auto& o : opts_) o->set_momentum(m);
    }
    auto betas() const
      requires requires(const Opt& o) { o.betas(); }
    {
      return opts_.front()->betas();
    }
    template <class B>
      requires requires(Opt& o, const B& b) { o.set_betas(b); }
    void set_betas(const B& b) {
      for (auto& o : opts_) o->set_betas(b);
    }
    /// Parameter groups on every replica's optimizer: torch's add_param_group, and what schedulers move
    /// in each group. An entry of a replica's named_parameters() (any replica's) or a name is found by
    /// name in each replica's model; an entry of no replica is refused (ValueError), one made by hand
    /// (no model) is taken by its offset in every replica.
    void add_param_group(const optim::ParamGroup& g)
      requires requires(Opt& o) { o.add_param_group(g); }
    {
      optim::ParamGroup each{{}, g.lr, g.weight_decay};
      for (const auto& ref : g.params.refs()) {
        const nn::ParameterInfo* p = ref.info();
        if (p == nullptr || p->arena == nullptr) {
          each.params.push_back(ref);
          continue;
        }
        bool ours = false;
        for (int r = 0; r < dp_->size(); ++r)  // (const: taking the arena marks no working copy stale)
          ours = ours || p->arena == std::as_const(dp_->replica(r)).parameters().data();
        if (!ours)
          throw ValueError("kiln::parallel::DataParallel: add_param_group: parameter '" + p->name +
                           "' is another model's (its named_parameters() entry points at no replica's "
                           "parameters); give entries of dp.replica(r).named_parameters(), or names");
        each.params.push_back(p->name);
      }
      // (each replica checks the same group against the same model type: the first refusal leaves all as they were)
      for (auto& o : opts_) o->add_param_group(each);
    }
    std::size_t param_group_count() const
      requires requires(const Opt& o) { o.param_group_count(); }
    {
      return opts_.front()->param_group_count();
    }
    double group_lr(std::size_t k) const
      requires requires(const Opt& o) { o.group_lr(k); }
    {
      return opts_.front()->group_lr(k);
    }
    void set_group_lr(std::size_t k, double lr)
      requires requires(Opt& o) { o.set_group_lr(k, lr); }
    {
      for (auto& o : opts_) o->set_group_lr(k, lr);
    }
    double group_weight_decay(std::size_t k) const
      requires requires(const Opt& o) { o.group_weight_decay(k); }
    {
      return opts_.front()->group_weight_decay(k);
    }
    double group_initial_lr(std::size_t k) const
      requires requires(const Opt& o) { o.group_initial_lr(k); }
    {
      return opts_.front()->group_initial_lr(k);
    }
    std::vector<std::string> group_parameter_names(std::size_t k) const
      requires requires(const Opt& o) { o.group_parameter_names(k); }
    {
      return opts_.front()->group_parameter_names(k);
    }
    Opt& replica(int r) { return *opts_.at(static_cast<std::size_t>(r)); }
    int size() const { return static_cast<int>(opts_.size()); }

   private:
    DataParallel* dp_;
    std::vector<std::unique_ptr<Opt>> opts_;
  };

 private:
  /// Rows [off, off + count) of a host batch: a view, no copy.
  template <class E, class S>
  static Tensor<E, S, Cpu> rows(const Tensor<E, S, Cpu>& t, index_t off, index_t count) {
    Extents<S> e = t.extents();
    e[0] = count;
    const index_t row = count > 0 ? t.numel() / std::max<index_t>(t.size(0), 1) : 0;
    return Tensor<E, S, Cpu>::from_blob(const_cast<E*>(t.data()) + off * row, e);
  }
  /// The chunk on replica r's device (the view itself for CPU replicas).
  template <class E, class S>
  static Tensor<E, S, D> to_replica(const Tensor<E, S, Cpu>& chunk, int r) {
    if constexpr (std::is_same_v<D, Cpu>) {
      (void)r;
      return chunk;
    } else {
      return chunk.template to<D>(r);
    }
  }
  static int check_count(int replicas) {
    if (replicas < 1)
      throw ValueError("kiln::parallel::DataParallel: " + std::to_string(replicas) + " replicas; give at least 1");
    return replicas;
  }
  /// Runs f(r) for every replica: replica 0 on the calling thread (with its OpenMP share, and its GPU
  /// and stream, for the call), the others on their own threads; rethrows the first exception after all
  /// have finished. Each replica's work is finished (its stream drained) when this returns.
  /// With SyncBatchNorm the replicas' collectives run inside such a call: a replica that throws
  /// abandons the others' (they return, and its exception is the one rethrown).
  template <class F>
  void run_replicas(F&& f) {
    // CPU replicas call their GEMMs at once from their threads: a pthreads OpenBLAS would serve them one
    // at a time from its one pool (backend/cpu/blas.hpp); each runs on its replica's thread instead.
    const backend::cpu::SerialBlas serial_blas(std::is_same_v<D, Cpu> && size() > 1);
    const auto part = [&](int r) {
      if (r == 0) {
        const backend::cpu::ScopedThreads share(threads_per_replica_);  // the calling thread: a replica's share
        [[maybe_unused]] const auto scope = devices_.caller_scope();
        f(0);
        devices_.finish(0);
      } else {
        f(r);
        devices_.finish(r);
      }
    };
    const std::function<void(int)> job = [&](int r) {
      if (!sync_) return part(r);
      try {
        part(r);
        sync_->leave();
      } catch (const typename ThreadReplicaGroup<D>::Abandoned&) {  // another replica's error is reported
      } catch (...) {
        sync_->abandon();
        throw;
      }
    };
    if (sync_) sync_->begin_step();
    try {
      pool_->run(job);
    } catch (...) {
      if (sync_) sync_->end_step();
      throw;
    }
    if (sync_) sync_->end_step();
  }

  /// Whether Net has SyncBatchNorm layers, which then normalise by every replica's share together.
  static constexpr bool synchronised = nn::has_sync_batchnorm_v<Net>;

  detail::ReplicaDevices<D> devices_;
  std::unique_ptr<ThreadReplicaGroup<D>> sync_;  // SyncBatchNorm's collectives (2 replicas or more)
  std::vector<std::unique_ptr<model_type>> models_;  // after sync_: they point into it
  int threads_per_replica_ = 1;
  std::unique_ptr<detail::ReplicaPool> pool_;  // last: its threads stop before the replicas go
};

}  // namespace kiln::parallel
