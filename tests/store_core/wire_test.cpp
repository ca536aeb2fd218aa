// Tests for store/core/wire.h: byte order, length prefixes, and short-input behaviour.
#include "store/core/wire.h"

#include <catch2/catch.hpp>
#include <limits>

using ddprun::store::Decoder;
using ddprun::store::Encoder;

TEST_CASE("Encoder writes little-endian integers and length-prefixed bytes", "[wire]") {
  std::string out;
  Encoder e(out);
  e.u8(0xab);
  e.u32(0x3C85F7CE);
  e.u64(3);
  e.i64(-2);
  e.bytes("hi");
  const std::string expected(
      "\xab"
      "\xce\xf7\x85\x3c"
      "\x03\x00\x00\x00\x00\x00\x00\x00"
      "\xfe\xff\xff\xff\xff\xff\xff\xff"
      "\x02\x00\x00\x00\x00\x00\x00\x00hi",
      1 + 4 + 8 + 8 + 10);
  CHECK(out == expected);
}

TEST_CASE("Decoder reads back what Encoder wrote", "[wire]") {
  std::string out;
  Encoder e(out);
  e.u8(7);
  e.u32(0xdeadbeef);
  e.u64(std::numeric_limits<std::uint64_t>::max());
  e.i64(std::numeric_limits<std::int64_t>::min());
  e.bytes(std::string("a\0b", 3));
  e.bytes("");

  Decoder d(out);
  std::uint8_t a = 0;
  std::uint32_t b = 0;
  std::uint64_t c = 0;
  std::int64_t i = 0;
  std::string s1, s2 = "junk";
  REQUIRE(d.u8(a));
  REQUIRE(d.u32(b));
  REQUIRE(d.u64(c));
  REQUIRE(d.i64(i));
  REQUIRE(d.bytes(s1, 100) == Decoder::BytesStatus::kOk);
  REQUIRE(d.bytes(s2, 100) == Decoder::BytesStatus::kOk);
  CHECK(a == 7);
  CHECK(b == 0xdeadbeef);
  CHECK(c == std::numeric_limits<std::uint64_t>::max());
  CHECK(i == std::numeric_limits<std::int64_t>::min());
  CHECK(s1 == std::string("a\0b", 3));
  CHECK(s2.empty());
  CHECK(d.remaining() == 0);
  CHECK(d.position() == out.size());
}

TEST_CASE("Decoder leaves the position unchanged on short input", "[wire]") {
  std::string out;
  Encoder(out).bytes("hello");
  for (std::size_t n = 0; n < out.size(); ++n) {
    Decoder d(std::string_view(out).substr(0, n));
    std::string v;
    CHECK(d.bytes(v, 100) == Decoder::BytesStatus::kNeedMore);
    CHECK(d.position() == 0);
    std::uint64_t u = 0;
    if (n < 8) {
      CHECK_FALSE(d.u64(u));
      CHECK(d.position() == 0);
    }
    std::uint32_t u32 = 0;
    if (n < 4) {
      CHECK_FALSE(d.u32(u32));
      CHECK(d.position() == 0);
    }
  }
  Decoder empty("");
  std::uint8_t b = 0;
  CHECK_FALSE(empty.u8(b));
  CHECK_FALSE(empty.skip(1));
  CHECK(empty.skip(0));
}

TEST_CASE("Decoder refuses a declared length over the cap without waiting for it", "[wire]") {
  std::string out;
  Encoder(out).u64(1ULL << 60);  // only the length: the bytes never come
  Decoder d(out);
  std::string v;
  CHECK(d.bytes(v, 1024) == Decoder::BytesStatus::kTooLong);
  CHECK(v.empty());

  std::string exact;
  Encoder(exact).bytes(std::string(16, 'x'));
  Decoder d2(exact);
  CHECK(d2.bytes(v, 16) == Decoder::BytesStatus::kOk);
  Decoder d3(exact);
  CHECK(d3.bytes(v, 15) == Decoder::BytesStatus::kTooLong);
}
