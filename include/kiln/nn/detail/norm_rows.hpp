/// What LayerNorm and GroupNorm share: rows normalised by their own mean and biased variance, then scaled
/// and shifted by per-channel (LayerNorm: per-element) weight and bias; the passes and the module.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/backend/cpu/threads.hpp"
#include "kiln/core/config.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/lane_sums.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/detail/conv_functors.hpp"
#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn::detail {

/// An input seen as rows of `length` elements, each normalised by its own statistics. A row is
/// `channels` runs of `spatial` elements, each run sharing one weight and bias; row r is sample
/// r / groups's group r % groups, whose runs take parameters g·channels .. g·channels + channels - 1.
/// LayerNorm: {L, L, 1, 1} (a parameter per element); GroupNorm<G, C> over [N, C, H, W]:
/// {C/G · H W, C/G, H W, G} (rows n·G + g).
struct NormRows {
  index_t length, channels, spatial, groups;
  /// The parameter index of row r's channel 0 (channel k's is k more).
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t first_param(index_t r) const { return (r % groups) * channels; }
  /// f(k, begin, end) for each run of channel k among the row's elements first .. last - 1 (one
  /// division in all); the caller hoists the run's weight and bias out of its loop over begin .. end.
  template <class F>
  KILN_HOST_DEVICE KILN_FORCEINLINE void runs(index_t first, index_t last, F&& f) const {
    for (index_t k = first / spatial, l = first; l < last; ++k) {
      const index_t end = (k + 1) * spatial < last ? (k + 1) * spatial : last;
      f(k, l, end);
      l = end;
    }
  }
};

using kiln::detail::lane_sums;

/// Row r's mean and 1 / sqrt(var + eps) with the biased variance, in double (two passes), to stats[2r]
/// and stats[2r + 1].
template <class T>
KILN_HOST_DEVICE KILN_FORCEINLINE void norm_row_moments(const T* x, double* stats, index_t r, index_t length,
                                                        double eps) {
  const T* row = x + r * length;
  double s = 0, unused = 0;
  lane_sums(0, length, s, unused,
            [&](index_t l, double& a, double&) { a += static_cast<double>(to_compute(row[l])); });
  const double mean = s / static_cast<double>(length);
  double q = 0;
  lane_sums(0, length, q, unused, [&](index_t l, double& a, double&) {
    const double d = static_cast<double>(to_compute(row[l])) - mean;
    a += d * d;
  });
  stats[2 * r] = mean;
  stats[2 * r + 1] = 1.0 / ops::detail::sqrt_(q / static_cast<double>(length) + eps);
}

/// Row r's mean(g) and mean(g x̂), with g = dy · weight (dy without affine) and x̂ = (x - mean_r) ·
/// rstd_r, in double, to coef[2r] and coef[2r + 1]: element by element when each has its own weight,
/// else run by run (the run's Σ dy and Σ dy (x - mean), then its weight).
template <class T, class M>
KILN_HOST_DEVICE KILN_FORCEINLINE void norm_row_grad_means(const T* dy, const T* x, const double* stats,
                                                           const M* weight, double* coef,
                                                           const NormRows& rows, index_t r) {
  const index_t L = rows.length, o = r * L;
  const double mean = stats[2 * r], rstd = stats[2 * r + 1];
  const M* w = weight ? weight + rows.first_param(r) : nullptr;
  double s = 0, sx = 0;
  if (rows.spatial == 1) {
    lane_sums(0, L, s, sx, [&](index_t l, double& a, double& b) {
      double g = static_cast<double>(to_compute(dy[o + l]));
      if (w) g *= static_cast<double>(w[l]);
      a += g;
      b += g * (static_cast<double>(to_compute(x[o + l])) - mean);
    });
  } else {
    for (index_t k = 0; k < rows.channels; ++k) {
      double sk = 0, sxk = 0;
      lane_sums(k * rows.spatial, (k + 1) * rows.spatial, sk, sxk, [&](index_t l, double& a, double& b) {
        const double g = static_cast<double>(to_compute(dy[o + l]));
        a += g;
        b += g * (static_cast<double>(to_compute(x[o + l])) - mean);
      });
      const double wk = w ? static_cast<double>(w[k]) : 1.0;
      s += wk * sk;
      sx += wk * sxk;
    }
  }
  coef[2 * r] = s / static_cast<double>(L);
  coef[2 * r + 1] = sx * rstd / static_cast<double>(L);
}

/// Per row r: its statistics (norm_row_moments). A GPU's first forward pass; the CPU's NormRowApply
/// computes them itself.
template <class T>
struct NormRowStats {
  const T* x;
  double* stats;
  index_t length;
  double eps;
  KILN_HOST_DEVICE void operator()(index_t r) const { norm_row_moments(x, stats, r, length, eps); }
  /// x read twice, two doubles written per row; a subtract, multiply and two adds per element.
  Traffic traffic(index_t n) const {
    return {2 * kiln::detail::bytes_of<T>(n * length) + kiln::detail::bytes_of<double>(2 * n),
            4 * static_cast<std::uint64_t>(n * length)};
  }
};

/// y = (x - mean_r) · rstd_r · weight + bias (weight and bias null: 1 and 0), in double, then stored
/// (through compute_t for 16-bit storage): one call per element after NormRowStats (a GPU), or per row (`by_rows`: the CPU), which first
/// computes the row's statistics into `stats` itself (the row is in cache for the second pass). With
/// an activation E after it (nn/epilogue.hpp), y = E(that value, rounded to T), as the two layers round;
/// z, where not null, keeps the normalised value (E's derivative needs it: GELU, SiLU). On the CPU the
/// row's normalised values are stored first (into z, else y), then activated in a loop of their own.
template <class T, class M, class E = epilogue::Identity>
struct NormRowApply {
  const T* x;
  T* y;
  T* z;
  double* stats;
  const M* weight;
  const M* bias;
  NormRows rows;
  bool by_rows;
  double eps;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t L = rows.length, r = by_rows ? i : i / L, first = by_rows ? 0 : i - r * L;
    if (by_rows) norm_row_moments(x, stats, r, L, eps);
    const double mean = stats[2 * r], rstd = stats[2 * r + 1];
    const index_t o = r * L, p = rows.first_param(r), last = by_rows ? L : first + 1;
    const auto centred = [&](index_t l) { return static_cast<double>(to_compute(x[o + l])) - mean; };
    T* const out = z ? z : y;  // the normalised values (then y = E(them))
    const auto store = [&](index_t l, double v) {
      out[o + l] = from_compute<T>(static_cast<compute_t<T>>(v));
    };
    // omp simd: g++ -O2 (README.md's line) does not vectorise these loops on its own
    if (rows.spatial == 1 && weight) {  // LayerNorm: a weight and bias per element
      KILN_PRAGMA_OMP(simd)
      for (index_t l = first; l < last; ++l)
        store(l, centred(l) * (rstd * static_cast<double>(weight[p + l])) + static_cast<double>(bias[p + l]));
    } else if (rows.spatial == 1) {
      KILN_PRAGMA_OMP(simd)
      for (index_t l = first; l < last; ++l) store(l, centred(l) * rstd);
    } else {  // GroupNorm: one per run of a channel's positions
      rows.runs(first, last, [&](index_t k, index_t begin, index_t end) {
        if (weight) {
          const double scale = rstd * static_cast<double>(weight[p + k]),
                       shift = static_cast<double>(bias[p + k]);
          KILN_PRAGMA_OMP(simd)
          for (index_t l = begin; l < end; ++l) store(l, centred(l) * scale + shift);
        } else {
          KILN_PRAGMA_OMP(simd)
          for (index_t l = begin; l < end; ++l) store(l, centred(l) * rstd);
        }
      });
    }
    if constexpr (!E::identity) {  // (the row's pointers in locals: through the members, no vector loop)
      const T* const v = out + o;
      T* const row = y + o;
      KILN_PRAGMA_OMP(simd)
      for (index_t l = first; l < last; ++l) row[l] = from_compute<T>(E::forward(to_compute(v[l])));
    }
  }
  /// x read (three times per row, statistics included), y written (and z); seven operations per element
  /// (and the activation).
  Traffic traffic(index_t n) const {
    const index_t elements = by_rows ? n * rows.length : n;
    return {(by_rows ? 4 : 2) * kiln::detail::bytes_of<T>(elements) +
                (z ? kiln::detail::bytes_of<T>(elements) : 0) +
                kiln::detail::bytes_of<double>(by_rows ? 2 * n : 0),
            (by_rows ? 7 : 3) * static_cast<std::uint64_t>(elements) +
                (E::identity ? 0 : static_cast<std::uint64_t>(elements))};
  }
};

/// Per row r: mean(g) and mean(g x̂) (norm_row_grad_means). A GPU's first pass for dx.
template <class T, class M>
struct NormRowGradMeans {
  const T* dy;
  const T* x;
  const double* stats;
  const M* weight;
  double* coef;
  NormRows rows;
  KILN_HOST_DEVICE void operator()(index_t r) const {
    norm_row_grad_means(dy, x, stats, weight, coef, rows, r);
  }
  /// dy and x read, two doubles written per row; three multiplies, a subtract and two adds per element.
  Traffic traffic(index_t n) const {
    return {2 * kiln::detail::bytes_of<T>(n * rows.length) + kiln::detail::bytes_of<double>(2 * n),
            6 * static_cast<std::uint64_t>(n * rows.length)};
  }
};

/// dx = rstd_r · (g - mean(g) - x̂ · mean(g x̂)) in double, then stored: per element after
/// NormRowGradMeans (a GPU), or per row (the CPU), which computes the row's means into `coef` first.
template <class T, class M>
struct NormRowGradInput {
  const T* dy;
  const T* x;
  T* dx;
  const double* stats;
  double* coef;
  const M* weight;
  NormRows rows;
  bool by_rows;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t L = rows.length, r = by_rows ? i : i / L, first = by_rows ? 0 : i - r * L;
    if (by_rows) norm_row_grad_means(dy, x, stats, weight, coef, rows, r);
    const double mean = stats[2 * r], rstd = stats[2 * r + 1], mean_g = coef[2 * r],
                 mean_gx = coef[2 * r + 1];
    const index_t o = r * L, last = by_rows ? L : first + 1;
    const M* w = weight ? weight + rows.first_param(r) : nullptr;
    const auto grad = [&](index_t l, double wl) {
      const double g = static_cast<double>(to_compute(dy[o + l])) * wl;
      const double xhat = (static_cast<double>(to_compute(x[o + l])) - mean) * rstd;
      dx[o + l] = from_compute<T>(static_cast<compute_t<T>>((g - mean_g - xhat * mean_gx) * rstd));
    };
    if (rows.spatial == 1 && w) {  // (omp simd: as NormRowApply's loops)
      KILN_PRAGMA_OMP(simd)
      for (index_t l = first; l < last; ++l) grad(l, static_cast<double>(w[l]));
    } else if (rows.spatial == 1) {
      KILN_PRAGMA_OMP(simd)
      for (index_t l = first; l < last; ++l) grad(l, 1.0);
    } else {
      rows.runs(first, last, [&](index_t k, index_t begin, index_t end) {
        const double wk = w ? static_cast<double>(w[k]) : 1.0;
        KILN_PRAGMA_OMP(simd)
        for (index_t l = begin; l < end; ++l) grad(l, wk);
      });
    }
  }
  /// dy and x read (twice per row on the CPU), dx written.
  Traffic traffic(index_t n) const {
    const index_t elements = by_rows ? n * rows.length : n;
    return {(by_rows ? 5 : 3) * kiln::detail::bytes_of<T>(elements) +
                kiln::detail::bytes_of<double>(by_rows ? 2 * n : 0),
            (by_rows ? 13 : 7) * static_cast<std::uint64_t>(elements)};
  }
};

/// The parameters' gradients in two passes. First, per chunk c of `block` samples, each parameter p's
/// Σ dy x̂ and Σ dy over the chunk's runs that p scales (rows n·groups + p / channels), in double, to
/// part[2c·A + p] and part[(2c + 1)·A + p]: on a GPU one call per (c, p), i = c·A + p (neighbouring
/// threads, neighbouring parameters and addresses); on the CPU (`by_chunks`) one call per (chunk,
/// slice of `slices` of the parameters), i = c·slices + s, which walks the chunk's rows in order and adds
/// each element of its parameters to their partials (a vector loop along the row for LayerNorm). A
/// parameter's sums are the same however many slices there are: slicing spreads a small batch (one
/// chunk) over the threads.
template <class T>
struct NormRowGradParamChunks {
  const T* dy;
  const T* x;
  const double* stats;
  double* part;
  NormRows rows;
  index_t samples, block, params;
  bool by_chunks;
  index_t slices = 1;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    if (by_chunks) return chunk(i / slices, i % slices);
    const index_t c = i / params, p = i - c * params, g = p / rows.channels, k = p - g * rows.channels;
    const index_t end = (c + 1) * block < samples ? (c + 1) * block : samples;
    double s = 0, sx = 0;
    if (rows.spatial == 1) {
      lane_sums(c * block, end, s, sx, [&](index_t n, double& a, double& b) {
        const index_t r = n * rows.groups + g, o = r * rows.length + k;
        const double d = static_cast<double>(to_compute(dy[o]));
        a += d;
        b += d * (static_cast<double>(to_compute(x[o])) - stats[2 * r]) * stats[2 * r + 1];
      });
    } else {
      for (index_t n = c * block; n < end; ++n) {
        const index_t r = n * rows.groups + g;
        double sn = 0, sxn = 0;
        run_sums(r, k, sn, sxn);
        s += sn;
        sx += sxn * stats[2 * r + 1];
      }
    }
    part[2 * c * params + p] = sx;
    part[(2 * c + 1) * params + p] = s;
  }
  /// The CPU's call: chunk c's rows in order, the partials of slice s's parameters p0 .. p1 - 1.
  KILN_HOST_DEVICE void chunk(index_t c, index_t s) const {
    const index_t p0 = s * params / slices, p1 = (s + 1) * params / slices;
    double* pw = part + 2 * c * params;
    double* pb = pw + params;
    for (index_t p = p0; p < p1; ++p) pw[p] = 0, pb[p] = 0;
    const index_t end = (c + 1) * block < samples ? (c + 1) * block : samples;
    for (index_t r = c * block * rows.groups; r < end * rows.groups; ++r) {
      const index_t o = r * rows.length, first = rows.first_param(r);
      // The row's channels first .. first + channels - 1, within the slice: channels k0 .. k1 - 1.
      const index_t k0 = (p0 > first ? p0 : first) - first,
                    k1 = (p1 < first + rows.channels ? p1 : first + rows.channels) - first;
      if (k0 >= k1) continue;
      const double mean = stats[2 * r], rstd = stats[2 * r + 1];
      if (rows.spatial == 1) {
        KILN_PRAGMA_OMP(simd)
        for (index_t l = k0; l < k1; ++l) {
          const double d = static_cast<double>(to_compute(dy[o + l]));
          pw[first + l] += d * (static_cast<double>(to_compute(x[o + l])) - mean) * rstd;
          pb[first + l] += d;
        }
      } else {
        for (index_t k = k0; k < k1; ++k) {
          double sn = 0, sxn = 0;
          run_sums(r, k, sn, sxn);
          pw[first + k] += sxn * rstd;
          pb[first + k] += sn;
        }
      }
    }
  }
  /// Row r's run k: Σ dy and Σ dy (x - mean_r).
  KILN_HOST_DEVICE KILN_FORCEINLINE void run_sums(index_t r, index_t k, double& s, double& sx) const {
    const index_t o = r * rows.length + k * rows.spatial;
    const double mean = stats[2 * r];
    lane_sums(0, rows.spatial, s, sx, [&](index_t t, double& a, double& b) {
      const double d = static_cast<double>(to_compute(dy[o + t]));
      a += d;
      b += d * (static_cast<double>(to_compute(x[o + t])) - mean);
    });
  }
  /// dy and x read once over all the calls, the partials written; five operations per element.
  Traffic traffic(index_t) const {
    const index_t elements = samples * rows.groups * rows.length, chunks = (samples + block - 1) / block;
    return {2 * kiln::detail::bytes_of<T>(elements) + kiln::detail::bytes_of<double>(2 * chunks * params),
            5 * static_cast<std::uint64_t>(elements)};
  }
};

/// Per parameter p: weight_grad[p] += the chunks' Σ dy x̂, bias_grad[p] += their Σ dy, added in chunk
/// order (the same sums whatever the thread count).
template <class M>
struct NormRowGradParamMerge {
  const double* part;
  M* weight_grad;
  M* bias_grad;
  index_t chunks, params;
  KILN_HOST_DEVICE void operator()(index_t p) const {
    double sx = 0, s = 0;
    for (index_t c = 0; c < chunks; ++c) {
      sx += part[2 * c * params + p];
      s += part[(2 * c + 1) * params + p];
    }
    weight_grad[p] = static_cast<M>(static_cast<double>(weight_grad[p]) + sx);
    bias_grad[p] = static_cast<M>(static_cast<double>(bias_grad[p]) + s);
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<double>(2 * chunks * n) + kiln::detail::bytes_of<M>(4 * n),
            2 * static_cast<std::uint64_t>(chunks * n)};
  }
};

/// Samples per chunk of the parameters' gradient sums: on the CPU a fixed 16 (the sums do not depend on
/// the thread count; a batch of few chunks is also split by parameters: norm_row_param_slices); on a GPU enough chunks to fill it with
/// `params` threads each, each thread summing 32 elements or more (a chunk of one sample when a run
/// is that long: GroupNorm on 16 x 16 positions). The GPU's sums then depend on its SM count.
template <class D>
index_t norm_row_param_block(index_t samples, index_t params, index_t spatial, int device) {
  const index_t most = samples > 0 ? samples : 1;
  if constexpr (std::is_same_v<D, Cpu>) {
    (void)params, (void)spatial, (void)device;
    return most < 16 ? most : 16;
  } else {
    const index_t want_chunks = kiln::detail::executor<D>::resident_threads(device) / params;
    const index_t fill = want_chunks > 0 ? (samples + want_chunks - 1) / want_chunks : most;
    const index_t least = (32 + spatial - 1) / spatial;  // samples for 32 elements a thread
    const index_t block = fill > least ? fill : least;
    return block < most ? block : most;
  }
}

/// Parameter slices per chunk on the CPU, where there are fewer chunks than threads (a small batch):
/// two calls per thread, each of at least 4096 of the chunk's elements, at most one slice per parameter.
/// The sums do not depend on it (each parameter's partial is one call's, over the same rows in order), so
/// it may follow the thread count; with enough chunks, one call per chunk walks its rows once.
inline index_t norm_row_param_slices(index_t chunks, index_t chunk_elements, index_t params) {
  const index_t threads = backend::cpu::threads();
  if (chunks >= threads) return 1;
  const index_t want = (2 * threads + chunks - 1) / chunks, most = chunk_elements / 4096;
  const index_t slices = want < most ? want : most;
  return slices < 1 ? 1 : slices < params ? slices : params;
}

/// The module of LayerNorm and GroupNorm. Spec says what differs:
///   Spec::affine_count                 weight and bias elements each (L, or C)
///   Spec::affine_shape()               their shape, as a state_dict lists it
///   Spec::affine_type                  the same as a Shape (weight() and bias() views)
///   Spec::name()                       torch's repr
///   Spec::rows_of(x)                   the NormRows of an input, checking its run-time extents
/// Parameters (Affine): weight (1), bias (0). No buffers: training and evaluation are the same.
template <class Spec, float Eps, bool Affine, class S, class P>
class NormRowsModule {
 public:
  using T = typename P::precision::storage;
  using M = typename P::precision::master;
  using D = typename P::device;
  using input_shape = S;
  using output_shape = S;
  static constexpr index_t A = Spec::affine_count;
  static constexpr index_t parameter_count = Affine ? 2 * A : 0;

  void bind(M* params, M* grads, T*, int device) { p_ = params, g_ = grads, device_ = device; }
  /// torch's reset_parameters: weight 1, bias 0 (no draw from the generator).
  void reset_parameters(Generator&) {
    if constexpr (Affine) {
      std::vector<M> v(2 * A, M(0));
      for (index_t a = 0; a < A; ++a) v[static_cast<std::size_t>(a)] = M(1);
      Tensor<M, Shape<2 * A>, D>::from_blob(p_, {}, device_).copy_from(std::span<const M>(v));
    }
  }
  std::vector<ParameterInfo> parameters() const {
    if constexpr (Affine)
      return {{"weight", 0, A, Spec::affine_shape()}, {"bias", A, A, Spec::affine_shape()}};
    else
      return {};
  }
  std::string name() const { return Spec::name(); }

  /// Each row normalised by its own mean and biased variance, the same in training and evaluation.
  Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
    return forward_fused<epilogue::Identity>(x, ctx);
  }
  /// weight_grad += Σ dy x̂, bias_grad += Σ dy; dx = rstd (g - mean(g) - x̂ mean(g x̂)) per row with
  /// g = dy · weight (empty when input_grad is false).
  Tensor<T, S, D> backward(const Tensor<T, S, D>& dy, bool input_grad = true) {
    return backward_fused<epilogue::Identity>(dy, input_grad);
  }

  /// y = E(the normalised x): the activation after it in a Sequential runs in its normalising pass
  /// (nn/epilogue.hpp), which saves the activation's own forward pass over the input; backward takes
  /// its derivative once, into dz, as the activation would. The bits are the two layers'.
  static constexpr bool fuses_epilogue = true;
  template <class E>
  Tensor<T, S, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
    const NormRows rows = Spec::rows_of(x);  // checks x's run-time extents
    const index_t count = x.numel() / rows.length;
    Tensor<T, S, D> y(x.extents(), x.device_index());
    // E's derivative of its input (GELU, SiLU) needs the normalised value, kept apart
    const bool keep_z = !E::identity && !E::saves_output && ctx.grad;
    Tensor<T, S, D> z = keep_z ? Tensor<T, S, D>(x.extents(), x.device_index()) : Tensor<T, S, D>();
    Tensor<double, Shape<dyn>, D> stats(Extents<Shape<dyn>>(2 * count), x.device_index());
    if (count > 0) {
      if constexpr (!by_rows)
        kiln::detail::executor<D>::for_each(
            count, NormRowStats<T>{x.data(), stats.data(), rows.length, static_cast<double>(Eps)},
            rows.length);
      kiln::detail::executor<D>::for_each(
          by_rows ? count : x.numel(),
          NormRowApply<T, M, E>{x.data(), y.data(), z.empty() ? nullptr : z.data(), stats.data(),
                                Affine ? p_ : nullptr, Affine ? p_ + A : nullptr, rows, by_rows,
                                static_cast<double>(Eps)},
          by_rows ? 3 * rows.length : 1);
    }
    x_ = ctx.grad ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
    stats_ = ctx.grad ? std::move(stats) : Tensor<double, Shape<dyn>, D>();
    activation_ = !E::identity && ctx.grad ? Tensor<T, S, D>(E::saves_output ? y : z) : Tensor<T, S, D>();
    saved_ = ctx.grad;
    rows_ = rows;
    return y;
  }
  /// backward() of dz = E'(dy, the value forward_fused<E> kept), taken in a pass of its own first.
  template <class E>
  Tensor<T, S, D> backward_fused(const Tensor<T, S, D>& dy, bool input_grad = true) {
    if constexpr (!E::identity) {
      if (saved_ && dy.extents() == x_.extents() && dy.numel() != 0) {  // (else backward says what is wrong)
        if (activation_.empty())
          throw Error("kiln::nn::" + name() + "::backward: the forward pass ran no activation to take back");
        Tensor<T, S, D> dz(dy.extents(), dy.device_index());
        kiln::detail::executor<D>::for_each(dz.numel(),
                                            EpilogueGrad<T, E>{dy.data(), activation_.data(), dz.data()});
        activation_ = Tensor<T, S, D>();
        return backward_fused<epilogue::Identity>(dz, input_grad);
      }
    }
    activation_ = Tensor<T, S, D>();
    if (!saved_)
      throw Error("kiln::nn::" + name() +
                  "::backward: no saved input; run forward with gradients enabled first");
    if (dy.extents() != x_.extents())
      throw ShapeError("kiln::nn::" + name() + "::backward: dy " + to_string(dy.extents()) +
                       " does not match the input " + to_string(x_.extents()));
    const NormRows rows = rows_;  // dy has the forward's extents (checked above)
    const index_t count = dy.numel() / rows.length;
    Tensor<T, S, D> dx = input_grad ? Tensor<T, S, D>(dy.extents(), dy.device_index()) : Tensor<T, S, D>();
    if (count > 0) {
      if constexpr (Affine) {
        const index_t samples = count / rows.groups,
                      block = norm_row_param_block<D>(samples, A, rows.spatial, dy.device_index());
        const index_t chunks = (samples + block - 1) / block;
        Tensor<double, Shape<dyn>, D> part(Extents<Shape<dyn>>(2 * chunks * A), dy.device_index());
        const index_t chunk_elements = block * rows.groups * rows.length,
                      slices = by_rows ? norm_row_param_slices(chunks, chunk_elements, A) : 1;
        kiln::detail::executor<D>::for_each(
            by_rows ? chunks * slices : chunks * A,
            NormRowGradParamChunks<T>{dy.data(), x_.data(), stats_.data(), part.data(), rows, samples, block,
                                      A, by_rows, slices},
            by_rows ? chunk_elements / slices : block * rows.spatial);
        kiln::detail::executor<D>::for_each(A, NormRowGradParamMerge<M>{part.data(), g_, g_ + A, chunks, A},
                                            chunks);
      }
      if (input_grad) {
        Tensor<double, Shape<dyn>, D> coef(Extents<Shape<dyn>>(2 * count), dy.device_index());
        const M* weight = Affine ? p_ : nullptr;
        if constexpr (!by_rows)
          kiln::detail::executor<D>::for_each(
              count, NormRowGradMeans<T, M>{dy.data(), x_.data(), stats_.data(), weight, coef.data(), rows},
              rows.length);
        kiln::detail::executor<D>::for_each(
            by_rows ? count : dy.numel(),
            NormRowGradInput<T, M>{dy.data(), x_.data(), dx.data(), stats_.data(), coef.data(), weight, rows,
                                   by_rows},
            by_rows ? 3 * rows.length : 1);
      }
    }
    x_ = Tensor<T, S, D>();
    stats_ = Tensor<double, Shape<dyn>, D>();
    saved_ = false;
    return dx;
  }

  /// Views of the parameters (device memory on a GPU), in their state_dict shape.
  Tensor<M, typename Spec::affine_type, D> weight() const requires Affine {
    return Tensor<M, typename Spec::affine_type, D>::from_blob(p_, {}, device_);
  }
  Tensor<M, typename Spec::affine_type, D> bias() const requires Affine {
    return Tensor<M, typename Spec::affine_type, D>::from_blob(p_ + A, {}, device_);
  }

 private:
  M* p_ = nullptr;
  M* g_ = nullptr;
  int device_ = 0;

  /// Per row on the CPU (a loop with the row's constants), per element on a GPU.
  static constexpr bool by_rows = std::is_same_v<D, Cpu>;

  Tensor<T, S, D> x_;                    // saved input (with gradients only)
  Tensor<T, S, D> activation_;           // what a fused activation's derivative reads (its output or input)
  Tensor<double, Shape<dyn>, D> stats_;  // each row's mean and 1 / sqrt(var + eps)
  bool saved_ = false;                   // whether x_ and stats_ are this forward's (x_ may be empty)
  NormRows rows_{1, 1, 1, 1};            // the saved input's layout
};

}  // namespace kiln::nn::detail
