/// DataLoader: batches of a dataset in a sampler's order, collated by worker threads ahead of use.
#pragma once
#include <algorithm>
#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/warning.hpp"
#include "kiln/data/batch.hpp"
#include "kiln/data/dataset.hpp"
#include "kiln/data/sampler.hpp"
#include "kiln/data/transforms.hpp"
#include "kiln/tensor/tensor.hpp"

#if KILN_WITH_CUDA
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/memory.hpp"
#endif

namespace kiln::data {

namespace detail {
template <class T>
inline constexpr bool is_variant = false;
template <class... Ts>
inline constexpr bool is_variant<std::variant<Ts...>> = true;
}  // namespace detail

/// torch.utils.data.DataLoader's options, with its defaults.
struct LoaderOptions {
  index_t batch_size = 1;
  bool shuffle = false;     ///< a fresh permutation every epoch (RandomSampler with `seed`)
  bool drop_last = false;   ///< drop the last batch when it is short
  int num_workers = 0;      ///< 0: batches are collated on the calling thread when asked for
  int prefetch_factor = 2;  ///< batches each worker collates ahead (>= 1; other than 2 only with num_workers > 0)
  bool pin_memory = false;  ///< batches in page-locked memory (needs kiln::cuda and a GPU; else ignored)
  std::uint64_t seed = 0;   ///< shuffling and random transforms
};

/// Where a sampler's k-th index sits in the epoch's order over all ranks: k * stride + offset. A
/// DistributedSampler's rank r takes every world_size-th from r; other samplers are the whole order.
struct SamplePlaces {
  std::uint64_t stride = 1, offset = 0;
};

/// One batch: inputs [B, sample...] (floats, or bytes for a Bytes<...> dataset) and targets [B, target...]
/// on the CPU, and its index in the epoch; assignment rebinds (data/batch.hpp).
template <dataset Ds>
struct Batch : TensorBatch<Tensor<sample_type_t<Ds>, batched_t<typename Ds::sample_shape>, Cpu>,
                           Tensor<typename Ds::target_type, batched_t<typename Ds::target_shape>, Cpu>> {};

/// The samplers a loader can switch between (set_sampler): sequential, shuffled, or one rank's share.
using AnySampler = std::variant<SequentialSampler, RandomSampler, DistributedSampler>;

/// Batches of `dataset` (kept by reference: it must outlive the loader and its epochs in flight; an
/// epoch does not need the loader once begun), in the order of a sampler
/// (sequential, or RandomSampler{seed} when shuffle is on; a DistributedSampler may be given), with
/// `transform` applied to every sample. Each `for (auto& batch : loader)` is one epoch; epochs count up
/// from 0 (set_epoch changes the next one). For a seed and an epoch, the batches are the same whatever
/// num_workers is: each sample's random stream comes from (seed, epoch, its position in the epoch's
/// order over all ranks), so the ranks of a DistributedSampler draw different augmentations.
/// A batch that cannot be made (a sample the dataset cannot read) throws when its turn comes, after
/// every batch before it; a program that catches it and steps the iterator on gets the next batch, as
/// torch's iterator does, whatever num_workers is (an error in batch 0 is thrown by begin()).
///
///   kiln::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .num_workers = 2});
///   for (const auto& b : loader) { auto logits = model.forward(b.x); ... }
template <class Ds, class Transform = Identity, class Sampler = AnySampler>
class DataLoader {
  // >>> Stopped here? The type given to DataLoader is not a kiln dataset. <<<
  static_assert(dataset<Ds>,
                "kiln::data::DataLoader: the dataset must be a kiln::data::dataset: sample_shape, target_shape, "
                "target_type, index_t size() const and read(i, x, y) const, writing sample i into x and y "
                "(torch's __len__ / __getitem__; there is no get(i)): see kiln/data/dataset.hpp");

 public:
  using batch_type = Batch<Ds>;
  using sample_shape = typename Ds::sample_shape;
  using sample_type = sample_type_t<Ds>;
  using target_type = typename Ds::target_type;
  using target_shape = typename Ds::target_shape;
  static constexpr index_t sample_numel = sample_shape::static_numel();
  static constexpr index_t target_numel = Ds::target_shape::static_numel();

  /// The sampler from the options (shuffle: RandomSampler{seed}, else sequential); with a sampler type of
  /// your own, pass the sampler.
  DataLoader(const Ds& ds, LoaderOptions o = {}, Transform t = {})
    requires std::is_same_v<Sampler, AnySampler>
      : ds_(&ds), o_(o), t_(std::make_shared<const Transform>(std::move(t))) {
    if (o_.shuffle) sampler_ = RandomSampler{o_.seed};
    else sampler_ = SequentialSampler{};
    check();
  }
  DataLoader(const Ds& ds, Sampler sampler, LoaderOptions o, Transform t = {})
      : ds_(&ds), o_(o), t_(std::make_shared<const Transform>(std::move(t))), sampler_(std::move(sampler)) {
    if (o_.shuffle)  // as torch: the sampler decides the order
      throw ValueError("kiln::data::DataLoader: a sampler and shuffle = true were both given; the sampler "
                       "decides the order (shuffle it: RandomSampler, DistributedSampler{.shuffle = true})");
    check();
  }
  // The loader keeps a pointer to the dataset: a temporary one would dangle. g++ prints the deleted line:
  DataLoader(const Ds&&, LoaderOptions = {}, Transform = {})  // a temporary dataset: name it first, it must outlive the loader
    requires std::is_same_v<Sampler, AnySampler>
  = delete;
  DataLoader(const Ds&&, Sampler, LoaderOptions, Transform = {}) = delete;  // a temporary dataset: name it first, it must outlive the loader

  /// Batches of n samples: n / batch_size, plus a last short one unless drop_last (no n + batch_size - 1,
  /// which overflows for a batch_size near INT64_MAX).
  static index_t batch_count(index_t n, const LoaderOptions& o) {
    return n / o.batch_size + (!o.drop_last && n % o.batch_size != 0 ? 1 : 0);
  }
  /// Batches per epoch (len(loader)), from the sampler's length (an epoch's order is not drawn).
  index_t size() const {
    return batch_count(samples(), o_);
  }
  const LoaderOptions& options() const { return o_; }
  /// Replaces the sampler from the next epoch on (DataLoader(..., sampler=...) in PyTorch); with the
  /// default sampler type, any of sequential, random or distributed:
  ///   loader.set_sampler(DistributedSampler{.world_size = 2, .rank = r, .seed = seed});
  void set_sampler(Sampler s) {
    check_sampler(s);
    sampler_ = std::move(s);
    warn_if_every_epoch_is_empty();  // a rank's share may be smaller than the batch
  }
  const Sampler& sampler() const { return sampler_; }
  /// The epoch the next iteration runs (DistributedSampler.set_epoch).
  void set_epoch(std::uint64_t e) { epoch_ = e; }
  std::uint64_t epoch() const { return epoch_; }

  /// What collating a batch reads, copied out of the loader for each epoch: its workers keep collating
  /// ahead while the program runs, so a loader moved or destroyed meanwhile (a std::vector of loaders
  /// that grows) leaves them what they read; only the dataset must outlive the epoch, as the loader.
  struct Collator {
    const Ds* ds;
    LoaderOptions o;
    std::shared_ptr<const Transform> t;
    bool pin;
    /// Batch k of the given order: samples order[k B, (k + 1) B), transformed; `places` says where the
    /// order's entries sit in the epoch over all ranks (their random streams).
    batch_type operator()(const std::vector<index_t>& order, index_t k, std::uint64_t epoch, SamplePlaces places) const {
      const index_t begin = k * o.batch_size;
      const index_t b = std::min<index_t>(o.batch_size, static_cast<index_t>(order.size()) - begin);
      batch_type out;
      out.x = decltype(out.x)(Extents<batched_t<sample_shape>>(b));
      out.y = decltype(out.y)(Extents<batched_t<typename Ds::target_shape>>(b));
      out.index = k;
      for (index_t i = 0; i < b; ++i) {
        const std::span<sample_type> x(out.x.data() + i * sample_numel, static_cast<std::size_t>(sample_numel));
        const std::span<target_type> y(out.y.data() + i * target_numel, static_cast<std::size_t>(target_numel));
        ds->read(order[static_cast<std::size_t>(begin + i)], x, y);
        const std::uint64_t place = static_cast<std::uint64_t>(begin + i) * places.stride + places.offset;
        SampleRng rng(detail::mix(detail::mix(o.seed, epoch), place));
        t->template apply<sample_shape>(x, rng);
      }
      if (pin) DataLoader::pin(out);
      return out;
    }
  };
  Collator collator() const { return {ds_, o_, t_, pin_}; }

  /// Collates batch k of the given order: samples order[k B, (k + 1) B), transformed; `places` says where
  /// the order's entries sit in the epoch over all ranks (their random streams).
  batch_type collate(const std::vector<index_t>& order, index_t k, std::uint64_t epoch,
                     SamplePlaces places = {}) const {
    return collator()(order, k, epoch, places);
  }

  class iterator;
  /// Starts the next epoch: draws its order and counts it (a batch that cannot be made throws when the
  /// loop reads it, batch 0 too; a begin() that throws, its order or its workers, leaves the count).
  iterator begin() {
    iterator it(this, epoch_);
    ++epoch_;
    return it;
  }
  // A loop over a loader starts an epoch (it moves the epoch counter): g++ prints the deleted line:
  iterator begin() const = delete;  // a const DataLoader has no epochs to run: take the loader as L&, not const L&
  std::default_sentinel_t end() const { return {}; }

  /// One epoch in flight: its order, and the workers collating ahead of the reader.
  class Epoch {
   public:
    Epoch(const DataLoader* l, std::uint64_t epoch)
        : c_(l->collator()), epoch_(epoch), order_(l->indices(epoch)), places_(l->places()) {
      batches_ = DataLoader::batch_count(static_cast<index_t>(order_.size()), c_.o);
      // No more workers and slots than the epoch has batches: a large prefetch_factor allocates no more
      // (none when there are no batches). The batches do not depend on either.
      const int workers = static_cast<int>(std::min<index_t>(c_.o.num_workers, batches_));
      if (workers > 0) {
        window_ = std::min(static_cast<index_t>(workers) * c_.o.prefetch_factor, batches_);
        slots_.resize(static_cast<std::size_t>(window_));
#if KILN_WITH_CUDA
        if (c_.pin) device_ = kiln::cuda::current_device();  // pinning workers call CUDA: on this GPU
#endif
        try {
          for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
        } catch (...) {  // a thread that could not start: stop and join those that did
          stop_and_join();
          throw;
        }
      }
    }
    ~Epoch() { stop_and_join(); }
    Epoch(const Epoch&) = delete;
    Epoch& operator=(const Epoch&) = delete;

    index_t batches() const { return batches_; }
    /// Batch k (in order; k = the number taken so far). Rethrows what its collation threw (a worker's
    /// exception, in its turn: batch k fails whatever num_workers is, and batch k + 1 comes next).
    batch_type take(index_t k) {
      if (threads_.empty()) return c_(order_, k, epoch_, places_);
      std::unique_lock lock(m_);
      Slot& s = slots_[static_cast<std::size_t>(k % window_)];
      cv_.wait(lock, [&] { return (s.ready && s.index == k) || fatal_; });
      if (!(s.ready && s.index == k)) std::rethrow_exception(fatal_);
      batch_type b = std::move(s.batch);
      const std::exception_ptr error = std::exchange(s.error, nullptr);
      s.ready = false;
      taken_ = k + 1;  // the slot is free for batch k + window_, failed or not
      lock.unlock();
      cv_.notify_all();
      if (error) std::rethrow_exception(error);
      return b;
    }

   private:
    struct Slot {
      batch_type batch;
      std::exception_ptr error;  // what collating it threw (then batch is empty)
      index_t index = -1;
      bool ready = false;
    };
    void stop_and_join() {
      {
        std::lock_guard lock(m_);
        stop_ = true;
      }
      cv_.notify_all();
      for (auto& t : threads_) t.join();
    }
    void work() {
#if KILN_WITH_CUDA
      if (device_ >= 0 && cudaSetDevice(device_) != cudaSuccess) {  // a new thread starts on GPU 0
        (void)cudaGetLastError();
        std::lock_guard lock(m_);
        try {  // (the message itself may fail to allocate)
          throw BackendError("kiln::data::DataLoader: a worker could not use GPU " + std::to_string(device_) +
                             " for pinned memory");
        } catch (...) {
          if (!fatal_) fatal_ = std::current_exception();  // the epoch ends at the first batch not made yet
        }
        cv_.notify_all();
        return;
      }
#endif
      for (;;) {
        index_t k;
        {
          std::unique_lock lock(m_);
          cv_.wait(lock, [&] { return stop_ || fatal_ || next_ >= batches_ || next_ < taken_ + window_; });
          if (stop_ || fatal_ || next_ >= batches_) return;
          k = next_++;
        }
        batch_type b;
        std::exception_ptr error;
        try {
          b = c_(order_, k, epoch_, places_);
        } catch (...) {  // handed to the reader in batch k's turn, as collating it there would throw
          error = std::current_exception();
        }
        {
          std::lock_guard lock(m_);
          Slot& s = slots_[static_cast<std::size_t>(k % window_)];
          s.batch = std::move(b);
          s.error = std::move(error);
          s.index = k;
          s.ready = true;
        }
        cv_.notify_all();
      }
    }

    const Collator c_;  // (not the loader: it may be moved or gone while the workers collate)
    std::uint64_t epoch_;
    std::vector<index_t> order_;
    SamplePlaces places_;
    index_t batches_ = 0, window_ = 0, next_ = 0, taken_ = 0;
    int device_ = -1;  // the GPU pinning workers use (the constructing thread's current one)
    std::vector<Slot> slots_;
    std::vector<std::thread> threads_;
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::exception_ptr fatal_;  // a worker that could not start (pinned memory on a GPU it cannot use)
  };

  /// An input iterator over one epoch's batches. A batch that could not be made (its read or transform
  /// threw) throws that error when read (`*it`, `it->`), in its turn, as torch's next(it) raises; `++it`
  /// then goes on to the next batch, and the epoch ends after its last batch, failed or not.
  class iterator {
   public:
    using value_type = batch_type;
    using difference_type = std::ptrdiff_t;
    iterator(const DataLoader* l, std::uint64_t epoch) : e_(std::make_unique<Epoch>(l, epoch)) { load(); }
    const batch_type& operator*() const { return batch(); }
    const batch_type* operator->() const { return &batch(); }
    iterator& operator++() {
      ++k_;
      load();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !e_ || k_ >= e_->batches(); }

   private:
    void load() {
      current_.reset();
      error_ = nullptr;
      if (k_ >= e_->batches()) return;
      try {
        current_ = e_->take(k_);
      } catch (...) {  // thrown where the loop reads this batch
        error_ = std::current_exception();
      }
    }
    const batch_type& batch() const {
      if (error_) std::rethrow_exception(error_);
      if (!current_)
        throw ValueError("kiln::data::DataLoader: an iterator past the epoch's last batch was read");
      return *current_;
    }
    std::unique_ptr<Epoch> e_;
    index_t k_ = 0;
    std::optional<batch_type> current_;
    std::exception_ptr error_;  // what making batch k_ threw
  };

 private:
  /// The dataset's size(), refused below 0 (torch's len() of a DataLoader raises too).
  index_t dataset_size() const {
    const index_t n = ds_->size();
    if (n < 0)
      throw ValueError("kiln::data::DataLoader: the dataset's size() is " + std::to_string(n) +
                       "; it must be >= 0");
    return n;
  }
  std::vector<index_t> indices(std::uint64_t epoch) const {
    const index_t n = dataset_size();
    if constexpr (detail::is_variant<Sampler>)
      return std::visit([&](const auto& s) { return s.indices(n, epoch); }, sampler_);
    else
      return sampler_.indices(n, epoch);
  }
  SamplePlaces places() const {
    const auto of = [](const auto& s) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s)>, DistributedSampler>)
        return SamplePlaces{static_cast<std::uint64_t>(s.world_size), static_cast<std::uint64_t>(s.rank)};
      else
        return SamplePlaces{};
    };
    if constexpr (detail::is_variant<Sampler>)
      return std::visit(of, sampler_);
    else
      return of(sampler_);
  }
  /// Samples per epoch: the sampler's length(n) (len(sampler)), or the size of epoch 0's order for a
  /// sampler without one.
  index_t samples() const {
    const index_t n = dataset_size();
    const auto length = [&](const auto& s) -> index_t {
      if constexpr (requires { { s.length(n) } -> std::convertible_to<index_t>; }) return s.length(n);
      else return static_cast<index_t>(s.indices(n, 0).size());
    };
    if constexpr (detail::is_variant<Sampler>)
      return std::visit(length, sampler_);
    else
      return length(sampler_);
  }
  void check() {
    if (o_.batch_size < 1)
      throw ValueError("kiln::data::DataLoader: batch_size is " + std::to_string(o_.batch_size) + "; it must be >= 1");
    if (o_.num_workers < 0)
      throw ValueError("kiln::data::DataLoader: num_workers is " + std::to_string(o_.num_workers) + "; it must be >= 0");
    if (o_.prefetch_factor < 1)
      throw ValueError("kiln::data::DataLoader: prefetch_factor is " + std::to_string(o_.prefetch_factor) +
                       "; it must be >= 1");
    check_sampler(sampler_);
    if (o_.num_workers == 0 && o_.prefetch_factor != 2)  // as torch 1.13
      throw ValueError("kiln::data::DataLoader: prefetch_factor " + std::to_string(o_.prefetch_factor) +
                       " needs worker threads (num_workers > 0); without them batches are made when asked for");
    pin_ = o_.pin_memory && pinning_available();
    warn_if_every_epoch_is_empty();
  }
  /// drop_last with a batch larger than an epoch's samples: allowed, as in torch, but never what was meant.
  /// Once per loader (set_sampler each epoch, as the DDP loop does, does not repeat it).
  void warn_if_every_epoch_is_empty() {
    if (o_.drop_last && samples() > 0 && size() == 0 && !warned_empty_epochs_)
      warned_empty_epochs_ = true, kiln::warn("kiln::data::DataLoader: drop_last with batch_size " + std::to_string(o_.batch_size) + " over " +
                 std::to_string(samples()) + " samples an epoch drops them all: every epoch is empty");
  }
  /// A DistributedSampler without world_size and rank (or with a rank outside it), or a RandomSampler with
  /// a negative num_samples or over an empty dataset without num_samples, throws here, not at the first
  /// epoch (with num_samples, at the first epoch, as torch's).
  void check_sampler(const Sampler& s) const {
    const auto check = [n = dataset_size()](const auto& one) {
      if constexpr (requires { one.check(); }) one.check();
      if constexpr (requires { one.length(n); }) (void)one.length(n);
    };
    if constexpr (detail::is_variant<Sampler>)
      std::visit(check, s);
    else
      check(s);
  }
  static bool pinning_available() {
#if KILN_WITH_CUDA
    return kiln::cuda::is_available();
#else
    return false;  // pinned memory needs the CUDA runtime (kiln::cuda); PyTorch ignores it without a GPU too
#endif
  }
  /// The batch copied into page-locked memory (as PyTorch's pin-memory thread does).
  static void pin([[maybe_unused]] batch_type& b) {
#if KILN_WITH_CUDA
    b.x = b.x.pin_memory();
    b.y = b.y.pin_memory();
#endif
  }

  const Ds* ds_;
  LoaderOptions o_;
  std::shared_ptr<const Transform> t_;  // shared with the epochs in flight (Collator)
  Sampler sampler_;
  std::uint64_t epoch_ = 0;
  bool pin_ = false;
  bool warned_empty_epochs_ = false;  // warn_if_every_epoch_is_empty's once
};

}  // namespace kiln::data
