/// ConvTranspose2d on the CPU, image by image: the adjoint of Conv2d's CPU path (nn/detail/conv_cpu.hpp).
/// `g` is the geometry of the convolution whose input gradient the transposed convolution computes: from
/// y [N, Out, Ho, Wo] (g.c, g.h, g.w) to x [N, In, H, W] (`in`, g.ho, g.wo). The forward pass is that
/// convolution's backward data pass (per group, the GEMM wᵀ x into columns, then col2im into y); the
/// backward pass is its forward pass for dx and its filter gradient with x and dz in each other's place.
#pragma once
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kiln/nn/detail/conv_cpu.hpp"

namespace kiln::nn::detail {

/// y = E(convᵀ(x, w) + b) for the batch; z keeps the pre-activation when not null. One parallel pass
/// over the images; per image and group, dcols = w_gᵀ x_g ([(Out / G) K K, H W]) and col2im adds it into
/// the group's planes of y (in A, the GEMM's type: the sums, the bias and the activation are rounded to T
/// once). T: activations; W: the weight the GEMM reads, [In, (Out / G) K K]; B: the bias (master type).
template <class E, index_t Stride, class T, class W, class B>
void conv_transpose2d_forward_cpu(const T* x, const W* w, const B* bias, T* z, T* y, const ConvGeometry& g,
                                  index_t in) {
  using A = compute_t<T>;
  constexpr bool direct = std::is_same_v<T, A>;  // col2im writes the output itself
  ConvGeometry one = g;
  one.n = 1;
  const index_t patch = g.patch(), p = g.pixels(), fg = in / g.groups, plane = g.h * g.w;
  const index_t x_image = in * p, y_image = g.image(), out = g.c;
  {  // the images, weights and bias read, y (and z) written; the GEMM, col2im's adds, bias and activation
    using kiln::detail::bytes_of;
    const index_t outputs = g.n * y_image;
    kiln::detail::count_pass(
        {bytes_of<T>(g.n * x_image) + bytes_of<W>(in * patch) + (bias ? bytes_of<B>(out) : 0) +
             bytes_of<T>(outputs) * (z ? 2 : 1),
         2 * static_cast<std::uint64_t>(g.n * x_image) * static_cast<std::uint64_t>(patch) +
             static_cast<std::uint64_t>(g.n * g.groups * patch * p) +
             static_cast<std::uint64_t>(outputs) * ((bias ? 1 : 0) + (E::identity ? 0 : 1))});
  }
  const int team = static_cast<int>(std::min<index_t>(backend::cpu::threads(), std::max<index_t>(g.n, 1)));
  const index_t per_thread = patch * p + (direct ? 0 : y_image + x_image);
  auto scratch = cpu_scratch<A>(per_thread, team);
  Tensor<A, Shape<dyn>, Cpu> wide;
  const A* wa = gemm_weight<A>(w, in * patch, wide);
  A* const scratch_all = scratch.data();
  const bool parallel = team > 1;
  const backend::cpu::SerialBlas serial_blas(parallel);  // one GEMM per thread, each on its thread
  KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel) num_threads(team))
  for (index_t n = 0; n < g.n; ++n) {
    A* dcols = scratch_all + backend::cpu::thread() * per_thread;
    A* sums = dcols + patch * p;  // narrow T: the image's sums before rounding
    const A* image = widened_image(x + n * x_image, sums + (direct ? 0 : y_image), x_image);
    T* yn = y + n * y_image;
    T* zn = z ? z + n * y_image : nullptr;
    auto* r = [&] {
      if constexpr (direct)
        return zn ? zn : yn;
      else
        return sums;
    }();
    for (index_t gi = 0; gi < g.groups; ++gi) {
      backend::cpu::gemm_in_column_blocks<A>(true, patch, p, fg, 1.0f, wa + gi * fg * patch, patch,
                                             image + gi * fg * p, p, 0.0f, dcols, p);
      col2im_image<Stride>(dcols, r + gi * g.group_image(), one);
    }
    const ColumnsToNchw<T, B, E, std::remove_pointer_t<decltype(r)>> epilogue{r,   bias,  zn,   yn,
                                                                              out, plane, plane};
    for (index_t f = 0; f < out; ++f) epilogue(f);
  }
}

/// gw += Σ_n x_n im2col(dz_n)ᵀ, gb += Σ dz, and dx = w im2col(dz_n) when dx is not null, where
/// dz = E'(dy, saved). As conv2d_backward_cpu: the batch cut into at most 32 groups of consecutive
/// images with their own partial weight gradients, added in group order (the same sums whatever the
/// thread count). T: activations; W: the weight the GEMM reads; G: the gradient arena's type (master).
template <class E, index_t Stride, class T, class W, class G>
void conv_transpose2d_backward_cpu(const T* x, const T* dy, const T* saved, const W* w, G* gw, G* gb, T* dx,
                                   const ConvGeometry& g, index_t in) {
  using A = compute_t<T>;
  constexpr bool narrow = !std::is_same_v<T, A>;
  constexpr bool wide_dz = !E::identity || narrow;
  ConvGeometry one = g;
  one.n = 1;
  const index_t patch = g.patch(), p = g.pixels(), fg = in / g.groups, plane = g.h * g.w;
  const index_t x_image = in * p, y_image = g.image(), out = g.c;
  {  // the images, dy (and the saved value) and the weights read; the gradients read and written, dx
     // written; the derivative, the bias sum, the im2col copies, the filter GEMM (and the data GEMM)
    using kiln::detail::bytes_of;
    const index_t outputs = g.n * y_image;
    const std::uint64_t gemm =
        2 * static_cast<std::uint64_t>(g.n * x_image) * static_cast<std::uint64_t>(patch);
    kiln::detail::count_pass({bytes_of<T>(g.n * x_image) * (dx ? 2 : 1) +
                                  bytes_of<T>(outputs) * (E::identity ? 1 : 2) +
                                  (dx ? bytes_of<W>(in * patch) : 0) + 2 * bytes_of<G>(in * patch) +
                                  (gb ? 2 * bytes_of<G>(out) : 0),
                              (dx ? 2 * gemm : gemm) + static_cast<std::uint64_t>(outputs) *
                                                           ((E::identity ? 0 : 1) + (gb ? 1 : 0))});
  }
  const index_t per_thread = patch * p + (wide_dz ? y_image : 0) + (narrow ? (dx ? 2 : 1) * x_image : 0);
  BackwardSplit<A> split(g.n, per_thread, in, patch, g.groups, out);
  Tensor<A, Shape<dyn>, Cpu> wide;
  const A* wa = dx ? gemm_weight<A>(w, in * patch, wide) : nullptr;
  const bool parallel = split.parallel();
  const int team = split.team();
  const index_t groups = split.groups();
  const backend::cpu::SerialBlas serial_blas(parallel);  // one GEMM per thread, each on its thread
  KILN_PRAGMA_OMP(parallel for schedule(static) if(parallel) num_threads(team))
  for (index_t grp = 0; grp < groups; ++grp) {
    A* cols = split.scratch();
    A* dz_buf = cols + patch * p;
    A* x_buf = dz_buf + (wide_dz ? y_image : 0);
    A* dx_buf = x_buf + (narrow ? x_image : 0);
    A* pw = split.weight_partial(grp);
    double* pb = split.bias_partial(grp);
    for (index_t n = split.first(grp); n < split.last(grp); ++n) {
      const A* dz;
      if constexpr (wide_dz) {  // through the activation (and widened), into the per-thread buffer
        const NchwToColumns<T, E, A> act{
            dy + n * y_image, saved ? saved + n * y_image : nullptr, dz_buf, out, plane, plane};
        for (index_t f = 0; f < out; ++f) act(f);
        dz = dz_buf;
      } else {
        dz = dy + n * y_image;
      }
      for (index_t f = 0; f < out; ++f)
        pb[f] += kiln::detail::lane_sum<double>(dz, f * plane, (f + 1) * plane);
      const A* image = widened_image(x + n * x_image, x_buf, x_image);
      T* dxn = dx ? dx + n * x_image : nullptr;
      for (index_t gi = 0; gi < g.groups; ++gi) {  // group gi: its In / G input channels, its Out / G outputs
        im2col_image<Stride>(dz + gi * g.group_image(), cols, one);  // [(Out / G) K K, H W]
        split.accumulate(pw, gi, image + gi * fg * p, cols, p);
        if (dx) {
          A* dst = [&] {
            if constexpr (narrow)
              return dx_buf + gi * fg * p;
            else
              return dxn + gi * fg * p;
          }();
          backend::cpu::gemm_in_column_blocks<A>(false, fg, p, patch, 1.0f, wa + gi * fg * patch, patch, cols,
                                                 p, 0.0f, dst, p);
        }
      }
      if constexpr (narrow)
        if (dx)
          for (index_t i = 0; i < x_image; ++i) dxn[i] = from_compute<T>(dx_buf[i]);
    }
  }
  split.add_to(gw, gb);
}

}  // namespace kiln::nn::detail
