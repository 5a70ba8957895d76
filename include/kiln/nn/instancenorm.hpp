/// InstanceNorm1d / InstanceNorm2d: each channel of each sample normalised over its positions by its own
/// mean and variance, as torch.nn.InstanceNorm1d / InstanceNorm2d(num_features, eps, momentum, affine,
/// track_running_stats=False).
#pragma once
#include <string>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/real.hpp"
#include "kiln/nn/groupnorm.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// torch's repr: "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)".
template <std::size_t Rank, index_t C, float Eps, float Momentum, bool Affine>
struct InstanceNormName {
  static std::string repr() {
    return "InstanceNorm" + std::to_string(Rank - 2) + "d(" + std::to_string(C) +
           ", eps=" + python_float(Eps) + ", momentum=" + python_float(Momentum) +
           ", affine=" + (Affine ? "True" : "False") + ", track_running_stats=False)";
  }
};

/// The positions of a channel of S when they are static (their product), or 0 when one is dyn.
template <class S>
constexpr index_t static_positions() {
  index_t p = 1;
  for (std::size_t d = 2; d < S::rank; ++d) {
    if (S::extents[d] == dyn) return 0;
    p *= S::extents[d];
  }
  return p;
}

/// InstanceNorm over [N, C, L] (Rank 3) or [N, C, H, W] (Rank 4): GroupNorm with a group per channel
/// (rows n·C + c of the channel's positions), under torch's name, refusing channels of one position as
/// torch does (their output would be the bias alone).
template <std::size_t Rank, index_t C, float Eps, float Momentum, bool Affine, bool TrackRunningStats>
struct InstanceNormLayer
    : GroupNormLayer<C, C, Eps, Affine, InstanceNormName<Rank, C, Eps, Momentum, Affine>> {
  using base = GroupNormLayer<C, C, Eps, Affine, InstanceNormName<Rank, C, Eps, Momentum, Affine>>;
  static_assert(
      !TrackRunningStats,
      "kiln::nn::InstanceNorm<C, Eps, Momentum, Affine, TrackRunningStats>: running statistics are not "
      "supported (torch's default, track_running_stats=False, normalises by each instance's own "
      "statistics in training and evaluation alike)");
  // >>> Stopped here? InstanceNorm2d takes [N, C, H, W] and InstanceNorm1d [N, C, L], with more than one
  //     position per channel (torch: "Expected more than 1 spatial element"). <<<
  template <class S>
  static constexpr bool accepts = S::rank == Rank &&
                                  (S::extents[1] == C || S::extents[1] == dyn) && static_positions<S>() != 1;
  /// What it takes where it is given S (for the error): [N, C, L] or [N, C, H, W] (S's extents past
  /// the channels, dyn for another rank).
  template <class S>
  using expects = typename with_channels<S, Rank, C>::type;

  /// GroupNorm's rows, after torch's check of the run-time positions (0 positions pass: an empty output).
  struct Spec : base::Spec {
    template <class X>
    static NormRows rows_of(const X& x) {
      index_t positions = 1;
      for (std::size_t d = 2; d < X::rank; ++d) positions *= x.size(d);
      if (positions == 1)
        throw ValueError("kiln::nn::" + base::Spec::name() +
                         ": expected more than 1 spatial element, got input " + to_string(x.extents()) +
                         " (torch: ValueError)");
      return base::Spec::rows_of(x);
    }
  };
  template <class S, class P>
  using module = NormRowsModule<Spec, Eps, Affine, S, P>;
};
}  // namespace detail

/// torch.nn.InstanceNorm2d(C, eps, momentum, affine=False): each sample's channel normalised over its
/// H W positions by its own mean and biased variance, then (Affine) scaled and shifted per channel; the
/// same in training and evaluation (style transfer, GAN generators). The same numbers as GroupNorm<C, C>.
/// Momentum is torch's argument, kept for its position: it only moves running statistics, which kiln
/// does not keep (TrackRunningStats must be false, torch's default).
/// Shapes: [N, C, H, W] -> the same. Parameters (Affine): weight [C] (1), bias [C] (0).
/// Example: `Sequential<ReflectionPad2d<3>, Conv2d<3, 64, 7>, InstanceNorm2d<64>, ReLU, ...>`.
template <index_t C, Real Eps = 1e-5f, Real Momentum = 0.1f, bool Affine = false,
          bool TrackRunningStats = false>
struct InstanceNorm2d
    : detail::InstanceNormLayer<4, C, Eps.value, Momentum.value, Affine, TrackRunningStats> {};

/// torch.nn.InstanceNorm1d(C, eps, momentum, affine=False): InstanceNorm2d over [N, C, L].
/// Shapes: [N, C, L] -> the same. Parameters (Affine): weight [C] (1), bias [C] (0).
template <index_t C, Real Eps = 1e-5f, Real Momentum = 0.1f, bool Affine = false,
          bool TrackRunningStats = false>
struct InstanceNorm1d
    : detail::InstanceNormLayer<3, C, Eps.value, Momentum.value, Affine, TrackRunningStats> {};

}  // namespace kiln::nn
