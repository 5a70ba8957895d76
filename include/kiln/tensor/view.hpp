/// A non-owning, trivially copyable window on contiguous tensor memory: the leaf of every expression.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kiln/core/half.hpp"
#include "kiln/expr/node.hpp"

namespace kiln {

/// Pointer + extents, row-major contiguous. Reads convert storage to compute type; writes convert back.
/// Shapes: any `Shape<...>`; `operator[]` takes the flat index.
template <class T, class S, class D>
struct TensorView {
  using element_type = std::remove_const_t<T>;
  using value_type = compute_t<element_type>;
  using shape_type = S;
  using device = D;

  T* data = nullptr;
  Extents<S> ext{};

  Extents<S> extents() const { return ext; }
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t size() const { return ext.numel(); }

  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t i) const { return to_compute(data[i]); }

  template <class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE void store(index_t i, V v) const
    requires(!std::is_const_v<T>)
  {
    data[i] = from_compute<element_type>(v);
  }

  /// V values at i (i a multiple of V, data aligned to V elements: see aligned_for).
  template <int W>
  KILN_HOST_DEVICE KILN_FORCEINLINE Packet<value_type, W> packet(index_t i) const {
    struct alignas(sizeof(element_type) * W) Raw {
      element_type v[W];
    };
    const Raw r = *reinterpret_cast<const Raw*>(data + i);
    Packet<value_type, W> p;
    KILN_UNROLL
    for (int k = 0; k < W; ++k) p[k] = to_compute(r.v[k]);
    return p;
  }
  template <int W, class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE void store_packet(index_t i, const Packet<V, W>& p) const
    requires(!std::is_const_v<T>)
  {
    struct alignas(sizeof(element_type) * W) Raw {
      element_type v[W];
    };
    Raw r;
    KILN_UNROLL
    for (int k = 0; k < W; ++k) r.v[k] = from_compute<element_type>(p[k]);
    *reinterpret_cast<Raw*>(data + i) = r;
  }
  /// True when the data pointer is aligned for packets of W elements.
  bool aligned_for(int w) const {
    return reinterpret_cast<std::uintptr_t>(data) % (sizeof(element_type) * static_cast<std::size_t>(w)) == 0;
  }
};

}  // namespace kiln
