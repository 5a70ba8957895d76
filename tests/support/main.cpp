// The Boost.Test main of every CPU test executable (linked Boost.Test: the library provides main()).
#define BOOST_TEST_MODULE kiln
#include <boost/test/unit_test.hpp>
