/// The data-parallel axis: one device, one process over several devices, one process per device.
#pragma once
#include <concepts>
#include <string_view>

namespace kiln {

/// Communication backends for Distributed<...>.
struct Nccl {
  static constexpr std::string_view name = "nccl";
};
struct Mpi {
  static constexpr std::string_view name = "mpi";
};

/// One device, no communication.
struct SingleDevice {
  static constexpr std::string_view name = "single";
  static constexpr bool multi_process = false;
};

/// One process drives several devices (replicas stay resident; gradients are all-reduced in place).
struct DataParallel {
  static constexpr std::string_view name = "dp";
  static constexpr bool multi_process = false;
};

/// One process per device (launched by mpirun), gradients all-reduced over Backend (Nccl or Mpi).
template <class Backend>
struct Distributed {
  using backend = Backend;
  static constexpr std::string_view name = "ddp";
  static constexpr bool multi_process = true;
};

/// Requirements: a `name` and whether it runs one process per device.
template <class X>
concept parallel_policy = requires {
  { X::name } -> std::convertible_to<std::string_view>;
  { X::multi_process } -> std::convertible_to<bool>;
};

}  // namespace kiln
