// store_contract_test.cpp: one contract suite run over every Store implementation:
// MemoryStore, TcpStore against a real TcpStoreServer on loopback, and PrefixStore over
// each. Identical semantics behind one interface is the point (see store.h).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "store/memory_store.h"
#include "store/prefix_store.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"

namespace ddprun::store {
namespace {

using namespace std::chrono_literals;

// Every fixture hands out clients of one fresh, empty store; two clients may be used
// from two threads.
struct MemoryFixture {
  std::shared_ptr<MemoryStore> mem = std::make_shared<MemoryStore>(30s);
  std::shared_ptr<Store> client() { return mem; }
};

struct TcpFixture {
  static ServerOptions loopback() {
    ServerOptions opts;
    opts.host = "127.0.0.1";
    return opts;
  }
  TcpStoreServer server{loopback()};
  std::uint16_t port = server.start();
  std::shared_ptr<Store> client() {
    TcpStoreOptions opts;
    opts.host = "127.0.0.1";
    opts.port = port;
    opts.timeout = 30s;
    return std::make_shared<TcpStore>(opts);
  }
};

template <class Inner>
struct PrefixFixture {
  Inner inner;
  std::shared_ptr<Store> client() { return std::make_shared<PrefixStore>("pre", inner.client()); }
};
using PrefixMemoryFixture = PrefixFixture<MemoryFixture>;
using PrefixTcpFixture = PrefixFixture<TcpFixture>;

bool mentions(const std::exception& e, const std::string& what) {
  return std::string(e.what()).find(what) != std::string::npos;
}

#define STORE_TYPES MemoryFixture, TcpFixture, PrefixMemoryFixture, PrefixTcpFixture

TEMPLATE_TEST_CASE("contract: set, get, overwrite, binary values", "[store][contract]",
                   STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  s->set("a", "1");
  CHECK(s->get("a") == "1");
  s->set("a", "2");
  CHECK(s->get("a") == "2");
  std::string binary("\0\xff\x01zz", 5);
  s->set("bin", binary);
  CHECK(s->get("bin") == binary);
  s->set("empty", "");
  CHECK(s->get("empty").empty());
  CHECK(s->check({"empty"}));
  std::string big(1 << 20, 'b');
  s->set("big", big);
  CHECK(s->get("big") == big);
}

TEMPLATE_TEST_CASE("contract: get blocks until another client sets the key", "[store][contract]",
                   STORE_TYPES) {
  TestType fx;
  auto getter = fx.client();
  auto setter = fx.client();
  std::string got;
  std::thread t([&] { got = getter->get("later"); });
  setter->set("later", "value");
  t.join();
  CHECK(got == "value");
}

TEMPLATE_TEST_CASE("contract: timeouts throw StoreTimeoutError naming the keys",
                   "[store][contract]", STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  try {
    s->wait({"w1", "w2"}, 100ms);
    FAIL("wait returned");
  } catch (const StoreTimeoutError& e) {
    CHECK(mentions(e, "w1"));
    CHECK(mentions(e, "w2"));
  }
  s->set_timeout(100ms);
  CHECK(s->timeout() == 100ms);
  try {
    s->get("missing");
    FAIL("get returned");
  } catch (const StoreTimeoutError& e) {
    CHECK(mentions(e, "missing"));
  }
  CHECK_THROWS_AS(s->multi_get({"m"}), StoreTimeoutError);
  CHECK_THROWS_AS(s->queue_pop("q"), StoreTimeoutError);
  try {
    s->barrier("lonely", 2);
    FAIL("barrier returned");
  } catch (const StoreTimeoutError& e) {
    CHECK(mentions(e, "lonely"));
  }
  // Still usable after every timeout (TcpStore: the CANCEL_WAIT protocol kept it in sync).
  s->set_timeout(30s);
  s->set("k", "v");
  CHECK(s->get("k") == "v");
  s->wait({"k"});
  s->wait({});
}

TEMPLATE_TEST_CASE("contract: wait_for answers a timeout with false, not an exception",
                   "[store][contract]", STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  auto setter = fx.client();
  CHECK_FALSE(s->wait_for({"a", "b"}, 50ms));
  s->set("a", "1");
  CHECK_FALSE(s->wait_for({"a", "b"}, 50ms));  // every key must exist
  CHECK(s->wait_for({"a"}, 50ms));
  CHECK(s->wait_for({}, 50ms));
  // A key set by another client while waiting ends the wait with true.
  std::thread t([&] { setter->set("b", "2"); });
  CHECK(s->wait_for({"a", "b"}, 30s));
  t.join();
  // Still usable after the timeouts (TcpStore: CANCEL_WAIT kept it in sync), and wait()
  // still throws on one.
  s->set("k", "v");
  CHECK(s->get("k") == "v");
  CHECK_THROWS_AS(s->wait({"never"}, 50ms), StoreTimeoutError);
  CHECK(s->get("k") == "v");
}

TEMPLATE_TEST_CASE("contract: compare_set quirks", "[store][contract]", STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  // Missing key, non-empty expected: nothing stored, `expected` returned.
  CHECK(s->compare_set("c", "old", "new") == "old");
  CHECK_FALSE(s->check({"c"}));
  // Missing key, empty expected: stored.
  CHECK(s->compare_set("c", "", "first") == "first");
  CHECK(s->get("c") == "first");
  // Present, mismatch: unchanged, current value returned.
  CHECK(s->compare_set("c", "nope", "x") == "first");
  CHECK(s->get("c") == "first");
  // Present, match: replaced.
  CHECK(s->compare_set("c", "first", "second") == "second");
  CHECK(s->get("c") == "second");
  // Creating a key wakes a waiter.
  auto waiter = fx.client();
  std::string got;
  std::thread t([&] { got = waiter->get("cs_new"); });
  s->compare_set("cs_new", "", "v");
  t.join();
  CHECK(got == "v");
}

TEMPLATE_TEST_CASE("contract: add stores ASCII decimal", "[store][contract]", STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  CHECK(s->add("n", 5) == 5);
  CHECK(s->get("n") == "5");
  CHECK(s->add("n", -7) == -2);
  CHECK(s->get("n") == "-2");
  CHECK(s->add("n", 0) == -2);
  s->set("m", "41");
  CHECK(s->add("m", 1) == 42);
  auto bad = fx.client();
  bad->set("s", "abc");
  // In-process stores say StoreProtocolError; a TcpStore's server refuses by closing the
  // connection, which its client reports as StoreConnectionError. Both say why.
  try {
    bad->add("s", 1);
    FAIL("add on a non-integer value returned");
  } catch (const StoreError& e) {
    CHECK(mentions(e, "not a decimal integer"));
  }
  CHECK(fx.client()->get("s") == "abc");
  // Waiters on a counter are woken by add.
  auto waiter = fx.client();
  std::thread t([&] { waiter->wait({"counter"}); });
  s->add("counter", 1);
  t.join();
}

TEMPLATE_TEST_CASE("contract: check, num_keys, delete_key", "[store][contract]", STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  CHECK(s->check({}));
  CHECK_FALSE(s->check({"x"}));
  CHECK(s->num_keys() == 0);
  s->set("x", "1");
  s->set("y", "2");
  CHECK(s->check({"x", "y"}));
  CHECK_FALSE(s->check({"x", "z"}));
  CHECK(s->num_keys() == 2);
  CHECK(s->delete_key("x"));
  CHECK_FALSE(s->delete_key("x"));
  CHECK_FALSE(s->check({"x"}));
  CHECK(s->num_keys() == 1);
  CHECK_THROWS_AS(s->wait({"x"}, 50ms), StoreTimeoutError);
}

TEMPLATE_TEST_CASE("contract: append, multi_set, multi_get, list_keys", "[store][contract]",
                   STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  s->append("log", "a");
  s->append("log", "bc");
  CHECK(s->get("log") == "abc");
  s->multi_set({"m1", "m2"}, {"v1", "v2"});
  CHECK(s->multi_get({"m2", "m1", "log"}) == std::vector<std::string>{"v2", "v1", "abc"});
  CHECK_THROWS_AS(s->multi_set({"a"}, {}), std::invalid_argument);
  auto keys = s->list_keys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"log", "m1", "m2"});
  // multi_get blocks until every key exists.
  auto getter = fx.client();
  std::vector<std::string> got;
  std::thread t([&] { got = getter->multi_get({"late1", "late2"}); });
  s->set("late1", "x");
  s->multi_set({"late2"}, {"y"});
  t.join();
  CHECK(got == std::vector<std::string>{"x", "y"});
}

TEMPLATE_TEST_CASE("contract: queues", "[store][contract]", STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  CHECK(s->queue_len("q") == 0);
  CHECK_FALSE(s->queue_try_pop("q"));
  s->queue_push("q", "one");
  s->queue_push("q", "two");
  CHECK(s->queue_len("q") == 2);
  CHECK(s->num_keys() == 0);  // queues are not keys
  CHECK(s->queue_pop("q") == "one");
  CHECK(s->queue_try_pop("q") == std::optional<std::string>("two"));
  auto popper = fx.client();
  std::string got;
  std::thread t([&] { got = popper->queue_pop("q"); });
  s->queue_push("q", "three");
  t.join();
  CHECK(got == "three");
  CHECK(s->queue_len("q") == 0);
}

TEMPLATE_TEST_CASE("contract: barrier releases every participant", "[store][contract]",
                   STORE_TYPES) {
  TestType fx;
  constexpr int kN = 4;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kN; ++i) clients.push_back(fx.client());
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i) {
    threads.emplace_back([&, i] {
      clients[i]->barrier("bar", kN);
      ++done;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(done == kN);
  CHECK(clients[0]->get("bar") == std::to_string(kN));
}

TEMPLATE_TEST_CASE("contract: one client shared by threads", "[store][contract]", STORE_TYPES) {
  TestType fx;
  auto s = fx.client();
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 50; ++j) {
        s->add("shared", 1);
        s->set("t" + std::to_string(i), std::to_string(j));
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(s->add("shared", 0) == 400);
  CHECK(s->get("t3") == "49");
}

TEST_CASE("PrefixStore maps keys to prefix/key and list_keys strips it", "[store]") {
  auto mem = std::make_shared<MemoryStore>(1s);
  PrefixStore p("job", mem);
  p.set("a", "1");
  mem->set("other/b", "2");
  CHECK(mem->get("job/a") == "1");
  CHECK(p.list_keys() == std::vector<std::string>{"a"});
  try {
    p.wait({"x"}, 10ms);
    FAIL("wait returned");
  } catch (const StoreTimeoutError& e) {
    CHECK(mentions(e, "job/x"));
  }
  p.set_timeout(5s);
  CHECK(mem->timeout() == 5s);
  CHECK_THROWS_AS(PrefixStore("x", nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace ddprun::store
