// Tests for store/core/protocol.h: golden bytes of both dialects (the PyTorch 1.13 captures
// byte for byte), arbitrary read splits, limits, unknown commands and dialect detection.
#include "store/core/protocol.h"

#include <catch2/catch.hpp>
#include <ostream>
#include <vector>

#include "store/core/wire.h"
#include "tests/store_core/hex.h"

namespace ddprun::store {
std::ostream& operator<<(std::ostream& os, const Request& r) {
  os << op_name(r.op) << " keys=[";
  for (const auto& k : r.keys) os << '"' << k << "\" ";
  os << "] values=" << r.values.size() << " number=" << r.number << " nonce=" << r.nonce;
  return os;
}
}  // namespace ddprun::store

namespace {

using namespace ddprun::store;
using ddprun::store::testing::hex;
using ddprun::store::testing::unhex;

Request make(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
             std::int64_t number = 0, std::uint32_t nonce = 0) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  r.nonce = nonce;
  return r;
}

struct Golden {
  const char* what;
  std::string bytes;
  Request request;
};

// Client bytes captured from real PyTorch 1.13 (tcpstore-protocol.md A.4 and A.10).
std::vector<Golden> legacy_goldens() {
  return {
      {"set('k1','hello')", unhex("00 03000000 00000000 2f6b31 05000000 00000000 68656c6c6f"),
       make(Op::kSet, {"/k1"}, {"hello"})},
      {"wait(['k1'])", unhex("05 01000000 00000000 03000000 00000000 2f6b31"),
       make(Op::kWait, {"/k1"})},
      {"get('k1')", unhex("02 03000000 00000000 2f6b31"), make(Op::kGet, {"/k1"})},
      {"add('cnt',5)", unhex("03 | 04000000 00000000 2f636e74 | 05000000 00000000"),
       make(Op::kAdd, {"/cnt"}, {}, 5)},
      {"add('cnt',-2)", unhex("03 | 04000000 00000000 2f636e74 | feffffff ffffffff"),
       make(Op::kAdd, {"/cnt"}, {}, -2)},
      {"compare_set('c1','','new')",
       unhex("01 | 03000000 00000000 2f6331 | 00000000 00000000 | 03000000 00000000 6e6577"),
       make(Op::kCompareSet, {"/c1"}, {"", "new"})},
      {"num_keys()", unhex("06"), make(Op::kGetNumKeys)},
      {"delete_key('k1')", unhex("08 | 03000000 00000000 2f6b31"), make(Op::kDeleteKey, {"/k1"})},
      {"wait(['cnt','c1'])",
       unhex("05 | 02000000 00000000 | 04000000 00000000 2f636e74 | 03000000 00000000 2f6331"),
       make(Op::kWait, {"/cnt", "/c1"})},
      {"ADD init/ 1 (wait_for_workers)",
       unhex("03 | 05 00 00 00 00 00 00 00 | 69 6e 69 74 2f | 01 00 00 00 00 00 00 00"),
       make(Op::kAdd, {"init/"}, {}, 1)},
      {"check(['k1'])", unhex("04 01000000 00000000 03000000 00000000 2f6b31"),
       make(Op::kCheck, {"/k1"})},
      {"watch_key('k1')", unhex("07 03000000 00000000 2f6b31"), make(Op::kWatchKey, {"/k1"})},
      {"2.0 append", unhex("09 0100000000000000 61 0200000000000000 7879"),
       make(Op::kAppend, {"a"}, {"xy"})},
      {"2.0 multi_get", unhex("0a 0200000000000000 0100000000000000 61 0000000000000000"),
       make(Op::kMultiGet, {"a", ""})},
      {"2.0 multi_set", unhex("0b 0100000000000000 0100000000000000 61 0100000000000000 76"),
       make(Op::kMultiSet, {"a"}, {"v"})},
      {"2.0 cancel_wait", unhex("0c"), make(Op::kCancelWait)},
  };
}

// Modern (2.2+) client requests, as TCPStore.cpp's client assembles them.
std::vector<Golden> modern_goldens() {
  return {
      {"VALIDATE", unhex("00 ce f7 85 3c"), make(Op::kValidate, {}, {}, 0, kValidationMagic)},
      {"PING pid 4660", unhex("0d 34 12 00 00"), make(Op::kPing, {}, {}, 0, 0x1234)},
      {"ADD init/ 1", unhex("04 0500000000000000 696e69742f 0100000000000000"),
       make(Op::kAdd, {"init/"}, {}, 1)},
      {"SET /k v", unhex("01 0200000000000000 2f6b 0100000000000000 76"),
       make(Op::kSet, {"/k"}, {"v"})},
      {"COMPARE_SET", unhex("02 0200000000000000 2f6b 0000000000000000 0100000000000000 76"),
       make(Op::kCompareSet, {"/k"}, {"", "v"})},
      {"WAIT /k", unhex("06 0100000000000000 0200000000000000 2f6b"), make(Op::kWait, {"/k"})},
      {"GET /k", unhex("03 0200000000000000 2f6b"), make(Op::kGet, {"/k"})},
      {"CHECK none", unhex("05 0000000000000000"), make(Op::kCheck)},
      {"GETNUMKEYS", unhex("07"), make(Op::kGetNumKeys)},
      {"DELETE_KEY", unhex("08 0200000000000000 2f6b"), make(Op::kDeleteKey, {"/k"})},
      {"APPEND", unhex("09 0200000000000000 2f6b 0100000000000000 77"),
       make(Op::kAppend, {"/k"}, {"w"})},
      {"MULTI_GET", unhex("0a 0100000000000000 0200000000000000 2f6b"),
       make(Op::kMultiGet, {"/k"})},
      {"MULTI_SET",
       unhex("0b 0200000000000000 0100000000000000 61 0100000000000000 31"
             " 0100000000000000 62 0000000000000000"),
       make(Op::kMultiSet, {"a", "b"}, {"1", ""})},
      {"CANCEL_WAIT", unhex("0c"), make(Op::kCancelWait)},
      {"QUEUE_PUSH", unhex("0e 0200000000000000 2f71 0300000000000000 6a6f62"),
       make(Op::kQueuePush, {"/q"}, {"job"})},
      {"QUEUE_POP", unhex("0f 0200000000000000 2f71"), make(Op::kQueuePop, {"/q"})},
      {"QUEUE_LEN", unhex("10 0200000000000000 2f71"), make(Op::kQueueLen, {"/q"})},
      {"LIST_KEYS", unhex("11"), make(Op::kListKeys)},
      {"BARRIER /b 4", unhex("12 0200000000000000 2f62 0400000000000000"),
       make(Op::kBarrier, {"/b"}, {}, 4)},
  };
}

ParseResult parse(std::string_view bytes, Dialect d, Request& out, const Limits& l = {}) {
  return parse_request(bytes, d, l, out);
}

// Feeds `stream` to a parser in the given chunk sizes, like a server reading a socket,
// and returns every request decoded. Fails the test on kBad.
std::vector<Request> parse_chunks(std::string_view stream, Dialect d,
                                  const std::vector<std::size_t>& cuts) {
  std::vector<Request> got;
  std::string buf;
  std::size_t at = 0;
  auto drain = [&] {
    while (true) {
      Request r;
      const auto res = parse_request(buf, d, Limits{}, r);
      REQUIRE(res.status != ParseStatus::kBad);
      if (res.status == ParseStatus::kNeedMore) {
        CHECK(res.needed > buf.size());
        return;
      }
      got.push_back(std::move(r));
      buf.erase(0, res.consumed);
    }
  };
  for (std::size_t cut : cuts) {
    buf.append(stream.substr(at, cut - at));
    at = cut;
    drain();
  }
  buf.append(stream.substr(at));
  drain();
  CHECK(buf.empty());
  return got;
}

void check_goldens(const std::vector<Golden>& goldens, Dialect d) {
  std::string stream;
  std::vector<Request> expected;
  for (const auto& g : goldens) {
    INFO(g.what << ": " << hex(g.bytes));
    Request r;
    const auto res = parse(g.bytes, d, r);
    REQUIRE(res.status == ParseStatus::kOk);
    CHECK(res.consumed == g.bytes.size());
    CHECK(r == g.request);

    std::string encoded;
    encode_request(g.request, d, encoded);
    CHECK(hex(encoded) == hex(g.bytes));

    // Every proper prefix is "need more", consumes nothing and leaves `out` alone.
    for (std::size_t n = 0; n < g.bytes.size(); ++n) {
      Request untouched = make(Op::kListKeys, {"sentinel"});
      const auto p = parse(std::string_view(g.bytes).substr(0, n), d, untouched);
      CHECK(p.status == ParseStatus::kNeedMore);
      CHECK(p.consumed == 0);
      CHECK(p.needed > n);
      CHECK(p.needed <= g.bytes.size());
      CHECK(untouched == make(Op::kListKeys, {"sentinel"}));
    }
    // Trailing bytes of the next request are not consumed.
    std::string more = g.bytes + "\x06";
    CHECK(parse(more, d, r).consumed == g.bytes.size());

    stream += g.bytes;
    expected.push_back(g.request);
  }

  // The whole conversation split into two reads at every byte boundary.
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    INFO("split at " << cut);
    REQUIRE(parse_chunks(stream, d, {cut}) == expected);
  }
  // And one byte per read.
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < stream.size(); ++i) every.push_back(i);
  CHECK(parse_chunks(stream, d, every) == expected);
}

DetectResult detect(std::string_view bytes, std::string* error = nullptr) {
  std::string err;
  const DetectResult d = detect_dialect(bytes, Limits{}, err);
  if (error) *error = err;
  return d;
}

}  // namespace

TEST_CASE("legacy dialect: the captured PyTorch 1.13 requests, byte for byte", "[protocol]") {
  check_goldens(legacy_goldens(), Dialect::kLegacy);
}

TEST_CASE("modern dialect: handshake and every command", "[protocol]") {
  check_goldens(modern_goldens(), Dialect::kModern);
}

TEST_CASE("the modern handshake is VALIDATE then PING with the pid", "[protocol]") {
  const std::string opening = unhex("00 ce f7 85 3c 0d 39 30 00 00");
  CHECK(detect(opening) == DetectResult::kModern);
  Request r;
  auto res = parse(opening, Dialect::kModern, r);
  REQUIRE(res.status == ParseStatus::kOk);
  CHECK(r.op == Op::kValidate);
  CHECK(res.consumed == 5);
  res = parse(std::string_view(opening).substr(5), Dialect::kModern, r);
  REQUIRE(res.status == ParseStatus::kOk);
  CHECK(r.op == Op::kPing);
  CHECK(r.nonce == 12345);
}

TEST_CASE("detect_dialect", "[protocol]") {
  CHECK(detect("") == DetectResult::kNeedMore);
  CHECK(detect(unhex("00")) == DetectResult::kNeedMore);
  CHECK(detect(unhex("00 ce")) == DetectResult::kNeedMore);
  CHECK(detect(unhex("00 ce f7 85")) == DetectResult::kNeedMore);
  CHECK(detect(unhex("00 ce f7 85 3c")) == DetectResult::kModern);
  CHECK(detect(unhex("00 ce f7 85 3c 0d 01 02")) == DetectResult::kModern);
  CHECK(detect(unhex("00 03 00")) == DetectResult::kNeedMore);
  CHECK(detect(unhex("00 03 00 00 00")) == DetectResult::kLegacy);  // 1.13 SET
  CHECK(detect(unhex("00 00 20 00 00")) == DetectResult::kLegacy);  // key of max_key_bytes
  CHECK(detect(unhex("03")) == DetectResult::kLegacy);              // 1.13 ADD init/
  CHECK(detect(unhex("06")) == DetectResult::kLegacy);
  CHECK(detect(unhex("ce f7 85 3c")) == DetectResult::kLegacy);
}

TEST_CASE("detect_dialect: a VALIDATE with a wrong magic is refused at once", "[protocol]") {
  std::string error;
  CHECK(detect(unhex("00 ce f7 85 3d"), &error) == DetectResult::kBad);
  CHECK(error ==
        "VALIDATE: magic 0x3D85F7CE is not 0x3C85F7CE (nor a legacy SET: key length "
        "over 8192 bytes)");
  CHECK(detect(unhex("00 de ad be ef"), &error) == DetectResult::kBad);
  CHECK(detect(unhex("00 01 20 00 00")) == DetectResult::kBad);  // one byte over the key limit
  Limits big;
  big.max_key_bytes = 0xffffffff;
  CHECK(detect_dialect(unhex("00 de ad be ef"), big, error) == DetectResult::kLegacy);
}

TEST_CASE("unknown command bytes and a wrong magic are rejected with one line", "[protocol]") {
  Request r;
  auto res = parse(unhex("0d 00000000"), Dialect::kLegacy, r);  // PING is modern only
  CHECK(res.status == ParseStatus::kBad);
  CHECK(res.error == "unknown command byte 13 in the legacy (1.13/2.0) dialect");
  res = parse(unhex("13"), Dialect::kModern, r);
  CHECK(res.status == ParseStatus::kBad);
  CHECK(res.error == "unknown command byte 19 in the modern (2.2+) dialect");
  res = parse(unhex("ff"), Dialect::kModern, r);
  CHECK(res.status == ParseStatus::kBad);
  // WATCH_KEY's 7 is GETNUMKEYS in the modern dialect.
  res = parse(unhex("07"), Dialect::kModern, r);
  CHECK(res.status == ParseStatus::kOk);
  CHECK(r.op == Op::kGetNumKeys);

  res = parse(unhex("00 78 56 34 12"), Dialect::kModern, r);
  CHECK(res.status == ParseStatus::kBad);
  CHECK(res.error == "VALIDATE: magic 0x12345678 is not 0x3C85F7CE");
  CHECK(res.error.find('\n') == std::string::npos);
}

TEST_CASE("limits: oversized lengths and counts are rejected before their bytes arrive",
          "[protocol]") {
  Request r;
  SECTION("key over 8 KiB") {
    std::string b = unhex("01");
    Encoder(b).u64(8 * 1024 + 1);
    const auto res = parse(b, Dialect::kModern, r);
    CHECK(res.status == ParseStatus::kBad);
    CHECK(res.error == "SET: key of 8193 bytes exceeds the limit of 8192 bytes");
  }
  SECTION("a key of exactly the limit is fine") {
    std::string b = unhex("03");
    Encoder(b).bytes(std::string(8 * 1024, 'k'));
    CHECK(parse(b, Dialect::kModern, r).status == ParseStatus::kOk);
  }
  SECTION("value over 8 MiB") {
    std::string b = unhex("00");  // legacy SET
    Encoder e(b);
    e.bytes("/k");
    e.u64(8 * 1024 * 1024 + 1);
    const auto res = parse(b, Dialect::kLegacy, r);
    CHECK(res.status == ParseStatus::kBad);
    CHECK(res.error == "SET: value of 8388609 bytes exceeds the limit of 8388608 bytes");
  }
  SECTION("a huge declared length (the 2.x opening read as 1.13 SET)") {
    const auto res = parse(unhex("00 ce f7 85 3c 0d 39 30 00 00"), Dialect::kLegacy, r);
    CHECK(res.status == ParseStatus::kBad);
    CHECK(res.error == "SET: key of 13573527894882254 bytes exceeds the limit of 8192 bytes");
  }
  SECTION("too many keys") {
    std::string b = unhex("0b");
    Encoder(b).i64(200000);
    auto res = parse(b, Dialect::kModern, r);
    CHECK(res.status == ParseStatus::kBad);
    CHECK(res.error == "MULTI_SET: 200000 keys exceeds the limit of 131072");
    b = unhex("06");
    Encoder(b).u64(~0ULL);
    res = parse(b, Dialect::kModern, r);
    CHECK(res.status == ParseStatus::kBad);
    CHECK(res.error == "WAIT: 18446744073709551615 keys exceeds the limit of 131072");
  }
  SECTION("negative MULTI_SET count") {
    std::string b = unhex("0b");
    Encoder(b).i64(-1);
    const auto res = parse(b, Dialect::kLegacy, r);
    CHECK(res.status == ParseStatus::kBad);
    CHECK(res.error == "MULTI_SET: negative key count -1");
  }
  SECTION("total request size") {
    Limits small;
    small.max_request_bytes = 100;
    std::string b = unhex("0b");
    Encoder e(b);
    e.i64(3);
    e.bytes("a");
    e.bytes(std::string(60, 'v'));  // ends at byte 86: fine so far
    e.bytes("b");
    e.u64(0);  // the second value would end at byte 103
    auto res = parse(b, Dialect::kModern, r, small);
    CHECK(res.status == ParseStatus::kBad);
    CHECK(res.error == "MULTI_SET: request of at least 103 bytes exceeds the limit of 100 bytes");

    std::string many = unhex("0b");
    Encoder(many).i64(10);  // 10 items need at least 9 + 10 * 16 bytes
    res = parse(many, Dialect::kModern, r, small);
    CHECK(res.status == ParseStatus::kBad);
    CHECK(res.error == "MULTI_SET: request of at least 169 bytes exceeds the limit of 100 bytes");
  }
}

TEST_CASE("a long value arriving in pieces is not re-copied: `needed` points at its end",
          "[protocol]") {
  std::string b = unhex("01");
  Encoder e(b);
  e.bytes("/big");
  e.bytes(std::string(1 << 20, 'x'));
  Request r;
  // Once the value's length is known, the parser reports where the request ends, so a
  // server can leave the buffer alone until then.
  for (std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{20}, std::size_t{21},
                        std::size_t{4096}, b.size() - 1}) {
    const auto res = parse(std::string_view(b).substr(0, n), Dialect::kModern, r);
    REQUIRE(res.status == ParseStatus::kNeedMore);
    if (n >= 1 + 8 + 4 + 8) CHECK(res.needed == b.size());
  }
  const auto res = parse(b, Dialect::kModern, r);
  REQUIRE(res.status == ParseStatus::kOk);
  CHECK(r.values[0].size() == (1u << 20));
}

TEST_CASE("op_in_dialect and encode_request of an op the dialect lacks", "[protocol]") {
  CHECK(op_in_dialect(Op::kWatchKey, Dialect::kLegacy));
  CHECK_FALSE(op_in_dialect(Op::kWatchKey, Dialect::kModern));
  for (Op op : {Op::kValidate, Op::kPing, Op::kQueuePush, Op::kQueuePop, Op::kQueueLen,
                Op::kListKeys, Op::kBarrier}) {
    CHECK_FALSE(op_in_dialect(op, Dialect::kLegacy));
    CHECK(op_in_dialect(op, Dialect::kModern));
    std::string out;
    encode_request(make(op, {"k"}), Dialect::kLegacy, out);
    CHECK(out.empty());
  }
  CHECK(std::string(op_name(Op::kMultiSet)) == "MULTI_SET");
}

TEST_CASE("an 8 MiB value arriving in 1440-byte pieces is re-parsed cheaply", "[protocol]") {
  // 2.x clients flush every 1440 bytes. A parser that copied the partial value on every
  // attempt would move ~24 GB here and blow the test timeout; ours reads two lengths.
  std::string b = unhex("01");
  Encoder e(b);
  e.bytes("/big");
  e.bytes(std::string(8 << 20, 'x'));
  Request r;
  std::size_t attempts = 0;
  for (std::size_t n = 1440; n < b.size(); n += 1440) {
    ++attempts;
    REQUIRE(parse(std::string_view(b).substr(0, n), Dialect::kModern, r).status ==
            ParseStatus::kNeedMore);
  }
  CHECK(attempts > 5000);
  REQUIRE(parse(b, Dialect::kModern, r).status == ParseStatus::kOk);
  CHECK(r.values[0].size() == (8u << 20));
}
