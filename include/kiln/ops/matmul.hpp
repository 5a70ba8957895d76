/// matmul: 2-D matrix products with optional transposes, through CBLAS on the CPU and cuBLAS on the GPU.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/backend/cpu/blas.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

/// A matrix operand read transposed (no copy): `matmul(x, transposed(w))` is x wᵀ.
template <class X>
struct Transposed {
  X x;
};
template <tensor X>
Transposed<X> transposed(const X& x) {
  static_assert(X::rank == 2, "kiln::transposed: only matrices (rank 2) can be transposed for matmul");
  return {x};
}

namespace detail {
/// GEMM of device D, row-major: C = alpha op(A) op(B) + beta C. Cuda: kiln/backend/cuda/cublas.hpp.
template <class D>
struct gemm_backend {
  static_assert(dependent_false<D>, "kiln::matmul on kiln::Cuda needs cuBLAS: link your target to kiln::cuda");
};
template <>
struct gemm_backend<Cpu> {
  template <class T, class TC>
  static void run(bool ta, bool tb, index_t m, index_t n, index_t k, double alpha, const T* a, index_t lda,
                  const T* b, index_t ldb, double beta, TC* c, index_t ldc, int /*device*/) {
    backend::cpu::gemm<T, TC>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
};

template <class X>
struct matmul_operand {
  using tensor_type = X;
  static constexpr bool trans = false;
  static const X& get(const X& x) { return x; }
};
template <class X>
struct matmul_operand<Transposed<X>> {
  using tensor_type = X;
  static constexpr bool trans = true;
  static const X& get(const Transposed<X>& x) { return x.x; }
};

/// Fails to compile, naming both inner extents, when op(A) is [M, KA] and op(B) is [KB, N] with KA != KB.
template <index_t KA, index_t KB>
struct matmul_inner_extents_must_match {
  // >>> Stopped here? op(A)'s columns (KA) differ from op(B)'s rows (KB). <<<
  static_assert(KA == KB || KA == dyn || KB == dyn,
                "kiln::matmul: shape mismatch: op(A) is [M, KA] and op(B) is [KB, N] with KA != KB; see the "
                "template arguments of kiln::matmul_inner_extents_must_match<KA, KB>. x W^T with W [Out, In], "
                "as torch's F.linear, is matmul(x, kiln::transposed(w))");
  static constexpr bool value = true;
};

/// Throws ValueError when C's memory intersects X's: the GEMM writes C while it reads A and B, so
/// `matmul_into(a, a, b)` would read what it already wrote (torch's out= copies through a temporary there;
/// kiln asks for one: `a = kiln::matmul(a, b);`).
template <class C, class X>
void check_matmul_disjoint(const C& c, const X& x, const char* which) {
  const auto c0 = reinterpret_cast<std::uintptr_t>(c.data()), x0 = reinterpret_cast<std::uintptr_t>(x.data());
  if (c.nbytes() == 0 || x.nbytes() == 0 || c0 >= x0 + x.nbytes() || x0 >= c0 + c.nbytes()) return;
  throw ValueError(std::string("kiln::matmul: C shares memory with ") + which +
                   ", which the product reads while it writes C; write into a tensor of its own");
}

/// matmul's first checks, in order: tensors (or transposed ones), then matrices (C too: its rank RankC).
/// Each guards the next, and the caller runs nothing past a false: the first that fails is the only error.
template <class A, class B, std::size_t RankC = 2>
constexpr bool matmul_operands_ok() {
  using TA = typename matmul_operand<A>::tensor_type;
  using TB = typename matmul_operand<B>::tensor_type;
  constexpr bool operands = tensor<TA> && tensor<TB>;
  static_assert(operands, "kiln::matmul: operands must be tensors or kiln::transposed(tensor); "
                          "evaluate expressions first with kiln::eval()");
  if constexpr (!operands) {
    return false;
  } else {
    constexpr bool matrices = TA::rank == 2 && TB::rank == 2 && RankC == 2;
    static_assert(matrices, "kiln::matmul: operands must be matrices (rank 2); kiln has no batched matmul");
    return matrices;
  }
}

/// What matmul returns after its static_assert failed: a value, so that the caller's `auto c = ...` adds
/// no error of its own to the one above.
struct no_matmul_result {};

/// matmul_into's work once its operands are known to be matrices: element types, devices, extents.
template <class A, class B, class TC, class SC, class DC>
void matmul_checked(Tensor<TC, SC, DC>& c, const A& a_, const B& b_, double alpha, double beta) {
  using OA = matmul_operand<A>;
  using OB = matmul_operand<B>;
  using TA = typename OA::tensor_type;
  using TB = typename OB::tensor_type;
  using TAB = typename TA::element_type;
  constexpr bool types_match =
      std::is_same_v<typename TB::element_type, TAB> &&
      (std::is_same_v<TAB, TC> ||
       (std::is_same_v<TC, float> && (std::is_same_v<TAB, half> || std::is_same_v<TAB, bfloat16>)));
  static_assert(types_match,
                "kiln::matmul: A, B and C must have the same element type (C may be float when A and B are half "
                "or bfloat16); cast<T>() one of them");
  constexpr bool devices_match = std::is_same_v<typename TA::device, DC> && std::is_same_v<typename TB::device, DC>;
  if constexpr (types_match)  // (each check only after the one before it holds: one error)
    static_assert(devices_match, "kiln::matmul: wrong device: A, B and C must live on the same device");
  constexpr index_t ka = OA::trans ? TA::shape_type::extents[0] : TA::shape_type::extents[1];
  constexpr index_t kb = OB::trans ? TB::shape_type::extents[1] : TB::shape_type::extents[0];
  if constexpr (types_match && devices_match) static_assert(matmul_inner_extents_must_match<ka, kb>::value);
  const auto& a = OA::get(a_);
  const auto& b = OB::get(b_);
  const index_t m = OA::trans ? a.size(1) : a.size(0), k = OA::trans ? a.size(0) : a.size(1);
  const index_t kb2 = OB::trans ? b.size(1) : b.size(0), n = OB::trans ? b.size(0) : b.size(1);
  if (k != kb2 || c.size(0) != m || c.size(1) != n)
    throw ShapeError("kiln::matmul: shape mismatch: op(A) [" + std::to_string(m) + ", " + std::to_string(k) +
                     "] x op(B) [" + std::to_string(kb2) + ", " + std::to_string(n) + "] into C " +
                     to_string(c.extents()));
  check_same_device("kiln::matmul (A and C)", pass_device(a), pass_device(c));
  check_same_device("kiln::matmul (B and C)", pass_device(b), pass_device(c));
  check_matmul_disjoint(c, a, "A");
  check_matmul_disjoint(c, b, "B");
  {  // A and B read, C written (and read when accumulating); 2 m n k operations
    const std::uint64_t c_bytes = bytes_of<TC>(m * n);
    count_pass({bytes_of<TAB>(m * k + k * n) + c_bytes * (beta != 0.0 ? 2 : 1),
                2 * static_cast<std::uint64_t>(m) * static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(k)});
  }
  if constexpr (types_match && devices_match)  // (else a static_assert above is the one error)
    gemm_backend<DC>::template run<TAB, TC>(OA::trans, OB::trans, m, n, k, alpha, a.data(), a.size(1), b.data(),
                                            b.size(1), beta, c.data(), n, c.device_index());
}
}  // namespace detail

/// C = alpha op(A) op(B) + beta C into an existing C [M, N] (beta = 1 accumulates, for gradients).
/// A and B have one element type; C has it too, or is float when A and B are half or bfloat16 (mixed
/// precision: float32 accumulation into a float32 result, as a weight gradient in an fp32 arena).
template <class A, class B, class TC, class SC, class DC>
void matmul_into(Tensor<TC, SC, DC>& c, const A& a_, const B& b_, double alpha = 1.0, double beta = 0.0) {
  if constexpr (detail::matmul_operands_ok<A, B, SC::rank>()) detail::matmul_checked(c, a_, b_, alpha, beta);
}

/// op(A) op(B) as a new tensor [M, N] (M may be dyn).
template <class A, class B>
auto matmul(const A& a, const B& b) {
  using OA = detail::matmul_operand<A>;
  using OB = detail::matmul_operand<B>;
  using TA = typename OA::tensor_type;
  using TB = typename OB::tensor_type;
  if constexpr (!detail::matmul_operands_ok<A, B>()) {
    return detail::no_matmul_result{};
  } else {
    constexpr index_t M = OA::trans ? TA::shape_type::extents[1] : TA::shape_type::extents[0];
    constexpr index_t N = OB::trans ? TB::shape_type::extents[0] : TB::shape_type::extents[1];
    using SC = Shape<M, N>;
    const auto& x = OA::get(a);
    const auto& y = OB::get(b);
    Extents<SC> e;
    e[0] = OA::trans ? x.size(1) : x.size(0);
    e[1] = OB::trans ? y.size(0) : y.size(1);
    Tensor<typename TA::element_type, SC, typename TA::device> c(e, detail::pass_device(x));
    matmul_into(c, a, b);
    return c;
  }
}

}  // namespace kiln
