/// Losses: MSELoss, CrossEntropyLoss and NLLLoss (value, and gradient w.r.t. the input), mean or sum
/// reduction, or unreduced (torch's reduction='none') with the upstream gradient given.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/fusion.hpp"
#include "kiln/core/lane_sums.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/layout.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// How a loss reduces its terms (MSELoss: the elements; CrossEntropyLoss: the rows) to the scalar it
/// returns: torch's reduction='mean' (the default) or 'sum'. torch's 'none' is a loss's `unreduced()`,
/// whose gradient is `backward(..., dloss)` with the upstream gradient of each term.
enum class Reduction { mean, sum };

/// The factor a loss's gradient is multiplied by (GradScaler's loss scale): a number from the host
/// (`scaler.scale()`; 1 for a plain step), or a double on the device (a capturable GradScaler's
/// `loss_scale()`), read by the gradient's own pass so that a captured step replays with the scale of
/// the iteration it runs in.
struct LossScale {
  double value = 1.0;
  const double* device = nullptr;
  LossScale(double v = 1.0) : value(v) {}  // implicit: backward(pred, y, scaler.scale()) as before
  static LossScale on_device(const double* p) {
    LossScale s;
    s.device = p;
    return s;
  }
};

namespace detail {
/// What a mean divides by: a number known on the host, or a count (or a sum of class weights) on the
/// device that the pass reads (CrossEntropyLoss's rows that are not ignored, counted by a reduction on
/// the GPU).
struct Denominator {
  double host = 1.0;
  const std::int64_t* device = nullptr;
  const double* weights = nullptr;
  Denominator(double d = 1.0) : host(d) {}  // implicit: a host number
  static Denominator on_device(const std::int64_t* p) {
    Denominator d;
    d.device = p;
    return d;
  }
  static Denominator on_device(const double* p) {
    Denominator d;
    d.weights = p;
    return d;
  }
  KILN_HOST_DEVICE KILN_FORCEINLINE double get() const {
    return device ? static_cast<double>(*device) : weights ? *weights : host;
  }
};
/// A loss gradient's factor num * scale / den, rounded to V: computed once on the host, or, where the
/// scale or the denominator lives on the device, where it is read, with the host's formula (the same
/// bits either way). A zero numerator gives 0 whatever den is: DataParallel's share (the scale) of a
/// replica whose rows all weigh 0 adds nothing, where 0 / 0 would spread NaN to every replica. Else a
/// zero den (a weighted mean whose counted rows all weigh 0) gives NaN, as torch's 0 / 0 at the labels
/// (not inf: with label smoothing the other classes' terms are not 0).
template <class V>
struct GradFactor {
  V host;
  const double* scale;
  Denominator den;
  double value, num;
  KILN_HOST_DEVICE KILN_FORCEINLINE static double ratio(double n, double d) {
    return n == 0 ? 0.0 : d == 0 ? static_cast<double>(NAN) : n / d;
  }
  static GradFactor make(LossScale s, double num, Denominator den) {
    return {static_cast<V>(ratio(num * s.value, den.host)), s.device, den, s.value, num};
  }
  KILN_HOST_DEVICE KILN_FORCEINLINE V get() const {
    if (scale == nullptr && den.device == nullptr && den.weights == nullptr) return host;
    return static_cast<V>(ratio(num * (scale ? *scale : value), den.get()));
  }
};
/// g = (pred - target) k, k from the device (MSELoss::backward with a device scale), times dloss[i]
/// where an upstream gradient is given.
template <class T, class U = T>
struct MseGrad {
  const T* pred;
  const U* target;
  T* g;
  GradFactor<compute_t<T>> factor;
  const compute_t<T>* upstream = nullptr;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    const compute_t<T> d = (to_compute(pred[i]) - to_compute(target[i])) * factor.get();
    g[i] = from_compute<T>(upstream ? d * upstream[i] : d);
  }
  Traffic traffic(index_t n) const {
    return {2 * kiln::detail::bytes_of<T>(n) + kiln::detail::bytes_of<U>(n) +
                (upstream ? kiln::detail::bytes_of<compute_t<T>>(n) : 0),
            (upstream ? 3 : 2) * static_cast<std::uint64_t>(n)};
  }
};

/// Fails to compile, naming both shapes, when a loss is given a prediction and a target of different
/// shapes (its overloads for that case instantiate it: one error, not "no match for call").
template <class Prediction, class Target, class R = void>
struct loss_shapes_must_match {
  // >>> Stopped here? The loss was given a target of another shape than the prediction. <<<
  static_assert(std::is_same_v<Prediction, Target>,
                "kiln::nn: a loss's prediction and target must have the same shape (torch would broadcast [N, 1] "
                "against [N] to [N, N], with a warning); see the template arguments of "
                "kiln::nn::detail::loss_shapes_must_match<prediction shape, target shape> (in a Shape, -1 means "
                "dyn). A target [N] for a prediction [N, 1]: target.reshape<kiln::Shape<kiln::dyn, 1>>(); class "
                "labels [N] (int64) for logits [N, C]: CrossEntropyLoss, whose target they are");
  static constexpr bool value = true;
  using type = R;  ///< what the overload that instantiates it returns (its return type: the error comes first)
};
/// Fails to compile when class labels are integers of another type than std::int64_t (torch's long).
template <class Label, class R = void>
struct labels_must_be_int64 {
  // >>> Stopped here? The labels are not std::int64_t. <<<
  static_assert(std::is_same_v<Label, std::int64_t>,
                "kiln::nn: class labels must be std::int64_t, as torch's are int64 (torch.long); see the template "
                "argument of kiln::nn::detail::labels_must_be_int64<label type>. Convert them: "
                "kiln::eval(kiln::cast<std::int64_t>(labels)), or, from a dataset of your own, make its "
                "target_type std::int64_t");
  static constexpr bool value = true;
  using type = R;  ///< what the overload that instantiates it returns (its return type: the error comes first)
};
/// Fails to compile when cross entropy's first argument, the logits, holds integers: the labels given first.
template <class Logit, class R = void>
struct logits_must_come_first {
  // >>> Stopped here? CrossEntropyLoss was given the labels first. <<<
  static_assert(!std::is_integral_v<Logit>,
                "kiln::nn::CrossEntropyLoss: the first argument (the logits) holds integers: the order is "
                "ce(logits, labels) and ce.backward(logits, labels), as torch's");
  using type = R;  ///< what the overload that instantiates it returns (its return type: the error comes first)
};

/// Checks the input (`input`: what loss `who` calls it) and the target: one device, one shape. The
/// target has the input's element type or its compute type: float targets for half or bfloat16
/// predictions, as torch's autocast runs these losses in fp32 on the data's own float targets (rounding
/// them to 16 bits would move a regression target of 21.6 to 21.625 in bfloat16).
template <class T, class U, class S, class D>
void check_pair(const char* who, const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target, const char* input = "pred") {
  // >>> Stopped here? The target's element type is neither the prediction's nor its compute type. <<<
  static_assert(std::is_same_v<U, T> || std::is_same_v<U, compute_t<T>>,
                "kiln::nn: a loss's target must have the prediction's element type or its compute type (float "
                "targets for half or bfloat16 predictions)");
  kiln::detail::check_same_device(who, pred, target);
  if (!(pred.extents() == target.extents()))
    throw ShapeError(std::string(who) + ": " + input + " " + to_string(pred.extents()) + " and target " +
                     to_string(target.extents()) + " must have the same shape");
}
}  // namespace detail

/// mean((pred - target)^2), as torch.nn.MSELoss(); with `.reduction = Reduction::sum`, the sum
/// (torch's reduction='sum'). Shapes: pred and target alike -> a scalar. `unreduced` is torch's
/// reduction='none': the squared errors themselves, and `backward(pred, target, dloss)` their gradient.
/// Example:
///   kiln::nn::MSELoss mse;                    // or mse{.reduction = kiln::nn::Reduction::sum}
///   auto loss = mse(pred, target);            // rank-0 tensor: loss.item()
///   auto dpred = mse.backward(pred, target);  // dL/dpred, [N, 1]
struct MSELoss {
  Reduction reduction = Reduction::mean;

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
    detail::check_pair("kiln::nn::MSELoss", pred, target);
    const kiln::detail::device_scope<D> on(kiln::detail::pass_device(pred));  // pred's GPU, whichever is current
    const auto d = pred - target;
    return reduction == Reduction::sum ? sum(d * d) : mean(d * d);  // one pass
  }
  /// 2 (pred - target) / numel (sum: 2 (pred - target)), times the loss's own gradient `scale` (1 for
  /// a plain step; a device scale is read by the pass, which then stays one pass also with fusion off).
  template <class T, class U, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target, LossScale scale = {}) const {
    detail::check_pair("kiln::nn::MSELoss::backward", pred, target);  // (the device-scale pass reads target[i])
    const int device = kiln::detail::pass_device(pred);
    const kiln::detail::device_scope<D> on(device);
    Tensor<T, S, D> g(pred.extents(), device);
    const double den = reduction == Reduction::sum ? 1.0 : static_cast<double>(pred.numel());
    const auto f = detail::GradFactor<compute_t<T>>::make(scale, 2.0, den);
    if (scale.device == nullptr) {
      g = (pred - target) * f.host;
      return g;
    }
    kiln::detail::executor<D>::for_each(g.numel(), detail::MseGrad<T, U>{pred.data(), target.data(), g.data(), f});
    return g;
  }

  /// (pred - target)^2 elementwise, in the compute type (fp32 for 16-bit operands, as autocast runs
  /// mse_loss): torch's MSELoss(reduction='none'). One pass (fused); `reduction` is not used.
  template <class T, class U, class S, class D>
  Tensor<compute_t<T>, S, D> unreduced(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target) const {
    detail::check_pair("kiln::nn::MSELoss::unreduced", pred, target);
    const int device = kiln::detail::pass_device(pred);
    const kiln::detail::device_scope<D> on(device);
    Tensor<compute_t<T>, S, D> out(pred.extents(), device);
    const auto d = pred - target;
    out = d * d;
    return out;
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` (dL/d of each squared error, the
  /// shape of pred): 2 (pred - target) dloss, as autograd's for reduction='none', times `scale` (the
  /// loss scale, read on the device as the other backward's). One pass (fused). A mean or weights go
  /// into dloss. (SG is deduced, so that `backward(pred, target, {})` still means a scale of 1.)
  template <class T, class U, class S, class D, class SG>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<U, S, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(std::is_same_v<SG, S>, "kiln::nn::MSELoss::backward: dloss must have the shape type of pred");
    detail::check_pair("kiln::nn::MSELoss::backward", pred, target);
    kiln::detail::check_same_device("kiln::nn::MSELoss::backward", pred, dloss);
    if (!(dloss.extents() == pred.extents()))
      throw ShapeError("kiln::nn::MSELoss::backward: dloss " + to_string(dloss.extents()) +
                       " must have the shape of pred " + to_string(pred.extents()));
    const int device = kiln::detail::pass_device(pred);
    const kiln::detail::device_scope<D> on(device);
    Tensor<T, S, D> g(pred.extents(), device);
    if (scale.device == nullptr) {
      g = (pred - target) * static_cast<compute_t<T>>(2 * scale.value) * dloss;
      return g;
    }
    const auto f = detail::GradFactor<compute_t<T>>::make(scale, 2.0, 1.0);
    kiln::detail::executor<D>::for_each(g.numel(), detail::MseGrad<T, U>{pred.data(), target.data(), g.data(), f, dloss.data()});
    return g;
  }
};

namespace detail {
/// A row's log-sum-exp kept in two parts, its max m and log Σ exp(x - m), so that log_softmax(x)_j is
/// (x_j - m) - log_s, in torch's order: m + log_s rounded first would lose the low bits of logits that
/// share a large offset (1e4 + d in float keeps d to 1e-3).
template <class V>
struct RowLse {
  V m, log_s;
  /// log_softmax of logit x (already in the compute type).
  KILN_HOST_DEVICE KILN_FORCEINLINE V log_p(V x) const { return (x - m) - log_s; }
  /// softmax of logit x: exp(log_p(x)), as autograd's log_softmax backward computes it.
  KILN_HOST_DEVICE KILN_FORCEINLINE V p(V x) const { return ops::detail::exp_(log_p(x)); }
};
/// f(j, g(j)) for j in [0, c) in order, g an exp of something. With a vector exp (core/vector_math.hpp:
/// one at a time it costs twice libm's), g runs over a piece of 64 first, in a loop of its own that -O3
/// vectorises (cross entropy's gradient). Elsewhere (a GPU, libm's exp: 10 % slower staged) one j at a
/// time.
template <class G, class F>
KILN_HOST_DEVICE KILN_FORCEINLINE void map_in_pieces(index_t c, G&& g, F&& f) {
  index_t j = 0;
#if KILN_VECTOR_EXP
  constexpr index_t piece = 64;
  using V = decltype(g(index_t{0}));
  for (; j + piece <= c; j += piece) {
    V v[piece];
    for (index_t k = 0; k < piece; ++k) v[k] = g(j + k);
    for (index_t k = 0; k < piece; ++k) f(j + k, v[k]);
  }
#endif
  for (; j < c; ++j) f(j, g(j));
}
/// A row's logits in the compute type, for lane_extreme (core/lane_sums.hpp).
template <class T>
struct ComputeValues {
  const T* x;
  KILN_HOST_DEVICE KILN_FORCEINLINE compute_t<T> operator[](index_t j) const { return to_compute(x[j]); }
};
/// Row n of the logits: m = max, log Σ exp(x - m) (stable for large logits); the sum in lane_sum's eight
/// lanes (core/lane_sums.hpp), the exps evaluated four a call first where exp is a vector function.
template <class T>
KILN_HOST_DEVICE KILN_FORCEINLINE RowLse<compute_t<T>> row_logsumexp(const T* x, index_t c) {
  using V = compute_t<T>;
  const V m = kiln::detail::lane_extreme<false, V>(ComputeValues<T>{x}, 0, c);
  const V s = kiln::detail::lane_sum<V, KILN_VECTOR_EXP>(ops::detail::ShiftedExp<T>{x, m}, 0, c);
  return {m, ops::detail::log_(s)};
}
/// How row n's label counts: ignored (== ignore_index: no loss, no gradient), outside [0, C) (NaN), or
/// a class.
enum class LabelKind { ignored, bad, valid };
KILN_HOST_DEVICE KILN_FORCEINLINE LabelKind label_kind(std::int64_t k, std::int64_t ignore, index_t c) {
  return k == ignore ? LabelKind::ignored : (k < 0 || k >= c) ? LabelKind::bad : LabelKind::valid;
}
/// loss[n] = ((1 - eps) w[y[n]] (lse(x[n]) - x[n, y[n]]) + eps Σ_j w[j] (lse(x[n]) - x[n, j]) / C) / den
/// (eps: label smoothing; w: class weights, 1 without), den the rows not ignored (their weights) for a
/// mean (so that the sum of the rows is the mean), 1 for a sum; 0 for an ignored row (NaN when every row
/// is and den counts none, as torch's 0 / 0); NaN for a label outside [0, C).
template <class T>
struct CrossEntropyRows {
  const T* x;
  const std::int64_t* y;
  compute_t<T>* loss;
  index_t c;
  std::int64_t ignore;
  Denominator den;
  compute_t<T> eps;
  const compute_t<T>* w = nullptr;  // class weights [C], or none
  KILN_HOST_DEVICE void operator()(index_t n) const {
    using V = compute_t<T>;
    const T* row = x + n * c;
    const std::int64_t k = y[n];
    const double d = den.get();
    switch (label_kind(k, ignore, c)) {
      case LabelKind::ignored: loss[n] = d == 0 ? static_cast<V>(NAN) : V(0); break;
      case LabelKind::bad: loss[n] = static_cast<V>(NAN); break;
      default: {
        const auto lse = row_logsumexp(row, c);
        V l = -lse.log_p(to_compute(row[k]));
        if (w) l = w[k] * l;
        if (eps != V(0)) {  // (eps = 0 adds nothing, not even 0 * inf)
          V smooth = 0;
          for (index_t j = 0; j < c; ++j) smooth -= w ? w[j] * lse.log_p(to_compute(row[j])) : lse.log_p(to_compute(row[j]));
          l = (V(1) - eps) * l + eps * smooth / static_cast<V>(c);
        }
        loss[n] = d == 0 ? static_cast<V>(NAN) : l / static_cast<V>(d);  // (see GradFactor: NaN, not inf)
      }
    }
  }
  /// The logits and labels read, one loss per row written; the log-sum-exp (a max, a subtract, an exp
  /// and an add per logit) and the row's last three (smoothed: a subtract and an add per logit, and four;
  /// weighted: a multiply, per logit where smoothed).
  Traffic traffic(index_t rows) const {
    const index_t weighted = w ? 1 + (eps != 0 ? c : 0) : 0;
    return {kiln::detail::bytes_of<T>(rows * c) + kiln::detail::bytes_of<std::int64_t>(rows) +
                kiln::detail::bytes_of<compute_t<T>>(rows),
            static_cast<std::uint64_t>(rows) *
                static_cast<std::uint64_t>(4 * c + 3 + (eps != 0 ? 2 * c + 4 : 0) + weighted)};
  }
};
/// The smoothed one-hot target of a valid row: (1 - eps) [j == k] + eps / C (exactly 1 and 0 for eps = 0);
/// with class weights w, (1 - eps) w[k] [j == k] + eps w[j] / C, what torch's weighted loss differentiates
/// to (no eps term for eps = 0, not even 0 * inf).
template <class V>
KILN_HOST_DEVICE KILN_FORCEINLINE V smoothed_target(index_t j, std::int64_t k, V eps, index_t c, const V* w = nullptr) {
  if (!w) return (j == k ? V(1) - eps : V(0)) + eps / static_cast<V>(c);
  return (j == k ? (V(1) - eps) * w[k] : V(0)) + (eps != V(0) ? eps * w[j] / static_cast<V>(c) : V(0));
}
/// dx[n, j] = scale (softmax(x[n])_j - t_j) / den for row n, t the smoothed one-hot target, times the
/// row's upstream gradient dloss[n] where one is given (reduction='none'); NaN for a label outside [0, C).
/// With class weights w it is scale (s softmax(x[n])_j - t_j) / den, t the weighted target and s = Σ_j t_j
/// = (1 - eps) w[k] + eps Σ w / C (`wsum`: Σ w).
/// An ignored row gets 0 - softmax(x[n])_j * 0, as autograd's log_softmax backward gives it: 0, or NaN
/// when its logits are not finite (so that a GradScaler skips such a step, as torch's).
template <class T>
struct CrossEntropyGrad {
  const T* x;
  const std::int64_t* y;
  T* dx;
  index_t c;
  std::int64_t ignore;
  GradFactor<compute_t<T>> factor;
  compute_t<T> eps;
  const compute_t<T>* upstream = nullptr;
  const compute_t<T>* w = nullptr;  // class weights [C], or none
  compute_t<T> wsum = 1;
  KILN_HOST_DEVICE void operator()(index_t n) const {
    using V = compute_t<T>;
    const T* row = x + n * c;
    const std::int64_t k = y[n];
    const LabelKind kind = label_kind(k, ignore, c);
    if (kind == LabelKind::bad) {
      for (index_t j = 0; j < c; ++j) dx[n * c + j] = from_compute<T>(static_cast<V>(NAN));
      return;
    }
    const auto lse = row_logsumexp(row, c);
    if (kind == LabelKind::ignored) {
      for (index_t j = 0; j < c; ++j) dx[n * c + j] = from_compute<T>(V(0) - lse.p(to_compute(row[j])) * V(0));
      return;
    }
    const V scale = upstream ? factor.get() * upstream[n] : factor.get();
    const auto p = [&](index_t j) { return lse.p(to_compute(row[j])); };
    if (!w) {
      map_in_pieces(c, p, [&](index_t j, V pj) {
        dx[n * c + j] = from_compute<T>(scale * (pj - smoothed_target(j, k, eps, c)));
      });
      return;
    }
    const V s = eps != V(0) ? (V(1) - eps) * w[k] + eps * wsum / static_cast<V>(c) : w[k];
    map_in_pieces(c, p, [&](index_t j, V pj) {
      dx[n * c + j] = from_compute<T>(scale * (s * pj - smoothed_target(j, k, eps, c, w)));
    });
  }
  /// The logits, labels (and upstream gradients) read, the gradient written; the log-sum-exp, then a
  /// subtract, an exp, the one-hot subtract and the scale per logit.
  Traffic traffic(index_t rows) const {
    return {2 * kiln::detail::bytes_of<T>(rows * c) + kiln::detail::bytes_of<std::int64_t>(rows) +
                (upstream ? kiln::detail::bytes_of<compute_t<T>>(rows) : 0),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(8 * c + 1 + (upstream ? 1 : 0))};
  }
};


// Probability targets: torch 1.13's CrossEntropyLoss with a target of the logits' shape [N, C].
/// Row n's weight on log_softmax(x[n])_j: its target t[j] mixed with the uniform distribution,
/// (1 - eps) t[j] + eps / C (t[j] itself for eps = 0), times class j's weight where there are weights.
template <class V, class U>
KILN_HOST_DEVICE KILN_FORCEINLINE V soft_target(const U* t, index_t j, V eps, index_t c, const V* w) {
  V q = static_cast<V>(to_compute(t[j]));
  if (eps != V(0)) q = (V(1) - eps) * q + eps / static_cast<V>(c);
  return w ? w[j] * q : q;
}
/// loss[n] = Σ_j q_j (lse(x[n]) - x[n, j]) / den, q row n's soft_target, den N for a mean (so that the
/// sum of the rows is the mean), 1 for a sum.
template <class T, class U>
struct SoftCrossEntropyRows {
  const T* x;
  const U* t;
  compute_t<T>* loss;
  index_t c;
  compute_t<T> den;
  compute_t<T> eps;
  const compute_t<T>* w = nullptr;  // class weights [C], or none
  KILN_HOST_DEVICE void operator()(index_t n) const {
    using V = compute_t<T>;
    const T* row = x + n * c;
    const auto lse = row_logsumexp(row, c);
    V l = 0;
    for (index_t j = 0; j < c; ++j) l -= soft_target(t + n * c, j, eps, c, w) * lse.log_p(to_compute(row[j]));
    loss[n] = l / den;
  }
  /// The logits and targets read, one loss per row written; the log-sum-exp, then per logit the target's
  /// mix (smoothed: a multiply and an add; weighted: a multiply), a subtract, a multiply and an add.
  Traffic traffic(index_t rows) const {
    const index_t per_logit = 4 + 3 + (eps != 0 ? 2 : 0) + (w ? 1 : 0);
    return {kiln::detail::bytes_of<T>(rows * c) + kiln::detail::bytes_of<U>(rows * c) +
                kiln::detail::bytes_of<compute_t<T>>(rows),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(per_logit * c + 1)};
  }
};
/// dx[n, j] = scale (s softmax(x[n])_j - q_j) / den, q row n's soft_target and s = Σ_j q_j (1 for a
/// target that sums to 1, without weights), times dloss[n] where given: torch's gradient of the loss.
template <class T, class U>
struct SoftCrossEntropyGrad {
  const T* x;
  const U* t;
  T* dx;
  index_t c;
  GradFactor<compute_t<T>> factor;
  compute_t<T> eps;
  const compute_t<T>* upstream = nullptr;
  const compute_t<T>* w = nullptr;  // class weights [C], or none
  KILN_HOST_DEVICE void operator()(index_t n) const {
    using V = compute_t<T>;
    const T* row = x + n * c;
    const U* target = t + n * c;
    const auto lse = row_logsumexp(row, c);
    const V scale = upstream ? factor.get() * upstream[n] : factor.get();
    V s = 0;
    for (index_t j = 0; j < c; ++j) s += soft_target(target, j, eps, c, w);
    for (index_t j = 0; j < c; ++j) {
      const V p = lse.p(to_compute(row[j]));
      dx[n * c + j] = from_compute<T>(scale * (s * p - soft_target(target, j, eps, c, w)));
    }
  }
  /// The logits and targets (twice: for s, then per logit) read, the gradient written.
  Traffic traffic(index_t rows) const {
    return {2 * kiln::detail::bytes_of<T>(rows * c) + 2 * kiln::detail::bytes_of<U>(rows * c) +
                (upstream ? kiln::detail::bytes_of<compute_t<T>>(rows) : 0),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(12 * c + 1)};
  }
};
/// g[n, :] = -scale q / den, q row n's soft_target, times dloss[n] where given: the gradient of
/// -Σ_j q_j log_softmax_j with respect to the log-probabilities (cross entropy's unfused passes).
template <class T, class U>
struct SoftNllGradRows {
  using C = compute_t<T>;
  const U* t;
  C* g;
  index_t c;
  GradFactor<C> factor;
  C eps;
  const C* upstream = nullptr;
  const C* w = nullptr;  // class weights [C], or none
  KILN_HOST_DEVICE void operator()(index_t n) const {
    const C scale = upstream ? factor.get() * upstream[n] : factor.get();
    for (index_t j = 0; j < c; ++j) g[n * c + j] = -scale * soft_target(t + n * c, j, eps, c, w);
  }
  Traffic traffic(index_t rows) const {
    return {kiln::detail::bytes_of<U>(rows * c) + kiln::detail::bytes_of<C>(rows * c) +
                (upstream ? kiln::detail::bytes_of<C>(rows) : 0),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(2 * c)};
  }
};
/// A floating-point element (float, double, half, bfloat16): what a probability target holds, as
/// opposed to labels (int64).
template <class U>
concept probability_element = std::is_same_v<U, float> || std::is_same_v<U, double> || std::is_same_v<U, half> ||
                              std::is_same_v<U, bfloat16>;

// Cross entropy's gradient as PyTorch's autograd computes it, one kernel per operation (fusion off,
// kiln::Unfused): log_softmax forward, nll_loss backward, log_softmax backward.
/// out[n, :] = x[n, :] - lse(x[n]).
template <class T>
struct LogSoftmaxRows {
  using C = compute_t<T>;  // kept in the compute type, as autocast runs log_softmax in fp32
  const T* x;
  C* out;
  index_t c;
  KILN_HOST_DEVICE void operator()(index_t n) const {
    const T* row = x + n * c;
    const auto lse = row_logsumexp(row, c);
    for (index_t j = 0; j < c; ++j) out[n * c + j] = lse.log_p(to_compute(row[j]));
  }
  Traffic traffic(index_t rows) const {
    return {kiln::detail::bytes_of<T>(rows * c) + kiln::detail::bytes_of<C>(rows * c),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(5 * c + 1)};
  }
};
/// g[n, :] = -scale t / den, t the smoothed (class-weighted) one-hot target, times dloss[n] where given
/// (0 for an ignored row, NaN for a label outside [0, C)), stored as G: nll_loss's gradient, in the
/// compute type inside cross entropy's unfused passes, in T as NLLLoss's.
template <class T, class G = compute_t<T>>
struct NllGradRows {
  using C = compute_t<T>;
  const std::int64_t* y;
  G* g;
  index_t c;
  std::int64_t ignore;
  GradFactor<C> factor;
  C eps;
  const C* upstream = nullptr;
  const C* w = nullptr;  // class weights [C], or none
  KILN_HOST_DEVICE void operator()(index_t n) const {
    const std::int64_t k = y[n];
    const LabelKind kind = label_kind(k, ignore, c);
    if (kind != LabelKind::valid) {
      const G fill = from_compute<G>(kind == LabelKind::ignored ? C(0) : static_cast<C>(NAN));
      for (index_t j = 0; j < c; ++j) g[n * c + j] = fill;
      return;
    }
    const C scale = upstream ? factor.get() * upstream[n] : factor.get();
    for (index_t j = 0; j < c; ++j) {
      const C t = smoothed_target(j, k, eps, c, w);
      // +0 off the label, as without smoothing; at the label -scale w[k] even for w[k] = 0 (NaN when
      // the weights that count sum to 0, as torch's).
      g[n * c + j] = from_compute<G>(t == C(0) && j != k ? C(0) : -scale * t);
    }
  }
  Traffic traffic(index_t rows) const {
    return {kiln::detail::bytes_of<std::int64_t>(rows) + kiln::detail::bytes_of<G>(rows * c) +
                (upstream ? kiln::detail::bytes_of<C>(rows) : 0),
            0};
  }
};
/// dx[n, :] = g[n, :] - exp(lsm[n, :]) Σ_j g[n, j].
template <class T>
struct LogSoftmaxGradRows {
  using C = compute_t<T>;
  const C* lsm;
  const C* g;
  T* dx;  // rounded to T once, as autocast's gradient reaches the half logits
  index_t c;
  KILN_HOST_DEVICE void operator()(index_t n) const {
    C sum = 0;
    for (index_t j = 0; j < c; ++j) sum += g[n * c + j];
    for (index_t j = 0; j < c; ++j) dx[n * c + j] = from_compute<T>(g[n * c + j] - ops::detail::exp_(lsm[n * c + j]) * sum);
  }
  Traffic traffic(index_t rows) const {
    return {2 * kiln::detail::bytes_of<C>(rows * c) + kiln::detail::bytes_of<T>(rows * c),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(4 * c)};
  }
};

/// loss[n] = -w[y[n]] x[n, y[n]] / den (NLLLoss: x holds log-probabilities; w the class weights, 1
/// without), 0 for an ignored row (NaN when den counts none), NaN for a label outside [0, C).
template <class T>
struct NllRows {
  const T* x;
  const std::int64_t* y;
  compute_t<T>* loss;
  index_t c;
  std::int64_t ignore;
  Denominator den;
  const compute_t<T>* w = nullptr;  // class weights [C], or none
  KILN_HOST_DEVICE void operator()(index_t n) const {
    using V = compute_t<T>;
    const std::int64_t k = y[n];
    const double d = den.get();
    switch (label_kind(k, ignore, c)) {
      case LabelKind::ignored: loss[n] = d == 0 ? static_cast<V>(NAN) : V(0); break;
      case LabelKind::bad: loss[n] = static_cast<V>(NAN); break;
      default: loss[n] = (w ? -w[k] * to_compute(x[n * c + k]) : -to_compute(x[n * c + k])) / static_cast<V>(d);
    }
  }
  /// One value and one label read per row, one loss written.
  Traffic traffic(index_t rows) const {
    return {kiln::detail::bytes_of<T>(rows) + kiln::detail::bytes_of<std::int64_t>(rows) +
                kiln::detail::bytes_of<compute_t<T>>(rows),
            2 * static_cast<std::uint64_t>(rows)};
  }
};

/// A loss's class weights (torch's `weight`) as the passes read them, in the compute type C on the
/// device of the passes; none (`data()` null) when the loss has no weights.
template <class C, class D>
struct ClassWeights {
  std::optional<Tensor<C, Shape<dyn>, D>> values;
  C sum = 1;  ///< Σ w (what a smoothed row's weighted target sums to, eps times it over C)
  const C* data() const { return values ? values->data() : nullptr; }
};

/// `weight` (empty: none) for loss `who` over `c` classes, copied to `device`; ValueError unless it has
/// one value per class.
template <class C, class D>
ClassWeights<C, D> class_weights(const char* who, const std::vector<double>& weight, index_t c, int device) {
  ClassWeights<C, D> r;
  if (weight.empty()) return r;
  if (static_cast<index_t>(weight.size()) != c)
    throw ValueError(std::string(who) + ": weight has " + std::to_string(weight.size()) + " values for " +
                     std::to_string(c) + " classes; expected one per class");
  std::vector<C> v(weight.size());
  double total = 0;
  for (std::size_t j = 0; j < weight.size(); ++j) {
    v[j] = static_cast<C>(weight[j]);
    total += static_cast<double>(v[j]);
  }
  r.sum = static_cast<C>(total);
  r.values.emplace(Tensor<C, Shape<dyn>, D>::from(std::span<const C>(v), Extents<Shape<dyn>>(c), device));
  return r;
}

/// kept[n] = w[y[n]] for a row whose label is a class, 0 for an ignored row or a label outside [0, C)
/// (whose loss is NaN anyway): a weighted mean's denominator, summed on the GPU.
template <class C>
struct KeptWeights {
  const std::int64_t* y;
  const C* w;
  double* kept;
  index_t c;
  std::int64_t ignore;
  KILN_HOST_DEVICE void operator()(index_t n) const {
    const std::int64_t k = y[n];
    kept[n] = label_kind(k, ignore, c) == LabelKind::valid ? static_cast<double>(w[k]) : 0.0;
  }
  Traffic traffic(index_t rows) const {
    return {kiln::detail::bytes_of<std::int64_t>(rows) + kiln::detail::bytes_of<C>(rows) +
                kiln::detail::bytes_of<double>(rows),
            0};
  }
};

/// What a loss over class labels divides the rows' sum by for reduction `how`, and its class weights: for
/// a mean the rows not ignored (the sum of their classes' weights, with weights), counted on the host on
/// the CPU, by one reduction on the GPU, whose device scalar (`keep` or `kept_weight`) holds while the
/// passes read it; 1 for a sum.
template <class C, class D>
struct LabelCount {
  Denominator den;
  ClassWeights<C, D> weights;
  std::optional<Tensor<std::int64_t, Shape<>, D>> keep;
  std::optional<Tensor<double, Shape<>, D>> kept_weight;
};

/// The rows of labels [N] not equal to `ignore` (on the host); with class `weight` (one per class), the
/// sum of their classes' weights, as torch's weighted mean divides by (a label outside the weights
/// counts nothing).
template <class SL>
double count_kept(const Tensor<std::int64_t, SL, Cpu>& labels, std::int64_t ignore,
                  const std::vector<double>& weight = {}) {
  double kept = 0;
  const auto c = static_cast<std::int64_t>(weight.size());
  for (index_t n = 0; n < labels.numel(); ++n) {
    const std::int64_t k = labels[n];
    if (k == ignore) continue;
    kept += weight.empty() ? 1.0 : (k >= 0 && k < c) ? weight[static_cast<std::size_t>(k)] : 0.0;
  }
  return kept;
}

/// Checks x [N, C] (`scores`: what loss `who` calls them) against labels [N]: one label per row.
template <class T, class S, class SL, class D>
void check_label_rows(const char* who, const char* scores, const Tensor<T, S, D>& x,
                      const Tensor<std::int64_t, SL, D>& labels) {
  static_assert(S::rank == 2, "kiln::nn: a loss over class labels takes scores [N, C] or [N, C, d1, ..., dk] "
                              "(logits or log-probabilities)");
  static_assert(SL::rank == 1, "kiln::nn: a loss over class labels takes labels [N]: class indices (int64)");
  if (labels.size(0) != x.size(0))
    throw ShapeError(std::string(who) + ": " + std::to_string(x.size(0)) + " rows of " + scores + " " +
                     to_string(x.extents()) + " but " + std::to_string(labels.size(0)) + " labels");
}

// ---- torch's K-dimensional class losses: scores [N, C, d1, ..., dk], labels [N, d1, ..., dk] ----

/// Fails to compile unless labels of shape SL go with scores of shape S [N, C, d1, ..., dk]: [N, d1, ...,
/// dk], static extents equal.
template <class S, class SL>
struct labels_must_drop_the_class_dimension {
  static constexpr bool value = [] {
    if constexpr (SL::rank + 1 != S::rank) {
      return false;
    } else {
      for (std::size_t d = 0; d < SL::rank; ++d) {
        const index_t a = SL::extents[d], b = S::extents[d == 0 ? 0 : d + 1];
        if (a != dyn && b != dyn && a != b) return false;
      }
      return true;
    }
  }();
  // >>> Stopped here? Labels (or a per-element dloss) of class scores [N, C, d1, ..., dk] are [N, d1, ..., dk]. <<<
  static_assert(value, "kiln::nn: the labels of class scores [N, C, d1, ..., dk] are [N, d1, ..., dk] (the scores' "
                       "shape without the class dimension), as torch's; see both shapes in "
                       "kiln::nn::detail::labels_must_drop_the_class_dimension<Scores, Labels>");
};

/// Checks labels (or an upstream gradient) `l` against scores x [N, C, d1, ..., dk] when run.
template <class T, class S, class L, class SL, class D>
void check_label_map(const char* who, const char* what, const Tensor<T, S, D>& x, const Tensor<L, SL, D>& l) {
  [[maybe_unused]] constexpr bool fits = labels_must_drop_the_class_dimension<S, SL>::value;  // (its own error)
  kiln::detail::check_same_device(who, x, l);
  bool same = l.rank == x.rank - 1;
  for (std::size_t d = 0; same && d < l.rank; ++d) same = l.size(static_cast<int>(d)) == x.size(static_cast<int>(d == 0 ? 0 : d + 1));
  if (!same)
    throw ShapeError(std::string(who) + ": scores " + to_string(x.extents()) + " but " + what + " " +
                     to_string(l.extents()) + "; expected the scores' shape without dimension 1 (the classes)");
}

/// check_label_map for class labels l [N, d1, ..., dk], and on the CPU (which counts them on the host)
/// each label in [0, C) or `ignore`, a bad one named by its position [n, i1, ..., ik] (the passes see the
/// positions as rows of one flat list; the GPU makes the loss NaN instead, as for labels [N]).
template <class T, class S, class SL, class D>
void check_label_map(const char* who, const Tensor<T, S, D>& x, const Tensor<std::int64_t, SL, D>& l, std::int64_t ignore) {
  check_label_map(who, "labels", x, l);
  if constexpr (std::is_same_v<D, Cpu>) {
    for (index_t at = 0; at < l.numel(); ++at) {
      if (label_kind(l[at], ignore, x.size(1)) != LabelKind::bad) continue;
      std::string where;
      for (index_t d = static_cast<index_t>(l.rank), rest = at; d-- > 0; rest /= l.size(static_cast<int>(d)))
        where = std::to_string(rest % l.size(static_cast<int>(d))) + (where.empty() ? "" : ", ") + where;
      throw ValueError(std::string(who) + ": label " + std::to_string(l[at]) + " at [" + where + "] of labels " +
                       to_string(l.extents()) + " is outside [0, " + std::to_string(x.size(1)) +
                       ") and is not ignore_index (" + std::to_string(ignore) +
                       "): labels are class indices from 0, one per position of the scores' dimension 1");
    }
  }
}

/// The layout [N, d1, ..., dk, C] of scores S [N, C, d1, ..., dk] (the class dimension last), and the
/// permutations there and back.
template <class S, class I = std::make_index_sequence<S::rank - 2>>
struct class_last;
template <class S, std::size_t... I>
struct class_last<S, std::index_sequence<I...>> {
  using shape = Shape<S::extents[0], S::extents[I + 2]..., S::extents[1]>;
  template <class X>
  static auto from_scores(const X& x) {
    return kiln::permute<0, static_cast<int>(I + 2)..., 1>(x);
  }
  template <class X>
  static auto to_scores(const X& x) {
    return kiln::permute<0, static_cast<int>(S::rank) - 1, static_cast<int>(I + 1)...>(x);
  }
};

/// Scores x [N, C, d1, ..., dk] as rows [N d1 ... dk, C], the class dimension last (one pass).
template <class T, class S, class D>
auto class_last_rows(const Tensor<T, S, D>& x) {
  using R = Shape<dyn, S::extents[1]>;
  Extents<R> e;
  e[0] = 1;
  for (std::size_t d = 0; d < S::rank; ++d)
    if (d != 1) e[0] *= x.size(static_cast<int>(d));
  e[1] = x.size(1);
  return kiln::eval(class_last<S>::from_scores(x)).template reshape<R>(e);
}

/// A tensor of labels' (or per-element values') shape [N, d1, ..., dk] as one row each, [N d1 ... dk] (a view).
template <class L, class SL, class D>
Tensor<L, Shape<dyn>, D> flat_rows(const Tensor<L, SL, D>& l) {
  return l.template reshape<Shape<dyn>>(Extents<Shape<dyn>>(l.numel()));
}

/// Rows [N d1 ... dk, C] back in the scores' layout [N, C, d1, ..., dk] of extents `ext` (one pass).
template <class T, class S, class SR, class D>
Tensor<T, S, D> scores_layout(const Tensor<T, SR, D>& rows, const Extents<S>& ext) {
  using Moved = typename class_last<S>::shape;
  Extents<Moved> m;
  m[0] = ext[0];
  for (std::size_t d = 2; d < S::rank; ++d) m[d - 1] = ext[d];
  m[S::rank - 1] = ext[1];
  Tensor<T, S, D> out(ext, kiln::detail::pass_device(rows));
  out = class_last<S>::to_scores(rows.template reshape<Moved>(m));
  return out;
}

/// Checks the class weights and the labels of x for loss `who` (one weight per class, if any; on the
/// CPU each label, which must be in [0, C) or `ignore`; check_label_rows first), copies the weights to
/// the passes' device and counts what the reduction `how` divides by.
template <class T, class S, class SL, class D>
LabelCount<compute_t<T>, D> count_labels(const char* who, const Tensor<T, S, D>& x, const Tensor<std::int64_t, SL, D>& labels,
                                         std::int64_t ignore, Reduction how, const std::vector<double>& weight) {
  LabelCount<compute_t<T>, D> r;
  r.weights = class_weights<compute_t<T>, D>(who, weight, x.size(1), kiln::detail::pass_device(x));
  if constexpr (std::is_same_v<D, Cpu>) {
    for (index_t n = 0; n < labels.numel(); ++n) {
      const std::int64_t k = labels[n];
      if (label_kind(k, ignore, x.size(1)) == LabelKind::bad)
        throw ValueError(std::string(who) + ": label " + std::to_string(k) + " in row " + std::to_string(n) +
                         " of the batch is outside [0, " + std::to_string(x.size(1)) + ") and is not ignore_index (" +
                         std::to_string(ignore) + "): labels are class indices from 0, one per score column");
    }
    if (how == Reduction::sum) {
      r.den = 1.0;
    } else if (weight.empty()) {
      r.den = count_kept(labels, ignore);
    } else {  // in the compute type's weights, as the passes weigh the rows
      double kept = 0;
      for (index_t n = 0; n < labels.numel(); ++n)
        if (labels[n] != ignore) kept += static_cast<double>(static_cast<compute_t<T>>(weight[static_cast<std::size_t>(labels[n])]));
      r.den = kept;
    }
  } else if (how == Reduction::sum) {
    r.den = 1.0;
  } else if (weight.empty()) {
    r.keep.emplace(sum(ne(labels, ignore)));
    r.den = Denominator::on_device(r.keep->data());
  } else {
    Tensor<double, SL, D> kept(labels.extents());
    kiln::detail::executor<D>::for_each(
        labels.size(0), KeptWeights<compute_t<T>>{labels.data(), r.weights.data(), kept.data(), x.size(1), ignore});
    r.kept_weight.emplace(sum(kept));
    r.den = Denominator::on_device(r.kept_weight->data());
  }
  return r;
}

/// Checks the upstream gradient `dloss` [N] of loss `who`'s unreduced rows against x [N, C] (`scores`).
template <class T, class S, class G, class SG, class D>
void check_row_gradient(const char* who, const char* scores, const Tensor<T, S, D>& x, const Tensor<G, SG, D>& dloss) {
  kiln::detail::check_same_device(who, x, dloss);
  if (dloss.size(0) != x.size(0))
    throw ShapeError(std::string(who) + ": dloss " + to_string(dloss.extents()) + " for " + std::to_string(x.size(0)) +
                     " rows of " + scores + " " + to_string(x.extents()));
}
}  // namespace detail

/// Cross entropy of logits [N, C] against integer class labels [N] (int64), mean over the rows whose
/// label is not `ignore_index`: torch.nn.CrossEntropyLoss() = log-softmax + NLL in one stable pass
/// (log-softmax as torch's, (x - max) - log Σ exp(x - max): logits of 1e4 + d keep d). As torch's, `ignore_index` defaults to -100: such rows get no loss and no
/// gradient, and the mean divides by the others (NaN when every row is ignored). `reduction =
/// Reduction::sum` sums the rows instead (0 when every row is ignored); `label_smoothing` (eps in [0, 1],
/// default 0) mixes the target with the uniform distribution, (1 - eps) onehot + eps / C, as torch's.
/// `unreduced` is torch's reduction='none' (each row's loss, [N]) and `backward(logits, labels, dloss)`
/// its gradient. `weight` (empty by default: every class 1) is torch's class weights, one per class: a
/// row's loss is weighted by its label's (the smoothing term by each class's), and a mean divides by the
/// weights of the rows that count. The fields are in torch's order (weight, ignore_index, reduction,
/// label_smoothing), as designated initializers must name them. Probability targets [N, C] (soft labels)
/// are the overloads that take a floating-point target of the logits' shape, below.
/// A label outside [0, C) that is not ignore_index throws kiln::ValueError on the CPU (which counts the
/// labels on the host) and makes the loss and that row's gradient NaN on the GPU (which, for a mean,
/// counts them with one reduction before each direction's pass).
/// Example:
///   kiln::nn::CrossEntropyLoss ce;                // or ce{.ignore_index = 0, .label_smoothing = 0.1f}
///                                                 // or ce{.weight = {1.0, 4.0, ...}} (one per class)
///   auto loss = ce(logits, labels);               // rank-0 tensor
///   auto dlogits = ce.backward(logits, labels);  // [N, C]
struct CrossEntropyLoss {
  std::vector<double> weight = {};  ///< torch's class weights: one per class, or empty (all 1)
  std::int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;

  // Labels of another integer type than std::int64_t: one error that says so (not "no match for call").
  template <class T, class S, class L, class SL, class D>
    requires(std::is_integral_v<L> && !std::is_same_v<L, std::int64_t>)
  typename detail::labels_must_be_int64<L, Tensor<compute_t<T>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<L, SL, D>&) const {
    return {};
  }
  template <class T, class S, class L, class SL, class D>
    requires(std::is_integral_v<L> && !std::is_same_v<L, std::int64_t>)
  typename detail::labels_must_be_int64<L, Tensor<T, S, D>>::type backward(const Tensor<T, S, D>&,
                                                                            const Tensor<L, SL, D>&,
                                                                            LossScale = {}) const {
    return {};
  }

  // The labels first and the logits second (ce(labels, logits)): one error that says so.
  template <class T, class S, detail::probability_element U, class ST, class D>
    requires std::is_integral_v<T>
  typename detail::logits_must_come_first<T, Tensor<compute_t<U>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<U, ST, D>&) const {
    return {};
  }
  template <class T, class S, detail::probability_element U, class ST, class D>
    requires std::is_integral_v<T>
  typename detail::logits_must_come_first<T, Tensor<U, ST, D>>::type backward(const Tensor<T, S, D>&,
                                                                             const Tensor<U, ST, D>&,
                                                                             LossScale = {}) const {
    return {};
  }

  template <class T, class S, class SL, class D>
  Tensor<compute_t<T>, Shape<>, D> operator()(const Tensor<T, S, D>& logits,
                                              const Tensor<std::int64_t, SL, D>& labels) const {
    kiln::detail::check_same_device("kiln::nn::CrossEntropyLoss", logits, labels);
    const auto terms = rows(logits, labels, reduction);  // each divided by the mean's count
    return logits.size(0) == 0 && reduction == Reduction::mean ? mean(terms) : sum(terms);  // no rows: 0 / 0
  }
  /// dL/dlogits = (softmax(logits) - target) / (rows not ignored; 1 for a sum), target the one-hot labels
  /// (smoothed; with weights, (s softmax - target) / (their weights), s the target's sum), times `scale`
  /// (1 for a plain step); ignored rows 0. One pass; with fusion off
  /// (kiln::Unfused) three, as PyTorch's autograd runs it: log_softmax, nll_loss's backward,
  /// log_softmax's backward (plus the count of a mean on the GPU).
  template <class T, class S, class SL, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels,
                           LossScale scale = {}) const {
    kiln::detail::check_same_device("kiln::nn::CrossEntropyLoss::backward", logits, labels);
    return gradient(logits, labels, scale, reduction, nullptr);
  }

  /// Each row's loss [N] (the labels' shape) in the compute type (fp32 for 16-bit logits, as autocast):
  /// torch's CrossEntropyLoss(reduction='none'), ignored rows 0, smoothing as above. One pass and no
  /// count; `reduction` is not used. A label outside [0, C) throws on the CPU, gives NaN on the GPU.
  template <class T, class S, class SL, class D>
  Tensor<compute_t<T>, SL, D> unreduced(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels) const {
    kiln::detail::check_same_device("kiln::nn::CrossEntropyLoss::unreduced", logits, labels);
    return rows(logits, labels, Reduction::sum);
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` [N] (dL/d of each row's loss):
  /// dloss[n] (softmax(logits[n]) - target[n]) per row, ignored rows 0 (whatever their dloss), as
  /// autograd's for reduction='none', times `scale` (the loss scale, as the other backward's). One pass
  /// (three with fusion off, as the other backward). A mean or per-sample weights go into dloss.
  template <class T, class S, class SL, class SG, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(SG::rank == 1, "kiln::nn::CrossEntropyLoss::backward: dloss must be [N], one gradient per row");
    kiln::detail::check_same_device("kiln::nn::CrossEntropyLoss::backward", logits, labels);
    detail::check_row_gradient("kiln::nn::CrossEntropyLoss::backward", "logits", logits, dloss);
    return gradient(logits, labels, scale, Reduction::sum, dloss.data());
  }

  /// torch's K-dimensional cross entropy: logits [N, C, d1, ..., dk] against labels [N, d1, ..., dk] (a
  /// class per pixel, as segmentation's), every option as above over the N d1 ... dk positions as rows (a
  /// mean divides by the positions counted); `unreduced` has the labels' shape, and so has `dloss`. The
  /// logits are copied once with the classes last, the gradient once back.
  template <class T, class S, class SL, class D>
    requires(S::rank > 2)
  Tensor<compute_t<T>, Shape<>, D> operator()(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels) const {
    detail::check_label_map("kiln::nn::CrossEntropyLoss", logits, labels, ignore_index);
    return (*this)(detail::class_last_rows(logits), detail::flat_rows(labels));
  }
  template <class T, class S, class SL, class D>
    requires(S::rank > 2)
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels,
                           LossScale scale = {}) const {
    detail::check_label_map("kiln::nn::CrossEntropyLoss::backward", logits, labels, ignore_index);
    return detail::scores_layout(backward(detail::class_last_rows(logits), detail::flat_rows(labels), scale),
                                 logits.extents());
  }
  template <class T, class S, class SL, class D>
    requires(S::rank > 2)
  Tensor<compute_t<T>, SL, D> unreduced(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels) const {
    detail::check_label_map("kiln::nn::CrossEntropyLoss::unreduced", logits, labels, ignore_index);
    return unreduced(detail::class_last_rows(logits), detail::flat_rows(labels)).template reshape<SL>(labels.extents());
  }
  template <class T, class S, class SL, class SG, class D>
    requires(S::rank > 2)
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    detail::check_label_map("kiln::nn::CrossEntropyLoss::backward", logits, labels, ignore_index);
    detail::check_label_map("kiln::nn::CrossEntropyLoss::backward", "dloss", logits, dloss);
    return detail::scores_layout(
        backward(detail::class_last_rows(logits), detail::flat_rows(labels), detail::flat_rows(dloss), scale),
        logits.extents());
  }
  /// Probability targets of logits [N, C, d1, ..., dk]: the target has the logits' shape (a distribution over
  /// the classes at each position); as above, the positions as rows (a mean divides by N d1 ... dk).
  template <class T, class S, detail::probability_element U, class ST, class D>
    requires(S::rank > 2)
  Tensor<compute_t<T>, Shape<>, D> operator()(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target) const {
    check_target_map("kiln::nn::CrossEntropyLoss", logits, target);
    return (*this)(detail::class_last_rows(logits), detail::class_last_rows(target));
  }
  template <class T, class S, detail::probability_element U, class ST, class D>
    requires(S::rank > 2)
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target, LossScale scale = {}) const {
    check_target_map("kiln::nn::CrossEntropyLoss::backward", logits, target);
    return detail::scores_layout(backward(detail::class_last_rows(logits), detail::class_last_rows(target), scale),
                                 logits.extents());
  }
  template <class T, class S, detail::probability_element U, class ST, class D>
    requires(S::rank > 2)
  Tensor<compute_t<T>, kiln::detail::remove_axis_t<S, 1>, D> unreduced(const Tensor<T, S, D>& logits,
                                                                       const Tensor<U, ST, D>& target) const {
    check_target_map("kiln::nn::CrossEntropyLoss::unreduced", logits, target);
    using SO = kiln::detail::remove_axis_t<S, 1>;
    Extents<SO> e;
    for (std::size_t d = 0; d < SO::rank; ++d) e[d] = logits.size(static_cast<int>(d == 0 ? 0 : d + 1));
    return unreduced(detail::class_last_rows(logits), detail::class_last_rows(target)).template reshape<SO>(e);
  }
  template <class T, class S, detail::probability_element U, class ST, class SG, class D>
    requires(S::rank > 2)
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    check_target_map("kiln::nn::CrossEntropyLoss::backward", logits, target);
    detail::check_label_map("kiln::nn::CrossEntropyLoss::backward", "dloss", logits, dloss);
    return detail::scores_layout(
        backward(detail::class_last_rows(logits), detail::class_last_rows(target), detail::flat_rows(dloss), scale),
        logits.extents());
  }

  /// What a mean divides by: the labels [N] (on the host) that are not ignore_index (the sum of their
  /// classes' weights, with weights). DataParallel weighs each replica's share of a batch by it.
  template <class SL>
  double counted(const Tensor<std::int64_t, SL, Cpu>& labels) const {
    return detail::count_kept(labels, ignore_index, weight);
  }

  /// Probability targets (torch 1.13's CrossEntropyLoss with a floating-point target of the logits'
  /// shape [N, C]: each row a distribution over the classes, as mixup's or a teacher's; not checked to
  /// sum to 1, as torch does not): row n's loss is -Σ_j w_j t'_nj log_softmax(logits[n])_j with t' =
  /// (1 - eps) t + eps / C; a mean divides by N (the weights do not enter it, as torch's), a sum by 1.
  /// No row is ignored: an ignore_index >= 0 is a ValueError, as in torch. The target may be
  /// another floating-point type than the logits (fp32 targets for fp16 logits): it is read in the
  /// compute type. DataParallel splits such a batch by rows.
  template <class T, class S, detail::probability_element U, class ST, class D>
  Tensor<compute_t<T>, Shape<>, D> operator()(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target) const {
    check_target("kiln::nn::CrossEntropyLoss", logits, target);
    const auto terms = soft_rows(logits, target, reduction);  // each divided by the mean's N
    return logits.size(0) == 0 && reduction == Reduction::mean ? mean(terms) : sum(terms);  // no rows: 0 / 0
  }
  /// dL/dlogits for probability targets: (s softmax(logits) - t') / (N; 1 for a sum), t' the target
  /// (smoothed, weighted) and s its row's sum, times `scale`. One pass; three with fusion off
  /// (log_softmax, the gradient of the target's weighted sum, log_softmax's backward), as autograd.
  template <class T, class S, detail::probability_element U, class ST, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target, LossScale scale = {}) const {
    check_target("kiln::nn::CrossEntropyLoss::backward", logits, target);
    return soft_gradient(logits, target, scale, reduction, nullptr);
  }
  /// Each row's loss [N] for probability targets, in the compute type (torch's reduction='none').
  template <class T, class S, detail::probability_element U, class ST, class D>
  Tensor<compute_t<T>, Shape<dyn>, D> unreduced(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target) const {
    check_target("kiln::nn::CrossEntropyLoss::unreduced", logits, target);
    return soft_rows(logits, target, Reduction::sum);
  }
  /// The gradient through the probability targets' `unreduced` of an upstream gradient `dloss` [N],
  /// times `scale`.
  template <class T, class S, detail::probability_element U, class ST, class SG, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(SG::rank == 1, "kiln::nn::CrossEntropyLoss::backward: dloss must be [N], one gradient per row");
    check_target("kiln::nn::CrossEntropyLoss::backward", logits, target);
    detail::check_row_gradient("kiln::nn::CrossEntropyLoss::backward", "logits", logits, dloss);
    return soft_gradient(logits, target, scale, Reduction::sum, dloss.data());
  }

 private:
  template <class T>
  compute_t<T> eps() const { return static_cast<compute_t<T>>(label_smoothing); }

  /// Probability targets of K-dimensional logits: the logits' shape, in the type and when run.
  template <class T, class S, class U, class ST, class D>
  static void check_target_map(const char* who, const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target) {
    static_assert(std::is_same_v<ST, S>,
                  "kiln::nn::CrossEntropyLoss: a probability target has the logits' shape [N, C, d1, ..., dk] "
                  "(class labels are int64 [N, d1, ..., dk])");
    kiln::detail::check_same_device(who, logits, target);
    if constexpr (std::is_same_v<ST, S>)
      if (!(target.extents() == logits.extents()))
        throw ShapeError(std::string(who) + ": logits " + to_string(logits.extents()) + " but target " +
                         to_string(target.extents()) + "; expected a probability target of the logits' shape");
  }

  void check_smoothing() const {
    if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))  // (torch 1.13 checks only > 1)
      throw ValueError("kiln::nn::CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0. Got: " +
                       std::to_string(label_smoothing));
  }

  /// Checks probability targets against the logits: the same shape (in the type, and when run), the same
  /// device, no ignore_index that names a class, label_smoothing in [0, 1].
  template <class T, class S, class U, class ST, class D>
  void check_target(const char* who, const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target) const {
    // >>> Stopped here? The logits are not [N, C], or the target's shape is not the logits'. <<<
    static_assert(S::rank == 2, "kiln::nn::CrossEntropyLoss: logits must be [N, C]");
    static_assert(std::is_same_v<ST, S>,
                  "kiln::nn::CrossEntropyLoss: a probability target has the logits' shape [N, C] "
                  "(class labels are int64 [N])");
    kiln::detail::check_same_device(who, logits, target);
    if constexpr (std::is_same_v<ST, S>)  // (else the static_assert above is the one error)
      if (!(target.extents() == logits.extents()))  // (C too, where the shape leaves it dynamic)
        throw ShapeError(std::string(who) + ": logits " + to_string(logits.extents()) + " but target " +
                         to_string(target.extents()) + "; expected a probability target of the logits' shape");
    if (ignore_index >= 0)  // (torch 1.13's test: a negative one names no class)
      throw ValueError(std::string(who) + ": ignore_index is not supported for floating point target (ignore_index " +
                       std::to_string(ignore_index) + " with probability targets [N, C])");
    check_smoothing();
  }
  /// Each row's loss [N] for probability targets, divided by what the reduction `how` divides by.
  template <class T, class S, class U, class ST, class D>
  Tensor<compute_t<T>, Shape<dyn>, D> soft_rows(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target,
                                                Reduction how) const {
    const int device = kiln::detail::pass_device(logits);
    const kiln::detail::device_scope<D> on(device);
    const index_t n = logits.size(0), c = logits.size(1);
    const auto w = detail::class_weights<compute_t<T>, D>("kiln::nn::CrossEntropyLoss", weight, c, device);
    const auto den = static_cast<compute_t<T>>(how == Reduction::mean ? static_cast<double>(n) : 1.0);
    Tensor<compute_t<T>, Shape<dyn>, D> out(Extents<Shape<dyn>>(n), device);
    kiln::detail::executor<D>::for_each(
        n,
        detail::SoftCrossEntropyRows<T, U>{logits.data(), target.data(), out.data(), c, den, eps<T>(),
                                           w.data()},
        c);
    return out;
  }
  /// dL/dlogits for probability targets and `how` (sum for the unreduced rows), times `upstream[n]`.
  template <class T, class S, class U, class ST, class D>
  Tensor<T, S, D> soft_gradient(const Tensor<T, S, D>& logits, const Tensor<U, ST, D>& target, LossScale scale,
                                Reduction how, const compute_t<T>* upstream) const {
    const int device = kiln::detail::pass_device(logits);
    const kiln::detail::device_scope<D> on(device);
    const index_t n = logits.size(0), c = logits.size(1);
    const auto w = detail::class_weights<compute_t<T>, D>("kiln::nn::CrossEntropyLoss", weight, c, device);
    const auto per_row = detail::GradFactor<compute_t<T>>::make(
        scale, 1.0, how == Reduction::mean ? static_cast<double>(n) : 1.0);
    Tensor<T, S, D> dx(logits.extents(), device);
    if (!fusion_enabled()) {
      Tensor<compute_t<T>, S, D> lsm(logits.extents(), device), g(logits.extents(), device);
      kiln::detail::executor<D>::for_each(n, detail::LogSoftmaxRows<T>{logits.data(), lsm.data(), c}, c);
      kiln::detail::executor<D>::for_each(
          n, detail::SoftNllGradRows<T, U>{target.data(), g.data(), c, per_row, eps<T>(), upstream, w.data()},
          c);
      kiln::detail::executor<D>::for_each(
          n, detail::LogSoftmaxGradRows<T>{lsm.data(), g.data(), dx.data(), c}, c);
      return dx;
    }
    kiln::detail::executor<D>::for_each(
        n,
        detail::SoftCrossEntropyGrad<T, U>{logits.data(), target.data(), dx.data(), c, per_row, eps<T>(),
                                           upstream, w.data()},
        c);
    return dx;
  }

  /// Each row's loss [N] in the compute type, divided by what the reduction `how` divides by.
  template <class T, class S, class SL, class D>
  Tensor<compute_t<T>, SL, D> rows(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels,
                                   Reduction how) const {
    const int device = kiln::detail::pass_device(logits);
    const kiln::detail::device_scope<D> on(device);  // the logits' GPU, whichever is current
    const auto den = count(logits, labels, how);
    Tensor<compute_t<T>, SL, D> out(labels.extents(), device);
    kiln::detail::executor<D>::for_each(
        logits.size(0),
        detail::CrossEntropyRows<T>{logits.data(), labels.data(), out.data(), logits.size(1), ignore_index,
                                    den.den, eps<T>(), den.weights.data()},
        logits.size(1));
    return out;
  }
  /// dL/dlogits for `how` (sum for the unreduced rows), times `upstream[n]` per row where given.
  template <class T, class S, class SL, class D>
  Tensor<T, S, D> gradient(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels,
                           LossScale scale, Reduction how, const compute_t<T>* upstream) const {
    const int device = kiln::detail::pass_device(logits);
    const kiln::detail::device_scope<D> on(device);
    const auto den = count(logits, labels, how);
    Tensor<T, S, D> dx(logits.extents(), device);
    const index_t n = logits.size(0), c = logits.size(1);
    const auto per_row = detail::GradFactor<compute_t<T>>::make(scale, 1.0, den.den);
    if (!fusion_enabled()) {
      // log_softmax and nll_loss's gradient in the compute type (fp32 for 16-bit logits, as autocast).
      Tensor<compute_t<T>, S, D> lsm(logits.extents(), device), g(logits.extents(), device);
      kiln::detail::executor<D>::for_each(n, detail::LogSoftmaxRows<T>{logits.data(), lsm.data(), c}, c);
      kiln::detail::executor<D>::for_each(
          n,
          detail::NllGradRows<T>{labels.data(), g.data(), c, ignore_index, per_row, eps<T>(), upstream,
                                 den.weights.data()},
          c);
      kiln::detail::executor<D>::for_each(
          n, detail::LogSoftmaxGradRows<T>{lsm.data(), g.data(), dx.data(), c}, c);
      return dx;
    }
    kiln::detail::executor<D>::for_each(
        n,
        detail::CrossEntropyGrad<T>{logits.data(), labels.data(), dx.data(), c, ignore_index, per_row,
                                    eps<T>(), upstream, den.weights.data(), den.weights.sum},
        c);
    return dx;
  }

  /// Checks the shapes, label_smoothing, the weights and the labels (in that order), and counts what the
  /// reduction `how` divides by.
  template <class T, class S, class SL, class D>
  detail::LabelCount<compute_t<T>, D> count(const Tensor<T, S, D>& logits,
                                            const Tensor<std::int64_t, SL, D>& labels, Reduction how) const {
    detail::check_label_rows("kiln::nn::CrossEntropyLoss", "logits", logits, labels);
    check_smoothing();
    return detail::count_labels("kiln::nn::CrossEntropyLoss", logits, labels, ignore_index, how, weight);
  }
};

/// Negative log-likelihood of log-probabilities [N, C] (a LogSoftmax's output) against integer class
/// labels [N] (int64): -x[n, y[n]], mean over the rows whose label is not `ignore_index`, as
/// torch.nn.NLLLoss(); LogSoftmax + NLLLoss is CrossEntropyLoss in two steps. `ignore_index` (default
/// -100), `reduction` (mean or sum), `unreduced` (torch's 'none') and a label outside [0, C) behave as
/// CrossEntropyLoss's. The gradient is -scale / (rows counted; 1 for a sum) at each row's label and 0
/// elsewhere, one pass (plus the count of a mean on the GPU); it never reads the log-probabilities, so
/// a non-finite one gives no NaN in it (as torch's). `weight` is torch's class weights, as
/// CrossEntropyLoss's: -w[y[n]] x[n, y[n]], a mean divided by the weights of the rows that count.
/// Example:
///   kiln::nn::NLLLoss nll;                     // for a Sequential<..., kiln::nn::LogSoftmax<>>
///   auto loss = nll(logp, labels);             // rank-0 tensor
///   auto dlogp = nll.backward(logp, labels);   // [N, C]
struct NLLLoss {
  std::vector<double> weight = {};  ///< torch's class weights: one per class, or empty (all 1)
  std::int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;

  // Labels of another integer type than std::int64_t: one error that says so (not "no match for call").
  template <class T, class S, class L, class SL, class D>
    requires(std::is_integral_v<L> && !std::is_same_v<L, std::int64_t>)
  typename detail::labels_must_be_int64<L, Tensor<compute_t<T>, Shape<>, D>>::type operator()(
      const Tensor<T, S, D>&, const Tensor<L, SL, D>&) const {
    return {};
  }
  template <class T, class S, class L, class SL, class D>
    requires(std::is_integral_v<L> && !std::is_same_v<L, std::int64_t>)
  typename detail::labels_must_be_int64<L, Tensor<T, S, D>>::type backward(const Tensor<T, S, D>&,
                                                                            const Tensor<L, SL, D>&,
                                                                            LossScale = {}) const {
    return {};
  }

  template <class T, class S, class SL, class D>
  Tensor<compute_t<T>, Shape<>, D> operator()(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels) const {
    kiln::detail::check_same_device("kiln::nn::NLLLoss", logp, labels);
    const auto terms = rows(logp, labels, reduction);  // each divided by the mean's count
    return logp.size(0) == 0 && reduction == Reduction::mean ? mean(terms) : sum(terms);  // no rows: 0 / 0
  }
  /// dL/dlogp: -scale / (rows not ignored; 1 for a sum) at each row's label (times its weight, over the
  /// weights, with weights), 0 elsewhere and on ignored rows, `scale` the loss's own gradient (1 for a
  /// plain step).
  template <class T, class S, class SL, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels,
                           LossScale scale = {}) const {
    kiln::detail::check_same_device("kiln::nn::NLLLoss::backward", logp, labels);
    return gradient(logp, labels, scale, reduction, nullptr);
  }
  /// Each row's loss [N] (the labels' shape) in the compute type: torch's NLLLoss(reduction='none'),
  /// ignored rows 0. One pass, no count.
  template <class T, class S, class SL, class D>
  Tensor<compute_t<T>, SL, D> unreduced(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels) const {
    kiln::detail::check_same_device("kiln::nn::NLLLoss::unreduced", logp, labels);
    return rows(logp, labels, Reduction::sum);
  }
  /// The gradient through `unreduced` of an upstream gradient `dloss` [N]: -scale dloss[n] at row n's
  /// label, 0 on ignored rows (whatever their dloss).
  template <class T, class S, class SL, class SG, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    static_assert(SG::rank == 1, "kiln::nn::NLLLoss::backward: dloss must be [N], one gradient per row");
    kiln::detail::check_same_device("kiln::nn::NLLLoss::backward", logp, labels);
    detail::check_row_gradient("kiln::nn::NLLLoss::backward", "log-probabilities", logp, dloss);
    return gradient(logp, labels, scale, Reduction::sum, dloss.data());
  }

  /// torch's K-dimensional NLL: log-probabilities [N, C, d1, ..., dk] against labels [N, d1, ..., dk], the
  /// positions as rows (CrossEntropyLoss's K-dimensional form has the details).
  template <class T, class S, class SL, class D>
    requires(S::rank > 2)
  Tensor<compute_t<T>, Shape<>, D> operator()(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels) const {
    detail::check_label_map("kiln::nn::NLLLoss", logp, labels, ignore_index);
    return (*this)(detail::class_last_rows(logp), detail::flat_rows(labels));
  }
  template <class T, class S, class SL, class D>
    requires(S::rank > 2)
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels,
                           LossScale scale = {}) const {
    detail::check_label_map("kiln::nn::NLLLoss::backward", logp, labels, ignore_index);
    return detail::scores_layout(backward(detail::class_last_rows(logp), detail::flat_rows(labels), scale),
                                 logp.extents());
  }
  template <class T, class S, class SL, class D>
    requires(S::rank > 2)
  Tensor<compute_t<T>, SL, D> unreduced(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels) const {
    detail::check_label_map("kiln::nn::NLLLoss::unreduced", logp, labels, ignore_index);
    return unreduced(detail::class_last_rows(logp), detail::flat_rows(labels)).template reshape<SL>(labels.extents());
  }
  template <class T, class S, class SL, class SG, class D>
    requires(S::rank > 2)
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels,
                           const Tensor<compute_t<T>, SG, D>& dloss, LossScale scale = {}) const {
    detail::check_label_map("kiln::nn::NLLLoss::backward", logp, labels, ignore_index);
    detail::check_label_map("kiln::nn::NLLLoss::backward", "dloss", logp, dloss);
    return detail::scores_layout(
        backward(detail::class_last_rows(logp), detail::flat_rows(labels), detail::flat_rows(dloss), scale),
        logp.extents());
  }

  /// What a mean divides by: the labels [N] (on the host) that are not ignore_index, or their classes'
  /// weights (DataParallel's shares).
  template <class SL>
  double counted(const Tensor<std::int64_t, SL, Cpu>& labels) const {
    return detail::count_kept(labels, ignore_index, weight);
  }

 private:
  template <class T, class S, class SL, class D>
  detail::LabelCount<compute_t<T>, D> count(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels,
                                            Reduction how) const {
    detail::check_label_rows("kiln::nn::NLLLoss", "log-probabilities", logp, labels);
    return detail::count_labels("kiln::nn::NLLLoss", logp, labels, ignore_index, how, weight);
  }
  /// Each row's loss [N] in the compute type, divided by what the reduction `how` divides by.
  template <class T, class S, class SL, class D>
  Tensor<compute_t<T>, SL, D> rows(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels,
                                   Reduction how) const {
    const int device = kiln::detail::pass_device(logp);
    const kiln::detail::device_scope<D> on(device);
    const auto den = count(logp, labels, how);
    Tensor<compute_t<T>, SL, D> out(labels.extents(), device);
    kiln::detail::executor<D>::for_each(
        logp.size(0), detail::NllRows<T>{logp.data(), labels.data(), out.data(), logp.size(1), ignore_index, den.den,
                                         den.weights.data()});
    return out;
  }
  template <class T, class S, class SL, class D>
  Tensor<T, S, D> gradient(const Tensor<T, S, D>& logp, const Tensor<std::int64_t, SL, D>& labels, LossScale scale,
                           Reduction how, const compute_t<T>* upstream) const {
    const int device = kiln::detail::pass_device(logp);
    const kiln::detail::device_scope<D> on(device);
    const auto den = count(logp, labels, how);
    Tensor<T, S, D> dx(logp.extents(), device);
    const auto per_row = detail::GradFactor<compute_t<T>>::make(scale, 1.0, den.den);
    kiln::detail::executor<D>::for_each(
        logp.size(0), detail::NllGradRows<T, T>{labels.data(), dx.data(), logp.size(1), ignore_index, per_row,
                                                compute_t<T>(0), upstream, den.weights.data()},
        logp.size(1));
    return dx;
  }
};

}  // namespace kiln::nn
