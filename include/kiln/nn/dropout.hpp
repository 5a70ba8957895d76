/// Dropout: zeroes each element with probability P in training and scales the rest by 1 / (1 - P);
/// Dropout1d / Dropout2d zero whole channels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/real.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// A counter-based uniform in [0, 1): the same (seed, call, index) gives the same number on every
/// device and thread count, and backward recomputes the mask instead of storing it.
KILN_HOST_DEVICE KILN_FORCEINLINE float uniform_at(std::uint64_t seed, std::uint64_t call, std::uint64_t i) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (call + 1) + 0xbf58476d1ce4e5b9ull * i;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}
/// out[i] = in[i] * keep(i / plane) / (1 - p): one draw per element (plane 1) or per channel of `plane`
/// positions (Dropout2d); p = 1 keeps nothing (+0 everywhere, never 0 * inf; torch multiplies by 0, so
/// its -0 and NaN for negative and non-finite inputs differ)
template <class T, bool PerChannel = false>
struct DropoutApply {
  const T* in;
  T* out;
  std::uint64_t seed, call;
  float p;
  index_t plane = 1;  // PerChannel: the positions of a channel
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t draw = PerChannel ? i / plane : i;
    const bool keep = uniform_at(seed, call, static_cast<std::uint64_t>(draw)) >= p;
    // The scale 1 / (1 - p) in double, then in the compute type: a float64 model gets its float64 value.
    const auto scale = static_cast<compute_t<T>>(1.0 / (1.0 - static_cast<double>(p)));
    out[i] = from_compute<T>(keep ? to_compute(in[i]) * scale : compute_t<T>(0));
  }
  /// in read, out written; the draw (a few integer mixes, counted as one), the comparison and the scale.
  Traffic traffic(index_t n) const { return {2 * kiln::detail::bytes_of<T>(n), 3 * static_cast<std::uint64_t>(n)}; }
};

/// The names Dropout's layer prints, as torch's modules.
enum class DropoutKind { element, channel1d, channel2d };

/// Dropout's layer: Kind element draws per element (any shape); channel1d / channel2d per channel of
/// [N, C, L] / [N, C, H, W].
template <float P, DropoutKind Kind>
struct DropoutLayer {
  static_assert(P >= 0.0f && P <= 1.0f, "kiln::nn::Dropout<P>: P must be in [0, 1]");
  static constexpr std::size_t rank = Kind == DropoutKind::channel1d   ? 3
                                      : Kind == DropoutKind::channel2d ? 4
                                                                       : 0;
  // >>> Stopped here? Dropout1d takes [N, C, L] and Dropout2d [N, C, H, W] (torch's batched inputs). <<<
  template <class S>
  static constexpr bool accepts = rank == 0 || S::rank == rank;
  template <class S>
  using output = S;
  /// What Dropout1d and Dropout2d take (for the error; Dropout takes every shape).
  template <class S>
  using expects = any_shape_of_rank<rank>;

  template <class S, class Pol>
  class module : public parameter_free<S, S, Pol> {
   public:
    using typename parameter_free<S, S, Pol>::T;
    using typename parameter_free<S, S, Pol>::D;

    void reset_parameters(Generator& g) { seed_ = g(); }  // the mask's seed: the model's, in layer order
    std::string name() const {
      const char* layer = Kind == DropoutKind::channel1d   ? "Dropout1d"
                          : Kind == DropoutKind::channel2d ? "Dropout2d"
                                                           : "Dropout";
      return std::string(layer) + "(p=" + python_float(P) + ", inplace=False)";
    }

    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      active_ = ctx.training && P > 0.0f;
      if (!active_) return x;
      if (kiln::detail::graph_capture<D>::active(x.device_index()))
        throw ValueError("kiln::nn::Dropout: a training forward inside a CUDA graph capture would draw the same "
                         "mask on every replay (the mask's counter is host state baked into the kernel); capture "
                         "an evaluation-mode forward, or a model without dropout");
      call_ = ctx.step != 0 ? ctx.step : call_ + 1;  // the model's count (a checkpoint keeps it), or its own
      return apply(x);
    }
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy) { return active_ ? apply(dy) : dy; }

   private:
    Tensor<T, S, D> apply(const Tensor<T, S, D>& in) const {
      Tensor<T, S, D> out(in.extents(), in.device_index());
      index_t plane = 1;  // the positions of a channel: one draw each
      if constexpr (rank > 0)
        for (std::size_t d = 2; d < rank; ++d) plane *= in.size(d);
      kiln::detail::executor<D>::for_each(
          out.numel(),
          DropoutApply<T, (rank > 0)>{in.data(), out.data(), seed_, call_, P, plane > 0 ? plane : 1});
      return out;
    }
    std::uint64_t seed_ = 0;
    std::uint64_t call_ = 0;
    bool active_ = false;
  };
};
}  // namespace detail

/// torch.nn.Dropout(p): in training each element is zeroed with probability P (default 0.5) and the
/// others scaled by 1 / (1 - P) (P = 1: zeros and a zero gradient, like torch's); in evaluation it is
/// the identity (no pass). Masks are drawn from a
/// counter-based generator seeded by the model's seed, so runs are reproducible on every device.
/// Shapes: any -> the same. Example: `Sequential<Linear<400, 120>, ReLU, Dropout<0.1f>, Linear<120, 84>>`.
template <Real P = 0.5f>
struct Dropout : detail::DropoutLayer<P.value, detail::DropoutKind::element> {};

/// torch.nn.Dropout2d(p): in training each channel of each sample ([N, C, H, W]) is zeroed as a whole
/// with probability P and the others scaled by 1 / (1 - P) (neighbouring pixels are correlated, so
/// element-wise dropout hides little of a feature map); the identity in evaluation. One draw per (n, c)
/// from the same generator as Dropout. Shapes: [N, C, H, W] -> the same.
/// Example: `Sequential<Conv2d<3, 32, 3, 1, 1>, ReLU, Dropout2d<0.2f>, ...>`.
template <Real P = 0.5f>
struct Dropout2d : detail::DropoutLayer<P.value, detail::DropoutKind::channel2d> {};

/// torch.nn.Dropout1d(p): Dropout2d over the channels of [N, C, L]. Shapes: [N, C, L] -> the same.
template <Real P = 0.5f>
struct Dropout1d : detail::DropoutLayer<P.value, detail::DropoutKind::channel1d> {};

}  // namespace kiln::nn
