// Tests for store/core/handler.h: the reply bytes of every command in both dialects, pending
// replies delivered through Effects, and the commands that close a connection.
#include "store/core/handler.h"

#include <catch2/catch.hpp>
#include <string>

#include "store/core/wire.h"
#include "tests/store_core/hex.h"

namespace {

using namespace ddprun::store;
using ddprun::store::testing::hex;
using ddprun::store::testing::unhex;

// One connection's view: raw request bytes in, reply bytes out (as hex).
struct Conn {
  KvState& kv;
  KvState::ClientId who;
  Dialect dialect;
  KvState::Effects fx;
  HandleResult last;

  std::string send(std::string_view request_hex) {
    const std::string bytes = unhex(request_hex);
    Request req;
    const auto p = parse_request(bytes, dialect, Limits{}, req);
    REQUIRE(p.status == ParseStatus::kOk);
    REQUIRE(p.consumed == bytes.size());
    std::string reply;
    last = handle_request(kv, who, req, reply, fx);
    return hex(reply);
  }
};

std::string str(std::string_view s) {
  std::string out;
  Encoder(out).bytes(s);
  return hex(out);
}
std::string i64(std::int64_t v) {
  std::string out;
  Encoder(out).i64(v);
  return hex(out);
}

}  // namespace

TEST_CASE("legacy replies: the 1.13 capture, reply for reply", "[handler]") {
  KvState kv;
  Conn c{kv, 1, Dialect::kLegacy, {}, {}};
  // set('k1','hello'): no reply.
  CHECK(c.send("00 03000000 00000000 2f6b31 05000000 00000000 68656c6c6f") == "");
  // wait(['k1']): ready at once.
  CHECK(c.send("05 01000000 00000000 03000000 00000000 2f6b31") == "00");
  // get('k1')
  CHECK(c.send("02 03000000 00000000 2f6b31") == "05 00 00 00 00 00 00 00 68 65 6c 6c 6f");
  // add('cnt',5) then add('cnt',-2)
  CHECK(c.send("03 04000000 00000000 2f636e74 05000000 00000000") == i64(5));
  CHECK(c.send("03 04000000 00000000 2f636e74 feffffff ffffffff") == i64(3));
  // compare_set('c1','','new')
  CHECK(c.send("01 03000000 00000000 2f6331 00000000 00000000 03000000 00000000 6e6577") ==
        str("new"));
  // num_keys(): /k1, /cnt, /c1
  CHECK(c.send("06") == i64(3));
  // delete_key('k1') twice
  CHECK(c.send("08 03000000 00000000 2f6b31") == "01 00 00 00 00 00 00 00");
  CHECK(c.send("08 03000000 00000000 2f6b31") == "00 00 00 00 00 00 00 00");
  // wait(['cnt','c1'])
  CHECK(c.send("05 02000000 00000000 04000000 00000000 2f636e74 03000000 00000000 2f6331") == "00");
  // check: ready / not ready
  CHECK(c.send("04 01000000 00000000 04000000 00000000 2f636e74") == "00");
  CHECK(c.send("04 01000000 00000000 03000000 00000000 2f6b31") == "01");
  CHECK(c.last.kind == HandleResult::Kind::kDone);
}

TEST_CASE("legacy WATCH_KEY answers 03 and pushes notifications", "[handler]") {
  KvState kv;
  Conn watcher{kv, 1, Dialect::kLegacy, {}, {}};
  Conn writer{kv, 2, Dialect::kLegacy, {}, {}};
  CHECK(watcher.send("07 0200000000000000 2f77") == "03");
  CHECK(writer.send("00 0200000000000000 2f77 0100000000000000 61") == "");
  REQUIRE(writer.fx.notifications.size() == 1);
  const auto& n = writer.fx.notifications[0];
  CHECK(n.watcher == 1);
  std::string push;
  encode_notification(n, push);
  // u8 KEY_CREATED, str key, bytes old (empty), bytes new
  CHECK(hex(push) == "01 " + str("/w") + " " + str("") + " " + str("a"));
}

TEST_CASE("2.0 additions in the legacy dialect: append, multi_get, multi_set, cancel",
          "[handler]") {
  KvState kv;
  Conn c{kv, 1, Dialect::kLegacy, {}, {}};
  CHECK(c.send("09 0100000000000000 61 0200000000000000 7879") == "");
  CHECK(c.send("09 0100000000000000 61 0100000000000000 7a") == "");
  CHECK(c.send("0b 0100000000000000 0100000000000000 62 0100000000000000 76") == "");
  CHECK(c.send("0a 0300000000000000 0100000000000000 61 0100000000000000 63"
               " 0100000000000000 62") == str("xyz") + " " + str("") + " " + str("v"));
  CHECK(c.send("0c") == "01");
}

TEST_CASE("modern handshake: VALIDATE is silent, PING echoes the nonce", "[handler]") {
  KvState kv;
  Conn c{kv, 1, Dialect::kModern, {}, {}};
  CHECK(c.send("00 ce f7 85 3c") == "");
  CHECK(c.send("0d 39 30 00 00") == "39 30 00 00");
  CHECK(c.send("04 0500000000000000 696e69742f 0100000000000000") == i64(1));
}

TEST_CASE("modern replies for every command", "[handler]") {
  KvState kv;
  Conn c{kv, 1, Dialect::kModern, {}, {}};
  CHECK(c.send("01 0200000000000000 2f6b 0100000000000000 76") == "");  // SET
  CHECK(c.send("03 0200000000000000 2f6b") == str("v"));                // GET
  CHECK(c.send("03 0200000000000000 2f6d") == str(""));                 // GET missing
  CHECK(c.send("02 0200000000000000 2f6b 0100000000000000 76 0100000000000000 77") ==
        str("w"));                                                          // COMPARE_SET
  CHECK(c.send("05 0100000000000000 0200000000000000 2f6b") == "00");       // CHECK
  CHECK(c.send("06 0100000000000000 0200000000000000 2f6b") == "00");       // WAIT ready
  CHECK(c.send("07") == i64(1));                                            // GETNUMKEYS
  CHECK(c.send("09 0200000000000000 2f6b 0100000000000000 78") == "");      // APPEND
  CHECK(c.send("0a 0100000000000000 0200000000000000 2f6b") == str("wx"));  // MULTI_GET
  CHECK(c.send("0b 0000000000000000") == "");                               // MULTI_SET none
  CHECK(c.send("0c") == "01");                                              // CANCEL_WAIT
  CHECK(c.send("0e 0200000000000000 2f71 0300000000000000 6a6f62") == "");  // QUEUE_PUSH
  CHECK(c.send("10 0200000000000000 2f71") == i64(1));                      // QUEUE_LEN
  CHECK(c.send("0f 0200000000000000 2f71") == i64(1) + " " + str("job"));   // QUEUE_POP
  CHECK(c.send("0f 0200000000000000 2f71") == i64(0));                      // empty pop
  CHECK(c.send("11") == i64(1) + " " + str("/k"));                          // LIST_KEYS
  CHECK(c.send("08 0200000000000000 2f6b") == i64(1));                      // DELETE_KEY
  CHECK(c.send("11") == i64(0));
  CHECK(c.send("12 0200000000000000 2f62 0100000000000000") == "00");  // BARRIER of 1
}

TEST_CASE("pending WAIT and BARRIER complete through Effects with one 00 each", "[handler]") {
  KvState kv;
  Conn a{kv, 1, Dialect::kModern, {}, {}};
  Conn b{kv, 2, Dialect::kModern, {}, {}};
  CHECK(a.send("06 0100000000000000 0200000000000000 2f6b") == "");
  CHECK(a.last.kind == HandleResult::Kind::kPending);
  CHECK(b.send("01 0200000000000000 2f6b 0100000000000000 76") == "");
  REQUIRE(b.fx.released == std::vector<KvState::ClientId>{1});
  std::string release;
  encode_release(release);
  CHECK(hex(release) == "00");

  b.fx.clear();
  CHECK(a.send("12 0200000000000000 2f62 0200000000000000") == "");
  CHECK(a.last.kind == HandleResult::Kind::kPending);
  CHECK(b.send("12 0200000000000000 2f62 0200000000000000") == "00");
  CHECK(b.last.kind == HandleResult::Kind::kDone);
  CHECK(b.fx.released == std::vector<KvState::ClientId>{1});
}

TEST_CASE("CANCEL_WAIT drops the pending wait and always answers 01", "[handler]") {
  KvState kv;
  Conn a{kv, 1, Dialect::kModern, {}, {}};
  CHECK(a.send("06 0100000000000000 0200000000000000 2f6b") == "");
  CHECK(kv.pending_waits() == 1);
  CHECK(a.send("0c") == "01");
  CHECK(kv.pending_waits() == 0);
  CHECK(a.send("0c") == "01");
  CHECK(a.send("01 0200000000000000 2f6b 0100000000000000 76") == "");
  CHECK(a.fx.released.empty());
}

TEST_CASE("ADD or BARRIER on a non-number closes with a one-line error", "[handler]") {
  KvState kv;
  Conn c{kv, 1, Dialect::kModern, {}, {}};
  CHECK(c.send("01 0200000000000000 2f6b 0300000000000000 616263") == "");
  CHECK(c.send("04 0200000000000000 2f6b 0100000000000000") == "");
  CHECK(c.last.kind == HandleResult::Kind::kClose);
  CHECK(c.last.error == "ADD: the value at key \"/k\" is not a decimal integer: \"abc\"");
  CHECK(c.send("12 0200000000000000 2f6b 0200000000000000") == "");
  CHECK(c.last.kind == HandleResult::Kind::kClose);
  CHECK(c.last.error.rfind("BARRIER: ", 0) == 0);
  CHECK(kv.pending_waits() == 0);
}

TEST_CASE("a hand-built request missing its fields closes instead of crashing", "[handler]") {
  KvState kv;
  KvState::Effects fx;
  std::string reply;
  for (Op op : {Op::kSet, Op::kCompareSet, Op::kGet, Op::kAdd, Op::kQueuePush, Op::kBarrier}) {
    Request r;
    r.op = op;
    const auto res = handle_request(kv, 1, r, reply, fx);
    CHECK(res.kind == HandleResult::Kind::kClose);
  }
  Request ms;
  ms.op = Op::kMultiSet;
  ms.keys = {"a", "b"};
  ms.values = {"1"};
  CHECK(handle_request(kv, 1, ms, reply, fx).kind == HandleResult::Kind::kClose);
  CHECK(reply.empty());
}

TEST_CASE("reply_size: a huge MULTI_GET is known before it is built", "[handler]") {
  KvState kv;
  KvState::Effects fx;
  kv.set("/big", std::string(8 << 20, 'x'), fx);
  Request r;
  r.op = Op::kMultiGet;
  r.keys.assign(131072, "/big");
  CHECK(reply_size(kv, r) == 131072 * (8 + (std::size_t{8} << 20)));  // 1 TiB
  r.keys.assign(3, "/big");
  r.keys.push_back("/missing");
  const std::size_t predicted = reply_size(kv, r);
  CHECK(predicted == 3 * (8 + (8u << 20)) + 8);
  std::string reply;
  CHECK(handle_request(kv, 1, r, reply, fx).kind == HandleResult::Kind::kDone);
  CHECK(reply.size() == predicted);
}

TEST_CASE("reply_size is the size of the reply, for every command", "[handler]") {
  KvState kv;
  KvState::Effects fx;
  kv.set("/v", "12345", fx);
  kv.set("/n", "7", fx);
  kv.queue_push("/q", "abc", fx);
  auto req = [](Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
                std::int64_t number = 0) {
    Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.number = number;
    return r;
  };
  for (Request r : {req(Op::kPing),
                    req(Op::kSet, {"/s"}, {"x"}),
                    req(Op::kGet, {"/v"}),
                    req(Op::kGet, {"/none"}),
                    req(Op::kCompareSet, {"/v"}, {"12345", "ab"}),
                    req(Op::kCompareSet, {"/v"}, {"zz", "abc"}),
                    req(Op::kCompareSet, {"/new"}, {"", "desired"}),
                    req(Op::kCompareSet, {"/new2"}, {"exp", "desired"}),
                    req(Op::kAdd, {"/n"}, {}, 2),
                    req(Op::kCheck, {"/v", "/w"}),
                    req(Op::kWait, {"/v"}),
                    req(Op::kGetNumKeys),
                    req(Op::kDeleteKey, {"/s"}),
                    req(Op::kAppend, {"/v"}, {"tail"}),
                    req(Op::kMultiGet, {"/v", "/none", "/v"}),
                    req(Op::kCancelWait),
                    req(Op::kQueueLen, {"/q"}),
                    req(Op::kQueuePop, {"/q"}),
                    req(Op::kQueuePop, {"/q"}),
                    req(Op::kListKeys),
                    req(Op::kBarrier, {"/b"}, {}, 1)}) {
    INFO(op_name(r.op));
    const std::size_t predicted = reply_size(kv, r);
    std::string reply;
    REQUIRE(handle_request(kv, 1, r, reply, fx).kind == HandleResult::Kind::kDone);
    CHECK(reply.size() == predicted);
  }
}
