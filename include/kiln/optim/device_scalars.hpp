/// A few doubles that a capturable optimizer or GradScaler keeps on the device (step counts, learning
/// rates, flags), so that a captured step (kiln::cuda::Graph) reads the current values when it replays.
#pragma once
#include <cstddef>
#include <span>

#include "kiln/core/index.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::optim::detail {

/// Doubles on device D, addressed by an enum of the owner's (AdamScalars, SgdScalars, ScalerState).
/// set() and get() copy one value (get waits for the stream); the owner's passes read and write them
/// through data(). A copy holds its own values (a copied scaler must not share its state).
template <class D>
class DeviceScalars {
 public:
  DeviceScalars() = default;
  /// `initial.size()` values on device `index` (< 0: the current one).
  DeviceScalars(std::span<const double> initial, int index)
      : values_(Extents<Shape<dyn>>(static_cast<index_t>(initial.size())), index) {
    values_.copy_from(initial);
  }
  DeviceScalars(const DeviceScalars& o) { *this = o; }
  DeviceScalars& operator=(const DeviceScalars& o) {
    if (this != &o) {
      values_ = Tensor<double, Shape<dyn>, D>();
      if (!o.values_.empty()) {
        values_ = Tensor<double, Shape<dyn>, D>(o.values_.extents(), o.values_.device_index());
        kiln::assign(values_, o.values_);
      }
    }
    return *this;
  }
  DeviceScalars(DeviceScalars&&) = default;
  DeviceScalars& operator=(DeviceScalars&&) = default;

  bool empty() const { return values_.empty(); }
  /// The device the values live on.
  int device() const { return values_.device_index(); }
  double* data() { return values_.data(); }
  const double* data() const { return values_.data(); }
  void set(int which, double value) { cell(which).copy_from(std::span<const double>(&value, 1)); }
  double get(int which) const { return cell(which).template to<Cpu>()[0]; }

 private:
  Tensor<double, Shape<dyn>, D> cell(int which) const {
    return Tensor<double, Shape<dyn>, D>::from_blob(const_cast<double*>(values_.data()) + which,
                                                    Extents<Shape<dyn>>(1), values_.device_index());
  }
  Tensor<double, Shape<dyn>, D> values_;
};

}  // namespace kiln::optim::detail
