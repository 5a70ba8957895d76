/// The fusion switch: kiln fuses by default (an expression chain in one pass, a layer with its
/// activation, cuBLASLt epilogues); switched off, the same code runs one pass per operation, as an
/// eager framework would, so that what fusion buys can be measured on the same model (issue #7).
#pragma once
#include <atomic>

namespace kiln {

namespace detail {
inline std::atomic<bool>& fusion_flag() {
  static std::atomic<bool> on{true};
  return on;
}
}  // namespace detail

/// Whether kiln fuses (the default). Process-wide: every thread sees the same setting.
inline bool fusion_enabled() { return detail::fusion_flag().load(std::memory_order_relaxed); }
/// Fusion on or off from now on (for the whole process).
inline void set_fusion(bool on) { detail::fusion_flag().store(on, std::memory_order_relaxed); }

/// Fusion off for a scope, then back as it was:
///   { kiln::Unfused off; train_step(); }   // one pass per operation
/// What it changes: an expression chain runs one pass per operation (each into a temporary); a Linear
/// or Conv2d followed by an activation runs as two layers (two passes, both ways); a Linear does not use
/// cuBLASLt's epilogue. Results agree with the fused run within rounding.
class Unfused {
 public:
  Unfused() : was_(fusion_enabled()) { set_fusion(false); }
  ~Unfused() { set_fusion(was_); }
  Unfused(const Unfused&) = delete;
  Unfused& operator=(const Unfused&) = delete;

 private:
  bool was_;
};

}  // namespace kiln
