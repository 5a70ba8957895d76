/// BatchNorm1d, BatchNorm2d: y = (x - mean) / sqrt(var + eps) · weight + bias per channel, as
/// torch.nn.BatchNorm1d / BatchNorm2d, with running statistics kept in the model's buffer arena; and the
/// layer they share with SyncBatchNorm (kiln/nn/sync_batchnorm.hpp), whose synchronised passes are here.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/real.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/detail/conv_functors.hpp"
#include "kiln/nn/detail/norm_rows.hpp"
#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/nn/replica_group.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// BatchNorm's momentum for torch's `momentum=None`: the running statistics are the cumulative
/// average of every batch's (factor 1 / num_batches_tracked) instead of an exponential one.
inline constexpr float cumulative_average = -1.0f;

namespace detail {
/// Which of a channel's `count` elements (batch and spatial positions, j = n·L + l) the `chunks` threads
/// of that channel take: interleaved on a GPU (thread k takes k, k + chunks, ...: neighbouring threads
/// read neighbouring addresses), in blocks on the CPU (thread k takes one contiguous run).
struct ChannelChunks {
  index_t count, chunks, channels, length;  // length L: the spatial size (1 for [N, C])
  bool interleaved;
  /// Call i's channel and chunk: chunk-major (i = k·C + c) for interleaved chunks of [N, C], where
  /// neighbouring channels are neighbouring addresses; channel-major (i = c·chunks + k) otherwise.
  KILN_HOST_DEVICE KILN_FORCEINLINE bool chunk_major() const { return interleaved && length == 1; }
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t channel_of(index_t i) const {
    return chunk_major() ? i % channels : i / chunks;
  }
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t chunk_of(index_t i) const { return chunk_major() ? i / channels : i % chunks; }
  /// The call (and partial slot) of channel c's chunk k.
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t call(index_t c, index_t k) const {
    return chunk_major() ? k * channels + c : c * chunks + k;
  }
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t block() const { return (count + chunks - 1) / chunks; }
  /// How many elements chunk k holds.
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t size(index_t k) const {
    if (interleaved) return k < count ? (count - k + chunks - 1) / chunks : 0;
    const index_t begin = k * block();
    return begin >= count ? 0 : (count - begin < block() ? count - begin : block());
  }
  /// The flat index in [N, C, L] of the t-th element of chunk k of channel c.
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t at(index_t c, index_t k, index_t t) const {
    const index_t j = interleaved ? k + t * chunks : k * block() + t;
    const index_t n = j / length;
    return (n * channels + c) * length + (j - n * length);
  }
  /// What `calls` chunk passes move and compute: two reads of every element of type T (two passes over
  /// x, or dy and x), two doubles written per call, four operations per element.
  template <class T>
  Traffic chunk_traffic(index_t calls) const {
    const index_t elements = count * channels;
    return {2 * kiln::detail::bytes_of<T>(elements) + kiln::detail::bytes_of<double>(2 * calls),
            4 * static_cast<std::uint64_t>(elements)};
  }
  /// a += Σ A(at), b += Σ B(at) over the elements of chunk k of channel c, f(at, a_lane, b_lane) adding
  /// one element's terms (at: its flat index). Blocked chunks walk their contiguous runs (one division
  /// per run, not per element), each summed by lane_sums (8 interleaved lanes: the adds do not wait for
  /// each other and the loop vectorises); a run shorter than the 8 lanes (BatchNorm1d's over [N, C] are
  /// one value long) is added directly. Interleaved chunks (a GPU thread's few elements) keep one sum.
  /// The order is fixed, so the sums are the same on every run.
  template <class F>
  KILN_HOST_DEVICE KILN_FORCEINLINE void sum(index_t c, index_t k, double& a, double& b, F&& f) const {
    sum_staged(c, k, a, b, NoStage{}, f);
  }
  /// sum()'s stage: nothing, and no pieces.
  struct NoStage {
    KILN_HOST_DEVICE KILN_FORCEINLINE void operator()(index_t, index_t) const {}
  };
  /// The most elements one stage of sum_staged holds (a multiple of the lanes).
  static constexpr index_t stage_tile = 256;
  /// sum(), with stage(first, last) called before f reads the elements [first, last): a run's pieces of
  /// at most stage_tile elements (one element at a time when interleaved). Per-element work done in a
  /// stage's own loop (a fused activation's derivative, into a buffer that f reads) vectorises where,
  /// inside f, it would not. The sums and their order are sum()'s: the lanes carry across the pieces.
  template <class Stage, class F>
  KILN_HOST_DEVICE KILN_FORCEINLINE void sum_staged(index_t c, index_t k, double& a, double& b, Stage&& stage,
                                                    F&& f) const {
    const index_t m = size(k);
    if (interleaved) {
      for (index_t t = 0; t < m; ++t) {
        const index_t e = at(c, k, t);
        stage(e, e + 1);
        f(e, a, b);
      }
      return;
    }
    for (index_t j = k * block(), end = k * block() + m; j < end;) {
      const index_t n = j / length, l = j - n * length;
      const index_t run = length - l < end - j ? length - l : end - j;
      const index_t base = (n * channels + c) * length + l;
      if (run < kiln::detail::sum_lanes) {
        stage(base, base + run);
        for (index_t t = 0; t < run; ++t) f(base + t, a, b);
      } else {
        kiln::detail::LaneSums<double> lanes;
        if constexpr (std::is_same_v<std::remove_cvref_t<Stage>, NoStage>) {
          lanes.add(base, base + run, f);
        } else {
          for (index_t first = base; first < base + run; first += stage_tile) {
            const index_t last = base + run - first < stage_tile ? base + run : first + stage_tile;
            stage(first, last);
            lanes.add(first, last, f);
          }
        }
        lanes.finish(a, b);
      }
      j += run;
    }
  }
};

/// Per (channel c, chunk k), call cc.call(c, k): the chunk's mean and its sum of squared deviations
/// from it (two passes over the chunk, in double), to part[2i] and part[2i + 1].
template <class T>
struct BatchNormStatsChunks {
  const T* x;
  double* part;
  ChannelChunks cc;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t c = cc.channel_of(i), k = cc.chunk_of(i), m = cc.size(k);
    double s = 0, q = 0, unused = 0;
    cc.sum(c, k, s, unused,
           [&](index_t at, double& a, double&) { a += static_cast<double>(to_compute(x[at])); });
    const double mean = m > 0 ? s / static_cast<double>(m) : 0.0;
    cc.sum(c, k, q, unused, [&](index_t at, double& a, double&) {
      const double d = static_cast<double>(to_compute(x[at])) - mean;
      a += d * d;
    });
    part[2 * i] = mean;
    part[2 * i + 1] = q;
  }
  /// x read twice, the partials written; a subtract, multiply and two adds per element.
  Traffic traffic(index_t n) const { return cc.template chunk_traffic<T>(n); }
};

/// A channel's count, mean and sum of squared deviations, merged part by part (Chan et al.): the
/// chunks of one batch, or the replicas' batches under SyncBatchNorm.
struct ChanMoments {
  double n = 0, mean = 0, m2 = 0;
  KILN_HOST_DEVICE KILN_FORCEINLINE void add(double nb, double mb, double qb) {
    if (nb == 0) return;
    const double total = n + nb, delta = mb - mean;
    mean += delta * nb / total;
    m2 += qb + delta * delta * n * nb / total;
    n = total;
  }
};

/// Channel c's statistics from its moments: stats[c] = mean, stats[C + c] = 1 / sqrt(var + eps) with the
/// biased variance; with running statistics (running non-null) they move towards the batch's, by
/// `momentum` or, for the cumulative average, by 1 / (tracked + 1), with the unbiased variance (torch's
/// update).
template <class M>
KILN_HOST_DEVICE KILN_FORCEINLINE void batch_norm_finish(index_t c, index_t channels, const ChanMoments& s,
                                                         double* stats, M* running, double eps, double momentum) {
  stats[c] = s.mean;
  stats[channels + c] = 1.0 / ops::detail::sqrt_(s.m2 / s.n + eps);
  if (running) {
    const index_t C = channels;
    const double f = momentum < 0 ? 1.0 / (static_cast<double>(running[2 * C]) + 1.0) : momentum;
    const double unbiased = s.m2 / (s.n - 1);
    running[c] = static_cast<M>((1 - f) * static_cast<double>(running[c]) + f * s.mean);
    running[C + c] = static_cast<M>((1 - f) * static_cast<double>(running[C + c]) + f * unbiased);
  }
}

/// Channel c's moments over this batch: its chunks' means and squared deviations merged.
KILN_HOST_DEVICE KILN_FORCEINLINE ChanMoments merge_chunks(const double* part, const ChannelChunks& cc, index_t c) {
  ChanMoments s;
  for (index_t k = 0; k < cc.chunks; ++k)
    s.add(static_cast<double>(cc.size(k)), part[2 * cc.call(c, k)], part[2 * cc.call(c, k) + 1]);
  return s;
}

/// Per channel c: the chunks merged into the batch's mean and biased variance (batch_norm_finish:
/// stats, and the running statistics when running is non-null; momentum < 0: cumulative average).
template <class M>
struct BatchNormStatsMerge {
  const double* part;
  double* stats;
  M* running;        // running_mean [C], running_var [C], num_batches_tracked; null: not tracked
  ChannelChunks cc;
  double eps, momentum;  // momentum < 0: cumulative average
  KILN_HOST_DEVICE void operator()(index_t c) const {
    batch_norm_finish(c, cc.channels, merge_chunks(part, cc, c), stats, running, eps, momentum);
  }
  /// The partials read, the statistics and running statistics written; the merge per chunk.
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<double>(2 * n * cc.chunks + 2 * n) + kiln::detail::bytes_of<M>(4 * n),
            8 * static_cast<std::uint64_t>(n * cc.chunks)};
  }
};

/// SyncBatchNorm, per channel c: this replica's moments packed for the all-gather, as
/// moments = [count, mean_0 .. mean_C-1, m2_0 .. m2_C-1] (the count written by channel 0).
struct BatchNormLocalMoments {
  const double* part;
  double* moments;
  ChannelChunks cc;
  KILN_HOST_DEVICE void operator()(index_t c) const {
    const ChanMoments s = merge_chunks(part, cc, c);
    if (c == 0) moments[0] = static_cast<double>(cc.count);
    moments[1 + c] = s.mean;
    moments[1 + cc.channels + c] = s.m2;
  }
  /// The partials read, the packed moments written; the merge per chunk.
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<double>(2 * n * cc.chunks + 2 * n + 1), 8 * static_cast<std::uint64_t>(n * cc.chunks)};
  }
};

/// SyncBatchNorm, per channel c: every replica's packed moments (gathered: `replicas` blocks of
/// 2C + 1, by rank) merged in rank order into the global batch's statistics (batch_norm_finish), the
/// same on every replica.
template <class M>
struct BatchNormGatheredMerge {
  const double* gathered;
  double* stats;
  M* running;
  index_t channels, replicas;
  double eps, momentum;
  KILN_HOST_DEVICE void operator()(index_t c) const {
    ChanMoments s;
    for (index_t r = 0; r < replicas; ++r) {
      const double* g = gathered + r * (2 * channels + 1);
      s.add(g[0], g[1 + c], g[1 + channels + c]);
    }
    batch_norm_finish(c, channels, s, stats, running, eps, momentum);
  }
  /// Every replica's moments read, the statistics and running statistics written; the merge per replica.
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<double>(2 * n * replicas + 2 * n) + kiln::detail::bytes_of<M>(4 * n),
            8 * static_cast<std::uint64_t>(n * replicas)};
  }
};

/// Per channel c in evaluation: the running statistics as stats (mean, 1 / sqrt(var + eps)).
template <class M>
struct BatchNormRunningStats {
  const M* running;
  double* stats;
  index_t channels;
  double eps;
  KILN_HOST_DEVICE void operator()(index_t c) const {
    stats[c] = static_cast<double>(running[c]);
    stats[channels + c] = 1.0 / ops::detail::sqrt_(static_cast<double>(running[channels + c]) + eps);
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<M>(2 * n) + kiln::detail::bytes_of<double>(2 * n), 2 * static_cast<std::uint64_t>(n)};
  }
};

/// y = E((x - mean_c) · invstd_c · weight_c + bias_c) over [N, C, L] (weight and bias null: 1 and 0), the
/// normalised value in double, rounded to T, then E (an activation run as its epilogue, nn/epilogue.hpp;
/// Identity: none) in T's compute type, rounded again: the bits of BatchNorm then the activation's layer.
/// z (non-null) keeps the normalised value (the activation's input, for a derivative that needs it).
/// One call per element (a GPU), or per [n, c] plane of L elements (`planes`: the CPU, a vector loop with
/// the channel's constants). The first call also counts the batch in num_batches_tracked (tracked
/// non-null): a pass after the merge that reads it.
template <class T, class M, class E = epilogue::Identity>
struct BatchNormApply {
  const T* x;
  T* y;
  T* z;
  const double* stats;
  const M* weight;
  const M* bias;
  M* tracked;
  index_t channels, length;
  bool planes;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t c = (planes ? i : i / length) % channels;
    const double mean = stats[c];
    double scale = stats[channels + c], shift = 0;
    if (weight) scale *= static_cast<double>(weight[c]), shift = static_cast<double>(bias[c]);
    const index_t o = planes ? i * length : i, n = planes ? length : 1;
    const auto normalised = [&](index_t l) {
      return from_compute<T>(
          static_cast<compute_t<T>>((static_cast<double>(to_compute(x[o + l])) - mean) * scale + shift));
    };
    const auto activate = [&](T v) { return from_compute<T>(E::forward(to_compute(v))); };
    // omp simd: g++ -O2 (README.md's line) does not vectorise these loops on its own; with an activation
    // its select then stays a branch, taken at random (a BatchNorm-ReLU pass took 3x as long)
    if constexpr (E::identity) {
      KILN_PRAGMA_OMP(simd)
      for (index_t l = 0; l < n; ++l) y[o + l] = normalised(l);
    } else if (KILN_DEVICE_PASS || n == 1) {  // (a GPU thread's element, or BatchNorm1d's over [N, C])
      for (index_t l = 0; l < n; ++l) {
        const T v = normalised(l);
        if (z) z[o + l] = v;
        y[o + l] = activate(v);
      }
    } else {
      // A plane: the normalised values first (into z, else y), a piece at a time, then the activation in
      // a loop of its own (an activation that calls the library, erf or exp, would keep the normalising
      // scalar).
      for (index_t first = 0; first < n; first += ChannelChunks::stage_tile) {
        const index_t m = n - first < ChannelChunks::stage_tile ? n - first : ChannelChunks::stage_tile;
        T* const out = y + o + first;
        T* const v = z ? z + o + first : out;
        KILN_PRAGMA_OMP(simd)
        for (index_t l = 0; l < m; ++l) v[l] = normalised(first + l);
        KILN_PRAGMA_OMP(simd)
        for (index_t l = 0; l < m; ++l) out[l] = activate(v[l]);
      }
    }
    if (tracked && i == 0) *tracked = *tracked + M(1);
  }
  /// x read, y (and z) written; a subtract, a multiply and an add per element, and the activation
  /// (n calls: elements, or planes).
  Traffic traffic(index_t n) const {
    const index_t elements = planes ? n * length : n;
    return {(z ? 3 : 2) * kiln::detail::bytes_of<T>(elements),
            (E::identity ? 3 : 4) * static_cast<std::uint64_t>(elements)};
  }
};

/// num_batches_tracked += 1 (for an empty batch, where nothing else changes).
template <class M>
struct BatchNormCountBatch {
  M* tracked;
  KILN_HOST_DEVICE void operator()(index_t) const { *tracked = *tracked + M(1); }
  Traffic traffic(index_t) const { return {2 * sizeof(M), 1}; }
};

/// dL/dz at flat index at for BatchNorm's output z: dy itself (E Identity), or through the fused
/// activation E's derivative from its saved value, rounded to T as the activation's own backward pass
/// rounds it.
template <class E, class T>
KILN_HOST_DEVICE KILN_FORCEINLINE T grad_through(const T* dy, const T* saved, index_t at) {
  if constexpr (E::identity) {
    (void)saved;
    return dy[at];
  } else {
    return from_compute<T>(E::backward(to_compute(dy[at]), to_compute(saved[at])));
  }
}

/// Per (channel c, chunk k): Σ dz and Σ dz (x - mean_c) over the chunk, in double, to part[2i] and
/// part[2i + 1], dz = dy, or dy through the fused activation E (grad_through; saved: E's output or input),
/// a piece of a run at a time into a buffer (a loop of its own, which vectorises).
template <class T, class E = epilogue::Identity>
struct BatchNormGradChunks {
  const T* dy;
  const T* saved;
  const T* x;
  const double* stats;
  double* part;
  ChannelChunks cc;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t c = cc.channel_of(i), k = cc.chunk_of(i);
    const double mean = stats[c];
    double s = 0, sx = 0;
    const auto add = [&](double g, index_t at, double& a, double& b) {
      a += g;
      b += g * (static_cast<double>(to_compute(x[at])) - mean);
    };
    const auto dz_at = [&](index_t at) {
      return static_cast<double>(to_compute(grad_through<E>(dy, saved, at)));
    };
    if (E::identity || KILN_DEVICE_PASS || cc.interleaved) {  // (a GPU thread's few elements: one at a time)
      cc.sum(c, k, s, sx, [&](index_t at, double& a, double& b) { add(dz_at(at), at, a, b); });
    } else {  // E's derivative a piece of a run at a time, in a loop of its own
      T dz[ChannelChunks::stage_tile];
      index_t from = 0;
      const auto stage = [&](index_t first, index_t last) {
        from = first;
        KILN_PRAGMA_OMP(simd)
        for (index_t l = first; l < last; ++l) dz[l - first] = grad_through<E>(dy, saved, l);
      };
      cc.sum_staged(c, k, s, sx, stage, [&](index_t at, double& a, double& b) {
        add(static_cast<double>(to_compute(dz[at - from])), at, a, b);
      });
    }
    part[2 * i] = s;
    part[2 * i + 1] = sx;
  }
  /// dy and x (and the saved value) read, the partials written; a subtract, multiply and two adds per
  /// element (and the derivative).
  Traffic traffic(index_t n) const {
    Traffic t = cc.template chunk_traffic<T>(n);
    if constexpr (!E::identity) {
      t.bytes += kiln::detail::bytes_of<T>(cc.count * cc.channels);
      t.ops += static_cast<std::uint64_t>(cc.count * cc.channels);
    }
    return t;
  }
};

/// Per channel c: the chunks' sums added; weight_grad += Σ dy x̂, bias_grad += Σ dy (when affine), and
/// coef[c] = Σ dy / count, coef[C + c] = Σ dy x̂ · invstd / count: with count the batch's elements per
/// channel, the means that dx subtracts under batch statistics (SyncBatchNorm: count 1, the sums that
/// the replicas add before dividing by the global count).
template <class M>
struct BatchNormGradMerge {
  const double* part;
  const double* stats;
  double* coef;
  M* weight_grad;
  M* bias_grad;
  ChannelChunks cc;
  double count;
  KILN_HOST_DEVICE void operator()(index_t c) const {
    double s = 0, sx = 0;
    for (index_t k = 0; k < cc.chunks; ++k) {
      s += part[2 * cc.call(c, k)];
      sx += part[2 * cc.call(c, k) + 1];
    }
    const double invstd = stats[cc.channels + c], n = count;
    if (weight_grad) {
      weight_grad[c] = static_cast<M>(static_cast<double>(weight_grad[c]) + sx * invstd);
      bias_grad[c] = static_cast<M>(static_cast<double>(bias_grad[c]) + s);
    }
    coef[c] = s / n;
    coef[cc.channels + c] = sx * invstd * invstd / n;
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<double>(2 * n * cc.chunks + 4 * n) + kiln::detail::bytes_of<M>(4 * n),
            2 * static_cast<std::uint64_t>(n * cc.chunks)};
  }
};

/// dx = weight_c · invstd_c · (dy - mean(dy)_c - (x - mean_c) · coef_c) under batch statistics
/// (training; the means are coef times coef_scale: 1, or 1 / the global count for SyncBatchNorm's
/// summed coefficients), dx = weight_c · invstd_c · dy under running ones (evaluation: constants); per
/// element or per plane (as BatchNormApply), in double and rounded once; dy through the fused activation
/// E first (grad_through).
template <class T, class M, class E = epilogue::Identity>
struct BatchNormGradInput {
  const T* dy;
  const T* saved;
  const T* x;
  T* dx;
  const double* stats;
  const double* coef;  // null: running statistics
  const M* weight;
  index_t channels, length;
  bool planes;
  double coef_scale = 1.0;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    using C = compute_t<T>;
    const index_t c = (planes ? i : i / length) % channels;
    double scale = stats[channels + c];
    if (weight) scale *= static_cast<double>(weight[c]);
    const double mean = stats[c], mean_dy = coef ? coef[c] * coef_scale : 0.0,
                 k = coef ? coef[channels + c] * coef_scale : 0.0;
    const index_t o = planes ? i * length : i, n = planes ? length : 1;
    const auto at = [](const T* p, index_t j) { return static_cast<double>(to_compute(p[j])); };
    const auto g = [&](index_t j) {
      return static_cast<double>(to_compute(grad_through<E>(dy, saved, j)));
    };
    if (coef) {
      KILN_PRAGMA_OMP(simd)
      for (index_t l = 0; l < n; ++l)
        dx[o + l] = from_compute<T>(static_cast<C>((g(o + l) - mean_dy - (at(x, o + l) - mean) * k) * scale));
    } else {
      KILN_PRAGMA_OMP(simd)
      for (index_t l = 0; l < n; ++l) dx[o + l] = from_compute<T>(static_cast<C>(g(o + l) * scale));
    }
  }
  Traffic traffic(index_t n) const {
    const index_t elements = planes ? n * length : n, reads = (coef ? 3 : 2) + (E::identity ? 0 : 1);
    return {reads * kiln::detail::bytes_of<T>(elements),
            ((coef ? 5 : 1) + (E::identity ? 0 : 1)) * static_cast<std::uint64_t>(elements)};
  }
};

/// How many chunks each channel's `count` elements are split into: on the CPU a fixed 2048 elements
/// each (so the sums do not depend on the thread count), on a GPU enough threads to fill it, each with
/// 32 elements or more.
template <class D>
index_t batch_norm_chunks(index_t channels, index_t count, int device) {
  if constexpr (std::is_same_v<D, Cpu>) {
    (void)channels, (void)device;
    return count > 2048 ? (count + 2047) / 2048 : 1;
  } else {
    const index_t want = kiln::detail::executor<D>::resident_threads(device) / channels;
    const index_t most = count / 32;
    return want < 1 || most < 1 ? 1 : (want < most ? want : most);
  }
}

/// BatchNorm over the channels (dimension 1) of inputs of rank MinRank to MaxRank: the shared layer of
/// BatchNorm1d, BatchNorm2d and SyncBatchNorm (Sync: training forwards of a model with a replica group
/// normalise by the statistics of every replica's batch together). Named::kind is torch's class name.
template <class Named, std::size_t MinRank, std::size_t MaxRank, index_t C, float Eps, float Momentum, bool Affine,
          bool Track, bool Sync = false>
struct BatchNormLayer {
  static_assert(C > 0, "kiln::nn::BatchNorm: the number of channels (features) must be positive");
  static_assert(Eps >= 0.0f,
                "kiln::nn::BatchNorm: eps must not be negative (0 as torch allows: a channel of "
                "one value then normalises to NaN)");
  static_assert(Momentum == cumulative_average || (Momentum >= 0.0f && Momentum <= 1.0f),
                "kiln::nn::BatchNorm: momentum must be in [0, 1], or kiln::nn::cumulative_average (torch's None)");

  template <class S>
  static constexpr bool accepts =
      S::rank >= MinRank && S::rank <= MaxRank && (S::extents[1] == C || S::extents[1] == dyn);
  template <class S>
  using output = S;
  /// What it takes where it is given S (for the error): S with C channels, of the nearest rank it takes.
  template <class S>
  using expects = typename with_channels<S, (S::rank < MinRank ? MinRank : S::rank > MaxRank ? MaxRank : S::rank),
                                         C>::type;

  template <class S, class P>
  class module {
   public:
    using T = typename P::precision::storage;
    using M = typename P::precision::master;
    using D = typename P::device;
    using input_shape = S;
    using output_shape = S;
    static constexpr index_t parameter_count = Affine ? 2 * C : 0;
    static constexpr index_t buffer_count = Track ? 2 * C + 1 : 0;

    void bind(M* params, M* grads, T*, int device) { p_ = params, g_ = grads, device_ = device; }
    /// torch's reset_parameters: weight 1, bias 0 (no draw from the generator).
    void reset_parameters(Generator&) {
      if constexpr (Affine) {
        std::vector<M> v(2 * C, M(0));
        for (index_t c = 0; c < C; ++c) v[static_cast<std::size_t>(c)] = M(1);
        Tensor<M, Shape<2 * C>, D>::from_blob(p_, {}, device_).copy_from(std::span<const M>(v));
      }
    }
    std::vector<ParameterInfo> parameters() const {
      if constexpr (Affine) return {{"weight", 0, C, {C}}, {"bias", C, C, {C}}};
      else return {};
    }
    void bind_buffers(M* buffers, int) { b_ = buffers; }
    /// running_mean 0, running_var 1, num_batches_tracked 0 (torch's reset_running_stats).
    void init_buffers(M* host) const {
      for (index_t c = 0; c < C; ++c) host[c] = M(0), host[C + c] = M(1);
      host[2 * C] = M(0);
    }
    std::vector<BufferInfo> buffers() const {
      return {{"running_mean", 0, C, {C}}, {"running_var", C, C, {C}}, {"num_batches_tracked", 2 * C, 1, {}, true}};
    }
    std::string name() const {
      return std::string(Named::kind) + "(" + std::to_string(C) + ", eps=" + detail::python_float(Eps) +
             ", momentum=" + (Momentum == cumulative_average ? std::string("None") : detail::python_float(Momentum)) +
             ", affine=" + (Affine ? "True" : "False") + ", track_running_stats=" + (Track ? "True" : "False") + ")";
    }

    /// Training (or no running statistics): normalised by the batch's mean and biased variance per
    /// channel, the running statistics moved towards them; evaluation: by the running statistics.
    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      return forward_fused<epilogue::Identity>(x, ctx);
    }
    /// weight_grad += Σ dy x̂, bias_grad += Σ dy; dx through the batch's statistics (training) or
    /// the running ones (evaluation); dx is empty when input_grad is false.
    /// SyncBatchNorm after a synchronised forward: the replicas add their sums of dy and dy x̂ before dx
    /// subtracts their means over the global batch (torch's; skipped, on every replica, when input_grad is
    /// false); weight_grad and bias_grad stay this replica's own (DistributedDataParallel averages them).
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy, bool input_grad = true) {
      return backward_fused<epilogue::Identity>(dy, input_grad);
    }

    /// y = E(BatchNorm(x)): the activation after it in a Sequential runs in its normalising pass, and
    /// its derivative in the two backward passes (nn/epilogue.hpp): the activation's own two passes
    /// over the batch are saved, the bits the same.
    static constexpr bool fuses_epilogue = true;
    template <class E>
    Tensor<T, S, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      check_channels(x);
      group_ = nullptr;
      saved_ = Tensor<T, S, D>();
      if constexpr (Sync)
        if (ctx.training && ctx.replicas != nullptr && ctx.replicas->size() > 1)
          return forward_synced<E>(x, ctx);
      const index_t length = spatial(x), count = x.size(0) * length;
      const bool batch = ctx.training || !Track;
      if (batch && count == 1)
        throw ValueError("kiln::nn::" + std::string(Named::kind) + ": expected more than 1 value per channel when " +
                         "training, got input " + to_string(x.extents()) + " (torch: ValueError)");
      Tensor<T, S, D> y(x.extents(), x.device_index());
      using Stats = Tensor<double, Shape<dyn>, D>;
      Stats stats(Extents<Shape<dyn>>(2 * C), x.device_index());
      M* running = Track && ctx.training ? b_ : nullptr;
      if (count == 0) {  // torch: an empty output, the batch counted, the statistics unchanged
        if (running) kiln::detail::executor<D>::for_each(1, BatchNormCountBatch<M>{running + 2 * C});
        x_ = Tensor<T, S, D>(), batch_ = batch;
        return y;
      }
      Tensor<T, S, D> z =
          keeps_input<E>(ctx) ? Tensor<T, S, D>(x.extents(), x.device_index()) : Tensor<T, S, D>();
      if (batch) {
        const ChannelChunks cc = chunks_of(x);
        Tensor<double, Shape<dyn>, D> part(Extents<Shape<dyn>>(2 * C * cc.chunks), x.device_index());
        kiln::detail::executor<D>::for_each(C * cc.chunks, BatchNormStatsChunks<T>{x.data(), part.data(), cc},
                                            cc.block());
        kiln::detail::executor<D>::for_each(
            C, BatchNormStatsMerge<M>{part.data(), stats.data(), running, cc, static_cast<double>(Eps), momentum_factor},
            cc.chunks);
      } else {
        kiln::detail::executor<D>::for_each(C, BatchNormRunningStats<M>{b_, stats.data(), C, static_cast<double>(Eps)});
      }
      normalise<E>(x, y, z, stats, running);
      x_ = ctx.grad ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
      stats_ = ctx.grad ? std::move(stats) : Stats();
      batch_ = batch;
      keep_activation<E>(ctx, y, z);
      return y;
    }

    /// backward() through E's derivative first (from the value forward_fused<E> kept): inside both
    /// passes for a derivative of the output (ReLU, Sigmoid, Tanh: a few operations); once, into dz, for
    /// one of the input (GELU, SiLU: erf, exp), which twice made BatchNorm2d + GELU forward and backward
    /// 31 ms where the two layers take 19 ([128, 16, 32, 32], 2 threads).
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, S, D>& dy, bool input_grad = true) {
      if constexpr (!E::identity && !E::saves_output) {
        if (dy.numel() != 0) {
          if (saved_.empty())
            throw Error("kiln::nn::" + std::string(Named::kind) + "::backward: no saved input; run forward "
                        "with gradients enabled first");
          Tensor<T, S, D> dz(dy.extents(), dy.device_index());
          kiln::detail::executor<D>::for_each(dz.numel(),
                                              EpilogueGrad<T, E>{dy.data(), saved_.data(), dz.data()});
          saved_ = Tensor<T, S, D>();
          return backward_fused<epilogue::Identity>(dz, input_grad);
        }
      }
      if (!x_.empty()) detail::check_backward_rows(Named::kind, dy.size(0), x_.size(0));  // (more would read past x_)
      if (dy.numel() == 0) {
        if (group_ != nullptr && input_grad) {  // the others wait for this replica's (zero) sums
          Tensor<double, Shape<dyn>, D> zeros(Extents<Shape<dyn>>(2 * C), dy.device_index());
          zeros.fill(0.0);
          group_->all_reduce_sum(zeros.data(), 2 * C, reduce_what());
        }
        group_ = nullptr;
        return input_grad ? Tensor<T, S, D>(dy.extents(), dy.device_index()) : Tensor<T, S, D>();
      }
      if (x_.empty() || (!E::identity && saved_.empty()))
        throw Error("kiln::nn::" + std::string(Named::kind) + "::backward: no saved input; run forward with "
                    "gradients enabled first");
      const T* saved = E::identity ? nullptr : saved_.data();
      const index_t length = spatial(dy);
      Tensor<double, Shape<dyn>, D> coef;
      if (Affine || batch_) {
        const ChannelChunks cc = chunks_of(dy);
        Tensor<double, Shape<dyn>, D> part(Extents<Shape<dyn>>(2 * C * cc.chunks), dy.device_index());
        kiln::detail::executor<D>::for_each(
            C * cc.chunks,
            BatchNormGradChunks<T, E>{dy.data(), saved, x_.data(), stats_.data(), part.data(), cc},
            cc.block());
        coef = Tensor<double, Shape<dyn>, D>(Extents<Shape<dyn>>(2 * C), dy.device_index());
        kiln::detail::executor<D>::for_each(
            C, BatchNormGradMerge<M>{part.data(), stats_.data(), coef.data(), Affine ? g_ : nullptr,
                                     Affine ? g_ + C : nullptr, cc, group_ ? 1.0 : static_cast<double>(cc.count)},
            cc.chunks);
        if (group_ != nullptr && input_grad) group_->all_reduce_sum(coef.data(), 2 * C, reduce_what());
      }
      Tensor<T, S, D> dx;
      if (input_grad) {
        dx = Tensor<T, S, D>(dy.extents(), dy.device_index());
        constexpr bool planes = std::is_same_v<D, Cpu>;
        kiln::detail::executor<D>::for_each(
            planes ? dy.size(0) * C : dy.numel(),
            BatchNormGradInput<T, M, E>{dy.data(), saved, x_.data(), dx.data(), stats_.data(),
                                        batch_ ? coef.data() : nullptr, Affine ? p_ : nullptr, C, length,
                                        planes, group_ ? 1.0 / global_count_ : 1.0},
            planes ? length : 1);
      }
      x_ = Tensor<T, S, D>();
      saved_ = Tensor<T, S, D>();
      stats_ = Tensor<double, Shape<dyn>, D>();
      group_ = nullptr;
      return dx;
    }

    /// Views of the parameters and buffers (device memory on a GPU).
    Tensor<M, Shape<C>, D> weight() const requires Affine { return Tensor<M, Shape<C>, D>::from_blob(p_, {}, device_); }
    Tensor<M, Shape<C>, D> bias() const requires Affine { return Tensor<M, Shape<C>, D>::from_blob(p_ + C, {}, device_); }
    Tensor<M, Shape<C>, D> running_mean() const requires Track { return Tensor<M, Shape<C>, D>::from_blob(b_, {}, device_); }
    Tensor<M, Shape<C>, D> running_var() const requires Track {
      return Tensor<M, Shape<C>, D>::from_blob(b_ + C, {}, device_);
    }

   private:
    /// SyncBatchNorm's training forward over the replicas of ctx.replicas (torch's SyncBatchNorm
    /// function): this replica's per-channel count, mean and squared deviations all-gathered, merged in
    /// rank order into the global batch's statistics (the same on every replica, running statistics
    /// included), and x normalised by them. A replica with an empty batch still takes part; when every
    /// replica's is empty, only num_batches_tracked moves (as an empty batch alone).
    template <class E>
    Tensor<T, S, D> forward_synced(const Tensor<T, S, D>& x, Context ctx) {
      ReplicaGroup& group = *ctx.replicas;
      const index_t length = spatial(x), count = x.size(0) * length;
      const int device = x.device_index();
      if (kiln::detail::graph_capture<D>::active(device))
        throw ValueError(what() + ": a training forward inside a CUDA graph capture cannot exchange statistics "
                         "with the other replicas (the collective and its count check wait on the host); capture "
                         "an evaluation-mode forward");
      using Doubles = Tensor<double, Shape<dyn>, D>;
      const ChannelChunks cc = chunks_of(x);
      Doubles part(Extents<Shape<dyn>>(2 * C * cc.chunks), device);
      Doubles local(Extents<Shape<dyn>>(2 * C + 1), device);
      kiln::detail::executor<D>::for_each(C * cc.chunks, BatchNormStatsChunks<T>{x.data(), part.data(), cc}, cc.block());
      kiln::detail::executor<D>::for_each(C, BatchNormLocalMoments{part.data(), local.data(), cc}, cc.chunks);
      const index_t replicas = group.size();
      Doubles gathered(Extents<Shape<dyn>>(replicas * (2 * C + 1)), device);
      group.all_gather(local.data(), gathered.data(), 2 * C + 1, gather_what());
      double total = 0;  // elements per channel over every replica: the counts, to the host
      const std::vector<double> all = gathered.to_vector();
      for (index_t r = 0; r < replicas; ++r) total += all[static_cast<std::size_t>(r * (2 * C + 1))];
      // On every replica alike. torch 1.13 checks this only for one process (`size == 1 and world_size < 2`)
      // and across ranks goes on to an unbiased variance of 0 / 0; kiln refuses as BatchNorm does.
      if (total == 1)
        throw ValueError(what() + ": expected more than 1 value per channel when training, got 1 over the " +
                         std::to_string(replicas) + " replicas (this replica's input " +
                         to_string(x.extents()) + ")");
      Tensor<T, S, D> y(x.extents(), device);
      M* running = Track ? b_ : nullptr;
      Doubles stats(Extents<Shape<dyn>>(2 * C), device);
      if (total > 0)
        kiln::detail::executor<D>::for_each(
            C, BatchNormGatheredMerge<M>{gathered.data(), stats.data(), running, C, replicas, static_cast<double>(Eps),
                                         momentum_factor},
            replicas);
      Tensor<T, S, D> z = keeps_input<E>(ctx) ? Tensor<T, S, D>(x.extents(), device) : Tensor<T, S, D>();
      if (count > 0 && total > 0) {
        normalise<E>(x, y, z, stats, running);
      } else if (running) {  // nothing here to normalise: the batch is counted all the same
        kiln::detail::executor<D>::for_each(1, BatchNormCountBatch<M>{running + 2 * C});
      }
      x_ = ctx.grad && count > 0 ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
      stats_ = ctx.grad ? std::move(stats) : Doubles();
      batch_ = true;
      group_ = ctx.grad && total > 0 ? &group : nullptr;
      global_count_ = total;
      keep_activation<E>(ctx, y, z);
      return y;
    }
    /// The running statistics' update factor as the merges take it (< 0: the cumulative average).
    static constexpr double momentum_factor = Momentum == cumulative_average ? -1.0 : static_cast<double>(Momentum);
    /// y = E(x normalised by `stats`), z (when not empty) the normalised x, counting the batch in
    /// num_batches_tracked when running is non-null: per element on a GPU, per [n, c] plane on the CPU.
    template <class E>
    void normalise(const Tensor<T, S, D>& x, Tensor<T, S, D>& y, Tensor<T, S, D>& z,
                   const Tensor<double, Shape<dyn>, D>& stats, M* running) {
      constexpr bool planes = std::is_same_v<D, Cpu>;
      const index_t length = spatial(x);
      kiln::detail::executor<D>::for_each(
          planes ? x.size(0) * C : x.numel(),
          BatchNormApply<T, M, E>{x.data(), y.data(), z.empty() ? nullptr : z.data(), stats.data(),
                                  Affine ? p_ : nullptr, Affine ? p_ + C : nullptr,
                                  running ? running + 2 * C : nullptr, C, length, planes},
          planes ? length : 1);
    }
    /// Whether forward_fused<E> keeps the normalised value apart from y: for a backward of an activation
    /// whose derivative needs its input.
    template <class E>
    static bool keeps_input(Context ctx) { return !E::identity && !E::saves_output && ctx.grad; }
    /// The value E's derivative reads in backward_fused<E> (training only): y, or the normalised z.
    template <class E>
    void keep_activation(Context ctx, const Tensor<T, S, D>& y, const Tensor<T, S, D>& z) {
      if constexpr (!E::identity)
        if (ctx.grad) saved_ = Tensor<T, S, D>(E::saves_output ? y : z);  // shares y's or z's storage
    }
    /// "kiln::nn::SyncBatchNorm<16>": who speaks in the synchronised passes' messages.
    /// Built once (each synchronised pass hands them to the collectives).
    static const std::string& what() {
      static const std::string s = "kiln::nn::" + std::string(Named::kind) + "<" + std::to_string(C) + ">";
      return s;
    }
    static const std::string& reduce_what() {
      static const std::string s = what() + "::backward: summing the gradient statistics";
      return s;
    }
    static const std::string& gather_what() {
      static const std::string s = what() + ": gathering the batch statistics";
      return s;
    }

    template <class X>
    static void check_channels(const X& x) {
      if constexpr (S::extents[1] == dyn)
        if (x.size(1) != C)
          throw ShapeError("kiln::nn::" + std::string(Named::kind) + "<" + std::to_string(C) + ">: input " +
                           to_string(x.extents()) + " has " + std::to_string(x.size(1)) + " channels, expected " +
                           std::to_string(C));
    }
    /// The product of the dimensions after the channels (1 for [N, C]).
    template <class X>
    static index_t spatial(const X& x) {
      index_t l = 1;
      for (std::size_t d = 2; d < S::rank; ++d) l *= x.size(d);
      return l;
    }
    template <class X>
    static ChannelChunks chunks_of(const X& x) {
      const index_t length = spatial(x), count = x.size(0) * length;
      return {count, batch_norm_chunks<D>(C, count, x.device_index()), C, length, !std::is_same_v<D, Cpu>};
    }

    M* p_ = nullptr;
    M* g_ = nullptr;
    M* b_ = nullptr;
    int device_ = 0;
    Tensor<T, S, D> x_;                          // saved input (training only)
    Tensor<T, S, D> saved_;                      // a fused activation's output or input (training only)
    Tensor<double, Shape<dyn>, D> stats_;        // the mean and 1 / sqrt(var + eps) it was normalised by
    bool batch_ = true;                          // whether those were the batch's statistics
    ReplicaGroup* group_ = nullptr;              // SyncBatchNorm: the replicas the saved statistics span
    double global_count_ = 0;                    // their elements per channel
  };
};

struct BatchNorm1dName {
  static constexpr const char* kind = "BatchNorm1d";
};
struct BatchNorm2dName {
  static constexpr const char* kind = "BatchNorm2d";
};
}  // namespace detail

/// torch.nn.BatchNorm1d(C, eps, momentum, affine, track_running_stats): normalises each of C features
/// (dimension 1) over the batch (and the length L). Shapes: [N, C] or [N, C, L] -> the same.
/// Parameters (Affine): weight [C] (1), bias [C] (0). Buffers (Track): running_mean [C] (0),
/// running_var [C] (1), num_batches_tracked [] (0), in the model's buffer arena.
/// Training normalises by the batch's mean and biased variance and moves the running statistics
/// towards the batch's (unbiased variance) by Momentum, or by 1 / batches for kiln::nn::cumulative_average
/// (torch's momentum=None); evaluation normalises by the running statistics (by the batch's without
/// Track). Example: `Sequential<Linear<13, 16>, BatchNorm1d<16>, ReLU, Linear<16, 1>>`.
template <index_t C, Real Eps = 1e-5f, Real Momentum = 0.1f, bool Affine = true,
          bool TrackRunningStats = true>
struct BatchNorm1d : detail::BatchNormLayer<detail::BatchNorm1dName, 2, 3, C, Eps.value, Momentum.value,
                                            Affine, TrackRunningStats> {};

/// torch.nn.BatchNorm2d(C, ...): as BatchNorm1d, over the batch and the H × W positions of each of C
/// channels. Shapes: [N, C, H, W] -> the same.
/// Example: `Sequential<Conv2d<3, 16, 3, 1, 1>, BatchNorm2d<16>, ReLU, MaxPool2d<2>, ...>`.
template <index_t C, Real Eps = 1e-5f, Real Momentum = 0.1f, bool Affine = true,
          bool TrackRunningStats = true>
struct BatchNorm2d : detail::BatchNormLayer<detail::BatchNorm2dName, 4, 4, C, Eps.value, Momentum.value,
                                            Affine, TrackRunningStats> {};

}  // namespace kiln::nn
