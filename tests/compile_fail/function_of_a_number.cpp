// expect: kiln::exp: takes a tensor or an expression, not a number; for a number use <cmath>'s
// errors: 1
// kiln::exp (and every function of one operand) given a plain number: one error saying what it takes,
// not the list of every `exp` overload in scope.
#include <kiln/kiln.hpp>

void compute() {
  auto y = kiln::exp(2.0);
  (void)y;
}
