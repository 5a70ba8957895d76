/// The bundle of the three policy axes that models, optimizers and loaders take.
#pragma once
#include "kiln/policy/device.hpp"
#include "kiln/policy/parallel.hpp"
#include "kiln/policy/precision.hpp"

namespace kiln {

/// Precision x device x parallel strategy, each an empty type chosen at compile time.
/// Example:
///   using GpuMixed = kiln::Policy<kiln::MixedFp16, kiln::Cuda>;  // a Model's: one device
/// A Model's policy is single-device; the strategies are carried out by the wrappers around one Model per
/// device (kiln::parallel::DataParallel, DistributedDataParallel), which take precision and device.
template <precision_policy P = Fp32, device_policy D = Cpu, parallel_policy X = SingleDevice>
struct Policy {
  using precision = P;
  using device = D;
  using parallel = X;
};

namespace detail {
template <class T>
struct is_policy : std::false_type {};
template <class P, class D, class X>
struct is_policy<Policy<P, D, X>> : std::true_type {};
}  // namespace detail

/// Any kiln::Policy<...>.
template <class T>
concept policy = detail::is_policy<T>::value;

}  // namespace kiln
