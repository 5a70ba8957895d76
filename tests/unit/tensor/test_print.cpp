// Printing tensors (tensor/print.hpp): to_string(t) and `os << t` write what torch 1.13's print(t) writes.
// Each expected string is torch's own output, made by the Python line in the comment above it
// (/usr/bin/python3, torch 1.13; `str(...)` gives what print shows). A GPU tensor's suffix comes from
// torch's _add_suffixes (torch._tensor_str) with "device='cuda:0'", which is what it prints on a GPU.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <kiln/tensor/print.hpp>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

/// 0, step, 2 step, ... (n values).
template <class T = float>
std::vector<T> arange(std::size_t n, double step = 1.0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = kiln::from_compute<T>(static_cast<double>(i) * step);
  return v;
}

/// A CPU tensor of extents ext holding values.
template <class T, class S>
Tensor<T, S> cpu(const std::vector<T>& values, const Extents<S>& ext = Extents<S>{}) {
  return kiln::test::make_tensor<kiln::Cpu>(values, ext);
}

constexpr float quiet_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float infinity = std::numeric_limits<float>::infinity();
}  // namespace

BOOST_AUTO_TEST_SUITE(tensor)

BOOST_AUTO_TEST_CASE_TEMPLATE(prints_as_torch_prints_on_each_device, D, kiln::test::devices) {
  constexpr bool gpu = std::is_same_v<D, kiln::Cuda>;
  const auto m = kiln::test::make_tensor<D>(std::vector<float>{1, 2, 3, 4}, Extents<Shape<2, 2>>{});
  // str(torch.tensor([[1., 2.], [3., 4.]])); on a GPU, with the suffix "device='cuda:0'"
  BOOST_TEST(kiln::to_string(m) == (gpu ? "tensor([[1., 2.],\n        [3., 4.]], device='cuda:0')"
                                        : "tensor([[1., 2.],\n        [3., 4.]])"));
  std::ostringstream os;
  os << m;
  BOOST_TEST(os.str() == kiln::to_string(m));

  const auto i = kiln::test::make_tensor<D>(std::vector<std::int32_t>{1, 2, 3}, Extents<Shape<dyn>>(3));
  // str(torch.tensor([1, 2, 3], dtype=torch.int32)): the device comes before the dtype
  BOOST_TEST(kiln::to_string(i) == (gpu ? "tensor([1, 2, 3], device='cuda:0', dtype=torch.int32)"
                                        : "tensor([1, 2, 3], dtype=torch.int32)"));

  const auto h = kiln::test::make_tensor<D>(arange<kiln::half>(17, 0.25), Extents<Shape<dyn>>(17));
  // str((torch.arange(17.) / 4).half()): the suffixes pass column 80, so they start a line
  BOOST_TEST(
      kiln::to_string(h) ==
      "tensor([0.0000, 0.2500, 0.5000, 0.7500, 1.0000, 1.2500, 1.5000, 1.7500, 2.0000,\n"
      "        2.2500, 2.5000, 2.7500, 3.0000, 3.2500, 3.5000, 3.7500, 4.0000],\n" +
          std::string(gpu ? "       device='cuda:0', dtype=torch.float16)" : "       dtype=torch.float16)"));

  Tensor<float, Shape<dyn, 3>, D> empty(0);
  // str(torch.zeros(0, 3))
  BOOST_TEST(kiln::to_string(empty) ==
             (gpu ? "tensor([], device='cuda:0', size=(0, 3))" : "tensor([], size=(0, 3))"));
}

// Without a GPU the test above runs on the CPU only; the suffixes of a GPU tensor are checked here on
// the formatter itself (device index 1: torch prints the index the tensor lives on).
BOOST_AUTO_TEST_CASE(a_gpu_tensor_names_its_device_first_and_wraps_it_as_torch_does) {
  kiln::detail::PrintValues v;
  v.extents = {16};
  for (int k = 0; k != 16; ++k) v.real.push_back(k * 0.25);
  // torch._tensor_str._add_suffixes("tensor(" + torch._tensor_str._tensor_str(torch.arange(16.) / 4, 7),
  //     ["device='cuda:1'", "dtype=torch.float16"], 7, False)
  BOOST_TEST(kiln::detail::format_tensor(v, "float16", 1) ==
             "tensor([0.0000, 0.2500, 0.5000, 0.7500, 1.0000, 1.2500, 1.5000, 1.7500, 2.0000,\n"
             "        2.2500, 2.5000, 2.7500, 3.0000, 3.2500, 3.5000, 3.7500],\n"
             "       device='cuda:1', dtype=torch.float16)");
  v.extents = {2};
  v.real = {1.0, 2.0};
  // str(torch.tensor([1., 2.], device='cuda:1'))
  BOOST_TEST(kiln::detail::format_tensor(v, "float32", 1) == "tensor([1., 2.], device='cuda:1')");
}

BOOST_AUTO_TEST_CASE(floats_print_the_shortest_form_that_shows_their_values) {
  using V = Shape<dyn>;
  // str(torch.tensor([1.5, 2.25])): 4 decimals
  BOOST_TEST(kiln::to_string(cpu<float>({1.5f, 2.25f}, Extents<V>(2))) == "tensor([1.5000, 2.2500])");
  // str(torch.tensor([-1.5, 0.125, 3.])): right-aligned to the widest
  BOOST_TEST(kiln::to_string(cpu<float>({-1.5f, 0.125f, 3.0f}, Extents<V>(3))) ==
             "tensor([-1.5000,  0.1250,  3.0000])");
  // str(torch.tensor([0., -0.])): integer values (zeros included) print with a dot
  BOOST_TEST(kiln::to_string(cpu<float>({0.0f, -0.0f}, Extents<V>(2))) == "tensor([0., -0.])");
  // Scientific when the nonzero magnitudes need it:
  // str(torch.tensor([1e-5, 1.])): the smallest below 1e-4
  BOOST_TEST(kiln::to_string(cpu<float>({1e-5f, 1.0f}, Extents<V>(2))) == "tensor([1.0000e-05, 1.0000e+00])");
  // str(torch.tensor([1., 2000.])): a ratio above 1000, integer values too
  BOOST_TEST(kiln::to_string(cpu<float>({1.0f, 2000.0f}, Extents<V>(2))) ==
             "tensor([1.0000e+00, 2.0000e+03])");
  // str(torch.tensor([1., 1000.])): a ratio of exactly 1000 is not above it
  BOOST_TEST(kiln::to_string(cpu<float>({1.0f, 1000.0f}, Extents<V>(2))) == "tensor([   1., 1000.])");
  // str(torch.tensor([0.5, 2e8])): the largest above 1e8
  BOOST_TEST(kiln::to_string(cpu<float>({0.5f, 2e8f}, Extents<V>(2))) == "tensor([5.0000e-01, 2.0000e+08])");
  // str(torch.tensor([1., 1e9]))
  BOOST_TEST(kiln::to_string(cpu<float>({1.0f, 1e9f}, Extents<V>(2))) == "tensor([1.0000e+00, 1.0000e+09])");
}

BOOST_AUTO_TEST_CASE(integers_and_bools_print_without_a_dot_and_other_dtypes_are_named) {
  using V = Shape<dyn>;
  // str(torch.tensor([1, -20, 300])): int64 is a default dtype, unnamed
  BOOST_TEST(kiln::to_string(cpu<std::int64_t>({1, -20, 300}, Extents<V>(3))) == "tensor([  1, -20, 300])");
  // str(torch.tensor([0, 255], dtype=torch.uint8))
  BOOST_TEST(kiln::to_string(cpu<std::uint8_t>({0, 255}, Extents<V>(2))) ==
             "tensor([  0, 255], dtype=torch.uint8)");
  // str(torch.tensor([True, False]))
  Tensor<bool, Shape<2>> b;
  b[0] = true;
  b[1] = false;
  BOOST_TEST(kiln::to_string(b) == "tensor([ True, False])");
  // str(torch.ones(18, dtype=torch.int32)): 61 characters, and torch counts a line without a newline as 2
  // more, so the dtype starts a line (str(torch.ones(16, dtype=torch.int32)) keeps it on the first)
  BOOST_TEST(kiln::to_string(cpu<std::int32_t>(std::vector<std::int32_t>(18, 1), Extents<V>(18))) ==
             "tensor([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],\n       dtype=torch.int32)");
  BOOST_TEST(kiln::to_string(cpu<std::int32_t>(std::vector<std::int32_t>(16, 1), Extents<V>(16))) ==
             "tensor([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], dtype=torch.int32)");
  // str(torch.tensor([1., 2.], dtype=torch.float64))
  BOOST_TEST(kiln::to_string(cpu<double>({1.0, 2.0}, Extents<V>(2))) ==
             "tensor([1., 2.], dtype=torch.float64)");
}

BOOST_AUTO_TEST_CASE(half_and_bfloat16_print_through_float_with_their_dtype) {
  using V = Shape<dyn>;
  const auto h = cpu<kiln::half>({kiln::from_compute<kiln::half>(1.0f), kiln::from_compute<kiln::half>(2.5f)},
                                 Extents<V>(2));
  // str(torch.tensor([1., 2.5], dtype=torch.float16))
  BOOST_TEST(kiln::to_string(h) == "tensor([1.0000, 2.5000], dtype=torch.float16)");
  const auto bf = cpu<kiln::bfloat16>(
      {kiln::from_compute<kiln::bfloat16>(-1.5f), kiln::from_compute<kiln::bfloat16>(2.0f)}, Extents<V>(2));
  // str(torch.tensor([-1.5, 2.], dtype=torch.bfloat16))
  BOOST_TEST(kiln::to_string(bf) == "tensor([-1.5000,  2.0000], dtype=torch.bfloat16)");
}

BOOST_AUTO_TEST_CASE(nan_and_inf_print_as_python_writes_them) {
  using V = Shape<dyn>;
  // str(torch.tensor([1., float('nan'), float('-inf')])): no dot on them
  BOOST_TEST(kiln::to_string(cpu<float>({1.0f, quiet_nan, -infinity}, Extents<V>(3))) ==
             "tensor([1., nan, -inf])");
  // str(torch.tensor([0.5, float('nan'), float('inf')]))
  BOOST_TEST(kiln::to_string(cpu<float>({0.5f, quiet_nan, infinity}, Extents<V>(3))) ==
             "tensor([0.5000,    nan,    inf])");
  // str(torch.tensor([float('nan')]))
  BOOST_TEST(kiln::to_string(cpu<float>({quiet_nan}, Extents<V>(1))) == "tensor([nan])");
}

BOOST_AUTO_TEST_CASE(scalars_and_empty_tensors_print_as_torch_does) {
  // str(torch.tensor(3.5))
  BOOST_TEST(kiln::to_string(cpu<float, Shape<>>({3.5f})) == "tensor(3.5000)");
  // str(torch.tensor(7))
  BOOST_TEST(kiln::to_string(cpu<std::int64_t, Shape<>>({7})) == "tensor(7)");
  // str(torch.zeros(0))
  BOOST_TEST(kiln::to_string(Tensor<float, Shape<dyn>>(0)) == "tensor([])");
  // str(torch.zeros(0, dtype=torch.int64)): an empty tensor names every dtype but float32
  BOOST_TEST(kiln::to_string(Tensor<std::int64_t, Shape<dyn>>(0)) == "tensor([], dtype=torch.int64)");
  // str(torch.zeros(2, 0, 3, dtype=torch.int32))
  BOOST_TEST(kiln::to_string(Tensor<std::int32_t, Shape<2, dyn, 3>>(0)) ==
             "tensor([], size=(2, 0, 3), dtype=torch.int32)");
  BOOST_TEST(kiln::to_string(Tensor<float, Shape<dyn, 4>>()) == "tensor([], size=(0, 4))");  // no storage
}

BOOST_AUTO_TEST_CASE(higher_ranks_put_blank_lines_between_matrices) {
  // str(torch.arange(12.).reshape(2, 2, 3))
  BOOST_TEST(kiln::to_string(cpu<float, Shape<2, 2, 3>>(arange(12))) ==
             "tensor([[[ 0.,  1.,  2.],\n"
             "         [ 3.,  4.,  5.]],\n"
             "\n"
             "        [[ 6.,  7.,  8.],\n"
             "         [ 9., 10., 11.]]])");
  // str(torch.arange(16).reshape(2, 2, 2, 2))
  BOOST_TEST(kiln::to_string(cpu<std::int64_t, Shape<2, 2, 2, 2>>(arange<std::int64_t>(16))) ==
             "tensor([[[[ 0,  1],\n"
             "          [ 2,  3]],\n"
             "\n"
             "         [[ 4,  5],\n"
             "          [ 6,  7]]],\n"
             "\n"
             "\n"
             "        [[[ 8,  9],\n"
             "          [10, 11]],\n"
             "\n"
             "         [[12, 13],\n"
             "          [14, 15]]]])");
}

BOOST_AUTO_TEST_CASE(long_rows_wrap_before_column_80) {
  // str(torch.arange(30.) / 4)
  BOOST_TEST(kiln::to_string(cpu<float, Shape<30>>(arange(30, 0.25))) ==
             "tensor([0.0000, 0.2500, 0.5000, 0.7500, 1.0000, 1.2500, 1.5000, 1.7500, 2.0000,\n"
             "        2.2500, 2.5000, 2.7500, 3.0000, 3.2500, 3.5000, 3.7500, 4.0000, 4.2500,\n"
             "        4.5000, 4.7500, 5.0000, 5.2500, 5.5000, 5.7500, 6.0000, 6.2500, 6.5000,\n"
             "        6.7500, 7.0000, 7.2500])");
}

BOOST_AUTO_TEST_CASE(more_than_1000_elements_are_summarised_by_3_at_each_end) {
  // str(torch.arange(1001)): the widths come from the items shown
  BOOST_TEST(kiln::to_string(cpu<std::int64_t, Shape<1001>>(arange<std::int64_t>(1001))) ==
             "tensor([   0,    1,    2,  ...,  998,  999, 1000])");
  // str(torch.arange(1000)): 1000 elements are all shown
  BOOST_TEST(kiln::to_string(cpu<std::int64_t, Shape<1000>>(arange<std::int64_t>(1000))).find("...") ==
             std::string::npos);
  // str(torch.arange(2000.).reshape(2, 1000)): a dimension of 6 or fewer is shown whole
  BOOST_TEST(kiln::to_string(cpu<float>(arange(2000), Extents<Shape<dyn, 1000>>(2))) ==
             "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 9.9700e+02, 9.9800e+02,\n"
             "         9.9900e+02],\n"
             "        [1.0000e+03, 1.0010e+03, 1.0020e+03,  ..., 1.9970e+03, 1.9980e+03,\n"
             "         1.9990e+03]])");
  // str(torch.arange(1100.).reshape(110, 10) / 4): rows elided with `...` on a line of its own
  BOOST_TEST(kiln::to_string(cpu<float>(arange(1100, 0.25), Extents<Shape<dyn, 10>>(110))) ==
             "tensor([[0.0000e+00, 2.5000e-01, 5.0000e-01,  ..., 1.7500e+00, 2.0000e+00,\n"
             "         2.2500e+00],\n"
             "        [2.5000e+00, 2.7500e+00, 3.0000e+00,  ..., 4.2500e+00, 4.5000e+00,\n"
             "         4.7500e+00],\n"
             "        [5.0000e+00, 5.2500e+00, 5.5000e+00,  ..., 6.7500e+00, 7.0000e+00,\n"
             "         7.2500e+00],\n"
             "        ...,\n"
             "        [2.6750e+02, 2.6775e+02, 2.6800e+02,  ..., 2.6925e+02, 2.6950e+02,\n"
             "         2.6975e+02],\n"
             "        [2.7000e+02, 2.7025e+02, 2.7050e+02,  ..., 2.7175e+02, 2.7200e+02,\n"
             "         2.7225e+02],\n"
             "        [2.7250e+02, 2.7275e+02, 2.7300e+02,  ..., 2.7425e+02, 2.7450e+02,\n"
             "         2.7475e+02]])");
}

// kiln::to_string(extents) is still the extents' "[2, 2]" next to the tensor's overload (and ADL finds both).
BOOST_AUTO_TEST_CASE(set_printoptions_changes_what_later_prints_show_as_torchs_does) {
  // Each string: torch.set_printoptions(<the options>); str(<the tensor>) (then the defaults again).
  struct Restore {
    kiln::PrintOptions old = kiln::printoptions();
    ~Restore() { kiln::set_printoptions(old); }
  } restore;
  using M22 = Shape<2, 2>;
  using V = Shape<dyn>;
  const auto m = cpu<float, M22>({1.23456f, -2.5f, 3.0f, 4.125f});
  BOOST_TEST(kiln::set_printoptions({.precision = 2}).precision == 4);  // returns the ones it replaces
  BOOST_TEST(kiln::to_string(m) == "tensor([[ 1.23, -2.50],\n        [ 3.00,  4.12]])");  // precision=2
  kiln::set_printoptions({.threshold = 5, .edgeitems = 2});
  BOOST_TEST(kiln::to_string(cpu<float, V>(arange(10), Extents<V>(10))) == "tensor([0., 1.,  ..., 8., 9.])");
  kiln::set_printoptions({.threshold = 5, .edgeitems = 1});  // torch.arange(12.).reshape(3, 4) / 3
  BOOST_TEST(kiln::to_string(cpu<float, Shape<3, 4>>(arange(12, 1.0 / 3))) ==
             "tensor([[0.0000,  ..., 1.0000],\n        ...,\n        [2.6667,  ..., 3.6667]])");
  kiln::set_printoptions({.linewidth = 40});  // torch.arange(20.) * 1.5
  BOOST_TEST(kiln::to_string(cpu<float, V>(arange(20, 1.5), Extents<V>(20))) ==
             "tensor([ 0.0000,  1.5000,  3.0000,\n         4.5000,  6.0000,  7.5000,\n         9.0000, 10.5000, "
             "12.0000,\n        13.5000, 15.0000, 16.5000,\n        18.0000, 19.5000, 21.0000,\n        22.5000, "
             "24.0000, 25.5000,\n        27.0000, 28.5000])");
  kiln::set_printoptions({.linewidth = 20});  // torch.arange(6, dtype=torch.int32)
  BOOST_TEST(kiln::to_string(cpu<std::int32_t, V>(arange<std::int32_t>(6), Extents<V>(6))) ==
             "tensor([0, 1, 2, 3,\n        4, 5],\n       dtype=torch.int32)");
  kiln::set_printoptions({.sci_mode = true});
  BOOST_TEST(kiln::to_string(cpu<float, Shape<3>>({1.5f, 2.25f, 1000.0f})) ==
             "tensor([1.5000e+00, 2.2500e+00, 1.0000e+03])");
  kiln::set_printoptions({.precision = 1, .sci_mode = true});
  BOOST_TEST(kiln::to_string(cpu<float, Shape<3>>({1.0f, 2.0f, 3.0f})) == "tensor([1.0e+00, 2.0e+00, 3.0e+00])");
  // No finite nonzero value: torch's formatter stops before the forced mode (sci_mode=True).
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  BOOST_TEST(kiln::to_string(cpu<float, Shape<3>>({0.0f, nan, inf})) == "tensor([0., nan, inf])");
  BOOST_TEST(kiln::to_string(cpu<float, Shape<2>>({0.0f, -0.0f})) == "tensor([0., -0.])");
  // Forced off, the widths are still those of the mode torch would have chosen (scientific here).
  kiln::set_printoptions({.sci_mode = false});
  BOOST_TEST(kiln::to_string(cpu<float, Shape<3>>({1e-5f, 1.0f, 2000.0f})) ==
             "tensor([    0.0000,     1.0000,  2000.0000])");
  BOOST_TEST(kiln::to_string(cpu<float, Shape<3>>({1.0f, 2.0f, 30000.0f})) ==
             "tensor([        1.,         2.,     30000.])");
  BOOST_CHECK_THROW(kiln::set_printoptions({.precision = -1}), kiln::ValueError);
  BOOST_CHECK_THROW(kiln::set_printoptions({.linewidth = 0}), kiln::ValueError);
  BOOST_TEST((kiln::printoptions().sci_mode == std::optional<bool>(false)));  // a refused call changes nothing
}

BOOST_AUTO_TEST_CASE(to_string_of_extents_is_unchanged) {
  const auto m = cpu<float, Shape<2, 2>>({1, 2, 3, 4});
  BOOST_TEST(to_string(m.extents()) == "[2, 2]");
  BOOST_TEST(to_string(m) == "tensor([[1., 2.],\n        [3., 4.]])");
}

BOOST_AUTO_TEST_SUITE_END()
