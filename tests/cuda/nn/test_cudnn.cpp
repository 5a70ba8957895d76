// cuDNN takes the convolutions: a ConvPlan finds an algorithm for every direction in float, double,
// half and bfloat16 for the seeds' LeNet shapes, a padded, strided one, a dilated one and grouped ones
// (depthwise among them). Without this the Conv2d tests
// would pass on the im2col + cuBLAS fallback and hide a plan that is never usable. A build without cuDNN
// compiles these cases to nothing: one case stands for them there and is reported skipped, with the reason.
#include <kiln/cuda.hpp>

#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>
#include <tuple>

#if KILN_WITH_CUDNN  // (a build without cuDNN has only the fallback, which the Conv2d tests cover)
#include <kiln/backend/cuda/cudnn.hpp>

namespace {
struct ConvShape {
  kiln::index_t n, c, h, w, k, r, stride, pad, dilation = 1, groups = 1;
  std::string describe() const {
    return "x [" + std::to_string(n) + ", " + std::to_string(c) + ", " + std::to_string(h) + ", " +
           std::to_string(w) + "], " + std::to_string(k) + " filters " + std::to_string(r) + "x" +
           std::to_string(r) + ", stride " + std::to_string(stride) + ", padding " + std::to_string(pad) +
           ", dilation " + std::to_string(dilation) + ", groups " + std::to_string(groups);
  }
};
constexpr ConvShape shapes[] = {
    {128, 3, 32, 32, 6, 5, 1, 0},                                        // LeNet's first convolution
    {128, 6, 14, 14, 16, 5, 1, 0},                                       // and its second
    {8, 3, 16, 16, 4, 3, 2, 1},       {8, 4, 16, 16, 6, 3, 1, 2, 2, 1},  // dilated
    {8, 4, 16, 16, 6, 3, 1, 1, 1, 2},                                    // two groups
    {8, 8, 16, 16, 8, 3, 2, 1, 1, 8},                                    // depthwise
};
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(cudnn)

using Types = std::tuple<float, double, kiln::half, kiln::bfloat16>;

BOOST_AUTO_TEST_CASE_TEMPLATE(every_direction_has_an_algorithm, T, Types) {
  for (const ConvShape& s : shapes) {
    BOOST_TEST_CONTEXT(s.describe()) {
      const kiln::cuda::ConvPlan<T> plan(s.n, s.c, s.h, s.w, s.k, s.r, s.stride, s.pad, s.dilation, s.groups,
                                         0);
      BOOST_TEST(plan.usable());
    }
  }
}

BOOST_AUTO_TEST_CASE(deterministic_algorithms_exist_for_float) {
  struct Deterministic {  // on for the plan only, also if it throws
    Deterministic() { kiln::cuda::set_cudnn_deterministic(true); }
    ~Deterministic() { kiln::cuda::set_cudnn_deterministic(false); }
  };
  const auto plan = [] {
    const Deterministic on;
    return std::make_unique<kiln::cuda::ConvPlan<float>>(128, 3, 32, 32, 6, 5, 1, 0, 1, 1, 0);
  }();
  BOOST_TEST(plan->usable());
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
#else
namespace {
/// Never holds in this build: Boost.Test reports the case below skipped, with this reason.
boost::test_tools::assertion_result built_with_cudnn(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result without(false);
  without.message() << "built without cuDNN (KILN_WITH_CUDNN is not set: CMake found no cudnn.h and "
                       "libcudnn next to the CUDA toolkit), so the cuDNN plan cases are not compiled; the "
                       "convolutions run on the im2col + cuBLAS fallback, which the Conv2d tests cover";
  return without;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)
BOOST_AUTO_TEST_SUITE(cudnn)

BOOST_AUTO_TEST_CASE(cudnn_plans_are_checked_in_a_build_with_cudnn,
                     *boost::unit_test::precondition(built_with_cudnn)) {
  BOOST_FAIL("not reached: the precondition never holds without cuDNN");
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
#endif
