/// Shapes: static extents in the type (`Shape<dyn, 3, 32, 32>`), run-time extents beside them.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "kiln/core/config.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"

namespace kiln {

/// A dynamic extent (usually the batch), known only at run time.
inline constexpr index_t dyn = -1;

/// A shape whose extents are fixed at compile time, except those written `dyn`. Mirrors std::extents.
/// Example: `Shape<dyn, 3, 32, 32>` is a batch of 3-channel 32x32 images.
template <index_t... E>
struct Shape {
  static_assert(((E == dyn || E >= 0) && ...), "kiln::Shape: an extent must be >= 0 or kiln::dyn");
  static constexpr std::size_t rank = sizeof...(E);
  static constexpr index_t extents[rank == 0 ? 1 : rank] = {E...};
  static constexpr std::size_t rank_dynamic = ((E == dyn ? 1 : 0) + ... + 0);
  static constexpr bool is_static = rank_dynamic == 0;
  /// Extent i, or dyn.
  static constexpr index_t static_extent(std::size_t i) { return extents[i]; }
  /// Product of all extents (1 for rank 0); dyn if any extent is dynamic.
  static constexpr index_t static_numel() {
    index_t n = 1;
    for (std::size_t i = 0; i != rank; ++i) {
      if (extents[i] == dyn) return dyn;
      n *= extents[i];
    }
    return n;
  }
  /// Product of the static extents (the dyn ones left out; 1 for none).
  static constexpr index_t known_numel() {
    index_t n = 1;
    for (std::size_t i = 0; i != rank; ++i)
      if (extents[i] != dyn) n *= extents[i];
    return n;
  }
};

/// Any kiln::Shape<...>.
template <class S>
struct is_shape : std::false_type {};
template <index_t... E>
struct is_shape<Shape<E...>> : std::true_type {};
template <class S>
concept shape = is_shape<S>::value;

namespace detail {
template <class F, class I = std::make_index_sequence<F::extents().size()>>
struct shape_from;
template <class F, std::size_t... I>
struct shape_from<F, std::index_sequence<I...>> {
  static constexpr auto e = F::extents();
  using type = Shape<e[I]...>;
};
}  // namespace detail
/// The Shape whose extents F::extents() gives, a constexpr std::array<index_t, R>: a shape computed by a
/// constexpr function (joined, unflattened, squeezed). (A type, not the array itself as a template
/// argument: nvcc's host pass does not take class-type template arguments.)
template <class F>
using shape_from_t = typename detail::shape_from<F>::type;
/// F for shape_from_t with the extents E...
template <index_t... E>
struct extents_list {
  static constexpr std::array<index_t, sizeof...(E)> extents() { return {E...}; }
};

namespace detail {
/// Extent I of S, 0 where dynamic, as a scalar constant (usable in device code, unlike S::extents).
template <class S, std::size_t I>
inline constexpr index_t static_extent_or_zero = S::extents[I] == dyn ? 0 : S::extents[I];
}  // namespace detail

/// The run-time extents of a value of shape S; trivially copyable, usable in kernels.
template <class S>
struct Extents {
  static constexpr std::size_t rank = S::rank;
  index_t e[rank == 0 ? 1 : rank];

  /// Static extents filled in; dynamic ones 0. (Through a scalar constant per dimension: nvcc's device
  /// pass, which compiles this constructor too, cannot read the host array S::extents.)
  KILN_HOST_DEVICE constexpr Extents() : Extents(std::make_index_sequence<rank>{}) {}
  /// Values for the dynamic extents, in order.
  template <class... I>
    requires(sizeof...(I) == S::rank_dynamic && sizeof...(I) > 0 && (std::is_integral_v<I> && ...))
  explicit constexpr Extents(I... dynamic) : Extents() {
    const index_t d[] = {static_cast<index_t>(dynamic)...};
    std::size_t k = 0;
    for (std::size_t i = 0; i != rank; ++i)
      if (S::extents[i] == dyn) {
        if (d[k] < 0) throw ShapeError("kiln::Extents: a dynamic extent must be >= 0, got " + std::to_string(d[k]));
        e[i] = d[k++];
      }
  }
  template <std::size_t... I>
  KILN_HOST_DEVICE constexpr explicit Extents(std::index_sequence<I...>) : e{detail::static_extent_or_zero<S, I>...} {}
  KILN_HOST_DEVICE constexpr index_t operator[](std::size_t i) const { return e[i]; }
  KILN_HOST_DEVICE constexpr index_t& operator[](std::size_t i) { return e[i]; }
  /// The element count. Modular (unsigned) arithmetic: no overflow to trap on for extents that are never
  /// allocated ([2^40, 2^40, 0] is 0); a tensor's extents are checked when it is made (checked_numel).
  KILN_HOST_DEVICE constexpr index_t numel() const {
    std::uint64_t n = 1;
    for (std::size_t i = 0; i != rank; ++i) n *= static_cast<std::uint64_t>(e[i]);
    return static_cast<index_t>(n);
  }
  friend constexpr bool operator==(const Extents& a, const Extents& b) {
    for (std::size_t i = 0; i != rank; ++i)
      if (a.e[i] != b.e[i]) return false;
    return true;
  }
};

/// "[3, 4]"
template <class S>
std::string to_string(const Extents<S>& x) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i != S::rank; ++i) os << (i ? ", " : "") << x[i];
  os << ']';
  return os.str();
}
template <class S>
std::ostream& operator<<(std::ostream& os, const Extents<S>& x) {
  return os << to_string(x);
}

namespace detail {
/// ext's element count, checked: ShapeError naming `what` when an extent is negative or the count of
/// `element`-byte elements overflows what memory can address (numel() would wrap: [2^32, 2^32] is 0).
template <class S>
index_t checked_numel(const Extents<S>& ext, std::size_t element, const char* what) {
  bool empty = false;
  for (std::size_t d = 0; d != S::rank; ++d) {
    if (ext[d] < 0) throw ShapeError(std::string(what) + ": negative extent in " + to_string(ext));
    empty |= ext[d] == 0;
  }
  if (empty) return 0;
  const std::uint64_t limit = std::min<std::uint64_t>(std::numeric_limits<index_t>::max(),
                                                      std::numeric_limits<std::size_t>::max() / element);
  std::uint64_t n = 1;
  for (std::size_t d = 0; d != S::rank; ++d) {
    const auto e = static_cast<std::uint64_t>(ext[d]);
    if (n > limit / e)
      throw ShapeError(std::string(what) + ": " + to_string(ext) +
                       " holds more elements than memory can address");
    n *= e;
  }
  return static_cast<index_t>(n);
}
}  // namespace detail

/// "Shape<dyn, 3>" (the static shape, for messages).
template <class S>
std::string shape_name() {
  std::ostringstream os;
  os << "Shape<";
  for (std::size_t i = 0; i != S::rank; ++i) {
    os << (i ? ", " : "");
    if (S::extents[i] == dyn) os << "dyn";
    else os << S::extents[i];
  }
  os << '>';
  return os.str();
}

namespace detail {
/// Throws ShapeError (naming `who`) when an extent of `ext` differs from its shape's static extent: an
/// Extents whose static extent was overwritten (`e[0] = 3` on Extents<Shape<2, 3>>) makes no tensor.
template <class S>
void check_static_extents(const Extents<S>& ext, const char* who) {
  for (std::size_t i = 0; i != S::rank; ++i)
    if (S::extents[i] != dyn && ext[i] != S::extents[i])
      throw ShapeError(std::string(who) + ": extents " + to_string(ext) + " do not fit " + shape_name<S>() +
                       " (extent " + std::to_string(i) + " is static: " + std::to_string(S::extents[i]) + ")");
}
}  // namespace detail

/// Extents of the same rank with a shape type change (reshape, a result shape), checked on the host.
template <class To, class From>
Extents<To> extents_cast(const Extents<From>& from) {
  static_assert(To::rank == From::rank, "kiln::extents_cast: ranks differ");
  Extents<To> to;
  for (std::size_t i = 0; i != To::rank; ++i) {
    if (To::extents[i] != dyn && To::extents[i] != from[i])
      throw ShapeError("kiln: extents " + to_string(from) + " do not fit " + shape_name<To>());
    to[i] = from[i];
  }
  return to;
}

namespace detail {
// ---- compile-time broadcasting (numpy rules, aligned on the right) ----
constexpr index_t broadcast_extent(index_t a, index_t b) {
  if (a == b) return a;
  if (a == 1) return b;
  if (b == 1) return a;
  if (a == dyn && b == dyn) return dyn;  // resolved at run time
  if (a == dyn) return b;                // b > 1: a must be 1 or b at run time, and the result is b
  if (b == dyn) return a;
  return -2;                             // incompatible
}
/// Extent i of X when X is right-aligned inside rank r (1 where X has no such dimension).
template <class X>
constexpr index_t aligned_extent(std::size_t i, std::size_t r) {
  return i + X::rank < r ? 1 : X::extents[i + X::rank - r];
}
/// An incompatible pair (-2) becomes dyn: shapes_must_broadcast reports it; no second, misleading error.
constexpr index_t broadcast_fit(index_t e) { return e == -2 ? dyn : e; }
template <class A, class B, std::size_t... I>
constexpr auto broadcast_shape_impl(std::index_sequence<I...>) {
  [[maybe_unused]] constexpr std::size_t r = A::rank > B::rank ? A::rank : B::rank;  // unused for rank 0
  return Shape<broadcast_fit(broadcast_extent(aligned_extent<A>(I, r), aligned_extent<B>(I, r)))...>{};
}
template <class A, class B>
constexpr bool broadcastable_impl() {
  constexpr std::size_t r = A::rank > B::rank ? A::rank : B::rank;
  for (std::size_t i = 0; i != r; ++i) {
    if (broadcast_extent(aligned_extent<A>(i, r), aligned_extent<B>(i, r)) == -2) return false;
  }
  return true;
}
}  // namespace detail

/// True when A and B broadcast together (numpy rules: align right; equal, 1, or dyn).
template <class A, class B>
inline constexpr bool broadcastable = detail::broadcastable_impl<A, B>();

/// The shape A and B broadcast to.
template <class A, class B>
using broadcast_shape_t = decltype(detail::broadcast_shape_impl<A, B>(
    std::make_index_sequence<(A::rank > B::rank ? A::rank : B::rank)>{}));

/// Fails to compile, naming both shapes, when A and B do not broadcast.
template <class A, class B>
struct shapes_must_broadcast {
  // >>> Stopped here? The two operands' static shapes (the template arguments above) do not broadcast. <<<
  static_assert(broadcastable<A, B>,
                "kiln: shape mismatch: operand shapes do not broadcast (numpy rules, aligned on the right: "
                "each pair of extents must be equal or 1); see the two Shape<...> arguments of "
                "kiln::shapes_must_broadcast in this message");
  static constexpr bool value = true;
};

namespace detail {
/// Broadcast: B's static 1 fits any extent of A's (a source broadcast into a destination A).
template <class A, class B, bool Broadcast = false>
constexpr bool static_extents_agree_impl() {
  if constexpr (A::rank != B::rank) {
    return false;
  } else {
    for (std::size_t i = 0; i != A::rank; ++i)
      if (A::extents[i] != dyn && B::extents[i] != dyn && A::extents[i] != B::extents[i] &&
          !(Broadcast && B::extents[i] == 1))
        return false;
    return true;
  }
}
}  // namespace detail

/// True when A and B have the same rank and the same extent wherever both are static (a dyn extent of
/// either side is checked at run time): a value of one shape can be stored in, or viewed as, the other.
template <class A, class B>
inline constexpr bool static_extents_agree = detail::static_extents_agree_impl<A, B>();

/// Fails to compile, naming both shapes, when Dst cannot receive a value of shape Src: where both are
/// static, each of Src's extents must be Dst's, or 1 (broadcast, as torch's copy_).
template <class Dst, class Src>
struct shapes_must_match {
  static constexpr bool compatible() { return detail::static_extents_agree_impl<Dst, Src, true>(); }
  // >>> Stopped here? The destination and the expression have different static shapes. <<<
  static_assert(compatible(),
                "kiln::assign: shape mismatch: the destination's shape and the expression's shape differ (an "
                "extent of the expression must be the destination's, or 1 to broadcast); see the two "
                "Shape<...> arguments (destination, expression) of kiln::shapes_must_match in this message; "
                "reshape<...>() one side or fix the layer sizes");
  static constexpr bool value = true;
};

}  // namespace kiln
