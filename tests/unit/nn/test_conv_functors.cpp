// Conv2d's shared host/device functors (nn/detail/conv_functors.hpp), which the CUDA path without cuDNN
// runs over the whole batch, checked here on the CPU against the definition: Im2colRows equals
// x[n, c0 + c, oh s - p + ki d, ow s - p + kj d] (0 outside) and the CPU's own im2col_image; Col2imRows
// is its adjoint (<im2col(x), dcols> = <x, col2im(dcols)> for every group) and equals col2im_image.
// For stride 1 without padding (the plain-copy path), stride 2 and 3, padding, dilation 2 and 3, two
// groups and depthwise.
#include <boost/test/unit_test.hpp>
#include <kiln/nn/detail/conv_cpu.hpp>
#include <kiln/nn/detail/conv_functors.hpp>
#include <string>
#include <vector>

#include "support/reference.hpp"

namespace conv_functors_test {
using kiln::index_t;
using kiln::nn::detail::ConvGeometry;

/// The geometry of x [n, c, h, w] with a k x k kernel, its output size as torch's.
ConvGeometry geometry(index_t n, index_t c, index_t h, index_t w, index_t k, index_t s, index_t p, index_t d,
                      index_t groups) {
  const index_t span = d * (k - 1) + 1;
  return {n, c, h, w, k, s, p, (h + 2 * p - span) / s + 1, (w + 2 * p - span) / s + 1, d, groups};
}

std::string describe(const ConvGeometry& g) {
  return "x [" + std::to_string(g.n) + ", " + std::to_string(g.c) + ", " + std::to_string(g.h) + ", " +
         std::to_string(g.w) + "], K " + std::to_string(g.k) + ", stride " + std::to_string(g.stride) +
         ", padding " + std::to_string(g.pad) + ", dilation " + std::to_string(g.dilation) + ", groups " +
         std::to_string(g.groups);
}

template <index_t Stride>
void check(const ConvGeometry& g) {
  using kiln::nn::detail::Col2imRows;
  using kiln::nn::detail::Im2colRows;
  BOOST_TEST_CONTEXT(describe(g)) {
    BOOST_REQUIRE(g.stride == Stride);
    const auto x = kiln::test::random_values<double>(static_cast<std::size_t>(g.n * g.image()), -1.0, 1.0, 5);
    const std::size_t ncols = static_cast<std::size_t>(g.patch() * g.columns());
    std::vector<double> dx(static_cast<std::size_t>(g.n * g.image()), -7.0);  // every element overwritten
    double lhs_total = 0, rhs_total = 0;
    for (index_t grp = 0; grp < g.groups; ++grp) {
      const index_t c0 = grp * g.group_channels();
      std::vector<double> cols(ncols, -7.0);
      const Im2colRows<double, Stride> im2col{x.data(), cols.data(), g, c0};
      for (index_t i = 0; i < Im2colRows<double, Stride>::count(g); ++i) im2col(i);
      // the definition, and the CPU path's im2col_image, image by image
      ConvGeometry one = g;
      one.n = 1;
      std::vector<double> image_cols(static_cast<std::size_t>(g.patch() * g.pixels()));
      std::size_t wrong = 0, wrong_cpu = 0;
      for (index_t n = 0; n < g.n; ++n) {
        kiln::nn::detail::im2col_image<Stride>(x.data() + n * g.image() + c0 * g.h * g.w, image_cols.data(),
                                               one);
        for (index_t c = 0; c < g.group_channels(); ++c)
          for (index_t ki = 0; ki < g.k; ++ki)
            for (index_t kj = 0; kj < g.k; ++kj)
              for (index_t oh = 0; oh < g.ho; ++oh)
                for (index_t ow = 0; ow < g.wo; ++ow) {
                  const index_t ih = oh * Stride - g.pad + ki * g.dilation,
                                iw = ow * Stride - g.pad + kj * g.dilation;
                  const double want =
                      ih < 0 || ih >= g.h || iw < 0 || iw >= g.w
                          ? 0.0
                          : x[static_cast<std::size_t>(((n * g.c + c0 + c) * g.h + ih) * g.w + iw)];
                  const index_t r = (c * g.k + ki) * g.k + kj, q = oh * g.wo + ow;
                  wrong += cols[static_cast<std::size_t>(r * g.columns() + n * g.pixels() + q)] != want;
                  wrong_cpu += image_cols[static_cast<std::size_t>(r * g.pixels() + q)] != want;
                }
      }
      BOOST_TEST(wrong == 0u, "group " << grp << ": Im2colRows differs from the definition in " << wrong);
      BOOST_TEST(wrong_cpu == 0u,
                 "group " << grp << ": im2col_image differs from the definition in " << wrong_cpu);

      // the adjoint: <im2col(x), dcols> = <x, col2im(dcols)> over the group's channels
      const auto dcols = kiln::test::random_values<double>(ncols, -1.0, 1.0, 40 + static_cast<unsigned>(grp));
      const Col2imRows<double, Stride> col2im{dcols.data(), dx.data(), g, c0};
      for (index_t i = 0; i < Col2imRows<double, Stride>::count(g); ++i) col2im(i);
      double lhs = 0, rhs = 0;
      for (std::size_t i = 0; i < ncols; ++i) lhs += cols[i] * dcols[i];
      for (index_t n = 0; n < g.n; ++n)
        for (index_t i = 0; i < g.group_image(); ++i) {
          const std::size_t at = static_cast<std::size_t>(n * g.image() + c0 * g.h * g.w + i);
          rhs += x[at] * dx[at];
        }
      BOOST_TEST(lhs == rhs, boost::test_tools::tolerance(1e-12));
      lhs_total += lhs, rhs_total += rhs;
      // col2im_image (the CPU path's scatter) gives the same image gradients
      std::vector<double> image_dcols(static_cast<std::size_t>(g.patch() * g.pixels()));
      std::vector<double> image_dx(static_cast<std::size_t>(g.group_image()));
      double worst = 0;
      for (index_t n = 0; n < g.n; ++n) {
        for (index_t r = 0; r < g.patch(); ++r)
          for (index_t q = 0; q < g.pixels(); ++q)
            image_dcols[static_cast<std::size_t>(r * g.pixels() + q)] =
                dcols[static_cast<std::size_t>(r * g.columns() + n * g.pixels() + q)];
        kiln::nn::detail::col2im_image<Stride>(image_dcols.data(), image_dx.data(), one);
        for (index_t i = 0; i < g.group_image(); ++i) {
          const double d = image_dx[static_cast<std::size_t>(i)] -
                           dx[static_cast<std::size_t>(n * g.image() + c0 * g.h * g.w + i)];
          worst = std::max(worst, d < 0 ? -d : d);
        }
      }
      BOOST_TEST(worst <= 1e-12, "group " << grp << ": col2im_image and Col2imRows differ by " << worst);
    }
    std::size_t untouched = 0;  // the groups together write every input gradient
    for (const double v : dx) untouched += v == -7.0;
    BOOST_TEST(untouched == 0u);
    BOOST_TEST(lhs_total == rhs_total, boost::test_tools::tolerance(1e-12));
  }
}
}  // namespace conv_functors_test

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(conv_functors)

BOOST_AUTO_TEST_CASE(im2col_and_col2im_rows_match_the_definition_and_the_cpu_path) {
  using conv_functors_test::check;
  using conv_functors_test::geometry;
  check<1>(geometry(2, 3, 6, 5, 3, 1, 0, 1, 1));  // every tap inside: the plain copy
  check<1>(geometry(2, 3, 7, 9, 3, 1, 0, 2, 1));  // the same with dilation 2
  check<1>(geometry(2, 3, 6, 5, 3, 1, 1, 1, 1));
  check<2>(geometry(2, 2, 7, 6, 3, 2, 1, 1, 1));
  check<1>(geometry(2, 3, 9, 7, 3, 1, 2, 2, 1));
  check<2>(geometry(3, 2, 11, 9, 3, 2, 0, 3, 1));
  check<1>(geometry(2, 4, 7, 6, 3, 1, 1, 1, 2));  // two groups
  check<2>(geometry(2, 6, 8, 7, 3, 2, 1, 1, 6));  // depthwise
  check<3>(geometry(2, 4, 9, 8, 2, 3, 1, 2, 2));  // stride past the kernel, dilation, groups
  check<2>(geometry(1, 4, 9, 8, 2, 2, 1, 2, 4));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
