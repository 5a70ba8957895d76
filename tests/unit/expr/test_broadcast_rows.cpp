// Broadcast operands read row by row (the CPU executor's row loop, expr/detail/row.hpp): every shape of
// broadcast operand, rows shorter than, equal to and longer than the row-loop threshold (L = 1, 7, 8,
// 9, 1023) and longer than one piece, broadcasts whose kind is only known at run time (dyn extents),
// both kinds in one tree, broadcasts of expressions and of broadcasts, all against float64
// references, in one pass each. The same cases run on CUDA (whose kernel reads operator[]).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::index_t;
using kiln::Shape;
using kiln::Tensor;
namespace kt = kiln::test;

using Dims = std::vector<index_t>;

template <class S>
Dims dims_of(const Extents<S>& e) {
  Dims d;
  for (std::size_t i = 0; i != S::rank; ++i) d.push_back(e[i]);
  return d;
}

std::size_t numel(const Dims& d) {
  std::size_t n = 1;
  for (index_t x : d) n *= static_cast<std::size_t>(x);
  return n;
}

/// v (row-major, extents `in`) read at every flat index of extents `out`, numpy rules (right-aligned,
/// extent 1 repeats), as double: the independent model of Broadcast.
template <class T>
std::vector<double> broadcast_ref(const std::vector<T>& v, Dims in, const Dims& out) {
  in.insert(in.begin(), out.size() - in.size(), 1);
  std::vector<double> r(numel(out));
  for (std::size_t i = 0; i < r.size(); ++i) {
    std::size_t rest = i, at = 0, stride = 1;
    for (std::size_t d = out.size(); d-- > 0;) {
      const auto o = static_cast<std::size_t>(out[d]);
      const std::size_t coord = rest % o;
      rest /= o;
      if (in[d] != 1) at += coord * stride;
      stride *= static_cast<std::size_t>(in[d]);
    }
    r[i] = kt::to_double(v[at]);
  }
  return r;
}

/// f(a[i], b[i], c[i]) for every i.
template <class F>
std::vector<double> ref3(F f, const std::vector<double>& a, const std::vector<double>& b,
                         const std::vector<double>& c) {
  std::vector<double> r(a.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = f(a[i], b[i], c[i]);
  return r;
}

// Two float roundings of terms up to ~6 in magnitude: relative to the terms, not to a result that may cancel.
constexpr double rel = 1e-6, abs_tol = 1e-5;

// Row lengths around the row-loop threshold (8) and one long row; batches small and large (parallel).
constexpr index_t lengths[] = {1, 7, 8, 9, 1023};
constexpr index_t batches[] = {1, 3, 64};

double relu(double v) { return v < 0 ? 0 : v; }

/// A node kiln does not know (a user's): its flat index mod 1000. Its rows call its operator[].
template <class D>
struct Iota {
  using value_type = float;
  using shape_type = Shape<dyn, dyn>;
  using device = D;
  Extents<shape_type> ext;
  Extents<shape_type> extents() const { return ext; }
  KILN_HOST_DEVICE value_type operator[](index_t i) const { return static_cast<float>(i % 1000); }
  template <int W>
  KILN_HOST_DEVICE kiln::Packet<float, W> packet(index_t i) const {
    kiln::Packet<float, W> p;
    for (int k = 0; k < W; ++k) p[k] = (*this)[i + k];
    return p;
  }
  bool aligned_for(int) const { return true; }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)

BOOST_AUTO_TEST_CASE_TEMPLATE(bias_rows_of_every_length_match_float64_in_one_pass, D, kiln::test::devices) {
  for (index_t n : batches)
    for (index_t f : lengths) {
      BOOST_TEST_CONTEXT("relu(x * g + b), x [" << n << ", " << f << "], g, b [" << f << "]") {
        const Extents<Shape<dyn, dyn>> ext(n, f);
        const auto xv = kt::random_values<float>(numel(dims_of(ext)), -2, 2, 101);
        const auto gv = kt::random_values<float>(static_cast<std::size_t>(f), -2, 2, 102);
        const auto bv = kt::random_values<float>(static_cast<std::size_t>(f), -2, 2, 103);
        const auto x = kt::make_tensor<D>(xv, ext);
        const auto g = kt::make_tensor<D>(gv, Extents<Shape<dyn>>(f));
        const auto b = kt::make_tensor<D>(bv, Extents<Shape<dyn>>(f));
        Tensor<float, Shape<dyn, dyn>, D> y(ext);
        const auto before = kiln::passes();
        y = kiln::relu(x * g + b);  // [N, F]
        BOOST_TEST(kiln::passes() - before == 1u);
        const Dims out = dims_of(ext);
        const auto want = ref3([](double a, double s, double t) { return relu(a * s + t); }, kt::to_doubles(xv),
                               broadcast_ref(gv, {f}, out), broadcast_ref(bv, {f}, out));
        BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));
      }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(static_bias_rows_match_float64, D, kiln::test::devices) {
  const index_t n = 4099;  // [4099, 9]: parallel on the CPU, rows of 9
  const auto xv = kt::random_values<double>(static_cast<std::size_t>(n * 9), -2, 2, 104);
  const auto gv = kt::random_values<double>(9, -2, 2, 105);
  const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn, 9>>(n));
  const auto g = kt::make_tensor<D>(gv, Extents<Shape<9>>{});
  Tensor<double, Shape<dyn, 9>, D> y(n);
  y = x * g - 1.0;  // [N, 9]
  const auto gb = broadcast_ref(gv, {9}, {n, 9});
  std::vector<double> want(xv.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = xv[i] * gb[i] - 1.0;
  BOOST_TEST(kt::all_close(y.to_vector(), want, 1e-15, 1e-15));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(column_rows_repeat_one_value, D, kiln::test::devices) {
  for (index_t n : batches)
    for (index_t f : lengths) {
      BOOST_TEST_CONTEXT("x [2, " << n << ", " << f << "] * c [" << n << ", 1] + d [" << n << ", 1]") {
        const Extents<Shape<dyn, dyn, dyn>> ext(2, n, f);
        const Dims out = dims_of(ext);
        const auto xv = kt::random_values<float>(numel(out), -2, 2, 106);
        const auto cv = kt::random_values<float>(static_cast<std::size_t>(n), -2, 2, 107);
        const auto dv = kt::random_values<float>(static_cast<std::size_t>(n), -2, 2, 108);
        const auto x = kt::make_tensor<D>(xv, ext);
        const auto c = kt::make_tensor<D>(cv, Extents<Shape<dyn, 1>>(n));       // static 1: constant rows
        const auto d = kt::make_tensor<D>(dv, Extents<Shape<dyn, dyn>>(n, 1));  // its 1 known at run time only
        Tensor<float, Shape<dyn, dyn, dyn>, D> y(ext);
        y = x * c + d;  // [2, N, F]
        const auto want = ref3([](double a, double s, double t) { return a * s + t; }, kt::to_doubles(xv),
                               broadcast_ref(cv, {n, 1}, out), broadcast_ref(dv, {n, 1}, out));
        BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));
      }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(row_vector_of_shape_1_by_f_broadcasts_over_rows, D, kiln::test::devices) {
  for (index_t f : lengths) {
    BOOST_TEST_CONTEXT("x [37, " << f << "] - r [1, " << f << "]") {
      const Extents<Shape<dyn, dyn>> ext(37, f);
      const Dims out = dims_of(ext);
      const auto xv = kt::random_values<float>(numel(out), -2, 2, 109);
      const auto rv = kt::random_values<float>(static_cast<std::size_t>(f), -2, 2, 110);
      const auto x = kt::make_tensor<D>(xv, ext);
      const auto r = kt::make_tensor<D>(rv, Extents<Shape<1, dyn>>(f));
      Tensor<float, Shape<dyn, dyn>, D> y(ext);
      y = x - r;  // [37, F]
      const auto rb = broadcast_ref(rv, {1, f}, out);
      std::vector<double> want(xv.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = double(xv[i]) - rb[i];
      BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rank_zero_tensor_rows_over_matrices_and_long_vectors, D, kiln::test::devices) {
  const auto s = kt::make_tensor<D>(std::vector<float>{-0.75f}, Extents<Shape<>>{});
  for (index_t f : lengths) {
    BOOST_TEST_CONTEXT("x [5, " << f << "] * s") {
      const Extents<Shape<dyn, dyn>> ext(5, f);
      const auto xv = kt::random_values<float>(static_cast<std::size_t>(5 * f), -2, 2, 111);
      const auto x = kt::make_tensor<D>(xv, ext);
      Tensor<float, Shape<dyn, dyn>, D> y(ext);
      y = x * s;
      BOOST_TEST(kt::all_close(y.to_vector(), kt::reference_map([](double a) { return -0.75 * a; }, xv)));
    }
  }
  // A rank-1 destination is one row, cut into pieces when long (2^14 and more).
  for (index_t n : {7, 8, 16384, 16385, 100003}) {
    BOOST_TEST_CONTEXT("x [" << n << "] + s") {
      const auto xv = kt::random_values<float>(static_cast<std::size_t>(n), -2, 2, 112);
      const auto x = kt::make_tensor<D>(xv, Extents<Shape<dyn>>(n));
      Tensor<float, Shape<dyn>, D> y(n);
      const auto before = kiln::passes();
      y = s + x;
      BOOST_TEST(kiln::passes() - before == 1u);
      BOOST_TEST(kt::all_close(y.to_vector(), kt::reference_map([](double a) { return a - 0.75; }, xv), rel,
                               abs_tol));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(channel_operands_broadcast_over_nchw, D, kiln::test::devices) {
  const index_t n = 3, c = 5, h = 4;
  for (index_t w : {1, 7, 8, 9, 33}) {
    BOOST_TEST_CONTEXT("x [3, 5, 4, " << w << "] * s [5, 1, 1] + t [5, 1, " << w << "]") {
      const Extents<Shape<dyn, dyn, dyn, dyn>> ext(n, c, h, w);
      const Dims out = dims_of(ext);
      const auto xv = kt::random_values<float>(numel(out), -2, 2, 113);
      const auto sv = kt::random_values<float>(static_cast<std::size_t>(c), -2, 2, 114);
      const auto tv = kt::random_values<float>(static_cast<std::size_t>(c * w), -2, 2, 115);
      const auto x = kt::make_tensor<D>(xv, ext);
      const auto s = kt::make_tensor<D>(sv, Extents<Shape<dyn, 1, 1>>(c));          // a per-channel scale
      const auto t = kt::make_tensor<D>(tv, Extents<Shape<dyn, 1, dyn>>(c, w));     // not trailing-aligned
      Tensor<float, Shape<dyn, dyn, dyn, dyn>, D> y(ext);
      y = x * s + t;  // [N, C, H, W]
      const auto want = ref3([](double a, double p, double q) { return a * p + q; }, kt::to_doubles(xv),
                             broadcast_ref(sv, {c, 1, 1}, out), broadcast_ref(tv, {c, 1, w}, out));
      BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(broadcast_of_an_expression_reads_its_rows, D, kiln::test::devices) {
  for (index_t f : lengths) {
    BOOST_TEST_CONTEXT("exp(g) + x and x * sigmoid(g * 2) with x [64, " << f << "], g [" << f << "]") {
      const Extents<Shape<dyn, dyn>> ext(64, f);
      const Dims out = dims_of(ext);
      const auto xv = kt::random_values<float>(numel(out), -2, 2, 116);
      const auto gv = kt::random_values<float>(static_cast<std::size_t>(f), -2, 2, 117);
      const auto x = kt::make_tensor<D>(xv, ext);
      const auto g = kt::make_tensor<D>(gv, Extents<Shape<dyn>>(f));
      const auto gb = broadcast_ref(gv, {f}, out);
      Tensor<float, Shape<dyn, dyn>, D> y(ext);
      const auto before = kiln::passes();
      y = kiln::exp(g) + x;  // the broadcast child is exp(g), not a tensor
      BOOST_TEST(kiln::passes() - before == 1u);
      std::vector<double> want(xv.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = std::exp(gb[i]) + double(xv[i]);
      BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));
      y = x * kiln::sigmoid(g * 2.0f);
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = double(xv[i]) / (1.0 + std::exp(-2.0 * gb[i]));
      BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(constant_and_contiguous_rows_known_only_at_run_time_mix_in_one_tree, D,
                              kiln::test::devices) {
  for (index_t f : lengths) {
    BOOST_TEST_CONTEXT("x [2, 64, " << f << "] * c [64, 1] + b [" << f << "], u [1], all dyn") {
      const Extents<Shape<dyn, dyn, dyn>> ext(2, 64, f);
      const Dims out = dims_of(ext);
      const auto xv = kt::random_values<float>(numel(out), -2, 2, 118);
      const auto cv = kt::random_values<float>(64, -2, 2, 119);
      const auto bv = kt::random_values<float>(static_cast<std::size_t>(f), -2, 2, 120);
      const auto x = kt::make_tensor<D>(xv, ext);
      const auto c = kt::make_tensor<D>(cv, Extents<Shape<dyn, dyn>>(64, 1));  // constant rows
      const auto b = kt::make_tensor<D>(bv, Extents<Shape<dyn>>(f));           // contiguous rows
      const auto u = kt::make_tensor<D>(std::vector<float>{1.25f}, Extents<Shape<dyn>>(1));  // constant rows
      const auto cb = broadcast_ref(cv, {64, 1}, out);
      const auto bb = broadcast_ref(bv, {f}, out);
      Tensor<float, Shape<dyn, dyn, dyn>, D> y(ext);
      y = x * c + b;
      BOOST_TEST(kt::all_close(
          y.to_vector(), ref3([](double a, double p, double q) { return a * p + q; }, kt::to_doubles(xv), cb, bb),
          rel, abs_tol));
      y = (x - b) * u;
      std::vector<double> want(xv.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = (double(xv[i]) - bb[i]) * 1.25;
      BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));
      y = kiln::where(c > 0.0f, x, b);  // a condition whose rows are constant
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = cb[i] > 0 ? double(xv[i]) : bb[i];
      BOOST_TEST(kt::all_close(y.to_vector(), want));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(lower_rank_expression_with_broadcasts_fills_a_batch, D, kiln::test::devices) {
  // [B, N, F] = c [N, 1] + r [F]: a broadcast (to the destination) of a tree of broadcasts.
  // (c is Shape<dyn, 1>: an operand of the tree's own static shape would not broadcast at run time.)
  const index_t b = 3, n = 11;
  for (index_t f : lengths) {
    BOOST_TEST_CONTEXT("y [3, 11, " << f << "] = c [11, 1] + r [" << f << "]") {
      const auto cv = kt::random_values<float>(static_cast<std::size_t>(n), -2, 2, 121);
      const auto rv = kt::random_values<float>(static_cast<std::size_t>(f), -2, 2, 122);
      const auto c = kt::make_tensor<D>(cv, Extents<Shape<dyn, 1>>(n));
      const auto r = kt::make_tensor<D>(rv, Extents<Shape<dyn>>(f));
      Tensor<float, Shape<dyn, dyn, dyn>, D> y(b, n, f);
      const auto before = kiln::passes();
      y = c + r;
      BOOST_TEST(kiln::passes() - before == 1u);
      const Dims out{b, n, f};
      const auto cb = broadcast_ref(cv, {n, 1}, out);
      const auto rb = broadcast_ref(rv, {f}, out);
      std::vector<double> want(cb.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = cb[i] + rb[i];
      BOOST_TEST(kt::all_close(y.to_vector(), want));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rows_round_through_casts_and_half_storage, D, kiln::test::devices) {
  const index_t n = 50, f = 9;
  const Extents<Shape<dyn, dyn>> ext(n, f);
  const Dims out = dims_of(ext);
  const auto xv = kt::random_values<float>(numel(out), -2, 2, 123);
  const auto gv = kt::random_values<float>(static_cast<std::size_t>(f), -2, 2, 124);
  const auto x = kt::make_tensor<D>(xv, ext);
  const auto g = kt::make_tensor<D>(gv, Extents<Shape<dyn>>(f));
  const auto gb = broadcast_ref(gv, {f}, out);
  Tensor<float, Shape<dyn, dyn>, D> y(ext);
  y = x + kiln::cast<kiln::half>(g);  // g rounded to half inside the row
  std::vector<double> want(xv.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    want[i] = double(xv[i]) + double(kt::reference_round_half(static_cast<float>(gb[i])));
  BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));

  const auto xh = kt::make_tensor<D>(kt::random_values<kiln::half>(numel(out), -2, 2, 125), ext);
  Tensor<kiln::half, Shape<dyn, dyn>, D> yh(ext);
  yh = xh * g;  // half loads widen to float, the store rounds once
  const auto xhv = xh.to_vector();
  for (std::size_t i = 0; i < want.size(); ++i)
    want[i] = double(kt::reference_round_half(static_cast<float>(kt::to_double(xhv[i]) * gb[i])));
  BOOST_TEST(kt::all_close(yh.to_vector(), want));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_node_kiln_does_not_know_reads_through_its_operator, D, kiln::test::devices) {
  static_assert(kiln::expression<Iota<D>>);
  for (index_t f : lengths) {
    BOOST_TEST_CONTEXT("iota [40, " << f << "] + b [" << f << "]") {
      const Extents<Shape<dyn, dyn>> ext(40, f);
      const Dims out = dims_of(ext);
      const auto bv = kt::random_values<float>(static_cast<std::size_t>(f), -2, 2, 126);
      const auto b = kt::make_tensor<D>(bv, Extents<Shape<dyn>>(f));
      Tensor<float, Shape<dyn, dyn>, D> y(ext);
      y = Iota<D>{ext} + b;
      const auto bb = broadcast_ref(bv, {f}, out);
      std::vector<double> want(bb.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(i % 1000) + bb[i];
      BOOST_TEST(kt::all_close(y.to_vector(), want, rel, abs_tol));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
