/// Conv2d on the CPU, image by image: each image's columns are built in a per-thread buffer that stays in
/// cache, and its GEMM writes NCHW directly ([Out, C K K] x [C K K, P] is image n's [Out, P] plane block).
///
/// One GEMM over the whole batch ([6 x 75] x [75 x 100352] for LeNet's first layer) streams a 30 MiB
/// column buffer through memory and runs OpenBLAS at ~21 GFLOP/s on 2 cores; one GEMM per image, in
/// parallel over the images (OpenBLAS runs each single-threaded inside the parallel region), reads its
/// columns from L2 and runs at ~55-60 GFLOP/s, with a buffer of one image per thread.
#pragma once
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/backend/cpu/blas.hpp"
#include "kiln/backend/cpu/threads.hpp"
#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/lane_sums.hpp"
#include "kiln/nn/detail/conv_functors.hpp"
#include "kiln/policy/device.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn::detail {

/// The output columns [lo, hi) whose tap kj reads inside a row of `w` (the others read padding).
inline void valid_columns(const ConvGeometry& g, index_t kj, index_t stride, index_t& lo, index_t& hi) {
  const index_t first = g.pad - kj * g.dilation;  // ow * stride >= first
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const index_t last = g.w - 1 + g.pad - kj * g.dilation;  // ow * stride <= last
  hi = last < 0 ? 0 : std::min(g.wo, last / stride + 1);
  lo = std::min(lo, hi);
}

/// A convolution's sizes when it compiles (no dilation, one group: LeNet's and ResNet's convolutions):
/// im2col and col2im then run with every bound a constant, in loops the compiler unrolls and vectorises
/// (a 40-byte memcpy call per row was half of the forward of LeNet's second convolution, 6 -> 16 with
/// 10-value rows; the stride-2 gather of a ResNet's downsampling 3x3, one scalar copy at a time, was 44 %
/// of its forward). Conv2d passes it; void: the sizes are only known at run time.
template <index_t C, index_t H, index_t W, index_t K, index_t Ho, index_t Wo, index_t S = 1, index_t P = 0>
struct FixedGeometry {
  static constexpr index_t c = C, h = H, w = W, k = K, ho = Ho, wo = Wo, stride = S, pad = P;
  /// The output columns [lo(kj), hi(kj)) whose tap kj reads inside a row (valid_columns).
  static constexpr index_t hi(index_t kj) {
    const index_t last = W - 1 + P - kj;
    return last < 0 ? 0 : std::min(Wo, last / S + 1);
  }
  static constexpr index_t lo(index_t kj) {
    const index_t first = P - kj;
    return std::min(first <= 0 ? 0 : (first + S - 1) / S, hi(kj));
  }
};

/// f(std::integral_constant<index_t, kj>) for kj in [0, K): each tap's bounds a constant.
template <index_t K, class F>
KILN_FORCEINLINE void for_each_tap(F&& f) {
  [&]<index_t... J>(std::integer_sequence<index_t, J...>) {
    (f(std::integral_constant<index_t, J>{}), ...);
  }(std::make_integer_sequence<index_t, K>{});
}

/// im2col_image for a FixedGeometry F: the same columns, in the same order.
template <class F, class T, class A>
void im2col_fixed(const T* x, A* cols) {
  A* out = cols;
  for (index_t c = 0; c < F::c; ++c)
    for (index_t ki = 0; ki < F::k; ++ki)
      for_each_tap<F::k>([&](auto tap) {
        constexpr index_t kj = decltype(tap)::value, lo = F::lo(kj), hi = F::hi(kj);
        for (index_t oh = 0; oh < F::ho; ++oh, out += F::wo) {
          const index_t ih = oh * F::stride - F::pad + ki;
          if (F::pad > 0 && (ih < 0 || ih >= F::h)) {
            KILN_PRAGMA_OMP(simd)
            for (index_t ow = 0; ow < F::wo; ++ow) out[ow] = A(0);
            continue;
          }
          const T* in = x + (c * F::h + ih) * F::w + kj - F::pad;
          for (index_t ow = 0; ow < lo; ++ow) out[ow] = A(0);
          KILN_PRAGMA_OMP(simd)
          for (index_t ow = lo; ow < hi; ++ow) out[ow] = static_cast<A>(to_compute(in[ow * F::stride]));
          for (index_t ow = hi; ow < F::wo; ++ow) out[ow] = A(0);
        }
      });
}

/// col2im_image for a FixedGeometry F: the same sums, added in the same order (the same bits).
template <class F, class A>
void col2im_fixed(const A* dcols, A* dx) {
  for (index_t i = 0; i < F::c * F::h * F::w; ++i) dx[i] = A(0);
  const A* d = dcols;
  for (index_t c = 0; c < F::c; ++c)
    for (index_t ki = 0; ki < F::k; ++ki)
      for_each_tap<F::k>([&](auto tap) {
        constexpr index_t kj = decltype(tap)::value, lo = F::lo(kj), hi = F::hi(kj);
        for (index_t oh = 0; oh < F::ho; ++oh, d += F::wo) {
          const index_t ih = oh * F::stride - F::pad + ki;
          if (F::pad > 0 && (ih < 0 || ih >= F::h)) continue;
          A* out = dx + (c * F::h + ih) * F::w + kj - F::pad;
          KILN_PRAGMA_OMP(simd)
          for (index_t ow = lo; ow < hi; ++ow) out[ow * F::stride] += d[ow];
        }
      });
}

/// cols[(c, ki, kj), (oh, ow)] = x[c, oh s - pad + ki d, ow s - pad + kj d] for one group of one image
/// (x: its first channel; 0 outside): the loops carry the indices, so there is no division per row
/// (Im2colRows divides, which is fine on a GPU and costs more than the copy on a CPU). The columns are in
/// the GEMM's type A: T itself, or float for half and bfloat16 (widening is exact).
template <index_t Stride, class T, class A>
void im2col_image(const T* x, A* cols, const ConvGeometry& g) {
  A* out = cols;
  for (index_t c = 0; c < g.group_channels(); ++c)
    for (index_t ki = 0; ki < g.k; ++ki)
      for (index_t kj = 0; kj < g.k; ++kj) {
        index_t lo, hi;
        valid_columns(g, kj, Stride, lo, hi);
        for (index_t oh = 0; oh < g.ho; ++oh, out += g.wo) {
          const index_t ih = oh * Stride - g.pad + ki * g.dilation;
          if (ih < 0 || ih >= g.h) {
            for (index_t ow = 0; ow < g.wo; ++ow) out[ow] = A(0);
            continue;
          }
          const T* in = x + (c * g.h + ih) * g.w;
          const index_t shift =
              kj * g.dilation - g.pad;  // iw = ow s + shift, inside [0, w) for ow in [lo, hi)
          for (index_t ow = 0; ow < lo; ++ow) out[ow] = A(0);
          if constexpr (Stride == 1 && std::is_same_v<T, A>)
            std::memcpy(out + lo, in + lo + shift, static_cast<std::size_t>(hi - lo) * sizeof(T));
          else
            for (index_t ow = lo; ow < hi; ++ow) out[ow] = static_cast<A>(to_compute(in[ow * Stride + shift]));
          for (index_t ow = hi; ow < g.wo; ++ow) out[ow] = A(0);
        }
      }
}

/// dx[c, ih, iw] = Σ of dcols over the taps that read it, for one group of one image (dx: its first
/// channel): a scatter-add in the order of im2col_image (one thread owns the image, so there is no race).
/// A is float or double.
template <index_t Stride, class A>
void col2im_image(const A* dcols, A* dx, const ConvGeometry& g) {
  for (index_t i = 0; i < g.group_image(); ++i) dx[i] = A(0);
  const A* d = dcols;
  for (index_t c = 0; c < g.group_channels(); ++c)
    for (index_t ki = 0; ki < g.k; ++ki)
      for (index_t kj = 0; kj < g.k; ++kj) {
        index_t lo, hi;
        valid_columns(g, kj, Stride, lo, hi);
        for (index_t oh = 0; oh < g.ho; ++oh, d += g.wo) {
          const index_t ih = oh * Stride - g.pad + ki * g.dilation;
          if (ih < 0 || ih >= g.h) continue;
          A* out = dx + (c * g.h + ih) * g.w;
          const index_t shift = kj * g.dilation - g.pad;
          for (index_t ow = lo; ow < hi; ++ow) out[ow * Stride + shift] += d[ow];
        }
      }
}

/// Per-thread scratch from the caching allocator (so the memory statistics see it).
template <class T>
Tensor<T, Shape<dyn>, Cpu> cpu_scratch(index_t per_thread, int threads) {
  return Tensor<T, Shape<dyn>, Cpu>(Extents<Shape<dyn>>(std::max<index_t>(per_thread, 1) * threads));
}

/// One image of `count` values as the GEMM's type A: x itself when T is A, else widened into `buf`.
template <class T, class A>
const A* widened_image(const T* x, A* buf, index_t count) {
  if constexpr (std::is_same_v<T, A>) {
    (void)buf, (void)count;
    return x;
  } else {
    for (index_t i = 0; i < count; ++i) buf[i] = static_cast<A>(to_compute(x[i]));
    return buf;
  }
}

/// The weight as the GEMM's type A: w itself when it is A, else a widened copy in `wide` (the
/// low-precision working copy under mixed precision, widened exactly).
template <class A, class W>
const A* gemm_weight(const W* w, index_t count, Tensor<A, Shape<dyn>, Cpu>& wide) {
  if constexpr (std::is_same_v<W, A>) {
    (void)count, (void)wide;
    return w;
  } else {
    wide = cpu_scratch<A>(count, 1);
    for (index_t k = 0; k < count; ++k) wide[k] = static_cast<A>(to_compute(w[k]));
    return wide.data();
  }
}

/// gw += Σ_grp partial[grp] and, when gb is not null, gb[f] += Σ_grp bias[grp out + f]: a backward pass's
/// per-group partial sums added in group order (the same sums whatever the thread count). A partial
/// holds each convolution group's [rows / G, patch] block of the weight gradient transposed, as
/// [patch, rows / G] (see BackwardSplit::accumulate). The sums run over tiles of that layout, each read
/// contiguously from every partial into a tile of accumulators (gw's values gathered first, scattered
/// back at the end): per weight the same adds in the same order as one weight at a time, which read
/// each partial with a stride of rows / G and took 5% of a ResNet-20 training step.
template <class A, class G>
void add_partials(G* gw, const A* partial, index_t rows, index_t fg, index_t patch, G* gb, const double* bias,
                  index_t out, index_t groups) {
  using C = compute_t<G>;
  constexpr index_t tile = 512;
  const index_t count = rows * patch, block = fg * patch;  // block: one convolution group's
  const index_t per_block = (block + tile - 1) / tile, tiles = (rows / fg) * per_block;
  const bool parallel_sum = backend::cpu::threads() > 1 && groups > 1 && count * groups >= 65536;
  (void)parallel_sum;
  KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel_sum))
  for (index_t t = 0; t < tiles; ++t) {
    const index_t gi = t / per_block, first = (t % per_block) * tile, len = std::min(tile, block - first);
    const index_t at = gi * block + first;  // the tile's first element in a partial
    C acc[tile];
    // element j of the tile is tap k, filter gi fg + r of the group: gw[(gi fg + r) patch + k]
    const auto each_weight = [&](auto&& f) {
      index_t k = first / fg, r = first - k * fg;
      for (index_t j = 0; j < len; ++j) {
        f(j, (gi * fg + r) * patch + k);
        if (++r == fg) r = 0, ++k;
      }
    };
    each_weight([&](index_t j, index_t i) { acc[j] = to_compute(gw[i]); });
    for (index_t grp = 0; grp < groups; ++grp) {
      const A* pg = partial + grp * count + at;
      KILN_PRAGMA_OMP(simd)
      for (index_t j = 0; j < len; ++j) acc[j] += static_cast<C>(pg[j]);
    }
    each_weight([&](index_t j, index_t i) { gw[i] = from_compute<G>(acc[j]); });
  }
  if (gb)
    for (index_t f = 0; f < out; ++f) {
      double acc = 0;
      for (index_t grp = 0; grp < groups; ++grp) acc += bias[grp * out + f];
      gb[f] = from_compute<G>(static_cast<compute_t<G>>(to_compute(gb[f]) + acc));
    }
}

/// How a backward pass (Conv2d's, ConvTranspose2d's) splits its batch: at most 32 groups of consecutive
/// images, each summing its own partial weight and bias gradients (added in group order at the end, so
/// the result does not depend on the thread count), a team of no more threads than groups, and per_thread
/// values of scratch for each thread. The weight gradient is [rows, patch] in `conv_groups` blocks of
/// rows / conv_groups rows; `biases`: the bias gradient's size.
template <class A>
class BackwardSplit {
 public:
  BackwardSplit(index_t n, index_t per_thread, index_t rows, index_t patch, index_t conv_groups,
                index_t biases)
      : n_(n),
        groups_(std::min<index_t>(n, 32)),
        per_group_((n + groups_ - 1) / std::max<index_t>(groups_, 1)),
        team_(static_cast<int>(std::min<index_t>(backend::cpu::threads(), std::max<index_t>(groups_, 1)))),
        per_thread_(per_thread),
        rows_(rows),
        fg_(rows / conv_groups),
        patch_(patch),
        weights_(rows * patch),
        biases_(biases),
        scratch_(cpu_scratch<A>(per_thread, team_)),
        partial_(cpu_scratch<A>(weights_, static_cast<int>(groups_))),
        bias_partial_(static_cast<std::size_t>(groups_ * biases), 0.0) {}
  index_t groups() const { return groups_; }
  int team() const { return team_; }
  bool parallel() const { return team_ > 1; }
  /// Group grp's images [first(grp), last(grp)).
  index_t first(index_t grp) const { return grp * per_group_; }
  index_t last(index_t grp) const { return std::min(n_, (grp + 1) * per_group_); }
  /// The calling thread's scratch (inside the parallel region).
  A* scratch() { return scratch_.data() + backend::cpu::thread() * per_thread_; }
  /// Group grp's partial weight gradient, zeroed, and its partial bias gradient.
  A* weight_partial(index_t grp) {
    A* pw = partial_.data() + grp * weights_;
    for (index_t k = 0; k < weights_; ++k) pw[k] = A(0);
    return pw;
  }
  double* bias_partial(index_t grp) { return bias_partial_.data() + grp * biases_; }
  /// A group's partial (pw) += lhs colsᵀ for convolution group gi, lhs [rows / G, p] and cols
  /// [patch, p]: computed as its transpose, cols lhsᵀ ([patch, rows / G]), which OpenBLAS runs about
  /// twice as fast when rows / G is small (16 filters: it packs the long operand once, not per 16 columns).
  void accumulate(A* pw, index_t gi, const A* lhs, const A* cols, index_t p) const {
    backend::cpu::gemm<A>(false, true, patch_, fg_, p, 1.0f, cols, p, lhs, p, 1.0f, pw + gi * fg_ * patch_,
                          fg_);
  }
  /// gw += the groups' partials, gb too when not null (add_partials).
  template <class G>
  void add_to(G* gw, G* gb) {
    add_partials(gw, partial_.data(), rows_, fg_, patch_, gb, bias_partial_.data(), biases_, groups_);
  }

 private:
  index_t n_, groups_, per_group_;
  int team_;
  index_t per_thread_, rows_, fg_, patch_, weights_, biases_;
  Tensor<A, Shape<dyn>, Cpu> scratch_, partial_;
  std::vector<double> bias_partial_;
};

/// y = E(conv(x, w) + b) for the batch; z keeps the pre-activation when not null. One parallel pass;
/// one GEMM per image and group ([Out / G, (C / G) K K] x [(C / G) K K, P] writes the group's planes).
/// T: activations; W: the weight the GEMM reads (T's working copy); B: the bias (master type). The
/// GEMM runs in A = compute_t<T> (fp32 arithmetic for half and bfloat16, whose result is rounded once,
/// in the epilogue).
template <class E, index_t Stride, class Fixed = void, class T, class W, class B>
void conv2d_forward_cpu(const T* x, const W* w, const B* bias, T* z, T* y, const ConvGeometry& g, index_t out) {
  using A = compute_t<T>;
  constexpr bool direct = std::is_same_v<T, A>;  // the GEMM writes NCHW output itself
  ConvGeometry one = g;
  one.n = 1;
  const index_t patch = g.patch(), p = g.pixels(), fg = out / g.groups;
  {  // the images, weights and bias read, y (and z) written; the columns stay in this thread's cache
    using kiln::detail::bytes_of;
    const index_t outputs = g.n * out * p;
    kiln::detail::count_pass({bytes_of<T>(g.n * g.image()) + bytes_of<W>(out * patch) + (bias ? bytes_of<B>(out) : 0) +
                                  bytes_of<T>(outputs) * (z ? 2 : 1),
                              static_cast<std::uint64_t>(outputs) * (2 * patch + (bias ? 1 : 0) + (E::identity ? 0 : 1))});
  }
  // A team of no more threads than images, each with its own columns (scratch for a thread that
  // would have no image would only cost memory).
  const int team = static_cast<int>(std::min<index_t>(backend::cpu::threads(), std::max<index_t>(g.n, 1)));
  // Narrow T: the image is widened once into the buffer (im2col reads each pixel K K times).
  const index_t per_thread = patch * p + (direct ? 0 : out * p + g.image());
  auto scratch = cpu_scratch<A>(per_thread, team);
  Tensor<A, Shape<dyn>, Cpu> wide;
  const A* wa = gemm_weight<A>(w, out * patch, wide);
  A* const scratch_all = scratch.data();
  const bool parallel = team > 1;
  const backend::cpu::SerialBlas serial_blas(parallel);  // one GEMM per thread, each on its thread
  KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel) num_threads(team))
  for (index_t n = 0; n < g.n; ++n) {
    A* cols = scratch_all + backend::cpu::thread() * per_thread;
    const A* image = widened_image(x + n * g.image(), cols + patch * p + (direct ? 0 : out * p), g.image());
    T* yn = y + n * out * p;
    T* zn = z ? z + n * out * p : nullptr;
    // the GEMM's [Out, P] result: z or y itself (NCHW already), or a float buffer for narrow T
    auto* r = [&] {
      if constexpr (direct)
        return zn ? zn : yn;
      else
        return cols + patch * p;
    }();
    for (index_t gi = 0; gi < g.groups; ++gi) {
      if constexpr (std::is_void_v<Fixed>) im2col_image<Stride>(image + gi * g.group_image(), cols, one);
      else im2col_fixed<Fixed>(image, cols);
      backend::cpu::gemm_in_column_blocks<A>(false, fg, p, patch, 1.0f, wa + gi * fg * patch, patch, cols, p,
                                             0.0f, r + gi * fg * p, p);
    }
    const ColumnsToNchw<T, B, E, std::remove_pointer_t<decltype(r)>> epilogue{r, bias, zn, yn, out, p, p};
    for (index_t f = 0; f < out; ++f) epilogue(f);
  }
}

/// gw += Σ_n dz_n colsᵀ, gb += Σ dz, and dx = col2im(wᵀ dz_n) when dx is not null, where
/// dz = E'(dy, saved). The batch is cut into at most 32 groups of consecutive images, each accumulating
/// its own partial weight gradient; the partials are added in group order, so the result does not depend
/// on the thread count. One parallel pass. T: activations; W: the weight the GEMM reads; G: the gradient
/// arena's type (master). The GEMMs run in A = compute_t<T>.
template <class E, index_t Stride, class Fixed = void, class T, class W, class G>
void conv2d_backward_cpu(const T* x, const T* dy, const T* saved, const W* w, G* gw, G* gb, T* dx,
                         const ConvGeometry& g, index_t out) {
  using A = compute_t<T>;
  constexpr bool narrow = !std::is_same_v<T, A>;     // T is half or bfloat16
  constexpr bool wide_dz = !E::identity || narrow;  // dz goes through a per-thread buffer
  ConvGeometry one = g;
  one.n = 1;
  const index_t patch = g.patch(), p = g.pixels(), fg = out / g.groups;
  {  // the images, dy (and the saved value) and the weights read; the weight and bias gradients read and
     // written, dx written; the derivative, the bias sum, the weight-gradient GEMM (and the data GEMM
     // and col2im's adds)
    using kiln::detail::bytes_of;
    const index_t outputs = g.n * out * p;
    const std::uint64_t gemm = 2 * static_cast<std::uint64_t>(outputs) * static_cast<std::uint64_t>(patch);
    kiln::detail::count_pass(
        {bytes_of<T>(g.n * g.image()) * (dx ? 2 : 1) + bytes_of<T>(outputs) * (E::identity ? 1 : 2) +
             (dx ? bytes_of<W>(out * patch) : 0) + 2 * bytes_of<G>(out * patch) +
             (gb ? 2 * bytes_of<G>(out) : 0),
         (dx ? 2 * gemm + static_cast<std::uint64_t>(patch * p * g.n * g.groups) : gemm) +
             static_cast<std::uint64_t>(outputs) * ((E::identity ? 0 : 1) + (gb ? 1 : 0))});
  }
  const index_t per_thread =
      patch * p + (wide_dz ? out * p : 0) + (dx ? patch * p : 0) + (narrow ? (dx ? 2 : 1) * g.image() : 0);
  BackwardSplit<A> split(g.n, per_thread, out, patch, g.groups, out);
  Tensor<A, Shape<dyn>, Cpu> wide;
  const A* wa = dx ? gemm_weight<A>(w, out * patch, wide) : nullptr;
  const bool parallel = split.parallel();
  const int team = split.team();
  const index_t groups = split.groups();
  const backend::cpu::SerialBlas serial_blas(parallel);  // one GEMM per thread, each on its thread
  KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel) num_threads(team))
  for (index_t grp = 0; grp < groups; ++grp) {
    A* cols = split.scratch();
    A* dz_buf = cols + patch * p;
    A* dcols = dz_buf + (wide_dz ? out * p : 0);
    A* dx_buf = dcols + (dx ? patch * p : 0);
    A* x_buf = dx_buf + (dx && narrow ? g.image() : 0);
    A* pw = split.weight_partial(grp);
    double* pb = split.bias_partial(grp);
    for (index_t n = split.first(grp); n < split.last(grp); ++n) {
      const A* dz;
      if constexpr (wide_dz) {  // through the activation (and widened), into the per-thread buffer
        const NchwToColumns<T, E, A> act{dy + n * out * p, saved ? saved + n * out * p : nullptr, dz_buf, out, p, p};
        for (index_t f = 0; f < out; ++f) act(f);
        dz = dz_buf;
      } else {
        dz = dy + n * out * p;
      }
      for (index_t f = 0; f < out; ++f) pb[f] += kiln::detail::lane_sum<double>(dz, f * p, (f + 1) * p);
      const A* image = widened_image(x + n * g.image(), x_buf, g.image());
      T* dxn = dx ? dx + n * g.image() : nullptr;
      for (index_t gi = 0; gi < g.groups; ++gi) {  // convolution group gi: its filters fg, its channels C / G
        if constexpr (std::is_void_v<Fixed>) im2col_image<Stride>(image + gi * g.group_image(), cols, one);
        else im2col_fixed<Fixed>(image, cols);
        const A* dzg = dz + gi * fg * p;
        split.accumulate(pw, gi, dzg, cols, p);
        if (dx) {
          backend::cpu::gemm_in_column_blocks<A>(true, patch, p, fg, 1.0f, wa + gi * fg * patch, patch, dzg,
                                                 p, 0.0f, dcols, p);
          A* dxg = nullptr;  // this group's dx: in the float buffer for narrow T, else dx itself
          if constexpr (narrow) dxg = dx_buf + gi * g.group_image();
          else dxg = dxn + gi * g.group_image();
          if constexpr (std::is_void_v<Fixed>) col2im_image<Stride>(dcols, dxg, one);
          else col2im_fixed<Fixed>(dcols, dxg);
        }
      }
      if constexpr (narrow)
        if (dx)
          for (index_t i = 0; i < g.image(); ++i) dxn[i] = from_compute<T>(dx_buf[i]);
    }
  }
  split.add_to(gw, gb);
}

}  // namespace kiln::nn::detail
