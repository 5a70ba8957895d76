/// Cast: a child's values converted to another element type (rounded as that type stores them).
#pragma once
#include "kiln/core/half.hpp"
#include "kiln/expr/node.hpp"

namespace kiln {

/// The child's values as element type T would hold them: `cast<half>(x)` rounds to half and
/// computes on in float; `cast<double>(x)` widens.
template <class T, class A>
struct Cast {
  using value_type = compute_t<T>;
  using shape_type = typename A::shape_type;
  using device = typename A::device;

  A a;

  Extents<shape_type> extents() const { return a.extents(); }
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t i) const {
    return to_compute(from_compute<T>(a[i]));
  }
  template <int V>
  KILN_HOST_DEVICE KILN_FORCEINLINE Packet<value_type, V> packet(index_t i) const {
    const auto x = a.template packet<V>(i);
    Packet<value_type, V> p;
    KILN_UNROLL
    for (int k = 0; k < V; ++k) p[k] = to_compute(from_compute<T>(x[k]));
    return p;
  }
  bool aligned_for(int w) const { return a.aligned_for(w); }
};

}  // namespace kiln
