/// Losses with mean reduction: MSELoss and CrossEntropyLoss (value, and gradient w.r.t. the input).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/fusion.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

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
/// A loss gradient's factor num * scale / den, rounded to V: computed once on the host, or for a device
/// scale where it is read, with the host's formula (the same bits either way).
template <class V>
struct GradFactor {
  V host;
  const double* scale;
  double num, den;
  static GradFactor make(LossScale s, double num, double den) {
    return {static_cast<V>(num * s.value / den), s.device, num, den};
  }
  KILN_HOST_DEVICE KILN_FORCEINLINE V get() const { return scale ? static_cast<V>(num * *scale / den) : host; }
};
/// g = (pred - target) k, k from the device (MSELoss::backward with a device scale).
template <class T>
struct MseGrad {
  const T* pred;
  const T* target;
  T* g;
  GradFactor<compute_t<T>> factor;
  KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t i) const {
    g[i] = from_compute<T>((to_compute(pred[i]) - to_compute(target[i])) * factor.get());
  }
  Traffic traffic(index_t n) const { return {3 * kiln::detail::bytes_of<T>(n), 2 * static_cast<std::uint64_t>(n)}; }
};
}  // namespace detail

/// mean((pred - target)^2), as torch.nn.MSELoss(). Shapes: pred and target alike -> a scalar.
/// Example:
///   kiln::nn::MSELoss mse;
///   auto loss = mse(pred, target);          // rank-0 tensor: loss.item()
///   auto dpred = mse.backward(pred, target);  // dL/dpred, [N, 1]
struct MSELoss {
  template <class T, class S, class D>
  auto operator()(const Tensor<T, S, D>& pred, const Tensor<T, S, D>& target) const {
    const auto d = pred - target;
    return mean(d * d);  // one pass
  }
  /// 2 (pred - target) / numel, times the loss's own gradient `scale` (1 for a plain step; a device
  /// scale is read by the pass, which then stays one pass also with fusion off).
  template <class T, class S, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& pred, const Tensor<T, S, D>& target, LossScale scale = {}) const {
    Tensor<T, S, D> g(pred.extents(), pred.device_index());
    const auto f = detail::GradFactor<compute_t<T>>::make(scale, 2.0, static_cast<double>(pred.numel()));
    if (scale.device == nullptr) {
      g = (pred - target) * f.host;
      return g;
    }
    kiln::detail::executor<D>::for_each(g.numel(), detail::MseGrad<T>{pred.data(), target.data(), g.data(), f});
    return g;
  }
};

namespace detail {
/// Row n of the logits: m = max, lse = m + log Σ exp(x - m) (stable for large logits).
template <class T>
KILN_HOST_DEVICE KILN_FORCEINLINE compute_t<T> row_logsumexp(const T* x, index_t c) {
  using V = compute_t<T>;
  V m = -static_cast<V>(INFINITY);
  for (index_t j = 0; j < c; ++j) {
    const V v = to_compute(x[j]);
    m = (v > m || v != v) ? v : m;
  }
  V s = 0;
  for (index_t j = 0; j < c; ++j) s += ops::detail::exp_(to_compute(x[j]) - m);
  return m + ops::detail::log_(s);
}
/// loss[n] = lse(x[n]) - x[n, y[n]]; NaN for a label outside [0, C).
template <class T>
struct CrossEntropyRows {
  const T* x;
  const std::int64_t* y;
  compute_t<T>* loss;
  index_t c;
  KILN_HOST_DEVICE void operator()(index_t n) const {
    const T* row = x + n * c;
    const std::int64_t k = y[n];
    loss[n] = (k < 0 || k >= c) ? static_cast<compute_t<T>>(NAN) : row_logsumexp(row, c) - to_compute(row[k]);
  }
  /// The logits and labels read, one loss per row written; the log-sum-exp (a max, a subtract, an exp
  /// and an add per logit) and the row's last two.
  Traffic traffic(index_t rows) const {
    return {kiln::detail::bytes_of<T>(rows * c) + kiln::detail::bytes_of<std::int64_t>(rows) +
                kiln::detail::bytes_of<compute_t<T>>(rows),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(4 * c + 2)};
  }
};
/// dx[n, j] = scale (softmax(x[n])_j - [j == y[n]]) for row n.
template <class T>
struct CrossEntropyGrad {
  const T* x;
  const std::int64_t* y;
  T* dx;
  index_t c;
  GradFactor<compute_t<T>> factor;
  KILN_HOST_DEVICE void operator()(index_t n) const {
    using V = compute_t<T>;
    const V scale = factor.get();
    const T* row = x + n * c;
    const V lse = row_logsumexp(row, c);
    for (index_t j = 0; j < c; ++j) {
      const V p = ops::detail::exp_(to_compute(row[j]) - lse);
      dx[n * c + j] = from_compute<T>(scale * (p - (j == y[n] ? V(1) : V(0))));
    }
  }
  /// The logits and labels read, the gradient written; the log-sum-exp, then a subtract, an exp, the
  /// one-hot subtract and the scale per logit.
  Traffic traffic(index_t rows) const {
    return {2 * kiln::detail::bytes_of<T>(rows * c) + kiln::detail::bytes_of<std::int64_t>(rows),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(8 * c + 1)};
  }
};

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
    const C lse = row_logsumexp(row, c);
    for (index_t j = 0; j < c; ++j) out[n * c + j] = to_compute(row[j]) - lse;
  }
  Traffic traffic(index_t rows) const {
    return {kiln::detail::bytes_of<T>(rows * c) + kiln::detail::bytes_of<C>(rows * c),
            static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(5 * c + 1)};
  }
};
/// g[n, :] = -scale at the label, 0 elsewhere (NaN rows for a label outside [0, C)).
template <class T>
struct NllGradRows {
  using C = compute_t<T>;
  const std::int64_t* y;
  C* g;
  index_t c;
  GradFactor<C> factor;
  KILN_HOST_DEVICE void operator()(index_t n) const {
    const C scale = factor.get();
    const std::int64_t k = y[n];
    const bool bad = k < 0 || k >= c;
    for (index_t j = 0; j < c; ++j)
      g[n * c + j] = bad ? static_cast<C>(NAN) : (j == k ? -scale : C(0));
  }
  Traffic traffic(index_t rows) const {
    return {kiln::detail::bytes_of<std::int64_t>(rows) + kiln::detail::bytes_of<T>(rows * c), 0};
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
}  // namespace detail

/// Cross entropy of logits [N, C] against integer class labels [N] (int64), mean over the batch:
/// torch.nn.CrossEntropyLoss() = log-softmax + NLL in one stable pass (logits of 1e4 are fine).
/// A label outside [0, C) throws kiln::ValueError on the CPU and yields a NaN loss on the GPU.
/// Example:
///   kiln::nn::CrossEntropyLoss ce;
///   auto loss = ce(logits, labels);               // rank-0 tensor
///   auto dlogits = ce.backward(logits, labels);  // [N, C]
struct CrossEntropyLoss {
  template <class T, class S, class SL, class D>
  Tensor<compute_t<T>, Shape<>, D> operator()(const Tensor<T, S, D>& logits,
                                              const Tensor<std::int64_t, SL, D>& labels) const {
    check(logits, labels);
    Tensor<compute_t<T>, Shape<dyn>, D> rows(Extents<Shape<dyn>>(logits.size(0)), logits.device_index());
    kiln::detail::executor<D>::for_each(
        logits.size(0), detail::CrossEntropyRows<T>{logits.data(), labels.data(), rows.data(), logits.size(1)});
    if constexpr (std::is_same_v<D, Cpu>) {
      for (index_t n = 0; n < rows.numel(); ++n)
        if (std::isnan(rows[n]) && (labels[n] < 0 || labels[n] >= logits.size(1)))
          throw ValueError("kiln::nn::CrossEntropyLoss: label " + std::to_string(labels[n]) + " at index " +
                           std::to_string(n) + " is outside [0, " + std::to_string(logits.size(1)) + ")");
    }
    return mean(rows);
  }
  /// dL/dlogits = (softmax(logits) - onehot(labels)) / N, times `scale` (1 for a plain step). One pass;
  /// with fusion off (kiln::Unfused) three, as PyTorch's autograd runs it: log_softmax, nll_loss's
  /// backward, log_softmax's backward.
  template <class T, class S, class SL, class D>
  Tensor<T, S, D> backward(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels,
                           LossScale scale = {}) const {
    check(logits, labels);
    Tensor<T, S, D> dx(logits.extents(), logits.device_index());
    const index_t n = logits.size(0), c = logits.size(1);
    const auto per_row = detail::GradFactor<compute_t<T>>::make(scale, 1.0, static_cast<double>(n > 0 ? n : 1));
    if (!fusion_enabled()) {
      // log_softmax and nll_loss's gradient in the compute type (fp32 for 16-bit logits, as autocast).
      Tensor<compute_t<T>, S, D> lsm(logits.extents(), logits.device_index()), g(logits.extents(), logits.device_index());
      kiln::detail::executor<D>::for_each(n, detail::LogSoftmaxRows<T>{logits.data(), lsm.data(), c});
      kiln::detail::executor<D>::for_each(n, detail::NllGradRows<T>{labels.data(), g.data(), c, per_row});
      kiln::detail::executor<D>::for_each(n, detail::LogSoftmaxGradRows<T>{lsm.data(), g.data(), dx.data(), c});
      return dx;
    }
    kiln::detail::executor<D>::for_each(n, detail::CrossEntropyGrad<T>{logits.data(), labels.data(), dx.data(), c, per_row});
    return dx;
  }

 private:
  template <class T, class S, class SL, class D>
  static void check(const Tensor<T, S, D>& logits, const Tensor<std::int64_t, SL, D>& labels) {
    static_assert(S::rank == 2, "kiln::nn::CrossEntropyLoss: logits must be [N, C]");
    static_assert(SL::rank == 1, "kiln::nn::CrossEntropyLoss: labels must be [N] class indices (int64)");
    if (labels.size(0) != logits.size(0))
      throw ShapeError("kiln::nn::CrossEntropyLoss: " + std::to_string(logits.size(0)) + " rows of logits " +
                       to_string(logits.extents()) + " but " + std::to_string(labels.size(0)) + " labels");
  }
};

}  // namespace kiln::nn
