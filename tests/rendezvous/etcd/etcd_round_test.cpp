// Table tests of etcd_round.h: the round state's and the members list's JSON, the key
// helpers, and the join decision next_join_step() (one look at the run's keys -> what a
// joining node does).
#include "rendezvous/etcd/etcd_round.h"

#include <algorithm>
#include <catch2/catch.hpp>

using namespace ddprun::rdzv;
using namespace std::chrono_literals;

TEST_CASE("etcd round state codec", "[etcd]") {
  EtcdRoundState s{3, true, {"a1", "b2"}};
  auto back = decode_round_state(encode_round_state(s));
  REQUIRE(back);
  CHECK(back->round == 3);
  CHECK(back->final);
  CHECK(back->members == s.members);
  CHECK_FALSE(decode_round_state("{}"));
  CHECK_FALSE(decode_round_state("[1]"));
  CHECK_FALSE(decode_round_state(R"({"round":1,"status":"odd","members":[]})"));
  CHECK_FALSE(decode_round_state(R"({"round":-1,"status":"final","members":[]})"));
  CHECK_FALSE(decode_round_state(R"({"round":1,"status":"final","members":[3]})"));
}

TEST_CASE("etcd keys: layout, lease ids, leaves", "[etcd_round]") {
  const EtcdKeys k{"/ddprun/rdzv/job/"};
  CHECK(k.key("state") == "/ddprun/rdzv/job/state");
  CHECK(k.rkey(3, "join/1a") == "/ddprun/rdzv/job/r3/join/1a");
  CHECK(lease_hex(0x694d8a1c2b3e4f5) == "694d8a1c2b3e4f5");
  CHECK(key_leaf(k.key("node/1a2b")) == "1a2b");
  CHECK(key_leaf("plain") == "plain");
}

namespace {

using Clock = JoinView::Clock;
using K = JoinStep::Kind;
using S = EtcdRoundState;

struct Row {
  std::string what;
  std::optional<S> state;
  std::vector<std::string> live, joins;
  int left_round = -1;
  int quiet_ms = 0;  // since the newest join key appeared
  K want;
  std::optional<S> next = std::nullopt;
  int until_ms = -1;  // kWait: the last call's end from now (-1: none)
};

}  // namespace

TEST_CASE("next_join_step: what a joining node does after one look", "[etcd_round]") {
  // MIN 2, MAX 3, last call 1000 ms; this node is "me".
  const std::vector<Row> rows{
      {"no state key", std::nullopt, {}, {}, -1, 0, K::kCreateState, S{0, false, {}}},
      {"joining, not joined", S{0, false, {}}, {}, {"a"}, -1, 0, K::kAddJoin},
      {"alone: under MIN", S{0, false, {}}, {}, {"me"}, -1, 5000, K::kWait},
      {"MIN in, last call running",
       S{0, false, {}},
       {},
       {"me", "a"},
       -1,
       400,
       K::kWait,
       std::nullopt,
       600},
      {"MIN in, last call over",
       S{0, false, {}},
       {},
       {"me", "a"},
       -1,
       1000,
       K::kClose,
       S{0, true, {"me", "a"}}},
      {"MIN in, not the oldest joiner: the oldest decides",
       S{0, false, {}},
       {},
       {"a", "me"},
       -1,
       5000,
       K::kWait},
      {"MAX in: close at once",
       S{2, false, {}},
       {},
       {"me", "a", "b"},
       -1,
       0,
       K::kClose,
       S{2, true, {"me", "a", "b"}}},
      {"MAX in, not the oldest joiner", S{2, false, {}}, {}, {"a", "me", "b"}, -1, 0, K::kWait},
      {"beyond MAX: the first MAX close",
       S{0, false, {}},
       {},
       {"a", "b", "c", "me"},
       -1,
       0,
       K::kWait},
      {"the oldest of more than MAX joiners closes with the first MAX",
       S{0, false, {}},
       {},
       {"me", "b", "c", "d"},
       -1,
       0,
       K::kClose,
       S{0, true, {"me", "b", "c"}}},
      {"final, a member, all live",
       S{1, true, {"a", "me"}},
       {"a", "me", "x"},
       {},
       -1,
       0,
       K::kFormed},
      {"final, a member gone",
       S{1, true, {"a", "me"}},
       {"me"},
       {},
       -1,
       0,
       K::kOpenNext,
       S{2, false, {}}},
      {"final, the round just left",
       S{1, true, {"a", "me"}},
       {"a", "me"},
       {},
       1,
       0,
       K::kOpenNext,
       S{2, false, {}}},
      {"final without this node: wait under it",
       S{4, true, {"a", "b"}},
       {"a", "b", "me"},
       {},
       -1,
       0,
       K::kWaitUnder},
      {"final without this node, one gone",
       S{4, true, {"a", "b"}},
       {"a", "me"},
       {},
       -1,
       0,
       K::kOpenNext,
       S{5, false, {}}},
  };
  const auto t0 = Clock::now();
  for (const Row& row : rows) {
    INFO(row.what);
    JoinView v;
    v.state = row.state;
    v.live = row.live;
    // What the node reads: whether it joined and is the oldest joiner; then (only then)
    // every join key.
    v.joined = std::find(row.joins.begin(), row.joins.end(), "me") != row.joins.end();
    v.first = v.joined && row.joins.front() == "me";
    if (v.first) v.joins = row.joins;
    v.me = "me";
    v.left_round = row.left_round;
    v.min_nodes = 2;
    v.max_nodes = 3;
    v.last_call_timeout = 1000ms;
    v.now = t0;
    v.changed_at = t0 - std::chrono::milliseconds(row.quiet_ms);
    const JoinStep step = next_join_step(v);
    CHECK(step.kind == row.want);
    if (row.next) CHECK(step.next == *row.next);
    if (row.want == K::kWait) {
      CHECK(step.watch_joins == v.first);  // the oldest joiner watches the joins
      CHECK(step.until == (row.until_ms < 0 ? Clock::time_point::max()
                                            : t0 + std::chrono::milliseconds(row.until_ms)));
    }
  }
}

TEST_CASE("etcd members list codec: r<R>/members", "[etcd_round]") {
  struct Row {
    std::string what;
    std::string json;
    std::optional<MembersList> want;
  };
  const std::vector<Row> rows{
      {"descriptors in member order", R"(["{\"a\":1}","{\"b\":2}"])",
       MembersList{false, {R"({"a":1})", R"({"b":2})"}}},
      {"no members", "[]", MembersList{false, {}}},
      {"too many for one key: read node/", R"("node/")", MembersList{true, {}}},
      {"another string", R"("nodes/")", std::nullopt},
      {"a descriptor that is not a string", R"(["{}", 3])", std::nullopt},
      {"an object", R"({"members": []})", std::nullopt},
      {"not JSON", "[\"unterminated", std::nullopt},
      {"empty", "", std::nullopt},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    CHECK(decode_members(row.json) == row.want);
  }
  // What the encoder writes decodes to the same list, up to 1 MiB; past it, "node/".
  const std::vector<std::string> descs{R"({"addr":"10.0.0.1"})", R"({"addr":"10.0.0.2"})"};
  CHECK(decode_members(encode_members(descs)) == MembersList{false, descs});
  const std::vector<std::string> large(4000, std::string(300, 'x'));
  CHECK(encode_members(large) == R"("node/")");
  CHECK(decode_members(encode_members(large)) == MembersList{true, {}});
}
