/// Epilogues: the activation a Linear, Conv2d or ConvTranspose2d runs on its GEMM's result while it is still
/// in cache.
///
/// In a Sequential, `Linear<...>, ReLU` (or a Linear, Conv2d or ConvTranspose2d followed by any pointwise
/// activation: ReLU, Sigmoid, Tanh, GELU, GELUTanh, SiLU, LeakyReLU, ELU, ReLU6, Hardtanh, Hardsigmoid, Hardswish,
/// Softplus, Mish, SELU, CELU, Softsign, LogSigmoid) runs as one layer: GEMM, then one pass that adds the
/// bias and applies the activation; backward is one pass that applies the activation's derivative and reduces
/// the bias gradient, then the GEMMs. A BatchNorm (1d, 2d, Sync) followed by one runs it in its normalising
/// pass, and its derivative in the two backward passes that read dy; a GroupNorm, LayerNorm or InstanceNorm
/// in its normalising pass, its derivative once into dz; an Add or a Residual in the pass of its sum
/// (nn/detail/sum_epilogue.hpp). The activation's module stays in the graph (summary, indices and
/// state_dict names do not change) but does no work.
#pragma once
#include <bit>
#include <cstdint>
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/ops/functors.hpp"

namespace kiln::nn::epilogue {

/// 0 from v, a value that is never negative where this is called (e^z, e^z - 1 at z > 0, log(1 + e^z), or
/// NaN): x - zero_from(v) is x, bits and sign, on the side of a select that does not need v. A function
/// (exp, expm1, log1p) whose value one side of a select uses is called in a branch on that side by g++,
/// and the CPU loop does not vectorise; used on both sides, it is called for every element, four a call
/// (core/vector_math.hpp): ELU forward and backward over [128, 16, 32, 32] took 17 ms, and take 3.7.
template <class A>
KILN_HOST_DEVICE KILN_FORCEINLINE A zero_from(A v) {
  return v < A(0) ? v : A(0);
}

/// Each epilogue E gives, on the compute type A:
///   E::forward(z)          the activation of the pre-activation z (bias included)
///   E::backward(dy, s)     dL/dz from dL/dy and the saved value s
///   E::saves_output        s is the output y (true) or the pre-activation z (false)
///   E::identity            nothing to apply (plain bias)
struct Identity {
  static constexpr bool saves_output = true;
  static constexpr bool identity = true;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) { return z; }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A) { return dy; }
};

/// dy where keep, else +0: dy's bits masked, without a branch. The same as `keep ? dy : A(0)`, which g++
/// turns into a branch when a conversion follows (a BatchNorm's backward widens dz to double: the
/// conversion may trap, so it is not hoisted out of the branch) and then does not vectorise.
template <class A>
KILN_HOST_DEVICE KILN_FORCEINLINE A keep_or_zero(bool keep, A dy) {
  if constexpr (std::is_same_v<A, float>)
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(dy) & (keep ? 0xffffffffu : 0u));
  else if constexpr (std::is_same_v<A, double>)
    return std::bit_cast<double>(std::bit_cast<std::uint64_t>(dy) & (keep ? ~0ull : 0ull));
  else
    return keep ? dy : A(0);
}

/// max(z, 0) (NaN passes through); the gradient at 0 is 0 and at NaN dy, as PyTorch's.
struct Relu {
  static constexpr bool saves_output = true;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) { return ops::Relu{}(z); }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A y) { return keep_or_zero(!(y <= A(0)), dy); }
};

struct Sigmoid {
  static constexpr bool saves_output = true;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) { return ops::Sigmoid{}(z); }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A y) { return dy * y * (A(1) - y); }
};

struct Tanh {
  static constexpr bool saves_output = true;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) { return ops::Tanh{}(z); }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A y) { return dy * (A(1) - y * y); }
};

/// x Φ(x), the exact erf form (torch.nn.GELU()); its derivative needs the pre-activation.
struct Gelu {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    return A(0.5) * z * (A(1) + ops::detail::erf_(z * A(0.70710678118654752440)));
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {  // Φ(z) + z φ(z)
    const A cdf = A(0.5) * (A(1) + ops::detail::erf_(z * A(0.70710678118654752440)));
    return dy * (cdf + z * A(0.39894228040143267794) * ops::detail::exp_(A(-0.5) * z * z));
  }
};

/// 0.5 z (1 + tanh(√(2/π) (z + 0.044715 z³))), torch.nn.GELU(approximate='tanh'), with torch's
/// derivative: 0.5 (1 + t) + 0.5 z (1 - t²) √(2/π) (1 + 3 · 0.044715 z²), t the tanh.
struct GeluTanh {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A inner(A z) {
    return A(0.79788456080286535588) * (z + A(0.044715) * z * z * z);  // √2 · (2/√π) · 0.5, torch's kBeta
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    return A(0.5) * z * (A(1) + ops::detail::tanh_(inner(z)));
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    const A t = ops::detail::tanh_(inner(z));
    const A left = A(0.5) * z, right = A(1) + t;
    const A inner_derivative = A(0.79788456080286535588) * (A(1) + A(3) * A(0.044715) * z * z);
    return dy * (A(0.5) * right + left * (A(1) - t * t) * inner_derivative);
  }
};

/// x sigmoid(x) = x / (1 + e^-x) (torch.nn.SiLU, "swish"); its derivative s (1 + x (1 - s)), s =
/// sigmoid(x), needs the pre-activation.
struct Silu {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) { return z / (A(1) + ops::detail::exp_(-z)); }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    const A s = A(1) / (A(1) + ops::detail::exp_(-z));
    return dy * s * (A(1) + z * (A(1) - s));
  }
};

/// z where z > 0, else Slope z (torch.nn.LeakyReLU(negative_slope)); the gradient Slope at 0 and at NaN,
/// as torch's. A positive slope keeps the sign, so the output tells the branch; otherwise the
/// pre-activation is kept.
template <float Slope>
struct LeakyRelu {
  static constexpr bool saves_output = Slope > 0.0f;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) { return z > A(0) ? z : z * A(Slope); }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A s) { return s > A(0) ? dy : dy * A(Slope); }
};

/// z where z > 0, else Alpha (e^z - 1) (torch.nn.ELU(alpha)), through expm1 as torch's CUDA kernel
/// (torch 1.13's CPU kernel computes e^z - 1, which loses the digits of a small z and gives +0 at -0);
/// its gradient Alpha e^z from the pre-activation (as torch's: y + Alpha would lose the gradient's
/// digits for very negative z), and dy at NaN (z <= 0 is false; torch's CPU vector path gives NaN there).
template <float Alpha>
struct Elu {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    const A e = ops::detail::expm1_(z);
    return z <= A(0) ? A(Alpha) * e : z - zero_from(e);
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    const A e = ops::detail::exp_(z);
    return z <= A(0) ? dy * A(Alpha) * e : dy - zero_from(e);
  }
};

/// z clamped to [Min, Max] (torch.nn.Hardtanh(min_val, max_val); ReLU6 is [0, 6]); NaN passes through.
/// The gradient dy strictly inside, 0 at and past either bound, and dy at NaN, as torch's
/// hardtanh_backward, from the pre-activation as torch's (the output would not tell the branch in a
/// 16-bit type where a bound rounds inside the range: fp16's 0.1 is 0.0999756).
template <float Min, float Max>
struct Hardtanh {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    return z < A(Min) ? A(Min) : z > A(Max) ? A(Max) : z;
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    return z <= A(Min) || z >= A(Max) ? A(0) : dy;
  }
};

/// min(max(z + 3, 0), 6) / 6 (torch.nn.Hardsigmoid, in torch's order of operations); the gradient dy / 6
/// strictly inside (-3, 3), else 0 (NaN too), as torch's.
struct Hardsigmoid {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    return clamp6(z + A(3)) / A(6);
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    return z > A(-3) && z < A(3) ? dy / A(6) : A(0);
  }
  /// min(max(v, 0), 6), NaN passing through.
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A clamp6(A v) {
    return v < A(0) ? A(0) : v > A(6) ? A(6) : v;
  }
};

/// z min(max(z + 3, 0), 6) / 6 (torch.nn.Hardswish); the gradient 0 below -3, dy (z / 3 + 1/2) from -3 to
/// 3 (both included), dy above 3 and at NaN, as torch's hardswish_backward.
struct Hardswish {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    return z * Hardsigmoid::clamp6(z + A(3)) / A(6);
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    return z < A(-3) ? A(0) : z <= A(3) ? dy * (z / A(3) + A(0.5)) : dy;
  }
};

/// log(1 + e^(Beta z)) / Beta, or z where Beta z > Threshold (torch.nn.Softplus(beta, threshold)); the
/// gradient dy e^(Beta z) / (e^(Beta z) + 1), or dy past the threshold, as torch's.
template <float Beta, float Threshold>
struct Softplus {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    const A l = ops::detail::log1p_(ops::detail::exp_(z * A(Beta)));
    return z * A(Beta) > A(Threshold) ? z - zero_from(l) : l / A(Beta);
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    const A e = ops::detail::exp_(z * A(Beta));
    return z * A(Beta) > A(Threshold) ? dy - zero_from(e) : dy * e / (e + A(1));
  }
};

/// z tanh(softplus(z)) (torch.nn.Mish); the gradient dy (t + z sigmoid(z) (1 - t^2)), t = tanh(softplus(z)),
/// as torch's.
struct Mish {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    return z * t(z);
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    const A tz = t(z), s = A(1) / (A(1) + ops::detail::exp_(-z));
    return dy * (tz + z * s * (A(1) - tz * tz));
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A t(A z) {
    return ops::detail::tanh_(ops::detail::log1p_(ops::detail::exp_(z)));
  }
};

/// Scale z where z > 0, else Scale Alpha (e^(z / Alpha') - 1) with Alpha' = 1 for SELU and Alpha for CELU:
/// torch's elu(z, alpha, scale, input_scale) (torch.nn.SELU: alpha 1.6732632423543772, scale
/// 1.0507009873554805; torch.nn.CELU(alpha): scale 1, input scale 1 / alpha), through expm1 as ELU; the
/// gradient dy Scale Alpha InputScale e^(InputScale z) where z <= 0, else dy Scale (dy Scale at NaN).
/// The constants are doubles, so that a float64 model uses torch's float64 values.
template <double Alpha, double Scale, double InputScale>
struct ScaledElu {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    const A e = ops::detail::expm1_(z * A(InputScale));
    return z <= A(0) ? A(Alpha) * A(Scale) * e : z * A(Scale) - zero_from(e);
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    const A e = ops::detail::exp_(z * A(InputScale));
    return z <= A(0) ? dy * A(InputScale) * (A(Alpha) * A(Scale)) * e : dy * A(Scale) - zero_from(e);
  }
};
/// SELU's constants (torch's, from Klambauer et al.).
inline constexpr double selu_alpha = 1.6732632423543772848170429916717;
inline constexpr double selu_scale = 1.0507009873554804934193349852946;

/// z / (1 + |z|) (torch.nn.Softsign); the gradient dy / (1 + |z|)^2, computed as torch's autograd
/// does through z.div(z.abs() + 1): dy / d - dy ((z / d) / d) sgn(z), d = 1 + |z|, so NaN at z = ±inf as
/// torch's (inf / inf), where the limit would be 0.
struct Softsign {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    return z / (A(1) + ops::detail::abs_(z));
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    const A d = A(1) + ops::detail::abs_(z);
    const A sgn = z > A(0) ? A(1) : (z < A(0) ? A(-1) : z);  // torch's sgn: 0 at ±0, NaN at NaN
    return dy / d + (-dy * ((z / d) / d)) * sgn;
  }
};

/// log(sigmoid(z)) = min(z, 0) - log(1 + e^-|z|) (torch.nn.LogSigmoid, without overflow either way); the
/// gradient dy / (1 + e^z) (sigmoid(-z)).
struct LogSigmoid {
  static constexpr bool saves_output = false;
  static constexpr bool identity = false;
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A forward(A z) {
    return (z < A(0) ? z : A(0)) - ops::detail::log1p_(ops::detail::exp_(-ops::detail::abs_(z)));
  }
  template <class A>
  KILN_HOST_DEVICE KILN_FORCEINLINE static A backward(A dy, A z) {
    return dy / (A(1) + ops::detail::exp_(z));
  }
};

}  // namespace kiln::nn::epilogue

namespace kiln::nn {

/// The epilogue a layer spec L stands for when it follows a layer that fuses_epilogue: its
/// fused_epilogue (every pointwise activation's, nn/activation.hpp; the activation itself, not a spec
/// derived from it with a module of its own); void: L is not fused.
template <class L>
struct epilogue_of {
  using type = void;
};
template <class L>
requires std::is_same_v<typename L::fused_layer, L>
struct epilogue_of<L> {
  using type = typename L::fused_epilogue;
};

/// Whether the module type Mod runs the activation after it (it has forward_fused / backward_fused).
template <class Mod>
concept fuses_epilogue = requires { Mod::fuses_epilogue; } && Mod::fuses_epilogue;

namespace detail {
/// The traffic of a bias + activation pass over rows x cols (the arithmetic as the unfused layer and
/// activation count it: the add, and the activation as one operation): z read, y written, z rewritten
/// when it is kept apart from y, the bias read.
template <class T, class B, class E>
Traffic bias_epilogue_traffic(index_t rows, index_t cols, const T* z, const B* bias, const T* y) {
  const index_t n = rows * cols;
  const std::uint64_t b = kiln::detail::bytes_of<T>(n) * (z != y ? 3 : 2) + (bias ? kiln::detail::bytes_of<B>(cols) : 0);
  return {b, static_cast<std::uint64_t>(n) * ((bias ? 1 : 0) + (E::identity ? 0 : 1))};
}
/// The traffic of an activation-backward + bias-gradient pass: dy and the saved value read, dz written,
/// the bias gradient read and written; the derivative and the sum as one operation each.
template <class T, class B>
Traffic epilogue_grad_traffic(index_t rows, index_t cols, const B* db) {
  const index_t n = rows * cols;
  return {kiln::detail::bytes_of<T>(n) * 3 + (db ? 2 * kiln::detail::bytes_of<B>(cols) : 0),
          static_cast<std::uint64_t>(n) * (db ? 2 : 1)};
}

/// y[r, :] = E(z[r, :] + b) over one row of `cols` (CPU: one call per row, contiguous and vectorised);
/// z keeps the pre-activation when it is not y (E::saves_output false). Bias may be null.
template <class T, class B, class E>
struct BiasEpilogueRows {
  T* z;
  const B* bias;
  T* y;
  index_t cols;
  KILN_HOST_DEVICE void operator()(index_t r) const {
    T* zr = z + r * cols;
    T* yr = y + r * cols;
    // One loop per case, each `omp simd`: g++ -O2 (README.md's line) neither takes the tests out of the
    // loop nor vectorises it by itself.
    if (bias) {
      if (zr != yr) row<true, true>(zr, yr);
      else row<true, false>(zr, yr);
    } else {
      if (zr != yr) row<false, true>(zr, yr);
      else row<false, false>(zr, yr);
    }
  }
  template <bool HasBias, bool Keep>
  KILN_HOST_DEVICE KILN_FORCEINLINE void row(T* zr, T* yr) const {
    KILN_PRAGMA_OMP(simd)
    for (index_t j = 0; j < cols; ++j) {
      compute_t<T> v = to_compute(zr[j]);
      if constexpr (HasBias) v += static_cast<compute_t<T>>(to_compute(bias[j]));
      if constexpr (Keep) zr[j] = from_compute<T>(v);
      yr[j] = from_compute<T>(E::forward(v));
    }
  }
  Traffic traffic(index_t rows) const { return bias_epilogue_traffic<T, B, E>(rows, cols, z, bias, y); }
};
/// The same per element (CUDA: one thread per element, coalesced).
template <class T, class B, class E>
struct BiasEpilogue {
  T* z;
  const B* bias;
  T* y;
  index_t cols;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const compute_t<T> v =
        to_compute(z[i]) + (bias ? static_cast<compute_t<T>>(to_compute(bias[i % cols])) : compute_t<T>(0));
    if (z != y) z[i] = from_compute<T>(v);
    y[i] = from_compute<T>(E::forward(v));
  }
  Traffic traffic(index_t n) const { return bias_epilogue_traffic<T, B, E>(n / cols, cols, z, bias, y); }
};
/// y = E(acc + b) from a wider accumulator (mixed precision: the GEMM's fp32 sum), so that the sum, the
/// bias and the activation are rounded to T once, as torch's addmm; z, when not null, keeps the rounded
/// pre-activation. One call per row (Rows: the CPU, contiguous) or per element (CUDA, coalesced).
template <class T, class A, class B, class E, bool Rows>
struct WideBiasEpilogue {
  const A* acc;
  const B* bias;  // null: no bias
  T* z;           // null: pre-activation not kept
  T* y;
  index_t cols;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    if constexpr (Rows) {
      for (index_t j = 0; j < cols; ++j) at(i * cols + j, j);
    } else {
      at(i, i % cols);
    }
  }
  KILN_HOST_DEVICE void at(index_t k, index_t j) const {
    const compute_t<T> v = static_cast<compute_t<T>>(acc[k]) +
                           (bias ? static_cast<compute_t<T>>(to_compute(bias[j])) : compute_t<T>(0));
    if (z) z[k] = from_compute<T>(v);
    y[k] = from_compute<T>(E::forward(v));
  }
  /// acc read, y (and z) written, the bias read; the add and the activation.
  Traffic traffic(index_t calls) const {
    const index_t n = Rows ? calls * cols : calls;
    return {kiln::detail::bytes_of<A>(n) + kiln::detail::bytes_of<T>(n) * (z ? 2 : 1) +
                (bias ? kiln::detail::bytes_of<B>(cols) : 0),
            static_cast<std::uint64_t>(n) * ((bias ? 1 : 0) + (E::identity ? 0 : 1))};
  }
};

/// dz = E'(dy, saved) elementwise.
template <class T, class E>
struct EpilogueGrad {
  const T* dy;
  const T* saved;
  T* dz;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    dz[i] = from_compute<T>(E::backward(to_compute(dy[i]), to_compute(saved[i])));
  }
  Traffic traffic(index_t n) const {
    return {3 * kiln::detail::bytes_of<T>(n), static_cast<std::uint64_t>(n)};
  }
};

/// How many chunks of rows the GPU's activation-backward pass splits a [rows, cols] gradient into:
/// enough threads (splits x cols) to fill the device's `resident` threads, each chunk at least
/// `min_rows` long so that the partial sums stay a small part of the traffic. 1 (one thread per column
/// over every row, no partial sums, no second pass) when the columns alone fill a quarter of the device
/// or the batch is shorter than 8 chunks: there the second pass would cost more than it saves.
constexpr index_t epilogue_grad_splits(index_t rows, index_t cols, index_t resident, index_t min_rows = 32) {
  if (cols <= 0 || rows < 8 * min_rows || 4 * cols > resident) return 1;
  const index_t want = (resident + cols - 1) / cols, most = rows / min_rows;
  return want < most ? want : most;
}
/// dz[r, j] = E'(dy[r, j], s[r, j]) over rows [c * chunk, (c + 1) * chunk) of column j, one call per
/// (chunk c, column j) at index c * cols + j (consecutive calls read consecutive columns: coalesced on
/// a GPU), with the column's sum of dz going to partial[c * cols + j], or with one chunk (partial null)
/// straight to db[j] += Σ_r dz[r, j]. db and partial may both be null (no bias).
template <class T, class B, class E>
struct EpilogueGradChunks {
  const T* dy;
  const T* saved;
  T* dz;
  B* db;
  compute_t<T>* partial;
  index_t rows, cols, chunk;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t c = i / cols, j = i - c * cols;
    const index_t r0 = c * chunk, r1 = rows < r0 + chunk ? rows : r0 + chunk;
    compute_t<T> acc = 0;
    for (index_t r = r0; r < r1; ++r) {
      const index_t k = r * cols + j;
      const compute_t<T> g = E::backward(to_compute(dy[k]), to_compute(saved[k]));
      dz[k] = from_compute<T>(g);
      acc += g;
    }
    if (partial) partial[i] = acc;
    else if (db) db[j] = static_cast<B>(static_cast<compute_t<T>>(to_compute(db[j])) + acc);
  }
  Traffic traffic(index_t n) const {
    if (!partial) return epilogue_grad_traffic<T, B>(rows, cols, db);
    return {kiln::detail::bytes_of<T>(rows * cols) * 3 + kiln::detail::bytes_of<compute_t<T>>(n),
            static_cast<std::uint64_t>(rows) * cols * 2};
  }
};
/// db[j] += Σ_c partial[c * cols + j], the chunks added in order (deterministic), one call per column.
template <class C, class B>
struct AddChunkSums {
  const C* partial;
  B* db;
  index_t chunks, cols;
  KILN_HOST_DEVICE void operator()(index_t j) const {
    C acc = 0;
    for (index_t c = 0; c < chunks; ++c) acc += partial[c * cols + j];
    db[j] = static_cast<B>(static_cast<C>(to_compute(db[j])) + acc);
  }
  Traffic traffic(index_t) const {
    return {kiln::detail::bytes_of<C>(chunks * cols) + 2 * kiln::detail::bytes_of<B>(cols),
            static_cast<std::uint64_t>(chunks) * cols};
  }
};
/// The same over a block of up to J columns per call, row by row (CPU: contiguous, vectorised inner loop).
template <class T, class B, class E, index_t J = 16>
struct EpilogueGradColumnBlocks {
  const T* dy;
  const T* saved;
  T* dz;
  B* db;
  index_t rows, cols;
  static index_t count(index_t cols) { return (cols + J - 1) / J; }
  KILN_HOST_DEVICE void operator()(index_t block) const {
    const index_t j0 = block * J, m = cols - j0 < J ? cols - j0 : J;
    compute_t<T> acc[J] = {};
    for (index_t r = 0; r < rows; ++r) {
      const index_t base = r * cols + j0;
      for (index_t j = 0; j < m; ++j) {
        const compute_t<T> g = E::backward(to_compute(dy[base + j]), to_compute(saved[base + j]));
        dz[base + j] = from_compute<T>(g);
        acc[j] += g;
      }
    }
    if (db)
      for (index_t j = 0; j < m; ++j) db[j0 + j] = static_cast<B>(static_cast<compute_t<T>>(to_compute(db[j0 + j])) + acc[j]);
  }
  Traffic traffic(index_t) const { return epilogue_grad_traffic<T, B>(rows, cols, db); }
};
}  // namespace detail

}  // namespace kiln::nn
