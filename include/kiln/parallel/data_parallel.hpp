/// DataParallel: one process, N replicas of a model (CPU replicas, or one per GPU), each batch split across
/// them, every replica on its own host thread, gradients summed across replicas, every replica stepping.
#pragma once
#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/nn/model.hpp"
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

/// N replicas of Net (input shape In, precision Prec) on device D: CPU replicas (in one address space,
/// for tests and for CPUs with many cores) or one per GPU (devices 0..N-1). They are created once from
/// one seed, so they start identical, and stay identical: every step gives each the same summed gradient
/// and each runs the same optimizer update. Unlike torch.nn.DataParallel, nothing is gathered onto the
/// first device and the parameters are never re-broadcast.
///
/// A step, for a mean-reduced loss (CrossEntropyLoss, MSELoss):
///   kiln::parallel::DataParallel<Net, kiln::Shape<kiln::dyn, 13>> dp(/*replicas=*/2, /*seed=*/0);
///   auto opt = dp.make_optimizers([](auto& m) { return kiln::optim::Adam(m, {.lr = 1e-3f}); });
///   opt.zero_grad();
///   double loss = dp.train_step(x, y, mse);  // split, forward + backward per replica, gradients summed
///   opt.step();                              // every replica steps
/// Replica r's loss gradient is weighted by its share of the batch (count_r / n), so the summed gradient
/// is the full batch's mean gradient, whatever the split. Dropout draws its mask from each replica's own
/// element indices, so a model with Dropout does not reproduce single-device training mask for mask.
template <class Net, class In, precision_policy Prec = Fp32, device_policy D = Cpu>
class DataParallel {
 public:
  using model_type = nn::Model<Net, In, Policy<Prec, D>>;
  using T = typename model_type::T;
  using M = typename model_type::M;
  using output_shape = typename model_type::output_shape;

  /// `replicas` models initialised from `seed` (identically). On the CPU each replica's OpenMP loops use
  /// an equal share of the threads (at least one); on CUDA replica r lives on device r.
  explicit DataParallel(int replicas, std::uint64_t seed = 0) {
    if (replicas < 1)
      throw ValueError("kiln::parallel::DataParallel: " + std::to_string(replicas) + " replicas; give at least 1");
    for (int r = 0; r < replicas; ++r)
      models_.push_back(std::make_unique<model_type>(seed, std::is_same_v<D, Cpu> ? -1 : r));
#if KILN_HAS_OPENMP
    threads_per_replica_ = std::max(1, omp_get_max_threads() / replicas);
#endif
  }

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
    for (auto& m : models_) opts.push_back(std::make_unique<Opt>(make(*m)));
    return Optimizers<Opt>(std::move(opts));
  }

  /// Forward and backward of one global batch: x [n, ...] and its targets (labels [n] or values [n, ...]),
  /// on the host for CUDA replicas (each replica's chunk is copied to its device). Each replica computes
  /// its chunk's loss on its own host thread and accumulates its parameter gradients; then the
  /// gradients are summed across replicas (in place, on every replica). Returns the batch's mean loss.
  /// `scale` multiplies every loss gradient (a GradScaler's scale).
  template <class Y, class SY, class Loss>
  double train_step(const Tensor<T, In, Cpu>& x, const Tensor<Y, SY, Cpu>& y, const Loss& loss, double scale = 1.0) {
    if (x.size(0) != y.size(0))
      throw ShapeError("kiln::parallel::DataParallel::train_step: " + std::to_string(x.size(0)) + " inputs but " +
                       std::to_string(y.size(0)) + " targets");
    const index_t n = x.size(0);
    const Split split = Split::of(n, size());
    std::vector<double> losses(models_.size(), 0.0);
    run_replicas([&](int r) {
      const index_t count = split.count[static_cast<std::size_t>(r)];
      if (count == 0) return;
      const index_t off = split.offset[static_cast<std::size_t>(r)];
      const auto xr = to_replica(rows(x, off, count), r);
      const auto yr = to_replica(rows(y, off, count), r);
      model_type& m = replica(r);
      const auto pred = m.forward(xr);
      const double share = static_cast<double>(count) / static_cast<double>(n);
      losses[static_cast<std::size_t>(r)] = share * static_cast<double>(loss(pred, yr).item());
      m.backward(loss.backward(pred, yr, scale * share));
    });
    all_reduce_gradients();
    double total = 0;
    for (double l : losses) total += l;
    return total;
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
      static_assert(std::is_same_v<D, Cpu>, "kiln::parallel::DataParallel: CUDA replicas (NCCL) are not built yet");
    }
  }

  /// Whether every replica holds the same parameters, bit for bit (they should, after any number of steps).
  bool in_sync() const {
    const auto p0 = replica(0).parameters().to_vector();
    for (int r = 1; r < size(); ++r)
      if (replica(r).parameters().to_vector() != p0) return false;
    return true;
  }

  void train(bool on = true) {
    for (auto& m : models_) m->train(on);
  }
  void eval() { train(false); }

  /// One optimizer per replica, driven together.
  template <class Opt>
  class Optimizers {
   public:
    explicit Optimizers(std::vector<std::unique_ptr<Opt>> opts) : opts_(std::move(opts)) {}
    void step() {
      for (auto& o : opts_) o->step();
    }
    void zero_grad() {
      for (auto& o : opts_) o->zero_grad();
    }
    float lr() const { return opts_.front()->lr(); }
    void set_lr(float lr) {
      for (auto& o : opts_) o->set_lr(lr);
    }
    Opt& replica(int r) { return *opts_.at(static_cast<std::size_t>(r)); }
    int size() const { return static_cast<int>(opts_.size()); }

   private:
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
  /// Runs f(r) for every replica, replica 0 on the calling thread and the others on their own threads,
  /// each with its share of the OpenMP threads; rethrows the first exception after all have finished.
  template <class F>
  void run_replicas(F&& f) {
    std::exception_ptr error;
    std::mutex error_mutex;
    const auto guarded = [&](int r) {
      try {
#if KILN_HAS_OPENMP
        omp_set_num_threads(threads_per_replica_);
#endif
        f(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    };
    std::vector<std::thread> threads;
    for (int r = 1; r < size(); ++r) threads.emplace_back(guarded, r);
#if KILN_HAS_OPENMP
    const int before = omp_get_max_threads();
#endif
    guarded(0);
#if KILN_HAS_OPENMP
    omp_set_num_threads(before);
#endif
    for (auto& t : threads) t.join();
    if (error) std::rethrow_exception(error);
  }

  std::vector<std::unique_ptr<model_type>> models_;
  int threads_per_replica_ = 1;
};

}  // namespace kiln::parallel
