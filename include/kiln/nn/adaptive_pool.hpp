/// AdaptiveAvgPool2d<OH, OW> and AdaptiveMaxPool2d<OH, OW>: the mean or the max over each of OH x OW
/// bins that tile the H x W plane, as torch.nn.AdaptiveAvgPool2d((OH, OW)) and AdaptiveMaxPool2d;
/// AdaptiveAvgPool2d<1> is a ResNet's global average pool.
#pragma once
#include <cstdint>
#include <string>

#include "kiln/core/config.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// torch's bins: output row i takes input rows floor(i H / O) .. ceil((i + 1) H / O) - 1 (neighbouring
/// bins overlap by a row when O does not divide H; with O > H rows repeat).
struct AdaptiveBins {
  index_t in, out;
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t begin(index_t i) const { return i * in / out; }
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t end(index_t i) const { return ((i + 1) * in + out - 1) / out; }
  /// Σ over the bins of their rows: the input rows counted once per bin that holds them.
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t covered() const {
    index_t c = 0;
    for (index_t i = 0; i < out; ++i) c += end(i) - begin(i);
    return c;
  }
  /// The first and one past the last output row whose bin holds input row r (exactly those: no bin
  /// in between misses it).
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t first_holding(index_t r) const { return r * out / in; }
  KILN_HOST_DEVICE KILN_FORCEINLINE index_t past_holding(index_t r) const {
    const index_t last = ((r + 1) * out + in - 1) / in;  // ceil((r + 1) O / H): begin(i) <= r for i below it
    return last < out ? last : out;
  }
};

/// y[plane, i, j] = the mean of the plane's bin (i, j), in compute_t, as torch's CPU kernel: the sum
/// divided by the bin's rows, then by its columns; a single bin (OH = OW = 1, where torch takes the
/// mean) divided once by H W.
template <class T>
struct AdaptiveAvgPoolForward {
  const T* x;
  T* y;
  AdaptiveBins rows, cols;
  KILN_HOST_DEVICE void operator()(index_t o) const {
    using C = compute_t<T>;
    const index_t j = o % cols.out, i = (o / cols.out) % rows.out, plane = o / (cols.out * rows.out);
    const T* xp = x + plane * rows.in * cols.in;
    const index_t h0 = rows.begin(i), h1 = rows.end(i), w0 = cols.begin(j), w1 = cols.end(j);
    C acc = 0;
    for (index_t h = h0; h < h1; ++h)
      for (index_t w = w0; w < w1; ++w) acc += to_compute(xp[h * cols.in + w]);
    y[o] =
        from_compute<T>(rows.out * cols.out == 1 ? acc / static_cast<C>(rows.in * cols.in)
                                                 : acc / static_cast<C>(h1 - h0) / static_cast<C>(w1 - w0));
  }
  /// x read (each element once per bin holding it), y written; an add per element read, two divides
  /// per output.
  Traffic traffic(index_t n) const {
    const index_t planes = n / (rows.out * cols.out), reads = planes * rows.covered() * cols.covered();
    return {kiln::detail::bytes_of<T>(planes * rows.in * cols.in + n),
            static_cast<std::uint64_t>(reads + 2 * n)};
  }
};

/// dx[plane, h, w] = Σ over the bins holding (h, w), in order, of dy / the bin's rows / its columns
/// (torch's scatter adds in the same order; a single bin: dy / (H W)): a gather per input, no atomics,
/// the same sums on every device.
template <class T>
struct AdaptiveAvgPoolBackward {
  const T* dy;
  T* dx;
  AdaptiveBins rows, cols;
  KILN_HOST_DEVICE void operator()(index_t p) const {
    using C = compute_t<T>;
    const index_t w = p % cols.in, h = (p / cols.in) % rows.in, plane = p / (cols.in * rows.in);
    const T* dyp = dy + plane * rows.out * cols.out;
    if (rows.out * cols.out == 1) {
      dx[p] = from_compute<T>(to_compute(dyp[0]) / static_cast<C>(rows.in * cols.in));
      return;
    }
    C acc = 0;
    for (index_t i = rows.first_holding(h), ie = rows.past_holding(h); i < ie; ++i) {
      const auto bh = static_cast<C>(rows.end(i) - rows.begin(i));
      for (index_t j = cols.first_holding(w), je = cols.past_holding(w); j < je; ++j)
        acc += to_compute(dyp[i * cols.out + j]) / bh / static_cast<C>(cols.end(j) - cols.begin(j));
    }
    dx[p] = from_compute<T>(acc);
  }
  /// dy read, dx written; two divides and an add per (input, bin holding it).
  Traffic traffic(index_t n) const {
    const index_t planes = n / (rows.in * cols.in), pairs = planes * rows.covered() * cols.covered();
    return {kiln::detail::bytes_of<T>(planes * rows.out * cols.out + n),
            3 * static_cast<std::uint64_t>(pairs)};
  }
};

/// y[plane, i, j] = the max of the plane's bin (i, j), and idx = its position h W + w in the plane (null
/// in inference), as torch's kernels: the first of equal maxima, NaN propagates (the last NaN wins).
template <class T>
struct AdaptiveMaxPoolForward {
  const T* x;
  T* y;
  std::int32_t* idx;
  AdaptiveBins rows, cols;
  KILN_HOST_DEVICE void operator()(index_t o) const {
    using C = compute_t<T>;
    const index_t j = o % cols.out, i = (o / cols.out) % rows.out, plane = o / (cols.out * rows.out);
    const T* xp = x + plane * rows.in * cols.in;
    const index_t h0 = rows.begin(i), h1 = rows.end(i), w0 = cols.begin(j), w1 = cols.end(j);
    C best = to_compute(xp[h0 * cols.in + w0]);
    index_t arg = h0 * cols.in + w0;
    for (index_t h = h0; h < h1; ++h)
      for (index_t w = w0; w < w1; ++w) {
        const C v = to_compute(xp[h * cols.in + w]);
        if (v > best || kiln::detail::is_nan(v)) best = v, arg = h * cols.in + w;
      }
    y[o] = from_compute<T>(best);
    if (idx) idx[o] = static_cast<std::int32_t>(arg);
  }
  /// x read (each element once per bin holding it), y and the positions written; a compare per read.
  Traffic traffic(index_t n) const {
    const index_t planes = n / (rows.out * cols.out), reads = planes * rows.covered() * cols.covered();
    return {kiln::detail::bytes_of<T>(planes * rows.in * cols.in + n) +
                (idx ? kiln::detail::bytes_of<std::int32_t>(n) : 0),
            static_cast<std::uint64_t>(reads)};
  }
};

/// dx[plane, h, w] = Σ dy over the bins holding (h, w) whose max it was, in bin order (torch's CPU
/// scatter order): a gather per input, no atomics, the same sums on every device.
template <class T>
struct AdaptiveMaxPoolBackward {
  const T* dy;
  const std::int32_t* idx;
  T* dx;
  AdaptiveBins rows, cols;
  KILN_HOST_DEVICE void operator()(index_t p) const {
    const index_t w = p % cols.in, h = (p / cols.in) % rows.in, plane = p / (cols.in * rows.in);
    const index_t o0 = plane * rows.out * cols.out;
    const auto at = static_cast<std::int32_t>(h * cols.in + w);
    compute_t<T> acc = 0;
    for (index_t i = rows.first_holding(h), ie = rows.past_holding(h); i < ie; ++i)
      for (index_t j = cols.first_holding(w), je = cols.past_holding(w); j < je; ++j)
        if (idx[o0 + i * cols.out + j] == at) acc += to_compute(dy[o0 + i * cols.out + j]);
    dx[p] = from_compute<T>(acc);
  }
  /// dy and the positions read, dx written; a compare per (input, bin holding it).
  Traffic traffic(index_t n) const {
    const index_t planes = n / (rows.in * cols.in), pairs = planes * rows.covered() * cols.covered();
    return {kiln::detail::bytes_of<T>(planes * rows.out * cols.out + n) +
                kiln::detail::bytes_of<std::int32_t>(planes * rows.out * cols.out),
            static_cast<std::uint64_t>(pairs)};
  }
};

/// The adaptive pools' layer: Max picks AdaptiveMaxPool2d, else AdaptiveAvgPool2d.
template <bool Max, index_t OH, index_t OW>
struct AdaptivePool2dLayer {
  static_assert(OH > 0 && OW > 0,
                "kiln::nn::AdaptiveAvgPool2d/AdaptiveMaxPool2d<OH, OW>: the output size must be positive");
  /// [N, C, H, W] with static C, H, W of at least one row and column.
  template <class S>
  static constexpr bool accepts = S::rank == 4 && (S::extents[1] != dyn) && (S::extents[2] != dyn) &&
                                  (S::extents[3] != dyn) && (S::extents[2] > 0) && (S::extents[3] > 0);
  template <class S>
  using output = Shape<S::extents[0], S::extents[1], OH, OW>;
  /// What it takes where it is given S (for the error): [N, C, H, W], all static past the batch, H and W
  /// at least 1.
  template <class S>
  using expects = static_image_at_least<S, 1, 1>;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
    using base = detail::parameter_free<S, output<S>, P>;
    static_assert(!Max || S::extents[2] * S::extents[3] <= 2147483647,
                  "kiln::nn::AdaptiveMaxPool2d: a plane's positions are kept as int32");

   public:
    using typename base::D;
    using typename base::output_shape;
    using typename base::T;
    static constexpr const char* kind = Max ? "AdaptiveMaxPool2d" : "AdaptiveAvgPool2d";
    /// torch's repr: "AdaptiveAvgPool2d(output_size=1)", "AdaptiveMaxPool2d(output_size=(2, 3))".
    std::string name() const {
      return std::string(kind) + "(output_size=" +
             (OH == OW ? std::to_string(OH) : "(" + std::to_string(OH) + ", " + std::to_string(OW) + ")") +
             ")";
    }

    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      Extents<output_shape> e = {};
      e[0] = x.size(0);
      Tensor<T, output_shape, D> y(e, x.device_index());
      const index_t grain = (S::extents[2] / OH + 1) * (S::extents[3] / OW + 1);
      if constexpr (Max) {
        idx_ = ctx.grad ? positions(e, x.device_index()) : positions();
        kiln::detail::executor<D>::for_each(
            y.numel(), AdaptiveMaxPoolForward<T>{x.data(), y.data(), idx_.data(), rows, cols}, grain);
      } else {
        kiln::detail::executor<D>::for_each(y.numel(),
                                            AdaptiveAvgPoolForward<T>{x.data(), y.data(), rows, cols}, grain);
      }
      rows_in_ = x.size(0);
      saved_ = ctx.grad;
      return y;
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) {
      if (!saved_ && dy.numel() != 0)
        throw Error(std::string("kiln::nn::") + kind +
                    "::backward: run forward with gradients enabled first");
      detail::check_backward_rows(kind, dy.size(0), rows_in_);
      Extents<S> e = {};
      e[0] = dy.size(0);
      Tensor<T, S, D> dx(e, dy.device_index());
      const index_t grain = (OH / S::extents[2] + 2) * (OW / S::extents[3] + 2);
      if constexpr (Max) {
        kiln::detail::executor<D>::for_each(
            dx.numel(), AdaptiveMaxPoolBackward<T>{dy.data(), idx_.data(), dx.data(), rows, cols}, grain);
        idx_ = positions();
      } else {
        kiln::detail::executor<D>::for_each(
            dx.numel(), AdaptiveAvgPoolBackward<T>{dy.data(), dx.data(), rows, cols}, grain);
      }
      saved_ = false;
      return dx;
    }

   private:
    static constexpr AdaptiveBins rows{S::extents[2], OH}, cols{S::extents[3], OW};
    /// AdaptiveMaxPool2d's winners, h W + w per output (training only); torch keeps int64.
    using positions = Tensor<std::int32_t, output_shape, D>;
    positions idx_;
    index_t rows_in_ = 0;
    bool saved_ = false;
  };
};
}  // namespace detail

/// torch.nn.AdaptiveAvgPool2d((OH, OW)): each plane's H x W split into OH x OW bins (row i takes input
/// rows floor(i H / OH) to ceil((i + 1) H / OH) - 1; columns alike), each averaged. Any H, W >= 1 give
/// the same output shape, so the layers after it do not depend on the image size.
/// Shapes: [N, C, H, W] -> [N, C, OH, OW]. Example, a ResNet's head:
/// `..., Residual<...>, AdaptiveAvgPool2d<1>, Flatten, Linear<64, 10>`.
template <index_t OH, index_t OW = OH>
struct AdaptiveAvgPool2d : detail::AdaptivePool2dLayer<false, OH, OW> {};

/// torch.nn.AdaptiveMaxPool2d((OH, OW)): the same bins as AdaptiveAvgPool2d's, each's max (the first of
/// equal maxima; NaN propagates). The gradient goes to each bin's max, added where bins overlap. torch's
/// return_indices is not offered: the positions stay inside the layer for its backward.
/// Shapes: [N, C, H, W] -> [N, C, OH, OW]. Example: `..., AdaptiveMaxPool2d<1>, Flatten, Linear<64, 10>`.
template <index_t OH, index_t OW = OH>
struct AdaptiveMaxPool2d : detail::AdaptivePool2dLayer<true, OH, OW> {};

}  // namespace kiln::nn
