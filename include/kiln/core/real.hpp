/// kiln::Real: the type of a layer's real-valued template argument (Dropout's p, BatchNorm's eps and
/// momentum, LeakyReLU's slope), so that `Dropout<0.2>` compiles as well as `Dropout<0.2f>`.
#pragma once
#include <type_traits>

namespace kiln {

/// A float template argument written as any number: C++20 refuses a double literal for a float template
/// parameter (`template <float P>` with `0.2`), which a PyTorch user writes first. Real holds the float
/// the number rounds to, so `Dropout<0.2>` and `Dropout<0.2f>` are the same type; `ELU<1>` works too.
struct Real {
  float value;
  template <class A>
  requires std::is_arithmetic_v<A>
  constexpr Real(A v) : value(static_cast<float>(v)) {}  // NOLINT(google-explicit-constructor): the point
  constexpr operator float() const { return value; }     // NOLINT(google-explicit-constructor)
};

}  // namespace kiln
