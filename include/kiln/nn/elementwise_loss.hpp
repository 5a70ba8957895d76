/// Elementwise losses beyond MSELoss, each of a prediction and a target of the same shape: L1Loss,
/// SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss and KLDivLoss (value, gradient, torch's
/// reduction='none').
#pragma once
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/backend/cpu/executor.hpp"
#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/nn/loss.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
KILN_HOST_DEVICE KILN_FORCEINLINE float log1p_(float x) { return ::log1pf(x); }
KILN_HOST_DEVICE KILN_FORCEINLINE double log1p_(double x) { return ::log1p(x); }

/// sign(d): 1, -1, or 0 at 0 and at NaN (torch's sgn, which l1_loss's gradient is).
template <class V>
KILN_HOST_DEVICE KILN_FORCEINLINE V sign_(V d) {
  return d > V(0) ? V(1) : d < V(0) ? V(-1) : V(0);
}

// The terms of the elementwise losses: value(p, t) and its derivative grad(p, t) in p, of a prediction
// p and its target t in the compute type V.
/// |d|, d = p - t, as torch.nn.L1Loss.
struct L1Term {
  template <class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE V value(V p, V t) const { return ops::detail::abs_(p - t); }
  template <class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE V grad(V p, V t) const { return sign_(p - t); }
};
/// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, as torch.nn.SmoothL1Loss. Beta 0 is |d| with
/// the gradient sign(d), 0 at d = 0 and NaN at NaN (torch 1.13's beta-0 gradient is -1 at d = 0 on the
/// CPU and 0 / 0 on the GPU: kiln takes L1's 0 on both).
template <class V>
struct SmoothL1Term {
  V beta;
  KILN_HOST_DEVICE KILN_FORCEINLINE V value(V p, V t) const {
    const V z = ops::detail::abs_(p - t);
    return z < beta ? V(0.5) * z * z / beta : z - V(0.5) * beta;
  }
  KILN_HOST_DEVICE KILN_FORCEINLINE V grad(V p, V t) const {
    const V d = p - t;
    if (beta == V(0)) return d != d ? d : sign_(d);
    return d < -beta ? V(-1) : d > beta ? V(1) : d / beta;
  }
};
/// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), as torch.nn.HuberLoss.
template <class V>
struct HuberTerm {
  V delta;
  KILN_HOST_DEVICE KILN_FORCEINLINE V value(V p, V t) const {
    const V z = ops::detail::abs_(p - t);
    return z < delta ? V(0.5) * z * z : delta * (z - V(0.5) * delta);
  }
  KILN_HOST_DEVICE KILN_FORCEINLINE V grad(V p, V t) const {
    const V d = p - t;
    return d < -delta ? -delta : d > delta ? delta : d;
  }
};
/// Binary cross entropy of a probability p in [0, 1] against a target t, as torch 1.13's
/// binary_cross_entropy: (t - 1) max(log(1 - p), -100) - t max(log p, -100) (the logs clamped, so p = 0
/// or 1 gives 100, not inf), NaN for p outside [0, 1] (torch refuses it; kiln's CPU throws before the
/// pass); its gradient (p - t) / max((1 - p) p, 1e-12), torch's.
struct BceTerm {
  template <class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE V value(V p, V t) const {
    if (!(p >= V(0) && p <= V(1))) return static_cast<V>(NAN);
    const V log_p = ops::detail::log_(p), log_q = ops::detail::log_(V(1) - p);
    return (t - V(1)) * (log_q > V(-100) ? log_q : V(-100)) - t * (log_p > V(-100) ? log_p : V(-100));
  }
  template <class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE V grad(V p, V t) const {
    if (!(p >= V(0) && p <= V(1))) return static_cast<V>(NAN);
    const V q = (V(1) - p) * p;
    const V eps = static_cast<V>(1e-12f);  // torch 1.13's EPSILON is a float: 9.99999996e-13 in double
    return (p - t) / (q > eps ? q : eps);
  }
};

/// The pointwise Kullback-Leibler divergence of a log-probability x against its target t, as torch
/// 1.13's kl_div: xlogy(t, t) - t x (0 log 0 is 0; a negative t, or t = 0 against x = -inf, is NaN), or
/// e^t (t - x) for a target of log-probabilities; its gradient in x, -t (-e^t).
struct KLDivTerm {
  bool log_target = false;
  template <class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE V value(V x, V t) const {
    if (log_target) return ops::detail::exp_(t) * (t - x);
    const V xlogy = t != t ? t : t == V(0) ? V(0) : t * ops::detail::log_(t);
    return xlogy - t * x;
  }
  template <class V>
  KILN_HOST_DEVICE KILN_FORCEINLINE V grad(V, V t) const {
    return log_target ? -ops::detail::exp_(t) : -t;
  }
};

/// term.value(pred, target) in the compute type (fp32 for 16-bit operands, as autocast runs these
/// losses): the node that a sum, a mean or an unreduced tensor evaluates in one pass.
template <class Term>
struct TermOfPair {
  Term term;
  template <class A, class B>
  KILN_HOST_DEVICE KILN_FORCEINLINE auto operator()(A a, B b) const {
    return term.value(to_compute(a), to_compute(b));
  }
};

/// g = term.grad(pred, target) k, k = the loss scale over the mean's count (read on the device for a
/// device scale), times dloss[i] where an upstream gradient is given (reduction='none').
template <class T, class Term, class U = T>
struct TermGrad {
  const T* pred;
  const U* target;
  T* g;
  GradFactor<compute_t<T>> factor;
  Term term;
  const compute_t<T>* upstream = nullptr;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    const compute_t<T> d = term.grad(to_compute(pred[i]), to_compute(target[i])) * factor.get();
    g[i] = from_compute<T>(upstream ? d * upstream[i] : d);
  }
  Traffic traffic(index_t n) const {
    return {2 * kiln::detail::bytes_of<T>(n) + kiln::detail::bytes_of<U>(n) +
                (upstream ? kiln::detail::bytes_of<compute_t<T>>(n) : 0),
            (upstream ? 5 : 4) * static_cast<std::uint64_t>(n)};
  }
};

/// The loss of one logit x against its target y in [0, 1], as torch's binary_cross_entropy_with_logits:
/// (1 - y) x + L (log1p(e^-|x|) + max(-x, 0)), L = (p - 1) y + 1 for the class's pos_weight p (1
/// without); stable for large |x|.
template <class V>
KILN_HOST_DEVICE KILN_FORCEINLINE V bce_with_logits(V x, V y, V p) {
  const V l = (p - V(1)) * y + V(1);
  const V neg = -x;
  return (V(1) - y) * x + l * (log1p_(ops::detail::exp_(-ops::detail::abs_(x))) + (neg > V(0) ? neg : V(0)));
}
/// out[i] = bce_with_logits(x[i], y[i], pos_weight[i % C]) (C: the last extent, or 1 for one weight), in
/// the compute type.
template <class T, class U = T>
struct BceWithLogitsRows {
  const T* x;
  const U* y;
  compute_t<T>* out;
  const compute_t<T>* pos_weight;  // [C], or none
  index_t c;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    using V = compute_t<T>;
    out[i] = bce_with_logits(to_compute(x[i]), to_compute(y[i]), pos_weight ? pos_weight[i % c] : V(1));
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<T>(n) + kiln::detail::bytes_of<U>(n) + kiln::detail::bytes_of<compute_t<T>>(n) +
                (pos_weight ? kiln::detail::bytes_of<compute_t<T>>(c) : 0),
            12 * static_cast<std::uint64_t>(n)};
  }
};
/// g[i] = ((p y + 1 - y) sigmoid(x) - p y) k (torch's gradient; sigmoid(x) - y without pos_weight), k as
/// TermGrad's, times dloss[i] where given.
template <class T, class U = T>
struct BceWithLogitsGrad {
  const T* x;
  const U* y;
  T* g;
  GradFactor<compute_t<T>> factor;
  const compute_t<T>* pos_weight;  // [C], or none
  index_t c;
  const compute_t<T>* upstream = nullptr;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    using V = compute_t<T>;
    const V xv = to_compute(x[i]), yv = to_compute(y[i]);
    const V s = V(1) / (V(1) + ops::detail::exp_(-xv));
    V d;
    if (pos_weight) {
      const V t = pos_weight[i % c] * yv;
      d = (t + V(1) - yv) * s - t;
    } else {
      d = s - yv;
    }
    d = d * factor.get();
    g[i] = from_compute<T>(upstream ? d * upstream[i] : d);
  }
  Traffic traffic(index_t n) const {
    return {2 * kiln::detail::bytes_of<T>(n) + kiln::detail::bytes_of<U>(n) +
                (upstream ? kiln::detail::bytes_of<compute_t<T>>(n) : 0) + (pos_weight ? kiln::detail::bytes_of<compute_t<T>>(c) : 0),
            (pos_weight ? 10 : 6) * static_cast<std::uint64_t>(n)};
  }
};

/// Checks that `dloss` (the upstream gradient of loss `who`'s unreduced terms) has the shape of the
/// input (`input`: what the loss calls it).
template <class T, class S, class G, class D>
void check_term_gradient(const char* who, const Tensor<T, S, D>& pred, const Tensor<G, S, D>& dloss,
                         const char* input = "pred") {
  kiln::detail::check_same_device(who, pred, dloss);
  if (!(dloss.extents() == pred.extents()))
    throw ShapeError(std::string(who) + ": dloss " + to_string(dloss.extents()) + " must have the shape of " + input +
                     " " + to_string(pred.extents()));
}

/// On the CPU, a ValueError naming the first element of `p` outside [0, 1] (or NaN) for loss `who`, as
/// torch's CPU kernel refuses it (one parallel scan, as the loss's own pass); on the GPU nothing is read
/// back (such a term is NaN).
template <class T, class S, class D>
void check_probabilities(const char* who, const Tensor<T, S, D>& p) {
  if constexpr (std::is_same_v<D, Cpu>) {
    const index_t n = p.numel();
    const T* data = p.data();
    index_t first = n;
    const bool parallel = n >= backend::cpu::parallel_threshold;
    (void)parallel;
    KILN_PRAGMA_OMP(parallel for reduction(min : first) schedule(static) if(parallel))
    for (index_t i = 0; i < n; ++i) {
      const auto v = to_compute(data[i]);
      if (!(v >= 0 && v <= 1) && i < first) first = i;
    }
    if (first < n) {
      std::ostringstream text;
      text << who << ": all elements of input should be between 0 and 1 (element " << first << " of input "
           << to_string(p.extents()) << " is " << std::setprecision(9) << static_cast<double>(to_compute(data[first]))
           << ")";
      throw ValueError(text.str());
    }
  }
}

/// What a loss of Term calls its first operand in its messages: KLDivLoss's `input` (log-probabilities,
/// as torch names it), the others' `pred`.
template <class Term>
inline constexpr const char* input_name = std::is_same_v<Term, KLDivTerm> ? "input" : "pred";

// The bodies of the elementwise losses of a pair (L1Loss, SmoothL1Loss, HuberLoss, BCELoss, KLDivLoss), for a Term
// of the compute type. Each loss is an aggregate of its options (no base class, so that designated
// initializers name them all) whose members forward here.
/// The mean (or sum) of the terms, in the compute type: one pass.
template <class Term, class T, class U, class S, class D>
auto pair_loss(const char* who, Reduction how, Term term, const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) {
  check_pair(who, pred, target, input_name<Term>);
  if constexpr (std::is_same_v<Term, BceTerm>) check_probabilities(who, pred);
  const kiln::detail::device_scope<D> on(kiln::detail::pass_device(pred));
  const auto terms = kiln::detail::make_binary(pred, target, who, TermOfPair<Term>{term});
  return how == Reduction::sum ? sum(terms) : mean(terms);
}
/// Each element's term in the compute type (reduction='none'): one pass.
template <class Term, class T, class U, class S, class D>
Tensor<compute_t<T>, S, D> pair_terms(const char* who, Term term, const Tensor<T, S, D>& pred,
                                      const Tensor<U, S, D>& target) {
  check_pair(who, pred, target, input_name<Term>);
  if constexpr (std::is_same_v<Term, BceTerm>) check_probabilities(who, pred);
  const int device = kiln::detail::pass_device(pred);
  const kiln::detail::device_scope<D> on(device);
  Tensor<compute_t<T>, S, D> out(pred.extents(), device);
  out = kiln::detail::make_binary(pred, target, who, TermOfPair<Term>{term});
  return out;
}
/// dL/dpred: the term's gradient times `scale` over `den` (what the loss divides its sum by), or times
/// dloss[i] where `dloss` (pred's shape) is given. One pass.
template <class Term, class T, class U, class S, class D>
Tensor<T, S, D> pair_gradient(const char* who, double den, Term term, const Tensor<T, S, D>& pred,
                              const Tensor<U, S, D>& target, LossScale scale,
                              const Tensor<compute_t<T>, S, D>* dloss = nullptr) {
  check_pair(who, pred, target, input_name<Term>);
  if constexpr (std::is_same_v<Term, BceTerm>) check_probabilities(who, pred);
  if (dloss) {
    check_term_gradient(who, pred, *dloss, input_name<Term>);
    den = 1.0;
  }
  const int device = kiln::detail::pass_device(pred);
  const kiln::detail::device_scope<D> on(device);
  Tensor<T, S, D> g(pred.extents(), device);
  kiln::detail::executor<D>::for_each(
      g.numel(), TermGrad<T, Term, U>{pred.data(), target.data(), g.data(), GradFactor<compute_t<T>>::make(scale, 1.0, den),
                                   term, dloss ? dloss->data() : nullptr});
  return g;
}
/// pair_gradient over the elements for a mean, 1 for a sum.
template <class Term, class T, class U, class S, class D>
Tensor<T, S, D> pair_backward(const char* who, Reduction how, Term term, const Tensor<T, S, D>& pred,
                              const Tensor<U, S, D>& target, LossScale scale,
                              const Tensor<compute_t<T>, S, D>* dloss = nullptr) {
  return pair_gradient(who, how == Reduction::sum ? 1.0 : static_cast<double>(pred.numel()), term, pred, target,
                       scale, dloss);
}
}  // namespace detail

/// mean(|pred - target|), as torch.nn.L1Loss(); `.reduction = Reduction::sum` sums. The gradient is
/// sign(pred - target) over the elements (0 where they are equal, and at NaN, as torch's). `unreduced` is
/// torch's reduction='none' and `backward(pred, target, dloss)` its gradient.
/// Example:
///   kiln::nn::L1Loss l1;                     // or l1{.reduction = kiln::nn::Reduction::sum}
///   auto loss = l1(pred, target);            // rank-0 tensor
///   auto dpred = l1.backward(pred, target);  // [N, 1]
struct L1Loss {
  Reduction reduction = Reduction::mean;
  static constexpr const char* name = "kiln::nn::L1Loss";

  // A target of another shape than the prediction: one error naming both (not "no match for call").
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<compute_t<T>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<U, ST, D>&) const {
    return {};
  }
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<T, S, D>>::type backward(const Tensor<T, S, D>&,
                                                                                 const Tensor<U, ST, D>&,
                                                                                 LossScale = {}) const {
    return {};
  }

  template <class T, class U, class S, class D>
  auto operator()(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    return detail::pair_loss(name, reduction, term<compute_t<T>>(), pred, target);
  }
  /// dL/dpred, times `scale` (1 for a plain step; a device scale is read by the pass). One pass.
  template <class T, class U, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target, LossScale scale = {}) const {
    return detail::pair_backward(name, reduction, term<compute_t<T>>(), pred, target, scale);
  }
  /// Each element's loss in the compute type (fp32 for 16-bit operands, as autocast): reduction='none'.
  template <class T, class U, class S, class D>
  Tensor<compute_t<T>, S, D> unreduced(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    return detail::pair_terms(name, term<compute_t<T>>(), pred, target);
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` (pred's shape), times `scale`.
  template <class T, class U, class S, class D, class SG>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(std::is_same_v<SG, S>, "kiln::nn::L1Loss::backward(pred, target, dloss): dloss must have pred's shape type "
                                         "(one upstream gradient per element, as unreduced() gives terms)");
    return detail::pair_backward(name, reduction, term<compute_t<T>>(), pred, target, scale, &dloss);
  }

 private:
  template <class V>
  detail::L1Term term() const {
    return {};
  }
};

/// torch.nn.SmoothL1Loss(beta = 1.0): 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (d =
/// pred - target), mean (or sum) over the elements; beta 0 is L1Loss. A negative (or NaN) beta is a
/// ValueError. Example: `kiln::nn::SmoothL1Loss loss{.beta = 0.5}; loss(pred, target)`.
struct SmoothL1Loss {
  Reduction reduction = Reduction::mean;
  double beta = 1.0;
  static constexpr const char* name = "kiln::nn::SmoothL1Loss";

  // A target of another shape than the prediction: one error naming both (not "no match for call").
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<compute_t<T>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<U, ST, D>&) const {
    return {};
  }
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<T, S, D>>::type backward(const Tensor<T, S, D>&,
                                                                                 const Tensor<U, ST, D>&,
                                                                                 LossScale = {}) const {
    return {};
  }

  template <class T, class U, class S, class D>
  auto operator()(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    return detail::pair_loss(name, reduction, term<compute_t<T>>(), pred, target);
  }
  /// dL/dpred, times `scale` (1 for a plain step; a device scale is read by the pass). One pass.
  template <class T, class U, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target, LossScale scale = {}) const {
    return detail::pair_backward(name, reduction, term<compute_t<T>>(), pred, target, scale);
  }
  /// Each element's loss in the compute type (fp32 for 16-bit operands, as autocast): reduction='none'.
  template <class T, class U, class S, class D>
  Tensor<compute_t<T>, S, D> unreduced(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    return detail::pair_terms(name, term<compute_t<T>>(), pred, target);
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` (pred's shape), times `scale`.
  template <class T, class U, class S, class D, class SG>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(std::is_same_v<SG, S>, "kiln::nn::SmoothL1Loss::backward(pred, target, dloss): dloss must have pred's shape type "
                                         "(one upstream gradient per element, as unreduced() gives terms)");
    return detail::pair_backward(name, reduction, term<compute_t<T>>(), pred, target, scale, &dloss);
  }

 private:
  template <class V>
  detail::SmoothL1Term<V> term() const {
    if (!(beta >= 0.0))
      throw ValueError("kiln::nn::SmoothL1Loss: beta must be >= 0 (got " + std::to_string(beta) + ")");
    return {static_cast<V>(beta)};
  }
};

/// torch.nn.HuberLoss(delta = 1.0): 0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere, mean
/// (or sum) over the elements: SmoothL1Loss with beta = delta, times delta. A delta <= 0 (or NaN) is a
/// ValueError. Example: `kiln::nn::HuberLoss loss{.delta = 2.0}; loss(pred, target)`.
struct HuberLoss {
  Reduction reduction = Reduction::mean;
  double delta = 1.0;
  static constexpr const char* name = "kiln::nn::HuberLoss";

  // A target of another shape than the prediction: one error naming both (not "no match for call").
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<compute_t<T>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<U, ST, D>&) const {
    return {};
  }
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<T, S, D>>::type backward(const Tensor<T, S, D>&,
                                                                                 const Tensor<U, ST, D>&,
                                                                                 LossScale = {}) const {
    return {};
  }

  template <class T, class U, class S, class D>
  auto operator()(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    return detail::pair_loss(name, reduction, term<compute_t<T>>(), pred, target);
  }
  /// dL/dpred, times `scale` (1 for a plain step; a device scale is read by the pass). One pass.
  template <class T, class U, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target, LossScale scale = {}) const {
    return detail::pair_backward(name, reduction, term<compute_t<T>>(), pred, target, scale);
  }
  /// Each element's loss in the compute type (fp32 for 16-bit operands, as autocast): reduction='none'.
  template <class T, class U, class S, class D>
  Tensor<compute_t<T>, S, D> unreduced(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    return detail::pair_terms(name, term<compute_t<T>>(), pred, target);
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` (pred's shape), times `scale`.
  template <class T, class U, class S, class D, class SG>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(std::is_same_v<SG, S>, "kiln::nn::HuberLoss::backward(pred, target, dloss): dloss must have pred's shape type "
                                         "(one upstream gradient per element, as unreduced() gives terms)");
    return detail::pair_backward(name, reduction, term<compute_t<T>>(), pred, target, scale, &dloss);
  }

 private:
  template <class V>
  detail::HuberTerm<V> term() const {
    if (!(delta > 0.0))
      throw ValueError("kiln::nn::HuberLoss: delta must be > 0 (got " + std::to_string(delta) + ")");
    return {static_cast<V>(delta)};
  }
};

/// Binary cross entropy of probabilities in [0, 1] (a Sigmoid's output) against targets of the same
/// shape, as torch.nn.BCELoss(): -(t log p + (1 - t) log(1 - p)) with each log clamped at -100, as
/// torch's (p = 0 or 1 gives a finite term, and a gradient capped at 1e12), mean (or sum) over the
/// elements; one pass each way. An input outside [0, 1] (or NaN) is a ValueError on the CPU, with
/// torch's message and the element, found by a scan before the pass; on the GPU its term is NaN. Prefer
/// BCEWithLogitsLoss on the logits, the stable form. 16-bit probabilities (a mixed policy's Sigmoid
/// output) are a compile error, as torch's autocast refuses BCELoss ("unsafe to autocast"): sigmoid(9)
/// stored in fp16 or bf16 is 1, whose clamped log gives a loss of 100 and a gradient the sigmoid's
/// backward multiplies by 0. `unreduced` is torch's reduction='none' and `backward(pred, target,
/// dloss)` its gradient; torch's per-element `weight` goes into dloss.
/// Example:
///   kiln::nn::BCELoss bce;                       // after a Sigmoid layer
///   auto loss = bce(probs, targets);             // rank-0 tensor
///   auto dprobs = bce.backward(probs, targets);  // (p - t) / ((1 - p) p), over the elements
struct BCELoss {
  Reduction reduction = Reduction::mean;
  static constexpr const char* name = "kiln::nn::BCELoss";

  // A target of another shape than the prediction: one error naming both (not "no match for call").
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<compute_t<T>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<U, ST, D>&) const {
    return {};
  }
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<T, S, D>>::type backward(const Tensor<T, S, D>&,
                                                                                 const Tensor<U, ST, D>&,
                                                                                 LossScale = {}) const {
    return {};
  }

  template <class T, class U, class S, class D>
  auto operator()(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    return detail::pair_loss(name, reduction, term<T>(), pred, target);
  }
  /// dL/dpred, times `scale` (1 for a plain step; a device scale is read by the pass). One pass.
  template <class T, class U, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target, LossScale scale = {}) const {
    return detail::pair_backward(name, reduction, term<T>(), pred, target, scale);
  }
  /// Each element's loss in the compute type (fp32 for 16-bit operands): reduction='none'.
  template <class T, class U, class S, class D>
  Tensor<compute_t<T>, S, D> unreduced(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    return detail::pair_terms(name, term<T>(), pred, target);
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` (pred's shape), times `scale`.
  template <class T, class U, class S, class D, class SG>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(std::is_same_v<SG, S>, "kiln::nn::BCELoss::backward(pred, target, dloss): dloss must have pred's shape type "
                                         "(one upstream gradient per element, as unreduced() gives terms)");
    return detail::pair_backward(name, reduction, term<T>(), pred, target, scale, &dloss);
  }

 private:
  template <class T>
  static detail::BceTerm term() {
    // >>> Stopped here? The probabilities hold integers. <<<
    static_assert(std::is_floating_point_v<compute_t<T>>,
                  "kiln::nn::BCELoss: probabilities and targets must be floating-point (float or double)");
    // >>> Stopped here? BCELoss of a mixed-precision model's probabilities. <<<
    static_assert(!std::is_floating_point_v<compute_t<T>> || std::is_same_v<compute_t<T>, T>,
                  "kiln::nn::BCELoss: probabilities in half or bfloat16 (a mixed policy's Sigmoid output) "
                  "are unsafe, as torch's autocast says: a probability near 1 rounds to 1, the loss is the "
                  "clamp's 100 and the gradient through the sigmoid 0. Drop the final Sigmoid and use "
                  "kiln::nn::BCEWithLogitsLoss on the logits (computed in fp32, stable at every logit)");
    return {};
  }
};

/// Binary cross entropy of logits against targets in [0, 1] of the same shape, as
/// torch.nn.BCEWithLogitsLoss(): sigmoid and the log-likelihood in one stable term, mean (or sum) over the
/// elements (one pass for the terms, one for their reduction). `pos_weight` (empty by default) is
/// torch's: one weight per class of the last dimension, or one for every class, multiplying the positive
/// term (more than 1 raises recall). `unreduced` is torch's reduction='none'
/// and `backward(logits, target, dloss)` its gradient; torch's per-element `weight` goes into dloss.
/// Example:
///   kiln::nn::BCEWithLogitsLoss bce;              // or bce{.pos_weight = {3.0}} for [N, 1] logits
///   auto loss = bce(logits, targets);             // rank-0 tensor
///   auto dlogits = bce.backward(logits, targets); // sigmoid(logits) - targets, over the elements
struct BCEWithLogitsLoss {
  Reduction reduction = Reduction::mean;
  std::vector<double> pos_weight = {};  ///< one per class (the last extent), one for all, or empty (all 1)
  static constexpr const char* name = "kiln::nn::BCEWithLogitsLoss";

  // A target of another shape than the prediction: one error naming both (not "no match for call").
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<compute_t<T>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<U, ST, D>&) const {
    return {};
  }
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<T, S, D>>::type backward(const Tensor<T, S, D>&,
                                                                                 const Tensor<U, ST, D>&,
                                                                                 LossScale = {}) const {
    return {};
  }

  template <class T, class U, class S, class D>
  auto operator()(const Tensor<T, S, D>& logits, const Tensor<U, S, D>& target) const {
    const kiln::detail::device_scope<D> on(kiln::detail::pass_device(logits));  // the logits' GPU
    const auto terms = unreduced(logits, target);
    return reduction == Reduction::sum ? sum(terms) : mean(terms);
  }
  /// dL/dlogits over the elements (1 for a sum), times `scale`. One pass.
  template <class T, class U, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<U, S, D>& target, LossScale scale = {}) const {
    const double den = reduction == Reduction::sum ? 1.0 : static_cast<double>(logits.numel());
    return gradient(logits, target, detail::GradFactor<compute_t<T>>::make(scale, 1.0, den), nullptr);
  }
  /// Each element's loss in the compute type: torch's reduction='none'. One pass.
  template <class T, class U, class S, class D>
  Tensor<compute_t<T>, S, D> unreduced(const Tensor<T, S, D>& logits, const Tensor<U, S, D>& target) const {
    detail::check_pair(name, logits, target, "logits");
    const int device = kiln::detail::pass_device(logits);
    const kiln::detail::device_scope<D> on(device);
    const auto w = weights<T>(logits, device);
    Tensor<compute_t<T>, S, D> out(logits.extents(), device);
    kiln::detail::executor<D>::for_each(
        out.numel(), detail::BceWithLogitsRows<T, U>{logits.data(), target.data(), out.data(), w.data(), weight_period(logits)});
    return out;
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` (the logits' shape), times `scale`.
  template <class T, class U, class S, class D, class SG>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<U, S, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(std::is_same_v<SG, S>, "kiln::nn::BCEWithLogitsLoss::backward(logits, target, dloss): dloss must have the "
                                         "logits' shape type (one upstream gradient per element, as unreduced() gives terms)");
    detail::check_term_gradient(name, logits, dloss, "logits");
    return gradient(logits, target, detail::GradFactor<compute_t<T>>::make(scale, 1.0, 1.0), dloss.data());
  }

 private:
  template <class T, class S, class D>
  static index_t classes(const Tensor<T, S, D>& logits) {
    return S::rank == 0 ? 1 : logits.size(S::rank - 1);
  }
  /// How many classes pos_weight's values cycle over: 1 for one value (torch broadcasts it), else C.
  template <class T, class S, class D>
  index_t weight_period(const Tensor<T, S, D>& logits) const {
    return pos_weight.size() == 1 ? 1 : classes(logits);
  }
  template <class T, class S, class D>
  detail::ClassWeights<compute_t<T>, D> weights(const Tensor<T, S, D>& logits, int device) const {
    if (pos_weight.size() > 1 && static_cast<index_t>(pos_weight.size()) != classes(logits))
      throw ValueError("kiln::nn::BCEWithLogitsLoss: pos_weight has " + std::to_string(pos_weight.size()) +
                       " values for a last dimension of " + std::to_string(classes(logits)) +
                       " (logits " + to_string(logits.extents()) + "); expected one per class, or one");
    return detail::class_weights<compute_t<T>, D>(name, pos_weight, weight_period(logits),
                                                  device);
  }
  template <class T, class U, class S, class D>
  Tensor<T, S, D> gradient(const Tensor<T, S, D>& logits, const Tensor<U, S, D>& target,
                           detail::GradFactor<compute_t<T>> factor, const compute_t<T>* upstream) const {
    detail::check_pair(name, logits, target, "logits");
    const int device = kiln::detail::pass_device(logits);
    const kiln::detail::device_scope<D> on(device);
    const auto w = weights<T>(logits, device);
    Tensor<T, S, D> g(logits.extents(), device);
    kiln::detail::executor<D>::for_each(g.numel(), detail::BceWithLogitsGrad<T, U>{logits.data(), target.data(), g.data(),
                                                                                factor, w.data(), weight_period(logits),
                                                                                upstream});
    return g;
  }
};

/// How KLDivLoss reduces its terms (torch's `reduction` for kl_div): `mean` over every element (torch's
/// default, which torch warns is not the divergence), `batchmean` the sum over the first dimension's
/// extent (the divergence per sample, what the math means: prefer it), `sum`. torch's 'none' is
/// KLDivLoss's `unreduced()`.
enum class KLDivReduction { mean, batchmean, sum };

/// The Kullback-Leibler divergence of the model's distribution from a target's, as torch.nn.KLDivLoss():
/// the input holds log-probabilities (a LogSoftmax's output), the target probabilities of the same shape
/// (or log-probabilities with `log_target`, which stays finite where they underflow); each term is
/// t (log t - x) (0 where t = 0), or e^t (t - x), reduced as `reduction` says (torch's default `mean`;
/// `batchmean` is the divergence). The gradient in the input is -t (-e^t) over the reduction's count;
/// one pass each way, and batchmean's division one more on a single element. Targets are not checked (a
/// negative one gives NaN, as torch's). `unreduced` is torch's reduction='none' and
/// `backward(input, target, dloss)` its gradient. Distillation, for example:
///   kiln::nn::KLDivLoss kl{.reduction = kiln::nn::KLDivReduction::batchmean};
///   auto loss = kl(log_probs, teacher_probs);           // log_probs: LogSoftmax of the student's logits
///   auto dlog_probs = kl.backward(log_probs, teacher_probs);
struct KLDivLoss {
  KLDivReduction reduction = KLDivReduction::mean;
  bool log_target = false;
  static constexpr const char* name = "kiln::nn::KLDivLoss";

  // A target of another shape than the prediction: one error naming both (not "no match for call").
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<compute_t<T>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<U, ST, D>&) const {
    return {};
  }
  template <class T, class U, class S, class ST, class D>
    requires(!std::is_same_v<S, ST>)
  typename detail::loss_shapes_must_match<S, ST, Tensor<T, S, D>>::type backward(const Tensor<T, S, D>&,
                                                                                 const Tensor<U, ST, D>&,
                                                                                 LossScale = {}) const {
    return {};
  }

  template <class T, class U, class S, class D>
  auto operator()(const Tensor<T, S, D>& input, const Tensor<U, S, D>& target) const {
    if (reduction != KLDivReduction::batchmean)
      return detail::pair_loss(name, reduction == KLDivReduction::sum ? Reduction::sum : Reduction::mean, term<T>(),
                               input, target);
    auto total = detail::pair_loss(name, Reduction::sum, term<T>(), input, target);
    if constexpr (S::rank > 0) {  // torch divides by size(0) where there is one (a rank-0 input: the sum)
      const kiln::detail::device_scope<D> on(kiln::detail::pass_device(input));
      kiln::assign(total, total / static_cast<compute_t<T>>(input.size(0)));
    }
    return total;
  }
  /// dL/dinput, times `scale` (1 for a plain step; a device scale is read by the pass). One pass.
  template <class T, class U, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& input, const Tensor<U, S, D>& target, LossScale scale = {}) const {
    return detail::pair_gradient(name, count(input), term<T>(), input, target, scale);
  }
  /// Each element's term in the compute type (fp32 for 16-bit operands, as autocast runs kl_div):
  /// reduction='none'.
  template <class T, class U, class S, class D>
  Tensor<compute_t<T>, S, D> unreduced(const Tensor<T, S, D>& input, const Tensor<U, S, D>& target) const {
    return detail::pair_terms(name, term<T>(), input, target);
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` (the input's shape), times `scale`.
  template <class T, class U, class S, class D, class SG>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& input, const Tensor<U, S, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(std::is_same_v<SG, S>, "kiln::nn::KLDivLoss::backward(input, target, dloss): dloss must have the input's "
                                         "shape type (one upstream gradient per element, as unreduced() gives terms)");
    return detail::pair_gradient(name, 1.0, term<T>(), input, target, scale, &dloss);
  }

 private:
  /// What the reduction divides the sum by: the elements (mean), the first extent (batchmean), 1.
  template <class T, class S, class D>
  double count(const Tensor<T, S, D>& input) const {
    if (reduction == KLDivReduction::mean) return static_cast<double>(input.numel());
    if constexpr (S::rank > 0)
      if (reduction == KLDivReduction::batchmean) return static_cast<double>(input.size(0));
    return 1.0;
  }
  template <class T>
  detail::KLDivTerm term() const {
    // >>> Stopped here? The log-probabilities hold integers. <<<
    static_assert(std::is_floating_point_v<compute_t<T>>,
                  "kiln::nn::KLDivLoss: log-probabilities and targets must be floating-point (float, double, half, "
                  "bfloat16)");
    return {log_target};
  }
};

}  // namespace kiln::nn
