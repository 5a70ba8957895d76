/// Strided: an operand read in another layout (kiln::permute, kiln::transpose, kiln::narrow).
#pragma once
#include <cstddef>

#include "kiln/expr/node.hpp"

namespace kiln {

/// Reads child E through the output's coordinates: output element (c_0, ..., c_{R-1}) is the child's flat
/// element `offset + Σ c_d · stride[d]`. A permute's strides are the child's, reordered; a narrow's are
/// the child's, with an offset to the first element kept. Like a Broadcast, it divides per element in
/// operator[]; the CPU executor reads it row by row instead (expr/detail/row.hpp: along a row the child's
/// index moves by the innermost stride).
template <class E, class Out>
struct Strided : gathered_packets<Strided<E, Out>> {
  using value_type = typename E::value_type;
  using shape_type = Out;
  using device = typename E::device;
  static constexpr std::size_t rank = Out::rank;

  E child;
  Extents<Out> out;
  index_t stride[rank == 0 ? 1 : rank];  // the child's flat-index step per output dimension
  index_t offset;                        // the child's flat index of output element 0

  Extents<Out> extents() const { return out; }
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t child_index(index_t i) const { return strided_index(i, out, stride, offset); }
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t i) const { return child[child_index(i)]; }
};

namespace detail {
/// Row-major strides of extents `in` (the last dimension's is 1).
template <class S>
void row_major_strides(const Extents<S>& in, index_t (&stride)[S::rank == 0 ? 1 : S::rank]) {
  index_t s = 1;
  for (std::size_t d = S::rank; d-- > 0;) {
    stride[d] = s;
    s *= in[d];
  }
}
}  // namespace detail

}  // namespace kiln
