// Tests for store/core/kv_state.h: c10d semantics (ADD, COMPARE_SET quirks, WAIT with
// duplicates, cancel and close, watches, queues, BARRIER) and release-exactly-once.
#include "store/core/kv_state.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using ddprun::store::KvState;
using Keys = std::vector<std::string>;
using Clients = std::vector<KvState::ClientId>;
constexpr auto kReady = KvState::WaitResult::kReady;
constexpr auto kPending = KvState::WaitResult::kPending;

std::string value_of(const KvState& kv, std::string_view key) {
  const std::string* v = kv.get(key);
  return v ? *v : "<missing>";
}

// A fresh key space plus the out-parameters every mutation takes.
struct Fresh {
  KvState kv;
  KvState::Effects fx;
  std::string err;
};

Clients sorted(Clients c) {
  std::sort(c.begin(), c.end());
  return c;
}

}  // namespace

TEST_CASE_METHOD(Fresh, "set, get, overwrite, num_keys, list_keys, erase", "[kv_state]") {
  CHECK(kv.get("/a") == nullptr);
  kv.set("/a", "1", fx);
  kv.set("/b", std::string("\0\xff", 2), fx);
  kv.set("/a", "2", fx);
  CHECK(value_of(kv, "/a") == "2");
  CHECK(value_of(kv, "/b") == std::string("\0\xff", 2));
  CHECK(kv.num_keys() == 2);
  auto keys = kv.list_keys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == Keys{"/a", "/b"});
  CHECK(kv.erase("/a", fx));
  CHECK_FALSE(kv.erase("/a", fx));
  CHECK(kv.num_keys() == 1);
  kv.set("", "empty key is a key", fx);
  CHECK(kv.num_keys() == 2);
  CHECK(fx.released.empty());
  CHECK(fx.notifications.empty());
}

TEST_CASE_METHOD(Fresh, "add stores ASCII decimal, missing is 0, junk and overflow are errors",
                 "[kv_state]") {
  CHECK(kv.add("init/", 1, fx, err) == 1);
  CHECK(kv.add("init/", 1, fx, err) == 2);
  CHECK(kv.add("init/", -5, fx, err) == -3);
  CHECK(value_of(kv, "init/") == "-3");
  CHECK(kv.add("init/", 0, fx, err) == -3);

  kv.set("/n", "+7", fx);
  CHECK(kv.add("/n", 1, fx, err) == 8);

  for (const char* junk : {"abc", "", "12abc", " 1", "1 ", "+", "-", "+-1", "1.5"}) {
    INFO(junk);
    kv.set("/j", junk, fx);
    err.clear();
    CHECK_FALSE(kv.add("/j", 1, fx, err).has_value());
    CHECK(err.find("is not a decimal integer") != std::string::npos);
    CHECK(value_of(kv, "/j") == junk);  // unchanged
  }

  kv.set("/big", "9223372036854775807", fx);
  err.clear();
  CHECK_FALSE(kv.add("/big", 1, fx, err).has_value());
  CHECK(err.find("overflows") != std::string::npos);
  CHECK(value_of(kv, "/big") == "9223372036854775807");
  kv.set("/big", "99999999999999999999", fx);
  CHECK_FALSE(kv.add("/big", 0, fx, err).has_value());
  kv.set("/min", "-9223372036854775808", fx);
  CHECK(kv.add("/min", 0, fx, err) == INT64_MIN);
  CHECK_FALSE(kv.add("/min", -1, fx, err).has_value());
}

TEST_CASE_METHOD(Fresh, "add's error line escapes binary keys and values", "[kv_state]") {
  kv.set(std::string("/\n\x01", 3), std::string(200, '\xee'), fx);
  CHECK_FALSE(kv.add(std::string("/\n\x01", 3), 1, fx, err).has_value());
  CHECK(err.find('\n') == std::string::npos);
  CHECK(err.find("\\x0a\\x01") != std::string::npos);
  CHECK(err.size() < 400);
}

TEST_CASE_METHOD(Fresh, "compare_set quirks", "[kv_state]") {
  // Missing key, empty expected: stores desired and returns it.
  CHECK(kv.compare_set("/c", "", "new", fx) == "new");
  CHECK(value_of(kv, "/c") == "new");
  // Missing key, non-empty expected: stores nothing, returns expected (c10d's "lie").
  CHECK(kv.compare_set("/m", "old", "new", fx) == "old");
  CHECK(kv.get("/m") == nullptr);
  // Present, matching: replaced; returns the new current value.
  CHECK(kv.compare_set("/c", "new", "newer", fx) == "newer");
  // Present, not matching: unchanged; returns the current value.
  CHECK(kv.compare_set("/c", "nope", "x", fx) == "newer");
  CHECK(value_of(kv, "/c") == "newer");
  // Present with an empty value matches an empty expected.
  kv.set("/e", "", fx);
  CHECK(kv.compare_set("/e", "", "filled", fx) == "filled");
}

TEST_CASE_METHOD(Fresh, "check: all keys, empty list, queues count when non-empty", "[kv_state]") {
  CHECK(kv.check({}));
  CHECK_FALSE(kv.check({"/a"}));
  kv.set("/a", "1", fx);
  CHECK(kv.check({"/a", "/a"}));
  CHECK_FALSE(kv.check({"/a", "/b"}));
  kv.queue_push("/q", "job", fx);
  CHECK(kv.check({"/a", "/q"}));
  std::string v;
  kv.queue_pop("/q", v);
  CHECK_FALSE(kv.check({"/q"}));
}

TEST_CASE_METHOD(Fresh, "wait: ready now, or released exactly once when the last key appears",
                 "[kv_state]") {
  kv.set("/a", "1", fx);
  CHECK(kv.wait({}, 1) == kReady);
  CHECK(kv.wait({"/a"}, 1) == kReady);
  CHECK(kv.pending_waits() == 0);

  CHECK(kv.wait({"/a", "/b", "/c"}, 1) == kPending);
  CHECK(kv.pending_waits() == 1);
  kv.set("/b", "x", fx);
  CHECK(fx.released.empty());
  kv.set("/b", "again", fx);  // the same key twice does not count twice
  CHECK(fx.released.empty());
  kv.set("/c", "x", fx);
  CHECK(fx.released == Clients{1});
  CHECK(kv.pending_waits() == 0);
  fx.clear();
  kv.set("/c", "y", fx);
  kv.erase("/c", fx);
  kv.set("/c", "z", fx);
  CHECK(fx.released.empty());  // never twice
}

TEST_CASE_METHOD(Fresh, "wait: duplicate keys count twice and one SET satisfies both",
                 "[kv_state]") {
  CHECK(kv.wait({"/x", "/x", "/y"}, 7) == kPending);
  kv.set("/x", "1", fx);
  CHECK(fx.released.empty());
  kv.set("/y", "1", fx);
  CHECK(fx.released == Clients{7});

  fx.clear();
  CHECK(kv.wait({"/d", "/d"}, 8) == kPending);
  kv.set("/d", "1", fx);
  CHECK(fx.released == Clients{8});
}

TEST_CASE_METHOD(Fresh, "every mutation that creates or changes a key wakes, delete does not",
                 "[kv_state]") {
  kv.set("/gone", "1", fx);
  CHECK(kv.wait({"/s"}, 1) == kPending);
  CHECK(kv.wait({"/add"}, 2) == kPending);
  CHECK(kv.wait({"/app"}, 3) == kPending);
  CHECK(kv.wait({"/m1", "/m2"}, 4) == kPending);
  CHECK(kv.wait({"/cas"}, 5) == kPending);
  CHECK(kv.wait({"/nocas"}, 6) == kPending);
  kv.erase("/gone", fx);
  CHECK(kv.wait({"/gone"}, 7) == kPending);
  kv.erase("/gone", fx);

  kv.set("/s", "v", fx);
  kv.add("/add", 3, fx, err);
  kv.append("/app", "tail", fx);
  kv.multi_set({"/m1", "/m2"}, {"1", "2"}, fx);
  kv.compare_set("/cas", "", "v", fx);
  kv.compare_set("/nocas", "expected", "v", fx);  // stores nothing: no wake
  CHECK(sorted(fx.released) == Clients{1, 2, 3, 4, 5});
  CHECK(kv.pending_waits() == 2);
}

TEST_CASE_METHOD(Fresh, "several clients on one key are all released, each once", "[kv_state]") {
  for (KvState::ClientId c = 1; c <= 100; ++c) CHECK(kv.wait({"/k"}, c) == kPending);
  kv.set("/k", "v", fx);
  CHECK(fx.released.size() == 100);
  CHECK(sorted(fx.released).back() == 100);
  CHECK(kv.pending_waits() == 0);
}

TEST_CASE_METHOD(Fresh,
                 "a client with two pending waits (a timed-out 1.13 client) gets two releases",
                 "[kv_state]") {
  CHECK(kv.wait({"/k"}, 1) == kPending);
  CHECK(kv.wait({"/k"}, 1) == kPending);
  kv.set("/k", "v", fx);
  CHECK(fx.released == Clients{1, 1});
}

TEST_CASE_METHOD(Fresh, "cancel_wait drops this client's waits and barriers only", "[kv_state]") {
  CHECK_FALSE(kv.cancel_wait(1));
  CHECK(kv.wait({"/k"}, 1) == kPending);
  CHECK(kv.wait({"/k", "/j"}, 1) == kPending);
  CHECK(kv.barrier("/b", 3, 1, fx, err) == kPending);
  CHECK(kv.wait({"/k"}, 2) == kPending);
  CHECK(kv.pending_waits() == 4);
  CHECK(kv.cancel_wait(1));
  CHECK(kv.pending_waits() == 1);
  CHECK_FALSE(kv.cancel_wait(1));
  kv.set("/k", "v", fx);
  kv.set("/j", "v", fx);
  CHECK(fx.released == Clients{2});
  // The canceled barrier arrival still counted.
  CHECK(value_of(kv, "/b") == "1");
}

TEST_CASE_METHOD(Fresh, "forget drops waits, barrier registrations and watches", "[kv_state]") {
  CHECK(kv.wait({"/k"}, 1) == kPending);
  CHECK(kv.barrier("/b", 2, 1, fx, err) == kPending);
  kv.watch("/k", 1);
  kv.watch("/k", 2);
  kv.forget(1);
  CHECK(kv.pending_waits() == 0);
  fx.clear();
  kv.set("/k", "v", fx);
  CHECK(fx.released.empty());
  REQUIRE(fx.notifications.size() == 1);  // only client 2 still watches
  CHECK(fx.notifications[0].watcher == 2);
  fx.clear();
  CHECK(kv.barrier("/b", 2, 3, fx, err) == kReady);
  CHECK(fx.released.empty());  // client 1 is gone
  kv.forget(42);               // unknown clients are fine
}

TEST_CASE("watch notifications: created, updated, deleted, with old and new values", "[kv_state]") {
  KvState kv;
  KvState::Effects fx;
  std::string err;
  kv.watch("/w", 9);
  kv.watch("/w", 9);  // a second registration does not double the pushes

  auto only = [&]() {
    REQUIRE(fx.notifications.size() == 1);
    auto n = fx.notifications[0];
    fx.clear();
    CHECK(n.watcher == 9);
    CHECK(n.key == "/w");
    return n;
  };
  kv.set("/w", "a", fx);
  auto n = only();
  CHECK(n.kind == KvState::Notification::Kind::kCreated);
  CHECK(n.old_value.empty());
  CHECK(n.new_value == "a");

  kv.set("/w", "b", fx);
  n = only();
  CHECK(n.kind == KvState::Notification::Kind::kUpdated);
  CHECK(n.old_value == "a");
  CHECK(n.new_value == "b");

  kv.append("/w", "c", fx);
  n = only();
  CHECK(n.kind == KvState::Notification::Kind::kUpdated);
  CHECK(n.new_value == "bc");

  kv.compare_set("/w", "bc", "d", fx);
  n = only();
  CHECK(n.old_value == "bc");
  CHECK(n.new_value == "d");
  kv.compare_set("/w", "nomatch", "e", fx);
  CHECK(fx.notifications.empty());

  kv.multi_set({"/x", "/w"}, {"1", "e"}, fx);
  n = only();
  CHECK(n.new_value == "e");

  kv.erase("/w", fx);
  n = only();
  CHECK(n.kind == KvState::Notification::Kind::kDeleted);
  CHECK(n.old_value == "e");
  CHECK(n.new_value.empty());

  kv.add("/w", 4, fx, err);
  n = only();
  CHECK(n.kind == KvState::Notification::Kind::kCreated);
  CHECK(n.new_value == "4");

  kv.set("/other", "z", fx);
  CHECK(fx.notifications.empty());
}

TEST_CASE_METHOD(Fresh, "queues: push, pop, len, push wakes at most one wait", "[kv_state]") {
  std::string v;
  CHECK(kv.queue_len("/q") == 0);
  CHECK(kv.queue_pop("/q", v) == 0);
  CHECK(kv.wait({"/q"}, 1) == kPending);
  CHECK(kv.wait({"/q"}, 2) == kPending);
  CHECK(kv.wait({"/q"}, 3) == kPending);
  kv.queue_push("/q", "j1", fx);
  CHECK(fx.released == Clients{1});  // oldest first
  kv.queue_push("/q", "j2", fx);
  CHECK(fx.released == Clients{1, 2});
  CHECK(kv.queue_len("/q") == 2);
  CHECK(kv.num_keys() == 0);  // queues are not keys
  CHECK(kv.list_keys().empty());
  CHECK(kv.queue_pop("/q", v) == 2);
  CHECK(v == "j1");
  CHECK(kv.queue_pop("/q", v) == 1);
  CHECK(v == "j2");
  CHECK(kv.queue_pop("/q", v) == 0);
  CHECK(kv.pending_waits() == 1);
  kv.queue_push("/q", "j3", fx);
  CHECK(fx.released == Clients{1, 2, 3});
  // A non-empty queue makes WAIT ready at once.
  CHECK(kv.wait({"/q"}, 4) == kReady);
}

TEST_CASE_METHOD(Fresh, "queue push skips waits still missing other keys", "[kv_state]") {
  CHECK(kv.wait({"/q", "/other"}, 1) == kPending);
  CHECK(kv.wait({"/q"}, 2) == kPending);
  kv.queue_push("/q", "j", fx);
  CHECK(fx.released == Clients{2});
  kv.set("/other", "x", fx);
  CHECK(fx.released == Clients{2, 1});
}

TEST_CASE_METHOD(Fresh, "barrier: several clients, released together, each once", "[kv_state]") {
  CHECK(kv.barrier("/b", 4, 1, fx, err) == kPending);
  CHECK(kv.barrier("/b", 4, 2, fx, err) == kPending);
  CHECK(kv.barrier("/b", 4, 3, fx, err) == kPending);
  CHECK(fx.released.empty());
  CHECK(kv.barrier("/b", 4, 4, fx, err) == kReady);
  CHECK(sorted(fx.released) == Clients{1, 2, 3});
  CHECK(value_of(kv, "/b") == "4");
  CHECK(kv.pending_waits() == 0);
  // Late arrivals past the count pass at once.
  fx.clear();
  CHECK(kv.barrier("/b", 4, 5, fx, err) == kReady);
  CHECK(fx.released.empty());
}

TEST_CASE_METHOD(Fresh,
                 "barrier: world size 1 passes at once, sizes <= 0 and bad counters are errors",
                 "[kv_state]") {
  CHECK(kv.barrier("/one", 1, 1, fx, err) == kReady);
  for (std::int64_t size : {std::int64_t{0}, std::int64_t{-3}, INT64_MIN}) {
    err.clear();
    CHECK_FALSE(kv.barrier("/zero", size, 1, fx, err).has_value());
    CHECK(err == "world size " + std::to_string(size) + " is not a positive number");
  }
  CHECK(kv.get("/zero") == nullptr);  // nothing counted
  kv.set("/bad", "x", fx);
  CHECK_FALSE(kv.barrier("/bad", 2, 1, fx, err).has_value());
  CHECK(err.find("not a decimal integer") != std::string::npos);
  CHECK(kv.pending_waits() == 0);
}

TEST_CASE_METHOD(Fresh,
                 "barrier arrivals wake WAITs on the counter key, SET does not release barriers",
                 "[kv_state]") {
  CHECK(kv.wait({"/b"}, 9) == kPending);
  CHECK(kv.barrier("/b", 3, 1, fx, err) == kPending);
  CHECK(fx.released == Clients{9});
  fx.clear();
  kv.set("/b", "1", fx);
  CHECK(fx.released.empty());
  CHECK(kv.barrier("/b", 3, 2, fx, err) == kPending);
  CHECK(kv.barrier("/b", 3, 3, fx, err) == kReady);
  CHECK(sorted(fx.released) == Clients{1, 2});
}

TEST_CASE_METHOD(Fresh, "10,000 clients in one barrier release in one step", "[kv_state][scale]") {
  constexpr KvState::ClientId kN = 10000;
  for (KvState::ClientId c = 1; c < kN; ++c) {
    REQUIRE(kv.barrier("/big", kN, c, fx, err) == kPending);
  }
  CHECK(kv.pending_waits() == kN - 1);
  CHECK(kv.barrier("/big", kN, kN, fx, err) == kReady);
  CHECK(fx.released.size() == kN - 1);
  CHECK(kv.pending_waits() == 0);
  // And 10,000 waiters cancelling one by one stay cheap (per-client index).
  for (KvState::ClientId c = 1; c <= kN; ++c) REQUIRE(kv.wait({"/never"}, c) == kPending);
  for (KvState::ClientId c = 1; c <= kN; ++c) REQUIRE(kv.cancel_wait(c));
  CHECK(kv.pending_waits() == 0);
}

TEST_CASE_METHOD(Fresh, "multi_get gives empty values for missing keys", "[kv_state]") {
  kv.multi_set({"/a", "/b", "/a"}, {"1", "2", "3"}, fx);  // in order: the last /a wins
  CHECK(kv.multi_get({"/a", "/zz", "/b"}) == Keys{"3", "", "2"});
  CHECK(kv.multi_get({}).empty());
}

TEST_CASE_METHOD(Fresh, "clear empties keys, queues, waits and watches", "[kv_state]") {
  kv.set("/a", "1", fx);
  kv.queue_push("/q", "1", fx);
  CHECK(kv.wait({"/w"}, 1) == kPending);
  CHECK(kv.barrier("/b", 5, 2, fx, err) == kPending);
  kv.watch("/a", 3);
  kv.clear();
  CHECK(kv.num_keys() == 0);
  CHECK(kv.queue_len("/q") == 0);
  CHECK(kv.pending_waits() == 0);
  fx.clear();
  kv.set("/w", "1", fx);
  kv.set("/a", "1", fx);
  CHECK(fx.released.empty());
  CHECK(fx.notifications.empty());
  CHECK(kv.barrier("/b", 2, 4, fx, err) == kPending);  // the counter restarted
}
