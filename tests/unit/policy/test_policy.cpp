// The three policy axes (precision, device, parallel) and the Policy<> bundle with its defaults.
#include <boost/test/unit_test.hpp>
#include <string_view>
#include <type_traits>

#include "support/policies.hpp"

namespace {
// ---- precision ----
static_assert(kiln::precision_policy<kiln::Fp32> && kiln::precision_policy<kiln::MixedFp16> &&
              kiln::precision_policy<kiln::MixedBf16>);
static_assert(std::is_same_v<kiln::Fp32::storage, float> && std::is_same_v<kiln::Fp32::compute, float> &&
              std::is_same_v<kiln::Fp32::master, float> && !kiln::Fp32::loss_scaling);
static_assert(std::is_same_v<kiln::MixedFp16::storage, kiln::half> &&
                  std::is_same_v<kiln::MixedFp16::compute, float> &&
                  std::is_same_v<kiln::MixedFp16::master, float> && kiln::MixedFp16::loss_scaling,
              "fp16 needs loss scaling (GradScaler)");
static_assert(std::is_same_v<kiln::MixedBf16::storage, kiln::bfloat16> &&
                  std::is_same_v<kiln::MixedBf16::master, float> && !kiln::MixedBf16::loss_scaling,
              "bf16 has float's range: no loss scaling");
static_assert(std::is_same_v<kiln::compute_t<kiln::MixedFp16::storage>, kiln::MixedFp16::compute>);

// ---- device ----
static_assert(kiln::device_policy<kiln::Cpu> && kiln::device_policy<kiln::Cuda>);
static_assert(!kiln::Cpu::is_cuda && kiln::Cuda::is_cuda);
static_assert(std::is_empty_v<kiln::Cpu> && std::is_empty_v<kiln::Cuda>, "axes are empty tag types");

// ---- parallel ----
static_assert(kiln::parallel_policy<kiln::SingleDevice> && kiln::parallel_policy<kiln::DataParallel> &&
              kiln::parallel_policy<kiln::Distributed<kiln::Nccl>> &&
              kiln::parallel_policy<kiln::Distributed<kiln::Mpi>>);
static_assert(!kiln::SingleDevice::multi_process && !kiln::DataParallel::multi_process &&
              kiln::Distributed<kiln::Nccl>::multi_process);
static_assert(std::is_same_v<kiln::Distributed<kiln::Mpi>::backend, kiln::Mpi>);

// ---- the bundle ----
using Default = kiln::Policy<>;
static_assert(std::is_same_v<Default::precision, kiln::Fp32> && std::is_same_v<Default::device, kiln::Cpu> &&
                  std::is_same_v<Default::parallel, kiln::SingleDevice>,
              "defaults: Fp32, Cpu, SingleDevice");
using GpuMixed = kiln::Policy<kiln::MixedFp16, kiln::Cuda, kiln::Distributed<kiln::Nccl>>;
static_assert(std::is_same_v<GpuMixed::precision, kiln::MixedFp16> &&
              std::is_same_v<GpuMixed::device, kiln::Cuda> &&
              std::is_same_v<GpuMixed::parallel::backend, kiln::Nccl>);
static_assert(std::is_same_v<kiln::Policy<kiln::MixedBf16>::device, kiln::Cpu>,
              "later axes keep their defaults");
static_assert(kiln::policy<Default> && kiln::policy<GpuMixed> && !kiln::policy<kiln::Fp32> &&
              !kiln::policy<int>);
static_assert(std::is_empty_v<GpuMixed>);

// Not models: a type missing a member fails the concept (and Policy<> would not accept it).
struct NotADevice {
  static constexpr std::string_view name = "tpu";
};
struct NotAPrecision {
  using storage = float;
  static constexpr bool loss_scaling = false;
  static constexpr std::string_view name = "x";
};
static_assert(!kiln::device_policy<NotADevice> && !kiln::precision_policy<NotAPrecision>);
// A compute type that is not what the storage computes in: half storage does its arithmetic in float, so
// a policy promising double arithmetic is refused rather than silently computing in float.
struct HalfInDouble {
  using storage = kiln::half;
  using compute = double;
  using master = float;
  static constexpr bool loss_scaling = true;
  static constexpr std::string_view name = "fp16-in-double";
};
static_assert(!kiln::precision_policy<HalfInDouble>);
static_assert(!kiln::parallel_policy<kiln::Nccl>,
              "a communication backend is not itself a parallel strategy");
}  // namespace

BOOST_AUTO_TEST_SUITE(policy)

BOOST_AUTO_TEST_CASE(axes_have_pytorch_like_names) {
  BOOST_TEST(kiln::Fp32::name == "fp32");
  BOOST_TEST(kiln::MixedFp16::name == "fp16");
  BOOST_TEST(kiln::MixedBf16::name == "bf16");
  BOOST_TEST(kiln::Cpu::name == "cpu");
  BOOST_TEST(kiln::Cuda::name == "cuda");
  BOOST_TEST(kiln::SingleDevice::name == "single");
  BOOST_TEST(kiln::DataParallel::name == "dp");
  BOOST_TEST(kiln::Distributed<kiln::Mpi>::name == "ddp");
  BOOST_TEST(kiln::Nccl::name == "nccl");
  BOOST_TEST(kiln::Mpi::name == "mpi");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(policy_carries_the_device_of_the_tensors_it_makes, D, kiln::test::devices) {
  using P = kiln::Policy<kiln::MixedBf16, D>;
  static_assert(kiln::policy<P>);
  using T = kiln::Tensor<typename P::precision::storage, kiln::Shape<kiln::dyn, 8>, typename P::device>;
  static_assert(std::is_same_v<typename T::device, D> &&
                std::is_same_v<typename T::element_type, kiln::bfloat16>);
  static_assert(std::is_same_v<typename T::value_type, typename P::precision::compute>);
  T t(3);
  t.fill(1.5f);  // exact in bfloat16
  BOOST_TEST(kiln::sum(t).item() == 36.0f);
  BOOST_TEST(P::device::name == (D::is_cuda ? "cuda" : "cpu"));
  BOOST_TEST(kiln::dtype_name<typename P::precision::storage>() == "bfloat16");
}

BOOST_AUTO_TEST_SUITE_END()
