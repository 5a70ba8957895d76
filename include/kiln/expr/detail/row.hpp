/// Rows: a node's values along one innermost row, as a node without index arithmetic, so that the CPU
/// executor's inner simd loop reads a broadcast operand like any other (no division per element).
#pragma once
#include "kiln/core/config.hpp"
#include "kiln/core/index.hpp"
#include "kiln/expr/binary.hpp"
#include "kiln/expr/broadcast.hpp"
#include "kiln/expr/cast.hpp"
#include "kiln/expr/node.hpp"
#include "kiln/expr/strided.hpp"
#include "kiln/expr/unary.hpp"
#include "kiln/tensor/shape.hpp"
#include "kiln/tensor/view.hpp"

namespace kiln::detail {

// The row of node e at (i0, len) is a node r with r[j] == e[i0 + j] for j in [0, len), where
// [i0, i0 + len) lies inside one innermost row of the output (L = its innermost extent:
// i0 / L == (i0 + len - 1) / L). It is built once per row, outside the inner loop:
//   - a TensorView becomes the view at data + i0; a Scalar stays itself;
//   - Unary, Binary, Where and Cast are rebuilt over their children's rows;
//   - a Broadcast becomes its child's row at the child's index of i0 when the child's innermost
//     extent is L (a bias [F] under [N, F]; the middle-axis case [N, 1, W] under [N, H, W] alike),
//     and a Scalar holding that one value when the child's innermost extent is 1 ([N, 1], [C, 1, 1],
//     rank 0): along a row the child's index then moves by 1 or by 0, never by anything else;
//   - a Strided (permute, narrow) becomes a StridedRow: the child read from its index of i0 in steps of
//     the innermost stride (the child's index of the next element along a row);
//   - any other node (one kiln does not know) becomes a FlatRow calling its operator[].
// A row is read only through operator[]; its extents() are [len] (rank 0 for constant rows).

/// Whether a Broadcast's rows are its child's rows or one repeated value, when known from the types.
enum class RowKind { contiguous, constant, deferred };

/// How the rows of the broadcasts whose kind is known only at run time (RowKind::deferred: a child
/// whose innermost extent is dyn, e.g. a bias Shape<dyn> or a column Shape<dyn, dyn>) are read. The
/// executor looks at the tree once (row_reader<E>::kinds) and picks one mode for all of them:
/// `mixed` (some of each) tests a flag per element and does not vectorise, but divides nothing.
enum class RowMode { contiguous, constant, mixed };

/// The kinds the deferred broadcasts of a tree turned out to have.
struct RowKinds {
  bool contiguous = false;
  bool constant = false;
};

/// Extents of a row of shape S (Shape<dyn>: [len]; Shape<>: none).
template <class S>
KILN_FORCEINLINE Extents<S> row_extents(index_t len) {
  static_assert(S::rank <= 1, "kiln: internal: a row has rank 0 or 1");
  Extents<S> x;
  if constexpr (S::rank == 1) x[0] = len;
  return x;
}

/// The row of a node kiln does not know: its operator[] at i0 + j.
template <class E>
struct FlatRow {
  using value_type = typename E::value_type;
  using shape_type = Shape<dyn>;
  using device = typename E::device;
  E e;
  index_t i0;
  Extents<Shape<dyn>> ext;
  Extents<Shape<dyn>> extents() const { return ext; }
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t j) const { return e[i0 + j]; }
};

/// The row of a Strided node: its child from index `base` in steps of `step`.
template <class E>
struct StridedRow {
  using value_type = typename E::value_type;
  using shape_type = Shape<dyn>;
  using device = typename E::device;
  E e;
  index_t base, step;
  Extents<Shape<dyn>> ext;
  Extents<Shape<dyn>> extents() const { return ext; }
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t j) const { return e[base + j * step]; }
};

/// The row of a deferred broadcast under RowMode::mixed: the child's row, or its first value repeated.
template <class R, class V>
struct SelectRow {
  using value_type = V;
  using shape_type = Shape<dyn>;
  using device = typename R::device;
  R row;
  V value;
  bool constant;
  Extents<Shape<dyn>> ext;
  Extents<Shape<dyn>> extents() const { return ext; }
  KILN_HOST_DEVICE KILN_FORCEINLINE value_type operator[](index_t j) const {
    return constant ? value : static_cast<V>(row[j]);
  }
};

/// How the rows of a node type are read: `broadcasts` (Broadcast nodes in the tree), `deferred` (those
/// of RowKind::deferred), `kinds(e, k)` (records the deferred ones' run-time kinds) and
/// `row<M>(e, i0, len)`. This primary template serves nodes kiln does not know.
template <class E>
struct row_reader {
  static constexpr int broadcasts = 0;
  static constexpr int deferred = 0;
  static void kinds(const E&, RowKinds&) {}
  template <RowMode>
  static KILN_FORCEINLINE FlatRow<E> row(const E& e, index_t i0, index_t len) {
    return {e, i0, row_extents<Shape<dyn>>(len)};
  }
};

/// e's row at (i0, len), read in mode M.
template <RowMode M, class E>
KILN_FORCEINLINE auto row_of(const E& e, index_t i0, index_t len) {
  return row_reader<E>::template row<M>(e, i0, len);
}

/// Leaves: no broadcast below.
struct leaf_row_reader {
  static constexpr int broadcasts = 0;
  static constexpr int deferred = 0;
  template <class E>
  static void kinds(const E&, RowKinds&) {}
};

template <class T, class S, class D>
struct row_reader<TensorView<T, S, D>> : leaf_row_reader {
  template <RowMode>
  static KILN_FORCEINLINE TensorView<T, Shape<dyn>, D> row(const TensorView<T, S, D>& e, index_t i0, index_t len) {
    return {e.data + i0, row_extents<Shape<dyn>>(len)};
  }
};

template <class T>
struct row_reader<Scalar<T>> : leaf_row_reader {
  template <RowMode>
  static KILN_FORCEINLINE Scalar<T> row(const Scalar<T>& e, index_t, index_t) {
    return e;
  }
};

template <class F, class A>
struct row_reader<Unary<F, A>> {
  static constexpr int broadcasts = row_reader<A>::broadcasts;
  static constexpr int deferred = row_reader<A>::deferred;
  static void kinds(const Unary<F, A>& e, RowKinds& k) { row_reader<A>::kinds(e.a, k); }
  template <RowMode M>
  static KILN_FORCEINLINE auto row(const Unary<F, A>& e, index_t i0, index_t len) {
    const auto a = row_of<M>(e.a, i0, len);
    return Unary<F, decltype(a)>{e.f, a};
  }
};

template <class T, class A>
struct row_reader<Cast<T, A>> {
  static constexpr int broadcasts = row_reader<A>::broadcasts;
  static constexpr int deferred = row_reader<A>::deferred;
  static void kinds(const Cast<T, A>& e, RowKinds& k) { row_reader<A>::kinds(e.a, k); }
  template <RowMode M>
  static KILN_FORCEINLINE auto row(const Cast<T, A>& e, index_t i0, index_t len) {
    const auto a = row_of<M>(e.a, i0, len);
    return Cast<T, decltype(a)>{a};
  }
};

template <class F, class A, class B>
struct row_reader<Binary<F, A, B>> {
  static constexpr int broadcasts = row_reader<A>::broadcasts + row_reader<B>::broadcasts;
  static constexpr int deferred = row_reader<A>::deferred + row_reader<B>::deferred;
  static void kinds(const Binary<F, A, B>& e, RowKinds& k) {
    row_reader<A>::kinds(e.a, k);
    row_reader<B>::kinds(e.b, k);
  }
  template <RowMode M>
  static KILN_FORCEINLINE auto row(const Binary<F, A, B>& e, index_t i0, index_t len) {
    const auto a = row_of<M>(e.a, i0, len);
    const auto b = row_of<M>(e.b, i0, len);
    using R = Binary<F, decltype(a), decltype(b)>;
    return R{e.f, a, b, row_extents<typename R::shape_type>(len)};
  }
};

template <class C, class A, class B>
struct row_reader<Where<C, A, B>> {
  static constexpr int broadcasts =
      row_reader<C>::broadcasts + row_reader<A>::broadcasts + row_reader<B>::broadcasts;
  static constexpr int deferred = row_reader<C>::deferred + row_reader<A>::deferred + row_reader<B>::deferred;
  static void kinds(const Where<C, A, B>& e, RowKinds& k) {
    row_reader<C>::kinds(e.c, k);
    row_reader<A>::kinds(e.a, k);
    row_reader<B>::kinds(e.b, k);
  }
  template <RowMode M>
  static KILN_FORCEINLINE auto row(const Where<C, A, B>& e, index_t i0, index_t len) {
    const auto c = row_of<M>(e.c, i0, len);
    const auto a = row_of<M>(e.a, i0, len);
    const auto b = row_of<M>(e.b, i0, len);
    using R = Where<decltype(c), decltype(a), decltype(b)>;
    return R{c, a, b, row_extents<typename R::shape_type>(len)};
  }
};

/// The RowKind of Broadcast<E, Out>'s rows, from the static extents: a rank-0 child or one whose
/// innermost extent is 1 repeats one value; a static innermost extent other than 1 is contiguous (it
/// equals the output's); a dyn one is decided at run time (unless the output's is 1: rows of length 1
/// read correctly either way).
template <class E, class Out>
constexpr RowKind broadcast_row_kind() {
  using In = typename E::shape_type;
  if constexpr (In::rank == 0 || Out::rank == 0) {
    return RowKind::constant;
  } else {
    constexpr index_t in = In::extents[In::rank - 1];
    constexpr index_t out = Out::extents[Out::rank - 1];
    if (in == 1) return RowKind::constant;
    if (in != dyn || out == 1) return RowKind::contiguous;
    return RowKind::deferred;
  }
}

template <class E, class Out>
struct row_reader<Broadcast<E, Out>> {
  using B = Broadcast<E, Out>;
  using V = typename B::value_type;
  static constexpr RowKind kind = broadcast_row_kind<E, Out>();
  static constexpr int broadcasts = 1 + row_reader<E>::broadcasts;
  static constexpr int deferred = (kind == RowKind::deferred ? 1 : 0) + row_reader<E>::deferred;

  /// Along an output row the child's index stays put (its innermost stride is 0).
  static bool constant(const B& b) {
    if constexpr (Out::rank == 0) return true;
    else return b.stride[Out::rank - 1] == 0;
  }
  static void kinds(const B& b, RowKinds& k) {
    if constexpr (kind == RowKind::deferred) (constant(b) ? k.constant : k.contiguous) = true;
    row_reader<E>::kinds(b.child, k);
  }
  template <RowMode M>
  static KILN_FORCEINLINE auto row(const B& b, index_t i0, index_t len) {
    const index_t base = b.child_index(i0);  // one division (or one per dimension) per row
    constexpr bool repeated = kind == RowKind::constant || (kind == RowKind::deferred && M == RowMode::constant);
    constexpr bool contiguous =
        kind == RowKind::contiguous || (kind == RowKind::deferred && M == RowMode::contiguous);
    if constexpr (repeated) {
      return Scalar<V>{b.child[base]};
    } else if constexpr (contiguous) {
      return row_of<M>(b.child, base, len);
    } else {
      // Mixed: a constant row's child row is built (pointer arithmetic, valid indices) but never read.
      const auto r = row_of<M>(b.child, base, len);
      return SelectRow<decltype(r), V>{r, b.child[base], constant(b), row_extents<Shape<dyn>>(len)};
    }
  }
};

/// A Strided node's rows read its child in steps of the innermost stride, one division per row (in
/// child_index) and none per element of the node itself (the child is read through its operator[]). It
/// counts as a broadcast: what makes the executor go row by row.
template <class E, class Out>
struct row_reader<Strided<E, Out>> {
  using S = Strided<E, Out>;
  static constexpr int broadcasts = 1;
  static constexpr int deferred = 0;
  static void kinds(const S&, RowKinds&) {}
  template <RowMode>
  static KILN_FORCEINLINE StridedRow<E> row(const S& s, index_t i0, index_t len) {
    return {s.child, s.child_index(i0), s.stride[Out::rank == 0 ? 0 : Out::rank - 1], row_extents<Shape<dyn>>(len)};
  }
};

}  // namespace kiln::detail
