/// Unary: f applied to one child (exp, relu, negation, a cast).
#pragma once
#include <type_traits>

#include "kiln/expr/node.hpp"

namespace kiln {

/// f(child[i]). F is an empty or small trivially copyable functor from ops/functors.hpp.
template <class F, class A>
struct Unary {
  using value_type = std::remove_cvref_t<decltype(std::declval<F>()(std::declval<typename A::value_type>()))>;
  using shape_type = typename A::shape_type;
  using device = typename A::device;

  F f;
  A a;

  Extents<shape_type> extents() const { return a.extents(); }
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t i) const { return f(a[i]); }
  template <int V>
  KILN_HOST_DEVICE KILN_FORCEINLINE Packet<value_type, V> packet(index_t i) const {
    const auto x = a.template packet<V>(i);
    Packet<value_type, V> p;
    KILN_UNROLL
    for (int k = 0; k < V; ++k) p[k] = f(x[k]);
    return p;
  }
  bool aligned_for(int w) const { return a.aligned_for(w); }
};

}  // namespace kiln
