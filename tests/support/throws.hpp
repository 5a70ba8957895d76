// throws_with<E>(f, part): whether f() throws an E whose message holds `part` (the message is logged).
#pragma once
#include <boost/test/unit_test.hpp>
#include <string>

namespace kiln::test {

template <class E, class F>
bool throws_with(F f, const std::string& part) {
  try {
    f();
  } catch (const E& e) {
    BOOST_TEST_MESSAGE(e.what());
    return std::string(e.what()).find(part) != std::string::npos;
  }
  return false;
}

}  // namespace kiln::test
