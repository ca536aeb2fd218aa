// tcp_store_server_test.cpp: TcpStoreServer on loopback with byte-level clients of both
// dialects (raw_client.h) and the TcpStore client: framing, pipelining, waits and their
// cancellation, bad input, limits, reset, many connections at once, and every descriptor
// the server and the client open closed again.
#include "store/tcp_store_server.h"

#include <dlfcn.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "store/core/wire.h"
#include "store/tcp_store_client.h"
#include "tests/support/eventually.h"
#include "tests/support/log_capture.h"
#include "tests/support/raw_client.h"
#include "tests/support/reserved_port.h"

namespace ddprun::store {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::LogCapture;
using testing::encode;
using testing::RawClient;
constexpr Dialect L = Dialect::kLegacy;
constexpr Dialect M = Dialect::kModern;

struct Server {
  explicit Server(ServerOptions opts = {})
      : server([&] {
          opts.host = "127.0.0.1";
          return opts;
        }()) {
    port = server.start();
  }
  TcpStoreServer server;
  std::uint16_t port = 0;
};

TcpStoreOptions client(std::uint16_t port, Store::Duration timeout = 30s) {
  TcpStoreOptions opts;
  opts.host = "127.0.0.1";
  opts.port = port;
  opts.timeout = timeout;
  return opts;
}

std::string hex(std::string_view h) {  // "00 03 0a" -> bytes
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size() + 1; i += 3) {
    out += static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16));
  }
  return out;
}

TEST_CASE("server: PyTorch 1.13's captured bytes, sent one byte at a time", "[server][net]") {
  Server s;
  RawClient c(s.port);
  // SET "/k1" "hello", then WAIT n=1 "/k1", then GET "/k1" (protocol reference A.10).
  c.send_bytewise(
      hex("00 03 00 00 00 00 00 00 00 2f 6b 31 05 00 00 00 00 00 00 00 68 65 6c 6c 6f"));
  c.send_bytewise(hex("05 01 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00 2f 6b 31"));
  CHECK(c.read_u8() == kStopWaiting);
  c.send_bytewise(hex("02 03 00 00 00 00 00 00 00 2f 6b 31"));
  CHECK(c.read_bytes() == "hello");
  // CHECK (4), which 1.13's Python binding does not expose: "/k1" ready, "/zz" not.
  c.send_bytewise(encode(Op::kCheck, L, {"/k1"}) + encode(Op::kCheck, L, {"/k1", "/zz"}));
  CHECK(c.read_u8() == kCheckReady);
  CHECK(c.read_u8() == kCheckNotReady);
  // ADD "init/" 1, as a 1.13 worker's first request.
  c.send_bytewise(hex("03 05 00 00 00 00 00 00 00 69 6e 69 74 2f 01 00 00 00 00 00 00 00"));
  CHECK(c.read_i64() == 1);
}

TEST_CASE("server: modern handshake and requests split one byte at a time", "[server][net]") {
  Server s;
  RawClient c(s.port);
  std::string hello = encode(Op::kValidate, M) + encode(Op::kPing, M, {}, {}, 77);
  c.send_bytewise(hello);
  CHECK(c.read_u32() == 77);
  c.send_bytewise(encode(Op::kSet, M, {"/a"}, {std::string("v\0w", 3)}));
  c.send_bytewise(encode(Op::kWait, M, {"/a"}) + encode(Op::kGet, M, {"/a"}));
  CHECK(c.read_u8() == kStopWaiting);
  CHECK(c.read_bytes() == std::string("v\0w", 3));
}

TEST_CASE("server: a client that sends its requests and its FIN at once is answered and closed",
          "[server][net]") {
  // The FIN arrives with the data: no later edge tells an edge-triggered loop about it.
  Server s;
  RawClient c(s.port);
  c.send(encode(Op::kAdd, L, {"/fin"}, {}, 5) + encode(Op::kAdd, L, {"/fin"}, {}, 2));
  REQUIRE(::shutdown(c.fd(), SHUT_WR) == 0);
  CHECK(c.read_i64() == 5);
  CHECK(c.read_i64() == 7);
  CHECK(c.closed_by_server(5s));
  CHECK(eventually([&] { return s.server.connection_count() == 0; }));
}

TEST_CASE("server: pipelined requests in one write are answered in order", "[server][net]") {
  Server s;
  constexpr int kN = 500;
  for (Dialect d : {L, M}) {
    RawClient c(s.port);
    std::string batch;
    if (d == M) batch += encode(Op::kValidate, M);
    std::string p = d == L ? "legacy/" : "modern/";
    for (int i = 0; i < kN; ++i) {
      batch += encode(Op::kSet, d, {p + std::to_string(i)}, {"v" + std::to_string(i)});
      batch += encode(Op::kAdd, d, {p + "n"}, {}, 2);
      batch += encode(Op::kGet, d, {p + std::to_string(i)});
    }
    batch += encode(Op::kGetNumKeys, d);
    c.send(batch);
    for (int i = 0; i < kN; ++i) {
      REQUIRE(c.read_i64() == 2 * (i + 1));
      REQUIRE(c.read_bytes() == "v" + std::to_string(i));
    }
    CHECK(c.read_i64() == (d == L ? kN + 1 : 2 * (kN + 1)));
  }
}

TEST_CASE("server: replies held back while a client does not read come out complete",
          "[server][net]") {
  Server s;
  RawClient c(s.port);
  std::string big(1 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>('a' + i % 26);
  c.send(encode(Op::kSet, L, {"big"}, {big}));
  constexpr int kGets = 40;  // 40 MiB of replies: far over the server's queue bound
  std::string batch;
  for (int i = 0; i < kGets; ++i) batch += encode(Op::kGet, L, {"big"});
  batch += encode(Op::kGetNumKeys, L);
  std::thread writer([&] { c.send(batch); });
  for (int i = 0; i < kGets; ++i) REQUIRE(c.read_bytes() == big);
  CHECK(c.read_i64() == 1);
  writer.join();
}

TEST_CASE("server: 200 concurrent TcpStore clients doing mixed operations", "[server][net]") {
  Server s;
  constexpr int kClients = 200, kRounds = 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      try {
        TcpStore store(client(s.port, 60s));
        for (int r = 0; r < kRounds; ++r) {
          std::string mine = "k/" + std::to_string(t) + "/" + std::to_string(r);
          store.set(mine, std::to_string(t * 1000 + r));
          store.add("counter", 1);
          store.append("log", "x");
          // Blocks until the neighbour got this far: WAIT then GET across connections.
          int n = (t + 1) % kClients;
          std::string theirs = "k/" + std::to_string(n) + "/" + std::to_string(r);
          if (store.get(theirs) != std::to_string(n * 1000 + r)) ++failures;
          if (!store.check({mine, theirs})) ++failures;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "client %d: %s\n", t, e.what());
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  TcpStore check(client(s.port));
  CHECK(check.add("counter", 0) == kClients * kRounds);
  CHECK(check.get("log") == std::string(kClients * kRounds, 'x'));
  CHECK(check.num_keys() == kClients * kRounds + 2);
}

TEST_CASE("server: a client that disconnects while waiting is dropped", "[server][net]") {
  Server s;
  {
    RawClient waiter(s.port);
    waiter.send(Op::kWait, L, {"x", "y"});
    REQUIRE(eventually([&] { return s.server.pending_waits() == 1; }));
  }
  CHECK(eventually(
      [&] { return s.server.pending_waits() == 0 && s.server.connection_count() == 0; }));
  RawClient setter(s.port);
  setter.send(Op::kSet, L, {"x"}, {"1"});
  setter.send(Op::kSet, L, {"y"}, {"1"});
  RawClient other(s.port);
  other.send(Op::kWait, L, {"x", "y"});
  CHECK(other.read_u8() == kStopWaiting);
  // No stray byte follows: the next reply comes whole (a leftover 00 would shift it).
  other.send(Op::kGetNumKeys, L);
  CHECK(other.read_i64() == 2);
}

TEST_CASE("server: CANCEL_WAIT drops the wait and is always answered 01", "[server][net]") {
  Server s;
  RawClient a(s.port);
  a.handshake();
  RawClient b(s.port);
  b.handshake();

  SECTION("with nothing pending, in both dialects") {
    a.send(Op::kCancelWait, M);
    CHECK(a.read_u8() == kWaitCanceled);
    RawClient legacy(s.port);
    legacy.send(Op::kCancelWait, L);
    CHECK(legacy.read_u8() == kWaitCanceled);
  }
  SECTION("cancel before the release: 01, and no stray 00 later") {
    a.send(Op::kWait, M, {"k"});
    a.send(Op::kCancelWait, M);
    CHECK(a.read_u8() == kWaitCanceled);
    b.send(Op::kSet, M, {"k"}, {"v"});
    b.expect_ping_echo(1);  // the SET has been applied
    a.expect_ping_echo(2);  // the next bytes A sees are its echo, not a 00
    CHECK(s.server.pending_waits() == 0);
  }
  SECTION("release before the cancel: 00 then 01") {
    a.send(Op::kWait, M, {"k"});
    REQUIRE(eventually([&] { return s.server.pending_waits() == 1; }));
    b.send(Op::kSet, M, {"k"}, {"v"});
    b.expect_ping_echo(1);
    a.send(Op::kCancelWait, M);
    CHECK(a.read_u8() == kStopWaiting);
    CHECK(a.read_u8() == kWaitCanceled);
    a.expect_ping_echo(2);
  }
  SECTION("release and cancel crossing: the client protocol always ends in sync") {
    for (int i = 0; i < 100; ++i) {
      std::string key = "race/" + std::to_string(i);
      a.send(Op::kWait, M, {key});
      std::thread setter([&] { b.send(Op::kSet, M, {key}, {"v"}); });
      a.send(Op::kCancelWait, M);
      std::uint8_t first = a.read_u8();
      if (first == kStopWaiting) first = a.read_u8();
      REQUIRE(first == kWaitCanceled);
      setter.join();
      b.expect_ping_echo(static_cast<std::uint32_t>(i));
      a.expect_ping_echo(static_cast<std::uint32_t>(i));
    }
    CHECK(s.server.pending_waits() == 0);
  }
}

TEST_CASE("server: TcpStore's timed wait cancels and leaves the connection usable",
          "[server][net]") {
  Server s;
  TcpStore store(client(s.port));
  CHECK_THROWS_AS(store.wait({"never"}, 50ms), StoreTimeoutError);
  CHECK(s.server.pending_waits() == 0);
  store.set("after", "1");
  CHECK(store.get("after") == "1");
}

TEST_CASE("server: stats() counts requests handled and bytes read and written", "[server][net]") {
  Server s;
  const ServerStats before = s.server.stats();
  CHECK(before.requests == 0);
  CHECK(before.bytes_in == 0);
  RawClient c(s.port);
  std::string sent;
  for (int i = 0; i < 10; ++i) sent += encode(Op::kSet, L, {"k" + std::to_string(i)}, {"v"});
  sent += encode(Op::kGetNumKeys, L);
  c.send(sent);
  CHECK(c.read_i64() == 10);
  const ServerStats after = s.server.stats();
  CHECK(after.requests == 11);  // a SET has no reply, but it is a request
  CHECK(after.bytes_in == sent.size());
  CHECK(after.bytes_out == 8);  // the count, an i64
}

TEST_CASE("server: silent connections are kept open", "[server][net]") {
  Server s;
  std::vector<RawClient> silent;
  for (int i = 0; i < 20; ++i) silent.emplace_back(s.port);
  RawClient busy(s.port);
  for (int i = 0; i < 50; ++i) busy.send(Op::kSet, L, {"k" + std::to_string(i)}, {"v"});
  busy.send(Op::kGetNumKeys, L);
  CHECK(busy.read_i64() == 50);
  // Time itself is what is tested (no idle timeout), so this one waits a fixed time.
  CHECK(silent.front().silent_for(1500ms));
  for (RawClient& c : silent) CHECK(c.silent_for(0ms));
  CHECK(s.server.connection_count() == 21);
  // A connection silent for a while still decides its dialect from its first bytes.
  silent.back().send(Op::kGetNumKeys, L);
  CHECK(silent.back().read_i64() == 50);
  silent.front().handshake();
}

TEST_CASE("server: bad input closes only that connection", "[server][net]") {
  ServerOptions opts;
  opts.limits.max_key_bytes = 16;
  opts.limits.max_value_bytes = 64;
  opts.limits.max_keys_per_request = 4;
  opts.limits.max_request_bytes = 4096;
  Server s(opts);
  RawClient good_legacy(s.port);
  good_legacy.send(Op::kSet, L, {"a"}, {"1"});
  RawClient good_modern(s.port);
  good_modern.handshake();
  good_modern.send(Op::kWait, M, {"later"});  // pending across the bad client's close

  RawClient bad(s.port);
  SECTION("key over the limit") { bad.send(Op::kSet, L, {std::string(17, 'k')}, {"v"}); }
  SECTION("value over the limit") {
    bad.handshake();
    bad.send(Op::kSet, M, {"k"}, {std::string(65, 'v')});
  }
  SECTION("too many keys") { bad.send(Op::kCheck, L, {"a", "b", "c", "d", "e"}); }
  SECTION("unknown legacy command") { bad.send(hex("7f 00 00")); }
  // As a 2.x client with a wrong magic opens (its PING would follow after a reply).
  SECTION("VALIDATE with a wrong magic, nothing after it") { bad.send(hex("00 de ad be ef")); }
  SECTION("garbage after the modern handshake") {
    bad.handshake();
    bad.send(hex("ee ee ee ee"));
  }
  SECTION("declared length of 2^62") { bad.send(hex("02 00 00 00 00 00 00 00 40")); }
  SECTION("ADD on a value that is not a number") {
    bad.send(Op::kSet, L, {"s"}, {"abc"});
    bad.send(Op::kAdd, L, {"s"}, {}, 1);
  }
  SECTION("BARRIER on a counter that is not a number") {
    bad.handshake();
    bad.send(Op::kSet, M, {"s"}, {"abc"});
    bad.send(Op::kBarrier, M, {"s"}, {}, 2);
  }
  SECTION("BARRIER with a world size of 0") {
    bad.handshake();
    bad.send(Op::kBarrier, M, {"z"}, {}, 0);
  }
  CHECK(bad.closed_by_server());
  good_legacy.send(Op::kGet, L, {"a"});
  CHECK(good_legacy.read_bytes() == "1");
  good_legacy.send(Op::kSet, L, {"later"}, {"x"});
  CHECK(good_modern.read_u8() == kStopWaiting);
  good_modern.expect_ping_echo(9);
  RawClient fresh(s.port);
  fresh.send(Op::kGetNumKeys, L);
  CHECK(fresh.read_i64() >= 2);
}

TEST_CASE("server: connections over max_connections are closed at once", "[server][net]") {
  ServerOptions opts;
  opts.max_connections = 3;
  Server s(opts);
  std::vector<RawClient> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back(s.port);
    clients.back().handshake();
  }
  RawClient extra(s.port);
  CHECK(extra.closed_by_server());
  RawClient extra2(s.port);
  CHECK(extra2.closed_by_server());
  clients.pop_back();
  REQUIRE(eventually([&] { return s.server.connection_count() == 2; }));
  RawClient again(s.port);
  again.handshake();
  clients.front().expect_ping_echo(3);
}

// The descriptors this process has open (/proc/self/fd).
std::size_t open_fd_count() {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++n;
  }
  return n;
}

TEST_CASE("server and client: every descriptor they open is closed again", "[server][net]") {
  {  // what a first server and client open once per process is open before counting
    Server warm;
    TcpStore c(client(warm.port));
    c.set("k", "v");
  }
  const test::ReservedPort closed;  // bound, never listening
  const std::size_t before = open_fd_count();
  {
    ServerOptions opts;
    opts.max_connections = 2;
    Server s(opts);  // listening, epoll and wake descriptors
    TcpStore a(client(s.port));
    a.set("k", "v");
    {
      RawClient bad(s.port);  // its session closes itself on bad input
      bad.send(hex("7f 00 00"));
      REQUIRE(bad.closed_by_server());
    }
    RawClient b(s.port);
    b.handshake();
    {
      RawClient over(s.port);  // refused over max_connections: closed at once
      CHECK(over.closed_by_server());
    }
    TcpStoreOptions refused = client(closed.number());
    refused.connect_timeout = 300ms;
    CHECK_THROWS_AS(TcpStore(refused), StoreRefusedError);  // each try's socket
    s.server.stop();                                        // the listener, b's session
    CHECK_THROWS_AS(a.num_keys(), StoreConnectionError);    // a gives its socket up
  }
  std::size_t after = 0;
  const bool balanced = eventually(
      [&] {
        after = open_fd_count();
        return after == before;
      },
      5s);
  INFO("open descriptors before: " << before << ", after: " << after);
  CHECK(balanced);
}

TEST_CASE("server: reset() closes every connection and empties the key space", "[server][net]") {
  Server s;
  RawClient a(s.port);
  a.send(Op::kSet, L, {"k"}, {"v"});
  a.send(Op::kAdd, L, {"n"}, {}, 5);
  CHECK(a.read_i64() == 5);
  RawClient waiter(s.port);
  waiter.handshake();
  waiter.send(Op::kQueuePush, M, {"q"}, {"item"});
  waiter.send(Op::kWait, M, {"never"});
  REQUIRE(eventually([&] { return s.server.pending_waits() == 1; }));
  s.server.reset();
  CHECK(a.closed_by_server());
  CHECK(waiter.closed_by_server());
  CHECK(s.server.pending_waits() == 0);
  RawClient fresh(s.port);
  fresh.handshake();
  fresh.send(Op::kGetNumKeys, M);
  CHECK(fresh.read_i64() == 0);
  fresh.send(Op::kQueueLen, M, {"q"});
  CHECK(fresh.read_i64() == 0);
}

TEST_CASE("server: both dialects share one key space on one port", "[server][net]") {
  Server s;
  RawClient legacy(s.port);
  RawClient modern(s.port);
  modern.handshake();
  legacy.send(Op::kSet, L, {"/k"}, {"from-1.13"});
  modern.send(encode(Op::kWait, M, {"/k"}) + encode(Op::kGet, M, {"/k"}));
  CHECK(modern.read_u8() == kStopWaiting);
  CHECK(modern.read_bytes() == "from-1.13");
  modern.send(Op::kWait, M, {"/m"});
  legacy.send(Op::kWait, L, {"/l"});
  REQUIRE(eventually([&] { return s.server.pending_waits() == 2; }));
  legacy.send(Op::kSet, L, {"/m"}, {"1"});
  modern.send(Op::kSet, M, {"/l"}, {"2"});
  CHECK(modern.read_u8() == kStopWaiting);
  CHECK(legacy.read_u8() == kStopWaiting);
  legacy.send(Op::kGetNumKeys, L);
  CHECK(legacy.read_i64() == 3);
}

TEST_CASE("server: modern queues, LIST_KEYS and BARRIER as PyTorch 2.x uses them",
          "[server][net]") {
  Server s;
  RawClient a(s.port), b(s.port);
  a.handshake();
  b.handshake();
  // Blocking pop = WAIT(key) then QUEUE_POP.
  a.send(Op::kWait, M, {"/q"});
  REQUIRE(eventually([&] { return s.server.pending_waits() == 1; }));
  b.send(Op::kQueuePush, M, {"/q"}, {"one"});
  b.send(Op::kQueuePush, M, {"/q"}, {"two"});
  CHECK(a.read_u8() == kStopWaiting);
  a.send(Op::kQueuePop, M, {"/q"});
  CHECK(a.read_i64() == 2);
  CHECK(a.read_bytes() == "one");
  a.send(Op::kQueueLen, M, {"/q"});
  CHECK(a.read_i64() == 1);
  b.send(Op::kSet, M, {"/x"}, {"1"});
  b.send(Op::kListKeys, M);
  CHECK(b.read_i64() == 1);
  CHECK(b.read_bytes() == "/x");
  // BARRIER of 2: the first waits, the second releases both.
  a.send(Op::kBarrier, M, {"/bar"}, {}, 2);
  REQUIRE(eventually([&] { return s.server.pending_waits() == 1; }));
  CHECK(a.silent_for(0ms));  // waiting, not answered
  b.send(Op::kBarrier, M, {"/bar"}, {}, 2);
  CHECK(b.read_u8() == kStopWaiting);
  CHECK(a.read_u8() == kStopWaiting);
}

TEST_CASE("server: legacy WATCH_KEY registration and notification", "[server][net]") {
  Server s;
  RawClient watcher(s.port), writer(s.port);
  watcher.send(Op::kWatchKey, L, {"/w"});
  CHECK(watcher.read_u8() == kWatchCallbackRegistered);
  writer.send(Op::kSet, L, {"/w"}, {"new"});
  std::uint8_t type = watcher.read_u8();
  CHECK((type == kWatchKeyCreated || type == kWatchKeyUpdated));
  CHECK(watcher.read_bytes() == "/w");
  CHECK(watcher.read_bytes().empty());
  CHECK(watcher.read_bytes() == "new");
}

TEST_CASE("server: a watcher that never reads its notifications is closed, not buffered",
          "[server][net]") {
  Server s;
  RawClient watcher(s.port), writer(s.port);
  watcher.send(Op::kWatchKey, L, {"/w"});
  CHECK(watcher.read_u8() == kWatchCallbackRegistered);
  std::string value(8 * 1024 * 1024, 'v');  // each notification carries old and new value
  for (int i = 0; i < 8; ++i) writer.send(Op::kSet, L, {"/w"}, {value});
  writer.send(Op::kGetNumKeys, L);
  CHECK(writer.read_i64() == 1);
  CHECK(eventually([&] { return s.server.connection_count() == 1; }));
}

TEST_CASE("server: a 1000-client ADD-then-WAIT barrier releases everyone", "[server][net]") {
  std::size_t limit = testing::raise_fd_limit();
  std::size_t n = std::min<std::size_t>(1000, (limit - 64) / 2);
  if (n < 1000) WARN("open-files limit " << limit << ": barrier of " << n << " clients only");
  Server s;
  std::vector<RawClient> clients;
  clients.reserve(n);
  for (std::size_t i = 0; i < n; ++i) clients.emplace_back(s.port);
  // As a 1.13 store-based barrier: ADD the counter, then WAIT for the last one's key.
  for (RawClient& c : clients) {
    c.send(encode(Op::kAdd, L, {"count"}, {}, 1) + encode(Op::kWait, L, {"done"}));
  }
  std::size_t last = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (clients[i].read_i64() == static_cast<std::int64_t>(n)) last = i;
  }
  REQUIRE(last < n);
  REQUIRE(eventually([&] { return s.server.pending_waits() == n; }));
  auto start = std::chrono::steady_clock::now();
  clients[last].send(Op::kSet, L, {"done"}, {"1"});
  for (RawClient& c : clients) REQUIRE(c.read_u8() == kStopWaiting);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start);
  std::printf("ADD-then-WAIT barrier of %zu clients released in %.1f ms\n", n, ms.count());
  CHECK(s.server.pending_waits() == 0);
}

TEST_CASE("server: a 1000-client modern BARRIER releases everyone", "[server][net]") {
  std::size_t limit = testing::raise_fd_limit();
  std::size_t n = std::min<std::size_t>(1000, (limit - 64) / 2);
  Server s;
  std::vector<RawClient> clients;
  clients.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    clients.emplace_back(s.port);
    clients.back().handshake();
  }
  for (std::size_t i = 0; i + 1 < n; ++i) {
    clients[i].send(Op::kBarrier, M, {"b"}, {}, static_cast<std::int64_t>(n));
  }
  REQUIRE(eventually([&] { return s.server.pending_waits() == n - 1; }));
  auto start = std::chrono::steady_clock::now();
  clients.back().send(Op::kBarrier, M, {"b"}, {}, static_cast<std::int64_t>(n));
  for (RawClient& c : clients) REQUIRE(c.read_u8() == kStopWaiting);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start);
  std::printf("BARRIER of %zu clients released in %.1f ms\n", n, ms.count());
}

TEST_CASE("server: accept failing on the open-files limit recovers once fds are free",
          "[server][net]") {
  // UBSan's vptr check opens a pipe whenever its type cache misses; with no fd left it
  // reports a false "invalid vptr" from whatever the server logs. Only then skip.
  if (::dlsym(RTLD_DEFAULT, "__ubsan_handle_dynamic_type_cache_miss") != nullptr) {
    WARN("skipped: UBSan's vptr check needs free fds (it opens a pipe on a cache miss)");
    return;
  }
  LogCapture log;
  Server s;
  RawClient first(s.port);
  first.handshake();
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  std::size_t open_fds = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++open_fds;
  }
  // Leave room for a few client sockets only; the server (same process) then gets
  // EMFILE from accept() while the connections wait in the listen backlog.
  rlimit tight = saved;
  tight.rlim_cur = open_fds + 3;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  std::vector<RawClient> clients;
  try {
    for (int i = 0; i < 8; ++i) clients.emplace_back(s.port);
  } catch (const std::runtime_error&) {
    // socket() itself hit the limit: the server's accept() certainly does too.
  }
  std::size_t connected = clients.size();
  // The server's accept() fails (and says so) while the limit holds.
  CHECK(eventually([&] { return log.has("cannot accept connections"); }));
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  REQUIRE(connected > 0);
  for (RawClient& c : clients) c.handshake();
  first.expect_ping_echo(5);
  CHECK(s.server.connection_count() == 1 + connected);
}

TEST_CASE("server: start() names host:port and the reason when binding fails", "[server][net]") {
  Server first;
  ServerOptions opts;
  opts.host = "127.0.0.1";
  opts.port = first.port;
  TcpStoreServer second(opts);
  try {
    second.start();
    FAIL("second server bound a port in use");
  } catch (const StoreAddressInUseError& e) {  // typed: the c10d agent joins as a client
    std::string msg = e.what();
    CHECK(msg.find("127.0.0.1:" + std::to_string(first.port)) != std::string::npos);
    CHECK(msg.find("in use") != std::string::npos);
  }
  second.stop();
  second.stop();  // idempotent
  first.server.stop();
  first.server.stop();
  CHECK(first.server.connection_count() == 0);
}

TEST_CASE("server: connections closed for bad input are logged at a bounded rate and summed up",
          "[server][net]") {
  LogCapture log;
  Server s;
  constexpr int kBad = 60;
  for (int i = 0; i < kBad; ++i) {
    RawClient bad(s.port);
    bad.send(hex("7f 00 00"));
    REQUIRE(bad.closed_by_server());
  }
  // Each closed connection is either a line of its own or counted in a summary line,
  // which comes when the rate window ends (within seconds).
  const std::regex summary("closed ([0-9]+) more connections for bad input");
  std::size_t one_by_one = 0, summed = 0;
  CHECK(eventually([&] {
    one_by_one = summed = 0;
    for (const std::string& line : log.lines()) {
      std::smatch m;
      if (line.find("closing connection from 127.0.0.1:") != std::string::npos) ++one_by_one;
      if (std::regex_search(line, m, summary)) summed += std::stoul(m[1]);
    }
    return one_by_one + summed == kBad;
  }));
  INFO(one_by_one << " logged one by one, " << summed << " in summaries");
  CHECK(one_by_one < kBad / 2);
  CHECK(summed > 0);
}

std::size_t rss_bytes() {  // this process's resident memory (the server runs in it)
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

// Issue 14: one large value, then connections that each send one small MULTI_GET naming
// it many times and never read. The server must neither build and hold every reply
// (gigabytes) nor stall other clients while it builds them. Sized so that a server
// without an output budget holds about 720 MiB here, not more.
TEST_CASE("server: unread MULTI_GETs of a large value stay within the output budget",
          "[server][net][hostile]") {
  Server s;  // the default caps, as ddprun-store serve and the agent's stores use them
  constexpr std::size_t kValue = std::size_t{4} << 20, kCopies = 15, kAttackers = 12;
  constexpr std::size_t kReply = kCopies * (8 + kValue);  // 60 MiB: under the reply cap
  const std::string value(kValue, 'x');
  {
    RawClient setter(s.port);
    setter.handshake();
    setter.send(Op::kSet, M, {"/big"}, {value});
    setter.expect_ping_echo(1);
  }
  const std::size_t rss_before = rss_bytes();

  // A probe keeps setting and getting throughout; its slowest operation is kept.
  std::atomic<bool> stop{false};
  std::atomic<long long> worst_us{0};
  std::atomic<int> probe_ops{0}, probe_errors{0};
  std::thread probe([&] {
    try {
      TcpStore store(client(s.port));
      for (int i = 0; !stop; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        store.set("probe", std::to_string(i));
        if (store.get("probe") != std::to_string(i)) ++probe_errors;
        const long long us = std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::steady_clock::now() - t0)
                                 .count();
        if (us > worst_us) worst_us = us;
        ++probe_ops;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "probe: %s\n", e.what());
      ++probe_errors;
    }
  });
  REQUIRE(eventually([&] { return probe_ops > 0; }));

  std::deque<RawClient> attackers;
  for (std::size_t i = 0; i < kAttackers; ++i) {
    attackers.emplace_back(s.port).handshake();
    attackers.back().send(Op::kMultiGet, M, std::vector<std::string>(kCopies, "/big"));
  }
  auto replies_started = [&] {
    std::size_t n = 0;
    for (RawClient& a : attackers) {
      pollfd p{a.fd(), POLLIN, 0};
      if (::poll(&p, 1, 0) == 1) ++n;
    }
    return n;
  };
  // Every reply starts (a server that builds them whole has built them all by then).
  CHECK(eventually([&] { return replies_started() == kAttackers; }));
  const std::size_t started = replies_started();
  const std::size_t rss_during = rss_bytes();
  const int ops_during = probe_ops;
  INFO("replies started: " << started << " of " << kAttackers << "; memory growth "
                           << (rss_during - rss_before) / (1 << 20) << " MiB");
  CHECK(rss_during < rss_before + (std::size_t{400} << 20));

  // Only the last attacker stays, and reads: its reply comes, complete.
  while (attackers.size() > 1) attackers.pop_front();
  std::string expected;
  expected.reserve(kReply);
  for (std::size_t i = 0; i < kCopies; ++i) Encoder(expected).bytes(value);
  const std::optional<std::string> got = attackers.back().read_exact(kReply, 60s);
  REQUIRE(got.has_value());
  CHECK(*got == expected);
  attackers.clear();
  CHECK(eventually([&] { return s.server.unsent_output_bytes() == 0; }));

  REQUIRE(eventually([&] { return probe_ops > ops_during + 3; }));
  stop = true;
  probe.join();
  CHECK(probe_errors == 0);
  // Generous for a loaded 2-core ASan machine; without the budget the probe stalls for
  // as long as replies are being built. The real numbers are in docs/benchmarks.md.
  CHECK(worst_us < 2'000'000);
  std::printf(
      "unread MULTI_GET attack: %zu of %zu replies started, +%zu MiB, %d probe ops, "
      "slowest %.1f ms\n",
      started, kAttackers, (rss_during - rss_before) >> 20, probe_ops.load(),
      static_cast<double>(worst_us) / 1000.0);
}

TEST_CASE("server: a request whose reply would pass the reply cap closes its connection",
          "[server][net][hostile]") {
  LogCapture log;
  Server s;
  RawClient c(s.port);
  c.handshake();
  c.send(Op::kSet, M, {"/v"}, {std::string(std::size_t{4} << 20, 'v')});
  c.send(Op::kMultiGet, M, std::vector<std::string>(17, "/v"));  // 68 MiB: over 64 MiB
  CHECK(c.closed_by_server());
  const std::string line =
      "MULTI_GET: reply of 71303304 bytes exceeds the limit of 67108864 bytes "
      "(--max-reply-bytes)";
  CHECK(eventually([&] { return log.has(line); }));
  RawClient other(s.port);
  other.handshake();
  other.send(Op::kMultiGet, M, std::vector<std::string>(15, "/v"));  // 60 MiB: served
  CHECK(other.read_exact(15 * (8 + (std::size_t{4} << 20)), 60s).has_value());
}

TEST_CASE("server: replies over --max-output-bytes wait until written replies make room",
          "[server][net][hostile]") {
  ServerOptions opts;
  opts.max_output_bytes = std::size_t{4} << 20;
  Server s(opts);
  constexpr std::size_t kValue = std::size_t{1} << 20, kCopies = 15, kAttackers = 8;
  {
    RawClient setter(s.port);
    setter.handshake();
    setter.send(Op::kSet, M, {"/v"}, {std::string(kValue, 'v')});
    setter.expect_ping_echo(1);
  }
  std::deque<RawClient> attackers;
  for (std::size_t i = 0; i < kAttackers; ++i) {
    attackers.emplace_back(s.port).handshake();
    attackers.back().send(Op::kMultiGet, M, std::vector<std::string>(kCopies, "/v"));
  }
  // Once the kernel's socket buffers are full, every unread reply holds a piece in the
  // server: the pieces stop at the budget (plus the one piece that crossed it) and the
  // remaining replies wait without starting.
  std::size_t most = 0;
  auto sample = [&] {
    most = std::max(most, s.server.unsent_output_bytes());
    return most >= opts.max_output_bytes;
  };
  eventually(sample);             // the pieces reach the budget (checked below) ...
  for (int i = 0; i < 40; ++i) {  // ... and stay within it
    sample();
    std::this_thread::sleep_for(25ms);
  }
  CHECK(most >= opts.max_output_bytes);
  CHECK(most <= opts.max_output_bytes + kValue);
  std::size_t started = 0;
  for (RawClient& a : attackers) {
    pollfd p{a.fd(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) ++started;
  }
  CHECK(started < kAttackers);
  // A small request of a client that reads its replies is served meanwhile.
  RawClient probe(s.port);
  probe.handshake();
  probe.send(Op::kGetNumKeys, M);
  CHECK(probe.read_i64() == 1);
  // The others go away; the last one's reply then comes, whole.
  while (attackers.size() > 1) attackers.pop_front();
  const auto got = attackers.back().read_exact(kCopies * (8 + kValue), 60s);
  REQUIRE(got.has_value());
  std::string expected;
  for (std::size_t i = 0; i < kCopies; ++i) Encoder(expected).bytes(std::string(kValue, 'v'));
  CHECK(*got == expected);
  attackers.clear();
  CHECK(eventually([&] { return s.server.unsent_output_bytes() == 0; }));
}

}  // namespace
}  // namespace ddprun::store
