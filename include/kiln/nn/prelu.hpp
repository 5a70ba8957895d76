/// PReLU: x where x > 0, else a x with a learned slope a, as torch.nn.PReLU(num_parameters, init).
#pragma once
#include <span>
#include <string>
#include <vector>

#include "kiln/core/half.hpp"
#include "kiln/core/real.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/nn/detail/weight_bias.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/reductions.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
/// y = x > 0 ? x : a[c] x (Backward: dx = x > 0 ? dy : a[c] dy), c the element's channel (dimension 1,
/// `inner` elements apart) or 0 for one slope; in the compute type, the slopes read from the master
/// weights. NaN gives NaN (NaN > 0 is false), as torch's.
template <bool Backward, class T, class M>
struct PreluPass {
  const T* x;
  const T* dy;  // Backward only
  T* out;
  const M* a;
  index_t channels, inner;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    using C = compute_t<T>;
    const C v = to_compute(x[i]);
    const C slope = static_cast<C>(a[channels == 1 ? 0 : (i / inner) % channels]);
    const C through = Backward ? to_compute(dy[i]) : v;
    out[i] = from_compute<T>(v > C(0) ? through : slope * through);
  }
  Traffic traffic(index_t n) const {
    return {kiln::detail::bytes_of<T>(n) * (Backward ? 3 : 2) + kiln::detail::bytes_of<M>(channels),
            static_cast<std::uint64_t>(n) * 2};
  }
};
}  // namespace detail

/// max(0, x) + a min(0, x) with a learned a: one slope for every element (NumParameters 1, torch's
/// default), or one per channel, dimension 1 of [N, C, ...] (NumParameters = C). Each slope starts at
/// Init (0.25) and is trained as any parameter (torch applies no weight decay of its own: put it in a
/// group without decay if you want torch's usual recipe). Shapes: any -> the same (per channel: rank 2 or
/// more). Parameters: weight [NumParameters] (torch's name).
/// Example: `Sequential<Conv2d<3, 16, 3>, PReLU<16>, ...>` or `Sequential<Linear<8, 8>, PReLU<>>`.
template <index_t NumParameters = 1, Real Init = 0.25f>
struct PReLU {
  static_assert(NumParameters > 0, "kiln::nn::PReLU<NumParameters>: at least one slope");
  template <class S>
  static constexpr bool accepts =
      (NumParameters == 1 && S::rank >= 1) || (S::rank >= 2 && (S::extents[1] == NumParameters || S::extents[1] == dyn));
  template <class S>
  using output = S;
  /// What it takes where it is given S (for the error): NumParameters channels at dimension 1.
  template <class S>
  using expects = typename detail::with_channels<S, (S::rank >= 2 ? S::rank : 2), NumParameters>::type;

  template <class S, class P>
  class module : public detail::WeightAndBias<P, 1, NumParameters, NumParameters, false> {
    using base = detail::WeightAndBias<P, 1, NumParameters, NumParameters, false>;

   public:
    using typename base::D;
    using typename base::M;
    using typename base::T;
    using input_shape = S;
    using output_shape = S;

    /// torch's: every slope Init.
    void reset_parameters(Generator&) {
      const std::vector<M> v(static_cast<std::size_t>(NumParameters), static_cast<M>(Init.value));
      this->weight().copy_from(std::span<const M>(v));
    }
    /// weight [NumParameters].
    std::vector<ParameterInfo> parameters() const { return {{"weight", 0, NumParameters, {NumParameters}}}; }
    std::string name() const { return "PReLU(num_parameters=" + std::to_string(NumParameters) + ")"; }

    Tensor<T, S, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      check_channels(x);
      Tensor<T, S, D> y(x.extents(), x.device_index());
      if (x.numel() != 0)
        kiln::detail::executor<D>::for_each(
            x.numel(), detail::PreluPass<false, T, M>{x.data(), nullptr, y.data(), this->weight().data(), NumParameters,
                                                       inner(x)});
      x_ = ctx.grad ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
      return y;
    }
    /// da += Σ over each slope's elements of (x > 0 ? 0 : x dy); dx = x > 0 ? dy : a dy (empty when
    /// input_grad is false).
    Tensor<T, S, D> backward(const Tensor<T, S, D>& dy, bool input_grad = true) {
      if (x_.empty() && dy.numel() != 0)
        throw Error("kiln::nn::PReLU::backward: no saved input; run forward with gradients enabled first");
      detail::check_backward_rows("PReLU", dy.size(0), x_.size(0));
      if (dy.numel() != 0) {
        // The elements as [outer, slopes, inner]: summed over 0 and 2, one value per slope.
        using V = Shape<dyn, NumParameters, dyn>;
        const index_t in = inner(x_);
        const Extents<V> e(NumParameters == 1 ? index_t{1} : x_.size(0), NumParameters == 1 ? x_.numel() : in);
        const auto xv = x_.template reshape<V>(e);
        const auto gv = dy.template reshape<V>(e);
        auto da = this->weight_grad().template reshape<Shape<NumParameters>>();
        da += kiln::sum<0, 2>(kiln::where(xv > 0.0f, 0.0f, xv * gv));
      }
      Tensor<T, S, D> dx;
      if (input_grad) {
        dx = Tensor<T, S, D>(dy.extents(), dy.device_index());
        if (dy.numel() != 0)
          kiln::detail::executor<D>::for_each(
              dy.numel(), detail::PreluPass<true, T, M>{x_.data(), dy.data(), dx.data(), this->weight().data(),
                                                         NumParameters, inner(x_)});
      }
      x_ = Tensor<T, S, D>();
      return dx;
    }

   private:
    /// The elements one channel's run spans: the product of the extents past dimension 1.
    static index_t inner(const Tensor<T, S, D>& x) {
      index_t n = 1;
      for (std::size_t d = 2; d < S::rank; ++d) n *= x.size(static_cast<int>(d));
      return n;
    }
    static void check_channels(const Tensor<T, S, D>& x) {
      if constexpr (NumParameters > 1 && S::extents[1] == dyn)
        if (x.size(1) != NumParameters)
          throw ShapeError("kiln::nn::PReLU<" + std::to_string(NumParameters) + ">: input " + to_string(x.extents()) +
                           " has " + std::to_string(x.size(1)) + " channels at dimension 1, expected " +
                           std::to_string(NumParameters) + " (torch's num_parameters)");
    }
    Tensor<T, S, D> x_;  // saved input (training only)
  };
};

}  // namespace kiln::nn
