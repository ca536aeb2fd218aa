// text_test.cpp: base/text.h's trim, split and parse_int on the edge cases their callers
// rely on (empty pieces kept, whole-string integers only, overflow refused).
#include "base/text.h"

#include <catch2/catch.hpp>
#include <cstdint>

using ddprun::parse_int;
using ddprun::split;
using ddprun::trim;

TEST_CASE("text: trim drops white space at both ends only") {
  CHECK(trim("  a b\t\n") == "a b");
  CHECK(trim(" \t ").empty());
  CHECK(trim("").empty());
  CHECK(trim("x") == "x");
}

TEST_CASE("text: split keeps empty pieces") {
  CHECK(split("a,b", ',') == std::vector<std::string>{"a", "b"});
  CHECK(split("a,,b,", ',') == std::vector<std::string>{"a", "", "b", ""});
  CHECK(split("", ',') == std::vector<std::string>{""});
  CHECK(split("abc", ':') == std::vector<std::string>{"abc"});
}

TEST_CASE("text: parse_int takes the whole string or nothing") {
  CHECK(parse_int<int>("42") == 42);
  CHECK(parse_int<int>("-7") == -7);
  CHECK_FALSE(parse_int<unsigned>("-7"));
  CHECK_FALSE(parse_int<int>(""));
  CHECK_FALSE(parse_int<int>(" 4"));
  CHECK_FALSE(parse_int<int>("4x"));
  CHECK_FALSE(parse_int<int>("+4"));
  CHECK_FALSE(parse_int<std::int8_t>("300"));
  CHECK(parse_int<long>("ff", 16) == 255);
  CHECK(parse_int<unsigned long long>("18446744073709551615") == 18446744073709551615ULL);
  CHECK_FALSE(parse_int<unsigned long long>("18446744073709551616"));
}
