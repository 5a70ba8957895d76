/// PixelShuffle / PixelUnshuffle: channels to space and back, as torch.nn.PixelShuffle(upscale_factor)
/// and torch.nn.PixelUnshuffle(downscale_factor).
#pragma once
#include <string>
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// The index in the [N, C R², H, W] tensor of element i of the [N, C, H R, W R] one:
/// big[n, c, h R + a, w R + b] = small[n, c R² + a R + b, h, w] (H, W: the small tensor's extents).
struct PixelShuffleIndex {
  index_t c, h, w, r;  // the big tensor's channels C, the small tensor's H and W, the factor R
  KILN_HOST_DEVICE index_t operator()(index_t i) const {
    const index_t wr = w * r, hr = h * r;
    const index_t x = i % wr, y = (i / wr) % hr, plane = i / (wr * hr);  // plane = n C + c
    const index_t a = y % r, b = x % r;
    return ((plane * r + a) * r + b) * h * w + (y / r) * w + x / r;
  }
};

/// to[i] = from[index(i)] (Gather) or to[index(i)] = from[i] (scatter): a permutation, one call per
/// element of the big tensor, so each element is written once.
template <class T, bool Gather>
struct PixelPermute {
  const T* from;
  T* to;
  PixelShuffleIndex index;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    if constexpr (Gather)
      to[i] = from[index(i)];
    else
      to[index(i)] = from[i];
  }
  Traffic traffic(index_t n) const { return {2 * kiln::detail::bytes_of<T>(n), 0}; }
};

/// PixelShuffle (Up: [N, C R², H, W] -> [N, C, H R, W R]) or PixelUnshuffle (its inverse).
template <index_t R, bool Up>
struct PixelShuffleLayer {
  static_assert(R > 0, "kiln::nn::PixelShuffle<R> / PixelUnshuffle<R>: the factor must be positive");
  // >>> Stopped here? PixelShuffle<R> takes [N, C R², H, W] (the channels a multiple of R²);
  //     PixelUnshuffle<R> takes [N, C, H, W] with H and W multiples of R. <<<
  template <class S>
  static constexpr bool accepts = (S::rank == 4) && (S::extents[1] != dyn) && (S::extents[2] != dyn) &&
                                  (S::extents[3] != dyn) &&
                                  (Up ? S::extents[1] % (R * R) == 0
                                      : (S::extents[2] % R == 0 && S::extents[3] % R == 0));
  template <class S>
  using output =
      std::conditional_t<Up,
                         Shape<S::extents[0], S::extents[1] / (R * R), S::extents[2] * R, S::extents[3] * R>,
                         Shape<S::extents[0], S::extents[1] * R * R, S::extents[2] / R, S::extents[3] / R>>;

  template <class S, class P>
  class module : public detail::parameter_free<S, output<S>, P> {
   public:
    using typename detail::parameter_free<S, output<S>, P>::T;
    using typename detail::parameter_free<S, output<S>, P>::D;
    using typename detail::parameter_free<S, output<S>, P>::output_shape;
    /// torch's repr: "PixelShuffle(upscale_factor=2)", "PixelUnshuffle(downscale_factor=2)".
    std::string name() const {
      return layer() + (Up ? "(upscale_factor=" : "(downscale_factor=") + std::to_string(R) + ")";
    }

    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context) {
      rows_ = x.size(0);
      return permute<output_shape, Up>(x);
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) {
      detail::check_backward_rows(layer(), dy.size(0), rows_);
      return permute<S, !Up>(dy);
    }

   private:
    static std::string layer() { return Up ? "PixelShuffle" : "PixelUnshuffle"; }
    /// The big tensor's indexing: [N, C, H R, W R] for PixelShuffle's output, its input for Unshuffle's.
    static constexpr PixelShuffleIndex index() {
      using Big = std::conditional_t<Up, output_shape, S>;
      return {Big::extents[1], Big::extents[2] / R, Big::extents[3] / R, R};
    }
    /// x into the shape To: to the big tensor (Gather: each of its elements reads one) or from it.
    template <class To, bool Gather, class From>
    static Tensor<T, To, D> permute(const Tensor<T, From, D>& x) {
      Extents<To> e = {};
      e[0] = x.size(0);
      Tensor<T, To, D> y(e, x.device_index());
      const index_t n = Gather ? y.numel() : x.numel();
      kiln::detail::executor<D>::for_each(n, PixelPermute<T, Gather>{x.data(), y.data(), index()});
      return y;
    }
    index_t rows_ = 0;
  };
};
}  // namespace detail

/// Rearranges [N, C R², H, W] into [N, C, H R, W R], torch.nn.PixelShuffle(upscale_factor=R): channel
/// c R² + a R + b of pixel (h, w) goes to pixel (h R + a, w R + b) of channel c (the sub-pixel
/// convolution's upsampling, ESPCN). Shapes: [N, C R², H, W] -> [N, C, H R, W R].
/// Example: `Sequential<Conv2d<64, 3 * 4, 3, 1, 1>, PixelShuffle<2>>` doubles the height and width.
template <index_t R>
struct PixelShuffle : detail::PixelShuffleLayer<R, true> {};

/// The inverse of PixelShuffle<R>, torch.nn.PixelUnshuffle(downscale_factor=R).
/// Shapes: [N, C, H R, W R] -> [N, C R², H, W].
template <index_t R>
struct PixelUnshuffle : detail::PixelShuffleLayer<R, false> {};

}  // namespace kiln::nn
