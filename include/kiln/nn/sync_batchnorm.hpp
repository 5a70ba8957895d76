/// SyncBatchNorm: batch normalisation over the batches of every replica of a distributed job together,
/// as torch.nn.SyncBatchNorm, and convert_sync_batchnorm_t, which turns a network's BatchNorm1d and
/// BatchNorm2d layers into it.
#pragma once
#include <type_traits>

#include "kiln/nn/batchnorm.hpp"
#include "kiln/nn/branches.hpp"
#include "kiln/nn/residual.hpp"
#include "kiln/nn/sequential.hpp"

namespace kiln::nn {

namespace detail {
struct SyncBatchNormName {
  static constexpr const char* kind = "SyncBatchNorm";
};
}  // namespace detail

/// torch.nn.SyncBatchNorm(C, eps, momentum, affine, track_running_stats): BatchNorm over the channels
/// (dimension 1) of inputs [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W] whose training forwards,
/// in a model with a replica group of more than one (DistributedDataParallel's ranks, DataParallel's
/// replicas), normalise by the mean and biased variance of the global batch — every replica's batch
/// together — and move the running statistics by them, identically on every replica; backward sums the
/// replicas' Σ dy and Σ dy x̂ for dx. Each training forward (NoGrad ones too) is therefore a
/// collective, and so is its backward when the layer's input needs a gradient: every replica runs it (one
/// with an empty batch too), so never run a training forward on one replica alone. Without a group (a
/// model alone) and in evaluation it is BatchNorm.
/// Same parameters, buffers and state_dict names as BatchNorm1d/2d, so checkpoints move between them.
/// Example: `Sequential<Conv2d<3, 16, 3, 1, 1>, SyncBatchNorm<16>, ReLU, ...>` trained under
/// DistributedDataParallel; or convert_sync_batchnorm_t<Net> for an existing network.
template <index_t C, Real Eps = 1e-5f, Real Momentum = 0.1f, bool Affine = true,
          bool TrackRunningStats = true>
struct SyncBatchNorm : detail::BatchNormLayer<detail::SyncBatchNormName, 2, 5, C, Eps.value, Momentum.value,
                                              Affine, TrackRunningStats, true> {};

/// Net with every BatchNorm1d and BatchNorm2d (inside Sequential, Residual, Add and Concat too) replaced by
/// SyncBatchNorm with the same arguments: torch's `SyncBatchNorm.convert_sync_batchnorm(model)` as a
/// type. Other layers stay as they are.
template <class Net>
struct convert_sync_batchnorm {
  using type = Net;
};
template <class Net>
using convert_sync_batchnorm_t = typename convert_sync_batchnorm<Net>::type;

template <index_t C, Real Eps, Real Momentum, bool Affine, bool Track>
struct convert_sync_batchnorm<BatchNorm1d<C, Eps, Momentum, Affine, Track>> {
  using type = SyncBatchNorm<C, Eps.value, Momentum.value, Affine, Track>;
};
template <index_t C, Real Eps, Real Momentum, bool Affine, bool Track>
struct convert_sync_batchnorm<BatchNorm2d<C, Eps, Momentum, Affine, Track>> {
  using type = SyncBatchNorm<C, Eps.value, Momentum.value, Affine, Track>;
};
template <class... Layers>
struct convert_sync_batchnorm<Sequential<Layers...>> {
  using type = Sequential<convert_sync_batchnorm_t<Layers>...>;
};
template <class... Layers>
struct convert_sync_batchnorm<Residual<Layers...>> {
  using type = Residual<convert_sync_batchnorm_t<Layers>...>;
};
template <class... Branches>
struct convert_sync_batchnorm<Add<Branches...>> {
  using type = Add<convert_sync_batchnorm_t<Branches>...>;
};
template <class... Branches>
struct convert_sync_batchnorm<Concat<Branches...>> {
  using type = Concat<convert_sync_batchnorm_t<Branches>...>;
};

/// Whether Net has a SyncBatchNorm (inside Sequential, Residual, Add and Concat too): its training steps are
/// collectives of all replicas (DataParallel then runs every replica, an empty share too).
template <class Net>
struct has_sync_batchnorm : std::false_type {};
template <class Net>
inline constexpr bool has_sync_batchnorm_v = has_sync_batchnorm<Net>::value;

template <index_t C, Real Eps, Real Momentum, bool Affine, bool Track>
struct has_sync_batchnorm<SyncBatchNorm<C, Eps, Momentum, Affine, Track>> : std::true_type {};
template <class... Layers>
struct has_sync_batchnorm<Sequential<Layers...>> : std::bool_constant<(has_sync_batchnorm_v<Layers> || ...)> {};
template <class... Layers>
struct has_sync_batchnorm<Residual<Layers...>> : std::bool_constant<(has_sync_batchnorm_v<Layers> || ...)> {};
template <class... Branches>
struct has_sync_batchnorm<Add<Branches...>> : std::bool_constant<(has_sync_batchnorm_v<Branches> || ...)> {};
template <class... Bs>
struct has_sync_batchnorm<Concat<Bs...>> : std::bool_constant<(has_sync_batchnorm_v<Bs> || ...)> {};

}  // namespace kiln::nn
