/// Partial overlap: an assignment whose expression reads the destination's memory at other indices.
///
/// `a = t.slice(1, n) * 2` with a = t.slice(0, n - 1), or `t = t + t.slice(0, 1).reshape<Shape<C>>()` (a row
/// of t broadcast over t), reads elements the same pass writes. Which value a read sees then depends on how
/// the pass is split: one CPU thread in order, several OpenMP threads, or GPU blocks in any order. As
/// torch (assert_no_partial_overlap), kiln refuses it; the destination read at the same index (`t = t * 2`,
/// `t += x`) is fine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kiln/core/errors.hpp"
#include "kiln/expr/detail/leaves.hpp"

namespace kiln::detail {

/// Throws kiln::ValueError when a leaf of e shares memory with dst but is not dst itself (the same
/// first element, size and element type, so read at the index being written).
template <class DV, class E>
void check_no_partial_overlap(const DV& dst, const E& e) {
  using DT = std::remove_const_t<std::remove_pointer_t<decltype(dst.data)>>;
  const auto d0 = reinterpret_cast<std::uintptr_t>(dst.data);
  const std::size_t dbytes = static_cast<std::size_t>(dst.size()) * sizeof(DT);
  if (dbytes == 0) return;
  for_each_leaf(e, [&](const void* p, std::size_t bytes, std::size_t element) {
    const auto l0 = reinterpret_cast<std::uintptr_t>(p);
    if (bytes == 0 || l0 >= d0 + dbytes || d0 >= l0 + bytes) return;  // disjoint
    if (l0 == d0 && bytes == dbytes && element == sizeof(DT)) return;   // dst itself, read in place
    throw ValueError(
        "kiln::assign: unsupported operation: the expression reads memory that the destination writes at "
        "other indices (a slice or a broadcast row of the destination, say), so the result would depend on "
        "the order of the writes; evaluate that operand into a tensor of its own first (x.clone()), as "
        "torch's clone()");
  });
}

}  // namespace kiln::detail
