/// Broadcast: a lower-rank or size-1 operand read at the output's flat index (a bias over the batch).
#pragma once
#include <string>

#include "kiln/expr/node.hpp"

namespace kiln {

/// Reads child E as if it had extents Out (numpy rules). Trailing-aligned operands (a bias [F] under
/// [N, F]) take a modulo; anything else maps the index through per-dimension strides (0 where broadcast).
template <class E, class Out>
struct Broadcast : gathered_packets<Broadcast<E, Out>> {
  using value_type = typename E::value_type;
  using shape_type = Out;
  using device = typename E::device;
  static constexpr std::size_t rank = Out::rank;

  E child;
  Extents<Out> out;
  index_t stride[rank == 0 ? 1 : rank];  // child stride per output dim (0 = broadcast)
  index_t modulus;                        // > 0: child index = i % modulus (trailing-aligned case)

  Broadcast(const E& e, const Extents<Out>& o) : child(e), out(o), stride{}, modulus(0) {
    using In = typename E::shape_type;
    const auto in = e.extents();
    const std::size_t off = rank - In::rank;
    index_t s = 1;
    for (std::size_t d = rank; d-- > 0;) {
      const index_t ext = d + In::rank < rank ? 1 : in[d - off];  // d < off, without nvcc's #186-D when off is 0
      stride[d] = (ext == 1 && out[d] != 1) ? 0 : s;
      s *= ext;
    }
    // Trailing-aligned: the child's dims equal the output's last dims (leading ones only broadcast).
    bool trailing = true;
    for (std::size_t d = off; d != rank; ++d) trailing = trailing && in[d - off] == out[d];
    index_t n = 1;
    for (std::size_t d = off; d != rank; ++d) n *= out[d];
    modulus = trailing ? (n == 0 ? 1 : n) : 0;
  }

  Extents<Out> extents() const { return out; }

  /// The child's flat index under output flat index i.
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t child_index(index_t i) const {
    return modulus > 0 ? i % modulus : strided_index(i, out, stride, 0);
  }
  /// Per element this divides; the CPU executor reads whole rows instead (expr/detail/row.hpp).
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t i) const { return child[child_index(i)]; }
};

namespace detail {
/// Dimension d of Out in an operand of shape S, right-aligned: dimension d + rank - Out::rank, or 1
/// where S has fewer dimensions. (No comparison at equal ranks: nvcc warns that `d + r < r` is pointless.)
template <class Out, class S>
index_t aligned_extent(const Extents<S>& e, std::size_t d) {
  if constexpr (S::rank == Out::rank)
    return e[d];
  else
    return d + S::rank < Out::rank ? 1 : e[d + S::rank - Out::rank];
}

/// Run-time broadcast of two extents (right-aligned); throws ShapeError naming both.
template <class Out, class A, class B>
Extents<Out> broadcast_extents(const Extents<A>& a, const Extents<B>& b, const char* what) {
  Extents<Out> o;
  for (std::size_t d = 0; d != Out::rank; ++d) {
    const index_t x = aligned_extent<Out>(a, d);
    const index_t y = aligned_extent<Out>(b, d);
    if (x != y && x != 1 && y != 1)
      throw ShapeError(std::string("kiln: ") + what + ": shape mismatch: " + to_string(a) + " and " + to_string(b) +
                       " do not broadcast (dimension " + std::to_string(d) + ": " + std::to_string(x) + " vs " +
                       std::to_string(y) + ")");
    o[d] = x == 1 ? y : x;
  }
  return o;
}

/// e as a node of shape Out: itself when nothing needs broadcasting, else wrapped.
template <class Out, class E>
auto broadcast_to(const E& e, const Extents<Out>& out) {
  if constexpr (is_scalar_node<E>::value) {
    return e;
  } else if constexpr (std::is_same_v<typename E::shape_type, Out>) {
    // Same static shape: the node reads e at the output's index, so run-time extents must be equal.
    if (!(e.extents() == out))
      throw ShapeError("kiln: shape mismatch: extents " + to_string(e.extents()) + " and " + to_string(out) +
                       " must be equal (an operand of the same static shape is not broadcast at run time: "
                       "give a dimension to broadcast a static 1, Shape<dyn, 1> rather than Shape<dyn, dyn>)");
    return e;
  } else {
    return Broadcast<E, Out>(e, out);
  }
}
}  // namespace detail

}  // namespace kiln
