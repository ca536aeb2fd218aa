// numbers_test.cpp: base/numbers.h's median and seconds_text on the cases the reports rely
// on (odd and even counts, unsorted input, no "-0", the shortest text).
#include "base/numbers.h"

#include <catch2/catch.hpp>

using ddprun::median;
using ddprun::seconds_text;

TEST_CASE("numbers: median of odd and even counts, in any order") {
  CHECK(median({}) == 0);
  CHECK(median({4}) == 4);
  CHECK(median({9, 1, 5}) == 5);
  CHECK(median({8, 2, 4, 6}) == 5);
  CHECK(median({0.3, 0.1, 0.2, 12.0}) == Approx(0.25));
  CHECK(median({7, 7, 1, 7}) == 7);
}

TEST_CASE("numbers: seconds_text rounds to the decimals asked and says no more") {
  CHECK(seconds_text(13.46, 1) == "13.5");
  CHECK(seconds_text(2.0, 1) == "2");
  CHECK(seconds_text(0.04, 1) == "0");
  CHECK(seconds_text(-0.04, 1) == "0");
  CHECK(seconds_text(0.0504, 3) == "0.05");
  CHECK(seconds_text(0.3, 3) == "0.3");
  CHECK(seconds_text(11.5, 0) == "12");
  CHECK(seconds_text(1234.56, 1) == "1234.6");
}
