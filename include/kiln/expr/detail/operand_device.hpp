/// The device of an expression's tensors.
///
/// An expression's leaves are raw views: they carry no device index. In a process with tensors on
/// several GPUs the runtime says where each leaf's memory is, so a pass whose tensors are on different GPUs is
/// refused before it runs (torch: "Expected all tensors to be on the same device"; otherwise an
/// illegal-address fault, or a silent peer read), and a reduction runs on its operand's GPU whichever is
/// current. On the CPU, and in a process that has used one GPU only (one process per GPU included),
/// nothing is asked (no cost).
#pragma once
#include <string>

#include "kiln/expr/detail/leaves.hpp"
#include "kiln/tensor/storage.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::detail {

/// The device every leaf of e is on, as `where(data)` tells (-1: cannot tell, that leaf is not
/// counted); -1 when no leaf tells. Throws ValueError naming `what` when two leaves differ.
template <class E, class Where>
int operand_device(const E& e, const char* what, Where&& where) {
  int device = -1;
  for_each_leaf(e, [&](const void* p, std::size_t bytes, std::size_t) {
    if (bytes == 0) return;
    const int d = where(p);
    check_same_device(what, device, d);
    if (device < 0) device = d;
  });
  return device;
}

/// The GPU that e's tensors are on (-1: none, or on the CPU). While this process has tensors on one GPU
/// only, that one, without asking (whichever is current: a model on cuda:1 with cuda:0 current); once it
/// has them on several, the runtime is asked per leaf. Memory every GPU reads (managed, pinned host)
/// does not count.
template <class D, class E>
int operand_device(const E& e, const char* what) {
  if constexpr (!device_memory<D>::indexed) {
    return -1;
  } else {
    if (!device_memory<D>::several_in_use()) return device_memory<D>::device_in_use();
    return operand_device(e, what, [](const void* p) { return device_memory<D>::resident_device(p); });
  }
}

}  // namespace kiln::detail
