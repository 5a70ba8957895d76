/// What an expression is: the `expression` concept, scalar leaves, packets, and device agreement.
#pragma once
#include <concepts>
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/type_list.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/shape.hpp"

namespace kiln {

/// V consecutive values, the unit of a vectorised load in the CUDA kernel.
template <class T, int V>
struct Packet {
  T v[V];
  KILN_HOST_DEVICE KILN_FORCEINLINE T& operator[](int i) { return v[i]; }
  KILN_HOST_DEVICE KILN_FORCEINLINE const T& operator[](int i) const { return v[i]; }
};

// Small named parts, so that a failed check names the clause that failed.
template <class E>
concept has_value_type = requires { typename E::value_type; };
template <class E>
concept has_shape = requires(const E& e) {
  typename E::shape_type;
  { e.extents() } -> std::same_as<Extents<typename E::shape_type>>;
};
template <class E>
concept flat_indexable = requires(const E& e, index_t i) {
  { e[i] } -> std::convertible_to<typename E::value_type>;
};
template <class E>
concept device_evaluable = std::is_trivially_copyable_v<E> && requires { typename E::device; };

/// A kiln expression: a trivially copyable tree with `value_type`, `shape_type`, `device`, host
/// `extents()` and `operator[](index_t)` on the flat (row-major) index. Nothing runs until assignment.
template <class E>
concept expression = has_value_type<E> && has_shape<E> && flat_indexable<E> && device_evaluable<E>;

/// The vector reads of a node that maps each output index to its child's on its own (Broadcast,
/// Strided): V scalar reads through Node::operator[], which needs no alignment.
template <class Node>
struct gathered_packets {
  template <int V>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto packet(index_t i) const {
    const Node& self = static_cast<const Node&>(*this);
    Packet<typename Node::value_type, V> p;
    KILN_UNROLL
    for (int k = 0; k < V; ++k) p[k] = self[i + k];
    return p;
  }
  bool aligned_for(int) const { return true; }
};

/// The child's flat index under output flat index i, for a child read through per-dimension strides
/// (stride[d]: the child's step for the output's dimension d) from flat index `offset`.
template <class Out>
KILN_HOST_DEVICE KILN_FORCEINLINE index_t strided_index(index_t i, const Extents<Out>& out, const index_t* stride,
                                                        index_t offset) {
  index_t j = offset;
  for (std::size_t d = Out::rank; d-- > 0;) {
    const index_t q = i / out[d];
    j += (i - q * out[d]) * stride[d];
    i = q;
  }
  return j;
}

/// A value broadcast to any shape: a number inside an expression (`x * 2.0f`).
template <class T>
struct Scalar {
  using value_type = T;
  using shape_type = Shape<>;
  using device = void;  // lives everywhere
  T value;
  Extents<Shape<>> extents() const { return {}; }
  KILN_HOST_DEVICE KILN_FORCEINLINE T operator[](index_t) const { return value; }
  template <int V>
  KILN_HOST_DEVICE KILN_FORCEINLINE Packet<T, V> packet(index_t) const {
    Packet<T, V> p;
    for (int k = 0; k < V; ++k) p[k] = value;
    return p;
  }
  bool aligned_for(int) const { return true; }
};

namespace detail {
template <class T>
struct is_scalar_node : std::false_type {};
template <class T>
struct is_scalar_node<Scalar<T>> : std::true_type {};

/// The device two operands agree on: void (a scalar) yields to the other.
template <class A, class B>
struct common_device {
  // >>> Stopped here? One operand lives on the CPU and the other on a GPU. <<<
  static_assert(std::is_void_v<A> || std::is_void_v<B> || std::is_same_v<A, B>,
                "kiln: operands live on different devices (kiln::Cpu and kiln::Cuda); move one first "
                "with .to<kiln::Cuda>() or .to<kiln::Cpu>()");
  using type = std::conditional_t<std::is_void_v<A>, B, A>;
};
}  // namespace detail
template <class A, class B>
using common_device_t = typename detail::common_device<A, B>::type;

}  // namespace kiln
