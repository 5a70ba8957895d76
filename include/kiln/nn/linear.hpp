/// Linear: y = x Wᵀ + b, as torch.nn.Linear.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/fusion.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/nn/detail/weight_bias.hpp"
#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/layout.hpp"
#include "kiln/ops/matmul.hpp"
#include "kiln/tensor/tensor.hpp"

#if KILN_WITH_CUDA
#include <memory>

#include "kiln/backend/cuda/cublaslt.hpp"
#endif

namespace kiln::nn {

/// A fully connected layer with In inputs and Out outputs (bias optional).
/// Shapes: [N, In] -> [N, Out], and as torch's over the last dimension of any rank: [N, *, In] -> [N, *,
/// Out] (a sequence [N, L, In]: each position's features; the leading dimensions are the GEMM's rows).
/// Parameters: weight [Out, In], bias [Out] (PyTorch's names and layout).
/// Initialisation: PyTorch's (weight and bias U(-1/sqrt(In), 1/sqrt(In))).
/// Example:
///   using Net = kiln::nn::Sequential<kiln::nn::Linear<13, 16>, kiln::nn::ReLU, kiln::nn::Linear<16, 1>>;
template <index_t In, index_t Out, bool Bias = true>
struct Linear {
  static_assert(In > 0 && Out > 0, "kiln::nn::Linear<In, Out>: feature counts must be positive");

  template <class S>
  static constexpr bool accepts = S::rank >= 2 && (S::extents[S::rank - 1] == In || S::extents[S::rank - 1] == dyn);
  template <class S>
  using output = typename kiln::detail::with_extent<S, S::rank - 1, Out>::type;
  /// What it takes where it is given S (for the error): S with In features last, [N, In] below rank 2.
  template <class S>
  using expects = typename std::conditional_t<(S::rank >= 2), kiln::detail::with_extent<S, S::rank - 1, In>,
                                              detail::with_channels<S, 2, In>>::type;

  /// The layer over rows [N, In] (S of rank 2).
  template <class S, class P>
  class rows_module;
  /// The layer over [N, *, In]: the rows module on the leading dimensions' product (views, no copies).
  template <class S, class P>
  class leading_module;
  template <class S, class P>
  using module = std::conditional_t<S::rank == 2, rows_module<S, P>, leading_module<S, P>>;

  template <class S, class P>
  class rows_module : public detail::WeightAndBias<P, Out, In, Out, Bias> {
    using base = detail::WeightAndBias<P, Out, In, Out, Bias>;

   public:
    using base::bias, base::bias_grad, base::weight, base::weight_grad, base::weight_operand;
    using typename base::D;
    using typename base::M;
    using typename base::T;
    using input_shape = S;
    using output_shape = output<S>;

    /// PyTorch's: weight and bias U(-1/sqrt(In), 1/sqrt(In)).
    void reset_parameters(Generator& g) { this->reset_uniform(g, In); }
    /// weight [Out, In], bias [Out].
    std::vector<ParameterInfo> parameters() const { return this->weight_and_bias({Out, In}); }
    std::string name() const {
      return "Linear(in_features=" + std::to_string(In) + ", out_features=" + std::to_string(Out) +
             ", bias=" + (Bias ? "True" : "False") + ")";
    }

    /// y = x Wᵀ + b  // [N, In] -> [N, Out]
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      return forward_fused<epilogue::Identity>(x, ctx);
    }
    /// dW += dyᵀ x, db += Σ_n dy, dx = dy W (empty when input_grad is false)  // [N, Out] -> [N, In]
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      return backward_fused<epilogue::Identity>(dy, input_grad);
    }

    /// y = E(x Wᵀ + b): one GEMM, then one pass for the bias and the activation (nn/epilogue.hpp).
    static constexpr bool fuses_epilogue = true;
    template <class E>
    Tensor<T, output_shape, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      // A non-const prvalue, so x_ is rebound to x's storage: `ctx.grad ? x : Tensor()` is a const one,
      // which copy-assigns the values (an extra pass, and a ShapeError once the batch size changes).
      if constexpr (S::extents[1] == dyn)  // checked first, before any path (cuBLASLt reads In columns)
        if (x.size(1) != In)
          throw ShapeError("kiln::nn::Linear<" + std::to_string(In) + ", " + std::to_string(Out) + ">: input " +
                           to_string(x.extents()) + " has " + std::to_string(x.size(1)) + " features, expected " +
                           std::to_string(In));
      x_ = ctx.grad ? Tensor<T, S, D>(x) : Tensor<T, S, D>();
#if KILN_WITH_CUDA
      if constexpr (std::is_same_v<D, Cuda> && std::is_same_v<T, float> && std::is_same_v<M, float> && Bias &&
                    (E::identity || std::is_same_v<E, epilogue::Relu>)) {  // one cuBLASLt call
        // cuBLASLt reads bias vectors 16-byte aligned; otherwise the GEMM + kiln's epilogue below.
        if (x.size(0) > 0 && reinterpret_cast<std::uintptr_t>(bias().data()) % 16 == 0 && fusion_enabled()) {
          Extents<output_shape> e = {};
          e[0] = x.size(0);
          Tensor<T, output_shape, D> y(e, x.device_index());
          if (lt_forward(x, y, !E::identity)) {
            if constexpr (!E::identity) saved_ = ctx.grad ? Tensor<T, output_shape, D>(y) : Tensor<T, output_shape, D>();
            return y;
          }
        }
      }
#endif
      if constexpr (!std::is_same_v<T, compute_t<T>> && (Bias || !E::identity)) {
        // Mixed precision: the GEMM's fp32 sum, the bias and the activation rounded to T once, as torch's
        // addmm under autocast (a sum past T's range that the bias brings back stays finite).
        Extents<output_shape> e = {};
        e[0] = x.size(0);
        Tensor<compute_t<T>, output_shape, D> acc(e, x.device_index());
        matmul_into(acc, x, transposed(weight_operand()));
        Tensor<T, output_shape, D> y(e, x.device_index());
        constexpr bool keeps_z = !E::identity && !E::saves_output;  // the activation's backward reads z
        Tensor<T, output_shape, D> z = keeps_z && ctx.grad ? Tensor<T, output_shape, D>(e, x.device_index())
                                                           : Tensor<T, output_shape, D>();
        const M* b = nullptr;
        if constexpr (Bias) b = bias().data();
        constexpr bool rows = std::is_same_v<D, Cpu>;
        using Epilogue = detail::WideBiasEpilogue<T, compute_t<T>, M, E, rows>;
        const Epilogue f{acc.data(), b, z.empty() ? nullptr : z.data(), y.data(), Out};
        kiln::detail::executor<D>::for_each(rows ? acc.size(0) : acc.numel(), f, rows ? Out : 1);
        if constexpr (!E::identity)
          saved_ = ctx.grad ? (E::saves_output ? y : z) : Tensor<T, output_shape, D>();
        return y;
      }
      auto z = matmul(x, transposed(weight_operand()));  // [N, Out]
      if constexpr (E::identity && !Bias) {
        return z;
      } else {
        Tensor<T, output_shape, D> y = E::saves_output ? z : Tensor<T, output_shape, D>(z.extents(), z.device_index());
        const M* b = nullptr;
        if constexpr (Bias) b = bias().data();
        const index_t rows = z.size(0);
        if constexpr (std::is_same_v<D, Cpu>)
          kiln::detail::executor<D>::for_each(rows, detail::BiasEpilogueRows<T, M, E>{z.data(), b, y.data(), Out}, Out);
        else
          kiln::detail::executor<D>::for_each(rows * Out, detail::BiasEpilogue<T, M, E>{z.data(), b, y.data(), Out});
        if constexpr (!E::identity) saved_ = ctx.grad ? (E::saves_output ? y : z) : Tensor<T, output_shape, D>();
        return y;
      }
    }
    /// dz = E'(dy) with db += Σ_n dz in one pass, then dW += dzᵀ x and dx = dz W.
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      if (x_.empty() && dy.size(0) != 0)
        throw Error("kiln::nn::Linear::backward: no saved input; run forward with gradients enabled first");
      detail::check_backward_rows("Linear", dy.size(0), x_.size(0));
      Tensor<T, output_shape, D> dz;
      if constexpr (E::identity) {
        dz = Tensor<T, output_shape, D>(dy);  // shares dy
        if constexpr (Bias) {
          auto gb = bias_grad();
          gb += sum<0>(dy);  // [Out]
        }
      } else {
        if (saved_.empty() && dy.size(0) != 0)
          throw Error("kiln::nn::Linear::backward: no saved activation; run forward with gradients enabled first");
        dz = Tensor<T, output_shape, D>(dy.extents(), dy.device_index());
        M* db = nullptr;
        if constexpr (Bias) db = bias_grad().data();
        if constexpr (std::is_same_v<D, Cpu>) {
          using F = detail::EpilogueGradColumnBlocks<T, M, E>;
          kiln::detail::executor<D>::for_each(F::count(Out), F{dy.data(), saved_.data(), dz.data(), db, dy.size(0), Out},
                                              dy.size(0) * Out / F::count(Out));
        } else {  // a thread per (chunk of rows, column); the chunks' sums added in a second, small pass
          using C = compute_t<T>;
          const index_t rows = dy.size(0);
          const index_t chunks =
              detail::epilogue_grad_splits(rows, Out, kiln::detail::executor<D>::resident_threads(dy.device_index()));
          const index_t chunk = (rows + chunks - 1) / chunks;
          Tensor<C, Shape<dyn>, D> part;
          if (chunks > 1 && db) part = Tensor<C, Shape<dyn>, D>(Extents<Shape<dyn>>(chunks * Out), dy.device_index());
          kiln::detail::executor<D>::for_each(chunks * Out, detail::EpilogueGradChunks<T, M, E>{dy.data(), saved_.data(), dz.data(), db,
                                                                                               part.data(), rows, Out, chunk});
          if (part.data())
            kiln::detail::executor<D>::for_each(Out, detail::AddChunkSums<C, M>{part.data(), db, chunks, Out});
        }
        saved_ = Tensor<T, output_shape, D>();
      }
      auto gw = weight_grad();
      matmul_into(gw, transposed(dz), x_, 1.0f, 1.0f);  // [Out, In]
      Extents<S> e = x_.extents();  // dx's: S's (its In may be a run-time extent), N rows
      e[0] = dy.size(0);
      if constexpr (S::extents[1] == dyn) e[1] = In;
      x_ = Tensor<T, S, D>();  // released first: dx may take its block
      if (!input_grad) return Tensor<T, S, D>();
      Tensor<T, S, D> dx(e, dy.device_index());
      matmul_into(dx, dz, weight_operand());  // [N, In]
      return dx;
    }

   private:
#if KILN_WITH_CUDA
    /// y = act(x Wᵀ + b) through cuBLASLt's epilogue; false when cuBLASLt cannot (the caller then runs
    /// the GEMM and kiln's epilogue kernel).
    bool lt_forward(const Tensor<T, S, D>& x, Tensor<T, output_shape, D>& y, bool relu) {
      const float* b = bias().data();  // 16-byte aligned (checked by the caller)
      const int device = x.device_index();
      if (relu && !kiln::cuda::relu_epilogue_keeps_nan(device)) return false;  // torch's ReLU keeps NaN
      if (!lt_plan_ || lt_relu_ != relu || !lt_plan_->matches(x.size(0), x.data(), weight().data(), b, y.data(), device)) {
        lt_plan_ = std::make_shared<kiln::cuda::LinearEpiloguePlan>(x.size(0), In, Out, relu, x.data(), weight().data(),
                                                                   b, y.data(), device);
        lt_relu_ = relu;
      }
      if (!lt_plan_->usable() || !lt_plan_->run(x.data(), weight().data(), b, y.data())) return false;
      {  // x, W and the bias read, y written; the GEMM, the bias add and the ReLU
        using kiln::detail::bytes_of;
        const index_t rows = x.size(0);
        kiln::detail::count_pass({bytes_of<T>(rows * In + In * Out + rows * Out) + bytes_of<float>(Out),
                                  static_cast<std::uint64_t>(rows) * Out * (2 * In + 1 + (relu ? 1 : 0))});
      }
      return true;
    }
    std::shared_ptr<kiln::cuda::LinearEpiloguePlan> lt_plan_;
    bool lt_relu_ = false;
#endif
    Tensor<T, S, D> x_;                 // saved input (training only)
    Tensor<T, output_shape, D> saved_;  // the fused activation's output or input (training only)
  };

  template <class S, class P>
  class leading_module : public rows_module<Shape<dyn, S::extents[S::rank - 1]>, P> {
    using Rows = Shape<dyn, S::extents[S::rank - 1]>;
    using base = rows_module<Rows, P>;

   public:
    using typename base::D;
    using typename base::T;
    using input_shape = S;
    using output_shape = output<S>;
    static constexpr bool fuses_epilogue = true;

    /// y = x Wᵀ + b over the last dimension  // [N, *, In] -> [N, *, Out]
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      return forward_fused<epilogue::Identity>(x, ctx);
    }
    /// The rows' backward, in x's shape  // [N, *, Out] -> [N, *, In]
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      return backward_fused<epilogue::Identity>(dy, input_grad);
    }
    template <class E>
    Tensor<T, output_shape, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      if constexpr (S::extents[S::rank - 1] == dyn)
        if (x.size(-1) != In)
          throw ShapeError("kiln::nn::Linear<" + std::to_string(In) + ", " + std::to_string(Out) + ">: input " +
                           to_string(x.extents()) + " has " + std::to_string(x.size(-1)) + " features last, expected " +
                           std::to_string(In));
      const auto y = base::template forward_fused<E>(as_rows(x), ctx);
      return y.template reshape<output_shape>(with_last<output_shape>(x.extents(), Out));
    }
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      auto dx = base::template backward_fused<E>(as_rows(dy), input_grad);
      if (!input_grad) return Tensor<T, S, D>();
      return dx.template reshape<S>(with_last<S>(dy.extents(), In));
    }

   private:
    /// x [N, *, F] as rows [N * ..., F] (a view; F is In or Out, never 0).
    template <class X>
    static auto as_rows(const X& x) {
      using R = Shape<dyn, X::shape_type::extents[X::shape_type::rank - 1]>;
      Extents<R> e;
      e[1] = x.size(-1);
      e[0] = x.numel() / e[1];
      return x.template reshape<R>(e);
    }
    /// ext's leading extents with `last` features, as Extents of R.
    template <class R, class From>
    static Extents<R> with_last(const From& ext, index_t last) {
      Extents<R> e;
      for (std::size_t d = 0; d + 1 < R::rank; ++d) e[d] = ext[d];
      e[R::rank - 1] = last;
      return e;
    }
  };
};

}  // namespace kiln::nn
