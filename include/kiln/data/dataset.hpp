/// The dataset concept and an in-memory TensorDataset.
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/tensor/shape.hpp"

namespace kiln {
template <class T, class S, class D>
class Tensor;  // (kiln/tensor/tensor.hpp; TensorDataset's constructor from tensors reads them)
}  // namespace kiln

namespace kiln::data {

namespace detail {
template <class D>
struct sample_type_of {
  using type = float;
};
template <class D>
  requires requires { typename D::sample_type; }
struct sample_type_of<D> {
  using type = typename D::sample_type;
};

/// The checks of a dataset's read(i, x, y): 0 <= i < size, and spans of exactly the sample's and the
/// target's element counts; ValueError naming `who` otherwise (read writes through both spans).
inline void check_read(const char* who, index_t i, index_t size, std::size_t x, std::size_t x_want,
                       std::size_t y, std::size_t y_want) {
  if (i < 0 || i >= size)
    throw ValueError(std::string(who) + ": index " + std::to_string(i) + " out of range; expected 0 <= i < " +
                     std::to_string(size));
  if (x != x_want || y != y_want)
    throw ValueError(std::string(who) + ": got spans of " + std::to_string(x) + " inputs and " +
                     std::to_string(y) + " targets; expected " + std::to_string(x_want) + " and " +
                     std::to_string(y_want));
}
}  // namespace detail

/// The element type of a dataset's inputs: D::sample_type where D has one (std::uint8_t for Bytes<...>),
/// else float.
template <class D>
using sample_type_t = typename detail::sample_type_of<D>::type;

/// A dataset of `size()` samples. Sample i is read into caller-provided memory (a slot of the batch being
/// collated, so nothing is allocated per sample):
///   D::sample_shape    the shape of one input, without the batch (Shape<1, 28, 28>, Shape<13>)
///   D::target_type     std::int64_t (a class index) or float (a regression target)
///   D::target_shape    Shape<> for a class index, Shape<1> (or more) for regression targets
///   D::sample_type     optional: the inputs' element type (default float; std::uint8_t for raw bytes)
///   d.size()           the number of samples
///   d.read(i, x, y)    writes sample i's input into x (sample_shape's numel values, row-major) and its
///                      target into y (target_shape's numel values); const and thread-safe
/// Like torch.utils.data.Dataset's __len__ / __getitem__.
template <class D>
concept dataset = requires(const D& d, index_t i, std::span<sample_type_t<D>> x, std::span<typename D::target_type> y) {
  // (g++ shows the line of a requirement that fails, with its comment)
  typename D::sample_shape;                      // using sample_shape = kiln::Shape<13>; (no batch dimension)
  typename D::target_shape;                      // Shape<> (a class index) or Shape<1> (a regression target)
  typename D::target_type;                       // std::int64_t (a class index) or float
  { d.size() } -> std::convertible_to<index_t>;  // index_t size() const
  d.read(i, x, y);  // void read(index_t i, std::span<float> x, std::span<target_type> y) const: const, as workers share it
};

namespace detail {
/// Shape<dyn, E...>: the batched form of a sample shape.
template <class S>
struct batched;
template <index_t... E>
struct batched<Shape<E...>> {
  using type = Shape<dyn, E...>;
};
}  // namespace detail

/// The shape of a batch of samples of shape S: Shape<dyn, S...>.
template <class S>
using batched_t = typename detail::batched<S>::type;

/// One sample as values (for inspection and tests; loaders read into batch slots instead).
template <class D>
struct Example {
  std::vector<sample_type_t<D>> x;
  std::vector<typename D::target_type> y;
};

/// Sample i of d as an Example.
template <dataset D>
Example<D> get(const D& d, index_t i) {
  Example<D> e;
  e.x.resize(static_cast<std::size_t>(D::sample_shape::static_numel()));
  e.y.resize(static_cast<std::size_t>(D::target_shape::static_numel()));
  d.read(i, std::span<sample_type_t<D>>(e.x), std::span<typename D::target_type>(e.y));
  return e;
}

/// A dataset whose samples are kept as bytes (Mnist, Cifar10: `read_bytes(i, x, y)` with x the sample's
/// stored bytes, 0-255).
template <class D>
concept byte_dataset = dataset<D> && requires(const D& d, index_t i, std::span<std::uint8_t> x,
                                              std::span<typename D::target_type> y) { d.read_bytes(i, x, y); };

/// The samples of a byte dataset as their stored bytes (std::uint8_t, 0-255) instead of floats in [0, 1]:
/// a loader over it collates and copies a quarter of the bytes, and a DeviceLoader scales and normalises
/// them where they land (on the GPU, one kernel per batch). Keeps `ds` by reference.
///   const kiln::data::Bytes bytes(train);                  // train: a FashionMnist
///   kiln::data::DataLoader loader(bytes, {.batch_size = 128, .pin_memory = true});
template <byte_dataset Ds>
class Bytes {
 public:
  using sample_type = std::uint8_t;
  using sample_shape = typename Ds::sample_shape;
  using target_type = typename Ds::target_type;
  using target_shape = typename Ds::target_shape;

  explicit Bytes(const Ds& ds) : ds_(&ds) {}
  Bytes(const Ds&&) = delete;  // a temporary dataset would dangle
  index_t size() const { return ds_->size(); }
  void read(index_t i, std::span<std::uint8_t> x, std::span<target_type> y) const { ds_->read_bytes(i, x, y); }
  const Ds& dataset() const { return *ds_; }

 private:
  const Ds* ds_;
};

/// Samples held in memory: inputs [N, sample...] as float, targets [N, target...]
/// (torch.utils.data.TensorDataset).
template <class SampleShape, class Target = std::int64_t, class TargetShape = Shape<>>
class TensorDataset {
 public:
  using sample_shape = SampleShape;
  using target_type = Target;
  using target_shape = TargetShape;
  static constexpr index_t sample_numel = SampleShape::static_numel();
  static constexpr index_t target_numel = TargetShape::static_numel();
  // >>> Stopped here? A sample's shape has no dyn and no 0 extent: the dataset counts samples by it. <<<
  static_assert(sample_numel > 0, "kiln::data::TensorDataset: the sample shape must be static (no dyn) and "
                                  "hold at least one value (no 0 extent)");
  static_assert(target_numel >= 0, "kiln::data::TensorDataset: the target shape must be static (no dyn)");

  /// From tensors, as torch's TensorDataset(x, y): x [N, sample...] of float and y [N, target...] of
  /// Target, on any device (their values are copied to the host); their first extents must agree.
  template <class SX, class DX, class SY, class DY>
  TensorDataset(const Tensor<float, SX, DX>& x, const Tensor<Target, SY, DY>& y)
      : TensorDataset(checked_rows(x.size(0), y.size(0)), x.to_vector(), y.to_vector()) {
    static_assert(static_extents_agree<batched_t<SampleShape>, SX>,
                  "kiln::data::TensorDataset: x must be [N, sample shape...]");
    static_assert(static_extents_agree<batched_t<TargetShape>, SY>,
                  "kiln::data::TensorDataset: y must be [N, target shape...]");
  }
  /// x: N * sample_numel values, y: N * target_numel values.
  TensorDataset(std::vector<float> x, std::vector<Target> y) : x_(std::move(x)), y_(std::move(y)) {
    if (x_.size() % static_cast<std::size_t>(sample_numel) != 0 ||
        y_.size() != x_.size() / static_cast<std::size_t>(sample_numel) * static_cast<std::size_t>(target_numel))
      throw ValueError("kiln::data::TensorDataset: " + std::to_string(x_.size()) + " input values and " +
                       std::to_string(y_.size()) + " targets do not make whole samples of " +
                       std::to_string(sample_numel) + " inputs and " + std::to_string(target_numel) + " targets");
  }
  index_t size() const { return static_cast<index_t>(x_.size()) / sample_numel; }
  void read(index_t i, std::span<float> x, std::span<Target> y) const {
    detail::check_read("kiln::data::TensorDataset::read", i, size(), x.size(), sample_numel, y.size(), target_numel);
    const auto xs = static_cast<std::size_t>(i * sample_numel), ys = static_cast<std::size_t>(i * target_numel);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = x_[xs + k];
    for (std::size_t k = 0; k < y.size(); ++k) y[k] = y_[ys + k];
  }
  const std::vector<float>& inputs() const { return x_; }
  const std::vector<Target>& targets() const { return y_; }

 private:
  struct Rows {};
  static Rows checked_rows(index_t x, index_t y) {
    if (x != y)
      throw ValueError("kiln::data::TensorDataset: x has " + std::to_string(x) + " rows and y " + std::to_string(y) +
                       "; expected one target row per sample (torch: size mismatch between tensors)");
    return {};
  }
  TensorDataset(Rows, std::vector<float> x, std::vector<Target> y) : TensorDataset(std::move(x), std::move(y)) {}

  std::vector<float> x_;
  std::vector<Target> y_;
};

}  // namespace kiln::data
