/// DeviceLoader: a DataLoader's batches moved to a device ahead of use, on a copy stream of their own, and
/// scaled and normalised there in one pass.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/backend/cpu/executor.hpp"
#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/data/batch.hpp"
#include "kiln/data/dataset.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/tensor.hpp"

#if KILN_WITH_CUDA
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/memory.hpp"
#endif

namespace kiln::data {

/// What a DeviceLoader does to the inputs where they land, per channel c (dimension 1 of the batch):
///   x = (float(x) / divisor - mean[c]) / std[c]
/// torchvision's ToTensor (divisor 255 on bytes) then Normalize(mean, std), in one pass over the batch:
/// one kernel on the GPU. Empty mean / std: 0 / 1; one value applies to every channel. With float
/// samples and divisor 1 it is Normalize alone (the same arithmetic as the Normalize transform, so the
/// batches are bit for bit those of a loader that normalises on the host).
struct ScaleNormalize {
  float divisor = 1.0f;
  std::vector<float> mean;
  std::vector<float> std;
  ScaleNormalize(float divisor_ = 1.0f, std::vector<float> mean_ = {}, std::vector<float> std_ = {})
      : divisor(divisor_), mean(std::move(mean_)), std(std::move(std_)) {}
};

namespace detail {
/// out[i] = (float(in[i]) / divisor - mean[c]) / sd[c], c = (i / Plane) % C: the device side of
/// ScaleNormalize, one for_each pass (the same functor in the CPU loop and the CUDA kernel). in may be
/// out (float inputs, in place). Plane and C come from the sample's static shape, so the channel is a
/// division by a constant (a multiply; a division by a run-time value made the CPU loop 10x slower).
template <class In, index_t C, index_t Plane>
struct ScaleNormalizeInto {
  const In* in;
  float* out;
  float divisor;
  float mean[C];
  float sd[C];
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t c = (i / Plane) % C;
    out[i] = (static_cast<float>(in[i]) / divisor - mean[c]) / sd[c];
  }
  Traffic traffic(index_t n) const {
    const auto count = static_cast<std::uint64_t>(n);
    return {count * (sizeof(In) + sizeof(float)), 3 * count};
  }
};

template <class In, index_t C, index_t Plane>
ScaleNormalizeInto<In, C, Plane> scale_normalize_into(const ScaleNormalize& t, const In* in, float* out) {
  const auto fits = [](const std::vector<float>& v) { return v.empty() || v.size() == 1 || v.size() == std::size_t{C}; };
  if (!fits(t.mean) || !fits(t.std))
    throw ValueError("kiln::data::ScaleNormalize: " + std::to_string(t.mean.size()) + " means and " +
                     std::to_string(t.std.size()) + " stds for " + std::to_string(C) +
                     " channels; give none, one value, or one per channel");
  if (!(t.divisor != 0.0f)) throw ValueError("kiln::data::ScaleNormalize: the divisor must not be 0");
  ScaleNormalizeInto<In, C, Plane> f{in, out, t.divisor, {}, {}};
  for (index_t c = 0; c < C; ++c) {
    const auto k = static_cast<std::size_t>(c);
    f.mean[c] = t.mean.empty() ? 0.0f : t.mean[t.mean.size() == 1 ? 0 : k];
    const float sd = t.std.empty() ? 1.0f : t.std[t.std.size() == 1 ? 0 : k];
    if (!(sd != 0.0f)) throw ValueError("kiln::data::ScaleNormalize: std of channel " + std::to_string(c) + " is 0");
    f.sd[c] = sd;  // as the Normalize transform (and torchvision's): (x - m) / s
  }
  return f;
}
}  // namespace detail

/// The batches of `loader` (a DataLoader, kept by reference) on device D, float inputs scaled and
/// normalised there (`transform`), targets as they are. On the GPU, batch k + 1 is copied on a copy
/// stream of the DeviceLoader's own while the program computes on batch k (from pinned memory, the
/// loader's `pin_memory`, the copy overlaps the computation), then transformed by one kernel on that
/// stream; a batch is handed out once the current stream has been made to wait for its copy (an
/// event, not a host wait). On the CPU the batch is transformed in one loop and handed out as it is.
///
///   const kiln::data::Bytes bytes(train);          // Fashion-MNIST as bytes: a quarter of the copies
///   kiln::data::DataLoader loader(bytes, {.batch_size = 128, .shuffle = true, .num_workers = 2,
///                                         .pin_memory = true});
///   kiln::data::DeviceLoader<kiln::Cuda, decltype(loader)> batches(loader, {255.0f, {0.5f}, {0.5f}});
///   for (const auto& b : batches) { auto logits = model.forward(b.x); ... }   // b.x: floats on the GPU
///
/// `device` < 0: the current device when the DeviceLoader is made (the rank's GPU under
/// DistributedDataParallel). size(), set_epoch() and set_sampler() are the loader's.
template <device_policy D, class Loader>
class DeviceLoader {
 public:
  using sample_shape = typename Loader::sample_shape;
  using sample_type = typename Loader::sample_type;
  using target_type = typename Loader::target_type;
  using target_shape = typename Loader::target_shape;
  using host_batch = typename Loader::batch_type;
  static constexpr index_t channels = sample_shape::rank == 0 ? 1 : sample_shape::extents[0];
  /// Per-channel means and scales travel as kernel arguments: up to 1024 channels (features of a flat
  /// sample); a wider sample is normalised with one mean and scale for all, as one channel.
  static constexpr index_t stat_channels = channels <= 1024 ? channels : 1;
  /// Values per channel and sample.
  static constexpr index_t plane = sample_shape::static_numel() / stat_channels;
  static_assert(std::is_same_v<sample_type, float> || std::is_same_v<sample_type, std::uint8_t>,
                "kiln::data::DeviceLoader: the loader's samples must be float or bytes (Bytes<...>)");

  /// One batch on D: float inputs [B, sample...], targets [B, target...], its index in the epoch;
  /// assignment rebinds, as a loader's Batch (data/batch.hpp).
  using batch_type =
      TensorBatch<Tensor<float, batched_t<sample_shape>, D>, Tensor<target_type, batched_t<target_shape>, D>>;

 private:
  /// A batch on its way: the device tensors, the host batch and device bytes the copy still reads, and
  /// (GPU) the event after its transform on the copy stream.
  struct Staged {
    batch_type out;
    host_batch host;
    std::optional<Tensor<sample_type, batched_t<sample_shape>, D>> raw = std::nullopt;
#if KILN_WITH_CUDA
    std::optional<cuda::Event> ready = std::nullopt;
#endif
  };

 public:
  explicit DeviceLoader(Loader& loader, ScaleNormalize transform = {}, int device = -1)
      : loader_(&loader), transform_(std::move(transform)), device_(resolve(device)) {
    if (stat_channels != channels && (transform_.mean.size() > 1 || transform_.std.size() > 1))
      throw ValueError("kiln::data::DeviceLoader: " + std::to_string(transform_.mean.size()) + " means and " +
                       std::to_string(transform_.std.size()) + " stds for " + std::to_string(channels) +
                       " channels (features); per-channel values go up to 1024 (they travel as kernel "
                       "arguments): give one mean and one std, or standardise in the dataset");
    // (checks the transform now, not at the first batch)
    (void)detail::scale_normalize_into<sample_type, stat_channels, plane>(transform_, nullptr, nullptr);
  }

  index_t size() const { return loader_->size(); }
  void set_epoch(std::uint64_t e) { loader_->set_epoch(e); }
  std::uint64_t epoch() const { return loader_->epoch(); }
  template <class Sampler>
  void set_sampler(Sampler s) {
    loader_->set_sampler(std::move(s));
  }
  const auto& options() const { return loader_->options(); }
  Loader& loader() { return *loader_; }
  const ScaleNormalize& transform() const { return transform_; }
  /// The device batches land on.
  int device() const { return device_; }

  /// An input iterator over one epoch: holds batch k (handed out) and batch k + 1 (on its way). A batch
  /// the loader could not make (or that could not be staged) throws its error when read (`*it`), in its
  /// turn, as the loader's iterator does; `++it` goes on to the next.
  class iterator {
   public:
    using value_type = batch_type;
    using difference_type = std::ptrdiff_t;
    explicit iterator(DeviceLoader* l) : l_(l), host_(l->loader_->begin()) {
      stage_next();
      advance();
    }
    const batch_type& operator*() const { return batch(); }
    const batch_type* operator->() const { return &batch(); }
    iterator& operator++() {
      advance();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_ && !error_; }

   private:
    /// Stages the loader's batch in hand (its copy overlaps what the program does with the one before
    /// it), or keeps its error for its turn.
    void stage_next() {
      if (host_ == std::default_sentinel) return;
      try {
        next_ = l_->stage(*host_);
      } catch (...) {
        next_error_ = std::current_exception();
      }
    }
    /// Hands out the staged batch (or its error) and stages the one after it.
    void advance() {
      current_.reset();
      error_ = nullptr;
      if (next_) {
        try {
          current_ = l_->finish(std::move(*next_));
        } catch (...) {
          error_ = std::current_exception();
        }
        next_.reset();
      } else if (next_error_) {
        error_ = std::exchange(next_error_, nullptr);
      } else {
        return;  // the epoch's last batch was handed out
      }
      ++host_;
      stage_next();
    }
    const batch_type& batch() const {
      if (error_) std::rethrow_exception(error_);
      if (!current_)
        throw ValueError("kiln::data::DeviceLoader: an iterator past the epoch's last batch was read");
      return *current_;
    }
    DeviceLoader* l_;
    typename Loader::iterator host_;
    std::optional<Staged> next_;
    std::exception_ptr next_error_;  // what the batch on its way threw instead
    std::optional<batch_type> current_;
    std::exception_ptr error_;  // what the batch in hand threw instead
  };
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  static int resolve(int device) {
    if constexpr (std::is_same_v<D, Cpu>) {
      return 0;
    } else {
#if KILN_WITH_CUDA
      return device < 0 ? cuda::current_device() : device;
#else
      return device;
#endif
    }
  }

  template <class F>
  static void run_pass(index_t n, const F& f) {
    kiln::detail::executor<D>::for_each(n, f);
  }

  Staged stage(const host_batch& h) {
    Staged s{.out = {}, .host = h};
    s.out.index = h.index;
    const index_t n = h.x.numel();
    if constexpr (std::is_same_v<D, Cpu>) {
      s.out.y = decltype(s.out.y)(h.y);  // shares the loader's targets
      s.out.x = decltype(s.out.x)(h.x.extents());  // the loader's batch stays as it was
      run_pass(n, detail::scale_normalize_into<sample_type, stat_channels, plane>(transform_, h.x.data(),
                                                                                  s.out.x.data()));
    } else {
#if KILN_WITH_CUDA
      stage_on_gpu(s, h, n);
#endif
    }
    return s;
  }

#if KILN_WITH_CUDA
  /// Device tensors are allocated on the current (compute) stream, where they are used and freed; the
  /// copy stream first waits for the work queued there so far (a block freed by it may come back here),
  /// then copies (from pinned memory: asynchronously; the pinned blocks are kept until the copy has run)
  /// and transforms; `ready` marks the end.
  void stage_on_gpu(Staged& s, const host_batch& h, index_t n) {
    cuda::DeviceGuard guard(device_);
    if (!copy_stream_) copy_stream_.emplace(device_);
    s.out.x = decltype(s.out.x)(h.x.extents(), device_);
    s.out.y = decltype(s.out.y)(h.y.extents(), device_);
    const sample_type* in = nullptr;
    if constexpr (std::is_same_v<sample_type, float>) {
      in = s.out.x.data();  // copied into x, transformed in place
    } else {
      s.raw.emplace(h.x.extents(), device_);
      in = s.raw->data();
    }
    cuda::Event compute_done(false);
    compute_done.record(cuda::current_stream(device_));
    copy_stream_->wait(compute_done);
    const cuda::StreamGuard on_copy_stream(*copy_stream_);  // device_copy, the pass and the markers use it
    try {
      // From pinned memory the copies are asynchronous (a pageable copy synchronises its stream first).
      kiln::detail::device_copy<Cuda, Cpu>::run(const_cast<sample_type*>(in), device_, h.x.data(), 0, h.x.nbytes(),
                                                h.x.is_pinned());
      kiln::detail::device_copy<Cuda, Cpu>::run(s.out.y.data(), device_, h.y.data(), 0, h.y.nbytes(), h.y.is_pinned());
      run_pass(
          n, detail::scale_normalize_into<sample_type, stat_channels, plane>(transform_, in, s.out.x.data()));
      s.ready.emplace(false);
      s.ready->record(*copy_stream_);
      // The device blocks belong to the current stream's cache but are written on this one: like torch's
      // record_stream, each waits for this stream's work before that cache hands it out again, also when
      // the batch is dropped without being handed out (an early break, an exception).
      CachingAllocator& cache = kiln::caching_allocator<Cuda>(device_);
      cache.record_use(s.out.x.data(), device_);
      cache.record_use(s.out.y.data(), device_);
      if (s.raw) cache.record_use(s.raw->data(), device_);
    } catch (...) {  // some work may be queued on blocks about to be freed: let it finish first
      (void)cudaStreamSynchronize(copy_stream_->get());
      (void)cudaGetLastError();
      throw;
    }
  }
#endif

  /// The current stream waits for the batch's copy and transform (GPU), then it is handed out.
  batch_type finish(Staged&& s) {
#if KILN_WITH_CUDA
    if constexpr (std::is_same_v<D, Cuda>) {
      cuda::DeviceGuard guard(device_);
      KILN_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(device_), s.ready->get(), 0));
    }
#endif
    return std::move(s.out);
  }

  Loader* loader_;
  ScaleNormalize transform_;
  int device_ = 0;
#if KILN_WITH_CUDA
  std::optional<cuda::Stream> copy_stream_;
#endif
};

}  // namespace kiln::data
