/// Making tensors, as torch's factories: ones, the *_like family, arange, linspace, eye, and seeded
/// rand, randn and randint (zeros and full are tensor.hpp's). Values are made on the host and copied to
/// the device once, so a seed draws the same tensor on every device.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/number_fits.hpp"
#include "kiln/core/number_text.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {
template <class T>
constexpr bool floating_element = std::is_floating_point_v<T> || std::is_same_v<T, half> ||
                                  std::is_same_v<T, bfloat16>;

/// What a range factory computes in, torch's CPU acc_type: double for float and double, float for half
/// and bfloat16, int64 for the integers.
template <class T>
using range_acc_t = std::conditional_t<std::is_floating_point_v<T>, double,
                                       std::conditional_t<floating_element<T>, float, std::int64_t>>;

/// torch's Scalar::to<A>: a floating number into an integer A is truncated toward zero (it must fit int64).
template <class A, class N>
A to_range_acc(N v, const char* who) {
  if constexpr (std::is_integral_v<A> && std::is_floating_point_v<N>) {
    if (!number_fits<std::int64_t>(v))
      throw ValueError(std::string(who) + ": " + shortest_text(v) +
                       " does not fit int64 (an integer tensor's range is computed in int64, as torch's)");
    return static_cast<A>(static_cast<std::int64_t>(v));
  } else {
    return static_cast<A>(v);
  }
}

/// A tensor of extents ext on device D whose flat element i is value(i), made on the host.
template <class T, class S, class D, class F>
Tensor<T, S, D> generated(const Extents<S>& ext, int index, F&& value) {
  if constexpr (std::is_same_v<D, Cpu>) {
    Tensor<T, S, D> t(ext, index);
    T* p = t.data();
    for (index_t i = 0, n = t.numel(); i < n; ++i) p[i] = value(i);
    return t;
  } else {
    std::vector<T> host(static_cast<std::size_t>(ext.numel()));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = value(static_cast<index_t>(i));
    return Tensor<T, S, D>::from(std::span<const T>(host.data(), host.size()), ext, index);
  }
}

template <class T>
constexpr void check_factory_element() {
  // >>> Stopped here? A range or random factory was asked for bool elements. <<<
  static_assert(!std::is_same_v<T, bool>,
                "kiln: arange, linspace, rand, randn and randint do not make bool tensors (torch's \"not "
                "implemented for 'Bool'\"); compare instead");
}
}  // namespace detail

/// A new tensor of shape S on device D filled with ones (torch.ones).
template <class T, class S, class D = Cpu>
Tensor<T, S, D> ones(const Extents<S>& ext = Extents<S>{}, int index = -1) {
  return full<T, S, D>(ext, compute_t<T>(1), index);
}

/// A tensor of x's element type, extents and device, uninitialised (torch.empty_like).
template <class T, class S, class D>
Tensor<T, S, D> empty_like(const Tensor<T, S, D>& x) {
  return Tensor<T, S, D>(x.extents(), detail::pass_device(x));
}
/// x's element type, extents and device, every element v (torch.full_like); v must fit T, as full's.
template <class T, class S, class D, class N>
  requires std::is_arithmetic_v<N>
Tensor<T, S, D> full_like(const Tensor<T, S, D>& x, N v) {
  return full<T, S, D>(x.extents(), v, detail::pass_device(x));
}
/// torch.zeros_like and torch.ones_like.
template <class T, class S, class D>
Tensor<T, S, D> zeros_like(const Tensor<T, S, D>& x) {
  return full_like(x, compute_t<T>(0));
}
template <class T, class S, class D>
Tensor<T, S, D> ones_like(const Tensor<T, S, D>& x) {
  return full_like(x, compute_t<T>(1));
}

/// [start, end) in steps of `step` as a [n] tensor (torch.arange): n = ceil((end - start) / step), element i
/// start + i step, computed in torch's CPU acc_type (double for float and double; int64 for the integers,
/// into which start, end and step are truncated first: arange<std::int64_t>(0, 2.5) is [0, 1]).
/// A zero step, a non-finite bound, a step whose sign goes away from end, or a size that does not fit
/// int64 is a ValueError with torch's words.
template <class T, class D = Cpu, class N1, class N2, class N3 = int>
  requires std::is_arithmetic_v<N1> && std::is_arithmetic_v<N2> && std::is_arithmetic_v<N3>
Tensor<T, Shape<dyn>, D> arange(N1 start, N2 end, N3 step = 1, int index = -1) {
  detail::check_factory_element<T>();
  using A = detail::range_acc_t<T>;
  constexpr const char* who = "kiln::arange";
  const A a = detail::to_range_acc<A>(start, who), b = detail::to_range_acc<A>(end, who),
          s = detail::to_range_acc<A>(step, who);
  if (!(s > 0 || s < 0)) throw ValueError(std::string(who) + ": step must be nonzero");
  if (!std::isfinite(static_cast<double>(a)) || !std::isfinite(static_cast<double>(b)))
    throw ValueError(std::string(who) + ": unsupported range: " + detail::shortest_text(a) + " -> " +
                     detail::shortest_text(b));
  if (!((s > 0 && b >= a) || (s < 0 && b <= a)))
    throw ValueError(std::string(who) + ": upper bound and larger bound inconsistent with step sign (start " +
                     detail::shortest_text(a) + ", end " + detail::shortest_text(b) + ", step " +
                     detail::shortest_text(s) + ")");
  // torch's size: in double, from int64 differences for int64 tensors and from the numbers given otherwise
  // (so arange<std::int32_t>(0.5, 3) has 3 elements, from 0).
  double n = 0;
  if constexpr (std::is_same_v<T, std::int64_t>) {  // |b - a| and |s| as uint64: exact, and no overflow
    const auto magnitude = [](std::int64_t v) {
      return v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
    };
    const std::uint64_t span = s > 0 ? static_cast<std::uint64_t>(b) - static_cast<std::uint64_t>(a)
                                     : static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b);
    n = std::ceil(static_cast<double>(span) / static_cast<double>(magnitude(s)));
  } else {
    n = std::ceil((static_cast<double>(end) - static_cast<double>(start)) / static_cast<double>(step));
  }
  if (!(n >= 0 && n <= static_cast<double>(std::numeric_limits<std::int64_t>::max())))
    throw ValueError(std::string(who) + ": invalid size, possible overflow? (" + detail::shortest_text(n) +
                     " elements)");
  const Extents<Shape<dyn>> ext(static_cast<index_t>(n));
  return detail::generated<T, Shape<dyn>, D>(ext, index, [&](index_t i) {
    return from_compute<T>(a + s * static_cast<A>(i));
  });
}
/// [0, end) in steps of 1 (torch.arange(end)).
template <class T, class D = Cpu, class N>
  requires std::is_arithmetic_v<N>
Tensor<T, Shape<dyn>, D> arange(N end) {
  return arange<T, D>(0, end, 1);
}

/// `steps` values from start to end, evenly spaced, both ends included, as a [steps] tensor
/// (torch.linspace): the first half start + i step, the rest end - (steps - 1 - i) step, with
/// step = (end - start) / (steps - 1) in T (double for the integers, whose start and end are T's first:
/// truncated, wrapped into uint8 as torch's -1 is 255). steps 1 is [start]; a negative steps is a ValueError.
template <class T, class D = Cpu, class N1, class N2>
  requires std::is_arithmetic_v<N1> && std::is_arithmetic_v<N2>
Tensor<T, Shape<dyn>, D> linspace(N1 start, N2 end, index_t steps, int index = -1) {
  detail::check_factory_element<T>();
  constexpr const char* who = "kiln::linspace";
  if (steps < 0)
    throw ValueError(std::string(who) + ": number of steps must be non-negative (got " +
                     std::to_string(steps) + ")");
  using C = compute_t<T>;
  using Step = std::conditional_t<std::is_integral_v<T>, double, C>;
  const auto as_t = [&](auto v) -> C {  // torch's Scalar::to<T>
    if constexpr (std::is_integral_v<T>) {
      detail::check_number_fits<T>(v, who);
      return static_cast<C>(detail::to_range_acc<std::int64_t>(v, who));
    } else {
      return to_compute(from_compute<T>(v));
    }
  };
  const C a = as_t(start), b = as_t(end);
  const Step s =
      steps > 1 ? (static_cast<Step>(b) - static_cast<Step>(a)) / static_cast<Step>(steps - 1) : Step(0);
  const index_t half_way = steps / 2;
  return detail::generated<T, Shape<dyn>, D>(Extents<Shape<dyn>>(steps), index, [&](index_t i) {
    if (steps == 1) return from_compute<T>(a);
    return from_compute<T>(i < half_way ? a + s * static_cast<Step>(i)
                                        : b - s * static_cast<Step>(steps - 1 - i));
  });
}

/// The n x m identity (torch.eye(n, m); m < 0: n): ones on the diagonal. A negative n or m is a ValueError.
template <class T, class D = Cpu>
Tensor<T, Shape<dyn, dyn>, D> eye(index_t n, index_t m = -1, int index = -1) {
  if (n < 0) throw ValueError("kiln::eye: n must be greater or equal to 0, got " + std::to_string(n));
  if (m < -1) throw ValueError("kiln::eye: m must be greater or equal to 0, got " + std::to_string(m));
  const index_t cols = m == -1 ? n : m;
  return detail::generated<T, Shape<dyn, dyn>, D>(Extents<Shape<dyn, dyn>>(n, cols), index, [&](index_t i) {
    return from_compute<T>(compute_t<T>(i / cols == i % cols ? 1 : 0));
  });
}

namespace detail {
/// The significand bits of a floating element type: a draw of that many bits over 2^bits is exact in T.
template <class T>
constexpr int significand_bits() {
  if constexpr (std::is_same_v<T, half>) return 11;
  else if constexpr (std::is_same_v<T, bfloat16>) return 8;
  else return std::numeric_limits<T>::digits;
}
template <class T>
constexpr void check_floating_draw() {
  // >>> Stopped here? rand or randn was asked for an integer tensor. <<<
  static_assert(floating_element<T>, "kiln::rand and kiln::randn make floating tensors (float, double, half, "
                                     "bfloat16), as torch's; kiln::randint makes integers");
}
}  // namespace detail

/// U[0, 1) draws from g (torch.rand with a generator): T's significand bits of each 64-bit draw, over
/// 2^bits, so 1 is never drawn even in half. The stream is kiln's, not torch's.
template <class T, class S, class D = Cpu>
Tensor<T, S, D> rand(const Extents<S>& ext, std::mt19937_64& g, int index = -1) {
  detail::check_floating_draw<T>();
  constexpr int bits = detail::significand_bits<T>();
  return detail::generated<T, S, D>(ext, index, [&](index_t) {
    return from_compute<T>(std::ldexp(static_cast<double>(g() >> (64 - bits)), -bits));
  });
}
template <class T, class S, class D = Cpu>
  requires S::is_static
Tensor<T, S, D> rand(std::mt19937_64& g, int index = -1) {
  return rand<T, S, D>(Extents<S>{}, g, index);
}

/// N(0, 1) draws from g (torch.randn with a generator), std::normal_distribution<double>'s: the same values
/// wherever the standard library is the same (libstdc++ here), not torch's.
template <class T, class S, class D = Cpu>
Tensor<T, S, D> randn(const Extents<S>& ext, std::mt19937_64& g, int index = -1) {
  detail::check_floating_draw<T>();
  std::normal_distribution<double> normal(0.0, 1.0);
  return detail::generated<T, S, D>(ext, index, [&](index_t) { return from_compute<T>(normal(g)); });
}
template <class T, class S, class D = Cpu>
  requires S::is_static
Tensor<T, S, D> randn(std::mt19937_64& g, int index = -1) {
  return randn<T, S, D>(Extents<S>{}, g, index);
}

/// Integers drawn uniformly from [low, high) (torch.randint(low, high, size, generator)): low + (a 64-bit
/// draw mod (high - low)), as torch's random_. low >= high, or a bound outside T, is a ValueError.
template <class T, class S, class D = Cpu>
Tensor<T, S, D> randint(std::int64_t low, std::int64_t high, const Extents<S>& ext, std::mt19937_64& g,
                        int index = -1) {
  detail::check_factory_element<T>();
  if (low >= high)
    throw ValueError("kiln::randint: expects 'from' to be less than 'to', but got from=" +
                     std::to_string(low) + " >= to=" + std::to_string(high));
  if (!detail::number_fits<T>(low) || !detail::number_fits<T>(high - 1) ||
      (std::is_unsigned_v<T> && low < 0))
    throw ValueError("kiln::randint: [" + std::to_string(low) + ", " + std::to_string(high) +
                     ") is outside " + std::string(dtype_name<T>()) + "'s range");
  const std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  return detail::generated<T, S, D>(ext, index, [&](index_t) {
    return from_compute<T>(static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + g() % range));
  });
}
template <class T, class S, class D = Cpu>
  requires S::is_static
Tensor<T, S, D> randint(std::int64_t low, std::int64_t high, std::mt19937_64& g, int index = -1) {
  return randint<T, S, D>(low, high, Extents<S>{}, g, index);
}

/// x's element type, extents and device, drawn as rand / randn (torch.rand_like, torch.randn_like).
template <class T, class S, class D>
Tensor<T, S, D> rand_like(const Tensor<T, S, D>& x, std::mt19937_64& g) {
  return rand<T, S, D>(x.extents(), g, detail::pass_device(x));
}
template <class T, class S, class D>
Tensor<T, S, D> randn_like(const Tensor<T, S, D>& x, std::mt19937_64& g) {
  return randn<T, S, D>(x.extents(), g, detail::pass_device(x));
}

}  // namespace kiln
