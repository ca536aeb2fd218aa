// decode_reply_value (store/core/reply.h): every value shape byte by byte - need-more with
// the size to wait for, then the value - and the cap on a declared string length.
#include "store/core/reply.h"

#include <catch2/catch.hpp>
#include <string>

#include "store/core/wire.h"

using namespace ddprun::store;

namespace {

// Decodes `wire` fed one more byte at a time: every proper prefix must be kNeedMore
// asking for more than it has, the whole must be kOk spanning all of it.
std::int64_t decode_growing(const std::string& wire, ReplyValue kind, std::string* bytes) {
  std::int64_t number = -1;
  for (std::size_t n = 0; n < wire.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    const ReplyDecode r =
        decode_reply_value(std::string_view(wire).substr(0, n), kind, number, bytes);
    REQUIRE(r.status == ParseStatus::kNeedMore);
    CHECK(r.needed > n);
    CHECK(r.needed <= wire.size());
  }
  const ReplyDecode r = decode_reply_value(wire + "trailing", kind, number, bytes);
  REQUIRE(r.status == ParseStatus::kOk);
  CHECK(r.consumed == wire.size());
  return number;
}

}  // namespace

TEST_CASE("reply values: integers of each width", "[reply]") {
  std::string wire;
  Encoder(wire).u8(3);
  CHECK(decode_growing(wire, ReplyValue::kU8, nullptr) == 3);
  wire.clear();
  Encoder(wire).u32(0xfeedf00d);
  CHECK(decode_growing(wire, ReplyValue::kU32, nullptr) == 0xfeedf00d);
  wire.clear();
  Encoder(wire).i64(-42);
  CHECK(decode_growing(wire, ReplyValue::kI64, nullptr) == -42);
}

TEST_CASE("reply values: byte strings, empty or not, content optional", "[reply]") {
  for (const std::string& value : {std::string(), std::string("v\0x", 3), std::string(300, 'z')}) {
    std::string wire;
    Encoder(wire).bytes(value);
    std::string got = "stale";
    CHECK(decode_growing(wire, ReplyValue::kBytes, &got) == std::int64_t(value.size()));
    CHECK(got == value);
    CHECK(decode_growing(wire, ReplyValue::kBytes, nullptr) == std::int64_t(value.size()));
  }
}

TEST_CASE("reply values: an absurd string length is bad input, nothing allocated", "[reply]") {
  std::string wire;
  Encoder(wire).u64(kMaxReplyValueBytes + 1);
  std::int64_t number = 0;
  std::string bytes;
  const ReplyDecode r = decode_reply_value(wire, ReplyValue::kBytes, number, &bytes);
  CHECK(r.status == ParseStatus::kBad);
  CHECK(r.error.find("-byte string (not a TCPStore?)") != std::string::npos);
  CHECK(bytes.empty());
}
