/// Binary and Where: f over two children, and c ? a : b over three, all of one (broadcast) shape.
#pragma once
#include <type_traits>

#include "kiln/expr/node.hpp"
#include "kiln/ops/functors.hpp"

namespace kiln {

/// f(a[i], b[i]); both children already have the node's shape (or are scalars).
template <class F, class A, class B>
struct Binary {
  using value_type = std::remove_cvref_t<decltype(std::declval<F>()(std::declval<typename A::value_type>(),
                                                                        std::declval<typename B::value_type>()))>;
  using shape_type = std::conditional_t<detail::is_scalar_node<A>::value, typename B::shape_type, typename A::shape_type>;
  using device = common_device_t<typename A::device, typename B::device>;

  F f;
  A a;
  B b;
  Extents<shape_type> ext;

  Extents<shape_type> extents() const { return ext; }
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t i) const { return f(a[i], b[i]); }
  template <int V>
  KILN_HOST_DEVICE KILN_FORCEINLINE Packet<value_type, V> packet(index_t i) const {
    const auto x = a.template packet<V>(i);
    const auto y = b.template packet<V>(i);
    Packet<value_type, V> p;
    KILN_UNROLL
    for (int k = 0; k < V; ++k) p[k] = f(x[k], y[k]);
    return p;
  }
  bool aligned_for(int w) const { return a.aligned_for(w) && b.aligned_for(w); }
};

/// c[i] ? a[i] : b[i], in the promoted type of a's and b's values (torch.where(m, i, 0.5) is float).
template <class C, class A, class B>
struct Where {
  using value_type = ops::detail::promote_t<typename A::value_type, typename B::value_type>;
  using shape_type = typename C::shape_type;
  using device = common_device_t<typename C::device, common_device_t<typename A::device, typename B::device>>;

  C c;
  A a;
  B b;
  Extents<shape_type> ext;

  Extents<shape_type> extents() const { return ext; }
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t i) const {
    return c[i] ? static_cast<value_type>(a[i]) : static_cast<value_type>(b[i]);
  }
  template <int V>
  KILN_HOST_DEVICE KILN_FORCEINLINE Packet<value_type, V> packet(index_t i) const {
    const auto x = c.template packet<V>(i);
    const auto y = a.template packet<V>(i);
    const auto z = b.template packet<V>(i);
    Packet<value_type, V> p;
    KILN_UNROLL
    for (int k = 0; k < V; ++k) p[k] = x[k] ? static_cast<value_type>(y[k]) : static_cast<value_type>(z[k]);
    return p;
  }
  bool aligned_for(int w) const { return c.aligned_for(w) && a.aligned_for(w) && b.aligned_for(w); }
};

}  // namespace kiln
