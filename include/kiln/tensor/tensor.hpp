/// Tensor: typed element, compile-time shape (dynamic batch allowed), device; shared storage.
#pragma once
#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/expr/node.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/shape.hpp"
#include "kiln/tensor/storage.hpp"
#include "kiln/tensor/view.hpp"

namespace kiln {

template <class T, class S, class D>
class Tensor;

template <class X>
struct is_tensor : std::false_type {};
template <class T, class S, class D>
struct is_tensor<Tensor<T, S, D>> : std::true_type {};
/// Any kiln::Tensor<...>.
template <class X>
concept tensor = is_tensor<std::remove_cvref_t<X>>::value;

template <class T, class S, class D, class Src>
void assign(Tensor<T, S, D>& dst, const Src& src);
namespace detail {
template <class T, class S, class D, class Src>
void assign_into_view(Tensor<T, S, D>& dst, const Src& src);
}  // namespace detail

/// A kiln tensor or expression (not a plain number).
template <class X>
concept operand = tensor<X> || expression<X>;
/// A kiln operand or a number.
template <class X>
concept operand_or_number = operand<X> || std::is_arithmetic_v<X>;

/// An n-dimensional array of T with shape S on device D. Copies share storage (like torch::Tensor);
/// `clone()` copies the data. Assigning an expression evaluates it into the existing storage in one pass.
///
/// Example:
///   kiln::Tensor<float, kiln::Shape<kiln::dyn, 4>> x(3), y(3);  // [3, 4]
///   x.fill(2.0f);
///   y = kiln::relu(x * 2.0f - 1.0f);                             // one loop / one kernel
template <class T, class S, class D = Cpu>
class Tensor {
  // >>> Stopped here? Check the element type, shape and device you gave kiln::Tensor. <<<
  static_assert(element<T>, "kiln::Tensor: element type must be float, double, kiln::half, kiln::bfloat16, "
                            "uint8_t, int32_t, int64_t or bool");
  static_assert(shape<S>, "kiln::Tensor: the second argument must be a kiln::Shape<...>");
  static_assert(device_policy<D>, "kiln::Tensor: the third argument must be kiln::Cpu or kiln::Cuda");

 public:
  using element_type = T;
  using value_type = compute_t<T>;
  using shape_type = S;
  using device = D;
  static constexpr std::size_t rank = S::rank;

  /// A static shape allocates; a shape with `dyn` extents starts empty (extent 0).
  Tensor() {
    if constexpr (S::is_static) allocate(Extents<S>{}, -1);
  }
  /// One value per `dyn` extent, in order: `Tensor<float, Shape<dyn, 10>> t(batch);`
  template <class... I>
    requires(sizeof...(I) == S::rank_dynamic && sizeof...(I) > 0 && (std::is_integral_v<I> && ...))
  explicit Tensor(I... dynamic) {
    allocate(Extents<S>(dynamic...), -1);
  }
  /// Uninitialised storage of the given extents on device `index` (cuda:index; < 0: the current device).
  explicit Tensor(const Extents<S>& ext, int index = -1) { allocate(ext, index); }

  Tensor(const Tensor&) = default;  // shares storage
  // A tensor is initialised only from one of its own element type and device (a copy shares storage).
  // The compiler shows the line below when one of another is given (g++ prints the comment with it);
  // another shape gets the compiler's own message, which names both.
  template <class U, class D2>
    requires(!std::is_same_v<Tensor<U, S, D2>, Tensor>)
  Tensor(const Tensor<U, S, D2>&) = delete;  // another element type or device: kiln::eval(kiln::cast<T>(x)), x.to<Dev>(), or g = x; into an allocated g
  // Nor is one made from an expression by conversion (`Tensor<...> r = x * 2.0f;`): the pass is asked for.
  template <class E>
    requires(expression<E> && !tensor<E>)
  Tensor(const E&) = delete;  // from an expression: auto r = kiln::eval(x * 2.0f); or assign it, r = x * 2.0f;
  /// Moves leave the source empty (no storage, every extent 0), so a stale handle cannot write into
  /// memory it no longer owns.
  Tensor(Tensor&& o) noexcept : storage_(std::move(o.storage_)), data_(o.data_), ext_(o.ext_) { o.reset(); }
  /// A named tensor (an lvalue) takes another's storage: `t = eval(e);` rebinds t, as libtorch's.
  Tensor& operator=(Tensor&& o) & noexcept {
    if (this != &o) {
      storage_ = std::move(o.storage_);
      data_ = o.data_;
      ext_ = o.ext_;
      o.reset();
    }
    return *this;
  }
  /// A temporary view (`x.slice(1, 5) = eval(e);`) is written into, as libtorch's Tensor::operator= &&:
  /// rebinding a temporary would write nothing.
  Tensor& operator=(Tensor&& o) && {
    if (this != &o) detail::assign_into_view(*this, o);
    return *this;
  }
  /// Writes other's values into this tensor's storage (allocating when it has none): libtorch's
  /// b.copy_(a), where libtorch's b = a rebinds b (docs/design.md).
  Tensor& operator=(const Tensor& other) & {
    if (this != &other) assign(*this, other);
    return *this;
  }
  /// Into a temporary view, never allocating: a view of a tensor with no storage yet (`flatten(t) = x`
  /// for a default-constructed t) has no elements to write, so another shape is a ShapeError (torch's
  /// copy_ into an empty view: a size mismatch), where an allocation would hold the values nowhere.
  Tensor& operator=(const Tensor& other) && {
    if (this != &other) detail::assign_into_view(*this, other);
    return *this;
  }
  /// Evaluates an expression (or fills with a number) into this tensor, in one pass.
  template <class E>
    requires(!std::is_same_v<std::remove_cvref_t<E>, Tensor>)
  Tensor& operator=(const E& e) & {
    assign(*this, e);
    return *this;
  }
  /// The same into a temporary view, never allocating (above).
  template <class E>
    requires(!std::is_same_v<std::remove_cvref_t<E>, Tensor>)
  Tensor& operator=(const E& e) && {
    detail::assign_into_view(*this, e);
    return *this;
  }

  // ---- shape ----
  const Extents<S>& extents() const { return ext_; }
  /// The extent of dimension `dim`; a negative one counts from the end (size(-1): the last), as torch's.
  /// A ShapeError names a dimension outside [-rank, rank).
  index_t size(std::int64_t dim) const {
    constexpr auto r = static_cast<std::int64_t>(S::rank);
    if (dim < -r || dim >= r)
      throw ShapeError("kiln::Tensor::size: dimension " + std::to_string(dim) + " is out of range for a tensor of rank " +
                       std::to_string(r) + " (expected in [" + std::to_string(-r) + ", " + std::to_string(r - 1) + "])");
    return ext_[static_cast<std::size_t>(dim < 0 ? dim + r : dim)];
  }
  index_t numel() const { return ext_.numel(); }
  bool empty() const { return numel() == 0; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * sizeof(T); }

  // ---- memory ----
  T* data() { return data_; }
  const T* data() const { return data_; }
  int device_index() const { return storage_ ? storage_->device : 0; }
  bool is_pinned() const { return storage_ && storage_->pinned; }
  /// True when both tensors use the same allocation.
  bool shares_storage_with(const Tensor& o) const { return storage_ && storage_ == o.storage_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  TensorView<T, S, D> view() { return {data_, ext_}; }
  TensorView<const T, S, D> view() const { return {data_, ext_}; }

  // ---- host element access (CPU tensors) ----
  // Unchecked unless KILN_BOUNDS_CHECK (kiln/core/config.hpp); at() is checked and takes negative indices.
  // `Checked` is a template argument, so that a checked and an unchecked translation unit instantiate two
  // functions of their own (one body under one name would break the one-definition rule).
  template <bool Checked = KILN_BOUNDS_CHECK != 0>
  T& operator[](index_t i)
    requires std::is_same_v<D, Cpu>
  {
    if constexpr (Checked) check_flat(i);
    return data_[i];
  }
  template <bool Checked = KILN_BOUNDS_CHECK != 0>
  const T& operator[](index_t i) const
    requires std::is_same_v<D, Cpu>
  {
    if constexpr (Checked) check_flat(i);
    return data_[i];
  }
  /// Element at a multi-index, row-major: `t(n, c, h, w)`.
  template <class... I, bool Checked = KILN_BOUNDS_CHECK != 0>
    requires(sizeof...(I) == S::rank && std::is_same_v<D, Cpu>)
  T& operator()(I... idx) {
    if constexpr (Checked) return data_[checked_offset(false, idx...)];
    return data_[offset(idx...)];
  }
  template <class... I, bool Checked = KILN_BOUNDS_CHECK != 0>
    requires(sizeof...(I) == S::rank && std::is_same_v<D, Cpu>)
  const T& operator()(I... idx) const {
    if constexpr (Checked) return data_[checked_offset(false, idx...)];
    return data_[offset(idx...)];
  }
  /// t(i, j, ...) checked, with torch's negative indices (-1: the last): an index outside
  /// [-size, size) of its dimension is an IndexError, "index 4 is out of bounds for dimension 0 with size 4".
  template <std::integral... I>
    requires(sizeof...(I) == S::rank && std::is_same_v<D, Cpu>)
  T& at(I... idx) {
    return data_[checked_offset(true, idx...)];
  }
  template <std::integral... I>
    requires(sizeof...(I) == S::rank && std::is_same_v<D, Cpu>)
  const T& at(I... idx) const {
    return data_[checked_offset(true, idx...)];
  }
  /// The value of a one-element tensor, copied to the host (torch's item()).
  value_type item() const {
    if (numel() != 1) throw ShapeError("kiln::Tensor::item: tensor has " + std::to_string(numel()) + " elements, expected 1");
    T v;
    detail::device_copy<Cpu, D>::run(&v, 0, data_, device_index(), sizeof(T), false);
    return to_compute(v);
  }

  /// All elements, copied to the host in row-major order.
  std::vector<T> to_vector() const {
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits and has no data()
      const auto n = static_cast<std::size_t>(numel());
      std::unique_ptr<bool[]> tmp(new bool[n == 0 ? 1 : n]);
      detail::device_copy<Cpu, D>::run(tmp.get(), 0, data_, device_index(), nbytes(), false);
      return std::vector<bool>(tmp.get(), tmp.get() + n);
    } else {
      std::vector<T> v(static_cast<std::size_t>(numel()));
      detail::device_copy<Cpu, D>::run(v.data(), 0, data_, device_index(), nbytes(), false);
      return v;
    }
  }
  /// A new tensor holding `values` (row-major; size must equal the extents' product).
  static Tensor from(std::span<const T> values, const Extents<S>& ext, int index = -1) {
    if (static_cast<index_t>(values.size()) != ext.numel())
      throw ShapeError("kiln::Tensor::from: " + std::to_string(values.size()) + " values for extents " +
                       to_string(ext) + " (" + std::to_string(ext.numel()) + " elements)");
    Tensor t(ext, index);
    detail::device_copy<D, Cpu>::run(t.data_, t.device_index(), values.data(), 0, t.nbytes(), false);
    return t;
  }
  /// Overwrites every element with host values (row-major; the count must match).
  void copy_from(std::span<const T> values) {
    if (static_cast<index_t>(values.size()) != numel())
      throw ShapeError("kiln::Tensor::copy_from: " + std::to_string(values.size()) + " values for extents " +
                       to_string(ext_) + " (" + std::to_string(numel()) + " elements)");
    detail::device_copy<D, Cpu>::run(data_, device_index(), values.data(), 0, nbytes(), false);
  }
  /// Static shapes only: `Tensor<float, Shape<2, 3>>::from({1, 2, 3, 4, 5, 6})`.
  static Tensor from(std::initializer_list<T> values)
    requires S::is_static
  {
    return from(std::span<const T>(values.begin(), values.size()), Extents<S>{});
  }

  /// A copy on device D2 (index: which GPU; < 0: the current one). With non_blocking and pinned host
  /// memory the copy is asynchronous on the current stream, like torch's `.to(device, non_blocking=True)`.
  /// A tensor already there (on the CPU, or on that GPU) is returned as it is, sharing its storage, as
  /// torch's `.to` returns self (clone() copies).
  template <class D2>
  Tensor<T, S, D2> to(int index = -1, bool non_blocking = false) const {
    if constexpr (std::is_same_v<D2, D>) {
      if constexpr (!detail::device_memory<D>::indexed)
        return *this;
      else if (storage_ &&
               (index < 0 ? detail::device_memory<D>::allocator(-1).device() : index) == device_index())
        return *this;
    }
    Tensor<T, S, D2> t(ext_, index);
    detail::device_copy<D2, D>::run(t.data(), t.device_index(), data_, device_index(), nbytes(), non_blocking);
    return t;
  }
  template <class D2>
  Tensor<T, S, D2> to(D2, int index = -1, bool non_blocking = false) const {
    return to<D2>(index, non_blocking);
  }

  /// A copy with its own storage.
  Tensor clone() const {
    Tensor t(ext_, storage_ ? storage_->device : -1);  // no storage (empty): the current device, not 0
    t = *this;
    return t;
  }

  /// The same storage seen with another shape of equal element count (no copy).
  template <class S2>
  Tensor<T, S2, D> reshape(const Extents<S2>& ext) const {
    detail::check_static_extents(ext, "kiln::Tensor::reshape");
    if (detail::checked_numel(ext, sizeof(T), "kiln::Tensor::reshape") != numel())
      throw ShapeError("kiln::Tensor::reshape: cannot view extents " + to_string(ext_) + " (" +
                       std::to_string(numel()) + " elements) as " + to_string(ext) + " (" +
                       std::to_string(ext.numel()) + " elements)");
    return Tensor<T, S2, D>(storage_, data_, ext);
  }
  /// Reshape to a shape whose only dynamic extent (if any) is inferred: `reshape<Shape<dyn, 400>>()`.
  template <class S2>
  Tensor<T, S2, D> reshape() const {
    static_assert(S2::rank_dynamic <= 1, "kiln::Tensor::reshape<S>(): at most one dyn extent can be inferred; "
                                         "pass Extents<S> for more");
    // >>> Stopped here? Both shapes are static and hold different numbers of elements. <<<
    static_assert(!(S::is_static && S2::is_static) || S::static_numel() == S2::static_numel(),
                  "kiln::Tensor::reshape<S>(): the new shape must hold as many elements as the tensor's own (both "
                  "are static here and differ: see S and S2 in the line above)");
    // >>> Stopped here? The tensor's static number of elements does not divide into the new shape's
    //     static extents, so no extent fits its one dyn dimension. <<<
    static_assert(!(S::is_static && S2::rank_dynamic == 1) ||
                      (S2::known_numel() != 0 && S::static_numel() % S2::known_numel() == 0),
                  "kiln::Tensor::reshape<S>(): the tensor's elements (static here) do not divide into the new "
                  "shape's static extents, so no extent fits its dyn one: see S and S2 in the line above");
    Extents<S2> e;
    if constexpr (S2::rank_dynamic == 1) {
      index_t known = 1;
      std::size_t at = 0;
      for (std::size_t i = 0; i < S2::rank; ++i) {
        if (S2::extents[i] == dyn) at = i;
        else known *= S2::extents[i];
      }
      if (known == 0 || numel() % known != 0)
        throw ShapeError("kiln::Tensor::reshape: " + std::to_string(numel()) + " elements of " + to_string(ext_) +
                         " do not divide into " + shape_name<S2>());
      e[at] = numel() / known;
    }
    return reshape<S2>(e);
  }

  /// Rows [begin, end) along the first dimension, sharing storage (a micro-batch, a device's share).
  Tensor slice(index_t begin, index_t end) const {
    static_assert(S::rank >= 1, "kiln::Tensor::slice: needs rank >= 1");
    if (begin < 0 || end < begin || end > ext_[0])
      throw ShapeError("kiln::Tensor::slice: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                       ") out of range for extents " + to_string(ext_));
    if constexpr (S::extents[0] != dyn) {
      if (end - begin != S::extents[0])
        throw ShapeError("kiln::Tensor::slice: a static first extent cannot change; got " +
                         std::to_string(end - begin) + " rows of " + to_string(ext_));
    }
    Extents<S> e = ext_;
    e[0] = end - begin;
    const index_t row = ext_[0] ? numel() / ext_[0] : 0;
    return Tensor(storage_, data_ + begin * row, e);
  }

  /// A copy in page-locked host memory (needs kiln::cuda), the source of asynchronous device copies;
  /// a tensor already there is returned as it is (torch's pin_memory), not copied.
  Tensor pin_memory() const
    requires std::is_same_v<D, Cpu>
  {
    if (is_pinned()) return *this;
    Tensor t;
    t.ext_ = ext_;
    t.storage_ = Storage::allocate(detail::pinned_host_memory<D>::allocator(), nbytes(), true);
    t.data_ = static_cast<T*>(t.storage_->ptr);
    detail::device_copy<Cpu, Cpu>::run(t.data_, 0, data_, 0, nbytes(), false);
    return t;
  }

  /// Sets every element to v (one pass). A number that does not fit T (300 into uint8, 1e40 into float)
  /// is a ValueError, as torch's fill_ raises.
  void fill(value_type v) { assign(*this, v); }
  template <class N>
    requires(std::is_arithmetic_v<N> && !std::is_same_v<N, value_type>)
  void fill(N v) {
    assign(*this, v);
  }

  /// Wraps memory owned by someone else (row-major, device D); the tensor never frees it. On a GPU,
  /// `index` is the device the memory belongs to (kiln's passes over it run there); by default the
  /// runtime says which, as libtorch's from_blob (device, managed, pinned host memory), and memory no
  /// GPU knows is refused (ValueError).
  static Tensor from_blob(T* p, const Extents<S>& ext, int index = -1) {
    if constexpr (detail::device_memory<D>::indexed) {
      if (index < 0) index = detail::device_memory<D>::pointer_device(p);
      if (index >= 0)
        detail::device_memory<D>::note_device(index);
      else if (p != nullptr && ext.numel() > 0)
        throw ValueError("kiln::Tensor::from_blob: the memory at p belongs to no GPU (plain host memory, or no "
                         "CUDA driver); pass its device index, or wrap host memory in a kiln::Cpu tensor");
      else  // nothing to read: the GPU in use, so no check refuses it
        index = std::max(detail::device_memory<D>::device_in_use(), 0);
    } else {
      index = 0;
    }
    auto s = std::make_shared<Storage>();
    s->ptr = p;
    const index_t n = detail::checked_numel(ext, sizeof(T), "kiln::Tensor::from_blob");
    s->bytes = static_cast<std::size_t>(n) * sizeof(T);
    s->device = index;
    return Tensor(std::move(s), p, ext);
  }

  // Internal: a tensor over existing storage (reshape, slice).
  Tensor(std::shared_ptr<Storage> s, T* data, const Extents<S>& ext)
      : storage_(std::move(s)), data_(data), ext_(ext) {}

 private:
  template <class, class, class>
  friend class Tensor;

  void reset() noexcept {
    storage_.reset();
    data_ = nullptr;
    for (std::size_t d = 0; d != S::rank; ++d) ext_[d] = 0;
  }
  void allocate(const Extents<S>& ext, int index) {
    detail::check_static_extents(ext, "kiln::Tensor");
    const index_t n = detail::checked_numel(ext, sizeof(T), "kiln::Tensor");
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
    ext_ = ext;
    storage_ = Storage::allocate(detail::device_memory<D>::allocator(index), bytes);
    data_ = static_cast<T*>(storage_->ptr);
  }
  template <class... I>
  index_t offset(I... idx) const {
    const index_t i[] = {static_cast<index_t>(idx)...};
    index_t off = 0;
    for (std::size_t d = 0; d != S::rank; ++d) off = off * ext_[d] + i[d];
    return off;
  }
  /// offset() after checking each index against its extent (negative ones counted from the end when
  /// `negative`, as torch's).
  template <class... I>
  index_t checked_offset(bool negative, I... idx) const {
    if (data_ == nullptr) throw IndexError("kiln::Tensor: element access to a tensor with no storage");
    const std::array<index_t, S::rank> given{static_cast<index_t>(idx)...};
    std::array<index_t, S::rank> i{};
    for (std::size_t d = 0; d != S::rank; ++d) {
      i[d] = negative && given[d] < 0 ? given[d] + ext_[d] : given[d];
      if (i[d] < 0 || i[d] >= ext_[d])
        throw IndexError("kiln::Tensor: index " + std::to_string(given[d]) + " is out of bounds for dimension " +
                         std::to_string(d) + " with size " + std::to_string(ext_[d]));
    }
    index_t off = 0;
    for (std::size_t d = 0; d != S::rank; ++d) off = off * ext_[d] + i[d];
    return off;
  }
  void check_flat(index_t i) const {
    if (i < 0 || i >= numel())
      throw IndexError("kiln::Tensor: flat index " + std::to_string(i) + " is out of bounds for " +
                       std::to_string(numel()) + " elements");
  }

  std::shared_ptr<Storage> storage_;
  T* data_ = nullptr;
  Extents<S> ext_{};
};

/// A new tensor of shape S on device D filled with v (torch.full): a number that does not fit T is a
/// ValueError, as fill's (torch's "value cannot be converted to type uint8_t without overflow").
template <class T, class S, class D = Cpu, class N>
  requires std::is_arithmetic_v<N>
Tensor<T, S, D> full(const Extents<S>& ext, N v, int index = -1) {
  Tensor<T, S, D> t(ext, index);
  t.fill(v);
  return t;
}
template <class T, class S, class D = Cpu>
Tensor<T, S, D> zeros(const Extents<S>& ext = Extents<S>{}, int index = -1) {
  return full<T, S, D>(ext, compute_t<T>(0), index);
}

/// Any tensor, expression or number as an expression node (tensors become views, numbers scalars).
template <class X>
auto as_expr(const X& x) {
  if constexpr (tensor<X>) {
    return x.view();
  } else if constexpr (std::is_arithmetic_v<X>) {
    return Scalar<X>{x};
  } else {
    // >>> Stopped here? An operand is neither a kiln tensor, a kiln expression nor a number. <<<
    static_assert(expression<X>, "kiln: operand is not a kiln tensor or expression (value_type, shape_type, "
                                 "extents(), operator[]); wrap raw buffers with kiln::Tensor<...>::from_blob()");
    return x;
  }
}

namespace detail {
/// The node type of a tensor, expression or number.
template <class X>
using node_t = decltype(as_expr(std::declval<const X&>()));

/// The device a pass over t runs on: its memory's, or -1 (the current device) for a tensor without memory.
template <class T, class S, class D>
int pass_device(const Tensor<T, S, D>& t) {
  return t.storage() ? t.device_index() : -1;
}

/// Throws ValueError when devices a and b (each -1: not known) differ, as torch's "Expected all
/// tensors to be on the same device". Only GPU indices can differ: a CPU tensor's is always 0.
inline void check_same_device(const char* what, int a, int b) {
  if (a >= 0 && b >= 0 && a != b)
    throw ValueError(std::string(what) + ": expected all tensors to be on the same device, but found at least "
                     "two devices, cuda:" + std::to_string(a) + " and cuda:" + std::to_string(b) +
                     "; move them to one with .to<kiln::Cuda>(index) first");
}
template <class TA, class SA, class TB, class SB, class D>
void check_same_device(const char* what, const Tensor<TA, SA, D>& a, const Tensor<TB, SB, D>& b) {
  check_same_device(what, pass_device(a), pass_device(b));
}
}  // namespace detail

}  // namespace kiln
