// Device checks before a pass (torch: "Expected all tensors to be on the same device"): the walk over an
// expression's tensors that finds their common device, the check that two devices agree, and what a
// tensor over foreign memory (from_blob) is on. The walk takes the "which device is this memory on"
// question as a function, so the CPU exercises it with made-up GPU indices; the runtime's answer
// (cudaPointerGetAttributes, asked only once a process has tensors on several GPUs) is tested in
// tests/cuda/device/test_other_device.cpp.
#include <boost/test/unit_test.hpp>

#include <map>
#include <string>
#include <vector>

#include "support/policies.hpp"

namespace {
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;
using Vec = Tensor<float, Shape<dyn>>;

bool names_both(const kiln::ValueError& e, const std::string& what, const std::string& a, const std::string& b) {
  const std::string m = e.what();
  return m.find(what) != std::string::npos && m.find(a) != std::string::npos && m.find(b) != std::string::npos &&
         m.find("same device") != std::string::npos;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(expr)
BOOST_AUTO_TEST_SUITE(operand_device)

BOOST_AUTO_TEST_CASE(leaves_on_one_device_give_that_device_and_two_devices_are_refused) {
  Vec x(Extents<Shape<dyn>>(5)), y(Extents<Shape<dyn>>(5)), z(Extents<Shape<dyn>>(5));
  std::map<const void*, int> on{{x.data(), 1}, {y.data(), 1}, {z.data(), 2}};
  const auto where = [&](const void* p) { return on.at(p); };
  using kiln::detail::operand_device;
  BOOST_TEST(operand_device(kiln::as_expr(x), "kiln::test", where) == 1);
  BOOST_TEST(operand_device(kiln::relu(x * 2.0f + y) - x, "kiln::test", where) == 1);
  BOOST_TEST(operand_device(kiln::where(z > 0.0f, z, z * 2.0f), "kiln::test", where) == 2);
  BOOST_CHECK_EXCEPTION((void)operand_device(x + kiln::exp(z), "kiln::test", where), kiln::ValueError,
                        [](const kiln::ValueError& e) { return names_both(e, "kiln::test", "cuda:1", "cuda:2"); });
  BOOST_CHECK_EXCEPTION((void)operand_device(kiln::where(x > y, z, x), "kiln::test", where), kiln::ValueError,
                        [](const kiln::ValueError& e) { return names_both(e, "kiln::test", "cuda:2", "cuda:1"); });
}

BOOST_AUTO_TEST_CASE(memory_the_runtime_cannot_place_and_empty_leaves_are_not_counted) {
  Vec x(Extents<Shape<dyn>>(5)), host(Extents<Shape<dyn>>(5)), none(Extents<Shape<dyn>>(0));
  std::map<const void*, int> on{{x.data(), 3}, {host.data(), -1}};
  const auto where = [&](const void* p) { return on.at(p); };  // an empty leaf is never asked (throws if it were)
  using kiln::detail::operand_device;
  BOOST_TEST(operand_device(x + host, "kiln::test", where) == 3);
  BOOST_TEST(operand_device(host * 2.0f, "kiln::test", where) == -1);
  BOOST_TEST(operand_device(none * 2.0f + none, "kiln::test", where) == -1);
  BOOST_TEST(operand_device(kiln::as_expr(2.0f), "kiln::test", where) == -1);  // a scalar: no tensor
}

// The CPU has no device index: nothing is walked or asked (the branch is not even instantiated).
static_assert(!kiln::detail::device_memory<kiln::Cpu>::indexed);

BOOST_AUTO_TEST_CASE(the_cpu_has_no_device_to_find) {
  Vec x(Extents<Shape<dyn>>(5));
  BOOST_TEST(kiln::detail::operand_device<kiln::Cpu>(x * 2.0f + x, "kiln::test") == -1);
}

BOOST_AUTO_TEST_CASE(two_known_devices_must_agree) {
  using kiln::detail::check_same_device;
  BOOST_CHECK_NO_THROW(check_same_device("kiln::test", 1, 1));
  BOOST_CHECK_NO_THROW(check_same_device("kiln::test", -1, 4));  // -1: not known (no memory yet)
  BOOST_CHECK_NO_THROW(check_same_device("kiln::test", 4, -1));
  BOOST_CHECK_EXCEPTION(check_same_device("kiln::nn::Model::forward", 0, 1), kiln::ValueError,
                        [](const kiln::ValueError& e) { return names_both(e, "kiln::nn::Model::forward", "cuda:0", "cuda:1"); });
  Vec empty;  // no memory: its pass runs on the current device
  BOOST_TEST(kiln::detail::pass_device(empty) == -1);
  BOOST_TEST(kiln::detail::pass_device(Vec(Extents<Shape<dyn>>(2))) == 0);
}

BOOST_AUTO_TEST_CASE(from_blob_on_the_cpu_is_device_0) {
  std::vector<float> host{1, 2, 3};
  const auto t = Vec::from_blob(host.data(), Extents<Shape<dyn>>(3));
  BOOST_TEST(t.device_index() == 0);
  BOOST_TEST(t.data() == host.data());
  BOOST_TEST(kiln::sum(t).item() == 6.0f);
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
