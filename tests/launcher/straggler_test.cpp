// The straggler ranking (launcher/jobwide/straggler.h) and the watch that runs it job-wide
// (launcher/jobwide/straggler_watch.h) over a real store (StoreJobBoard on a MemoryStore): two
// nodes' watches on two threads, as two agents, one of them on a clock 5 s ahead.
#include "launcher/jobwide/straggler.h"

#include <catch2/catch.hpp>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "launcher/jobwide/straggler_watch.h"
#include "rendezvous/c10d/store_job_board.h"
#include "store/memory_store.h"

using namespace ddprun::launcher;
using namespace std::chrono_literals;

namespace {

constexpr std::int64_t kSecondNs = 1'000'000'000;
constexpr std::int64_t kBaseNs = 1'800'000'000 * kSecondNs;

// Ranks 0..3, two per host ("a", "b"); collectives 1..n of group 0, 0.1 s apart; rank r
// arrives `late(r, seq)` seconds after the collective's start.
template <typename Late>
std::vector<RankArrivals> four_ranks(int n, Late late) {
  std::vector<RankArrivals> ranks;
  for (int r = 0; r < 4; ++r) {
    RankArrivals ra{r, r < 2 ? "a" : "b", {}};
    for (int seq = 1; seq <= n; ++seq) {
      ra.arrivals.push_back(
          {0, seq, kBaseNs + seq * kSecondNs / 10 + static_cast<std::int64_t>(late(r, seq) * 1e9)});
    }
    ranks.push_back(std::move(ra));
  }
  return ranks;
}

}  // namespace

TEST_CASE("straggler: the rank that arrives last at most collectives, by the threshold",
          "[straggler]") {
  // Rank 3 is 0.3 s late at 18 of 20; the others within a few ms of each other.
  const auto ranks = four_ranks(20, [](int r, int seq) {
    return r == 3 ? (seq % 10 != 0 ? 0.3 : 0.0) : 0.001 * ((r + seq) % 3);
  });
  const auto s = find_straggler(ranks, 0.05);
  REQUIRE(s);
  CHECK_FALSE(s->host_wide);
  CHECK(s->rank == 3);
  CHECK(s->last == 18);
  CHECK(s->collectives == 20);
  CHECK(straggler_line(*s, 10s, 0.05) ==
        "straggler: rank 3 on b arrived last at 18 of 20 collectives of group 0 in the last 10 s, "
        "by a median of 0.298 s (threshold 0.05 s)");
  // Below the threshold, or too few collectives, or last only now and then: none.
  CHECK_FALSE(find_straggler(ranks, 0.5));
  CHECK_FALSE(find_straggler(four_ranks(7, [](int r, int) { return r == 3 ? 0.3 : 0.0; }), 0.05));
  CHECK_FALSE(find_straggler(
      four_ranks(20, [](int r, int seq) { return r == seq % 4 ? 0.3 : 0.0; }), 0.05));
}

TEST_CASE("straggler: a host whose ranks are late together", "[straggler]") {
  // Ranks 2 and 3 (host b) both 0.2 s late, each the latest half of the time.
  const auto ranks = four_ranks(
      16, [](int r, int seq) { return r < 2 ? 0.0 : 0.2 + (r == 2 + seq % 2 ? 0.01 : 0.0); });
  const auto s = find_straggler(ranks, 0.05);
  REQUIRE(s);
  CHECK(s->host_wide);
  CHECK(s->host == "b");
  CHECK(s->ranks == std::vector<int>{2, 3});
  CHECK(straggler_line(*s, 10s, 0.05) ==
        "straggler: host b (ranks 2,3) arrived last at 16 of 16 collectives of group 0 in the "
        "last 10 s, by a median of 0.21 s (threshold 0.05 s)");
}

TEST_CASE("straggler: collectives a rank did not report are left out", "[straggler]") {
  auto ranks = four_ranks(30, [](int r, int) { return r == 1 ? 0.1 : 0.0; });
  ranks[0].arrivals.resize(10);  // rank 0 reported its first 10 only
  const auto s = find_straggler(ranks, 0.05);
  REQUIRE(s);
  CHECK(s->rank == 1);
  CHECK(s->collectives == 10);
}

TEST_CASE("straggler: a collective a window's end cut in two is ranked with the next window",
          "[straggler]") {
  // Two ranks, rank 1 0.28 s late at collectives 1..14 of group 0. Window 1 holds rank 0's
  // arrivals at 1..10 but rank 1's at 1..6 only (each reports on its own beat); window 2
  // the rest. Alone, neither window has 8 collectives that both entered.
  const auto arrivals = [](int rank, int from, int to) {
    RankArrivals r{rank, "a", {}};
    for (int seq = from; seq <= to; ++seq) {
      r.arrivals.push_back(
          {0, seq, kBaseNs + seq * 3 * kSecondNs / 10 + rank * kSecondNs * 28 / 100});
    }
    return r;
  };
  const std::vector<RankArrivals> w1{arrivals(0, 1, 10), arrivals(1, 1, 6)};
  const std::vector<RankArrivals> w2{arrivals(0, 11, 14), arrivals(1, 7, 14)};
  CHECK_FALSE(find_straggler(w1, 0.05));
  CHECK_FALSE(find_straggler(w2, 0.05));
  const JoinedWindow first = join_window({}, w1);
  CHECK_FALSE(find_straggler(first.ranks, 0.05));
  REQUIRE(first.carry.size() == 1);  // rank 0's 7..10
  CHECK(first.carry[0].rank == 0);
  CHECK(first.carry[0].arrivals.size() == 4);
  CHECK(first.carry[0].arrivals.front().seq == 7);
  const JoinedWindow second = join_window(first.carry, w2);
  const auto s = find_straggler(second.ranks, 0.05);
  REQUIRE(s);
  CHECK(s->rank == 1);
  CHECK(s->collectives == 8);  // 7..14
  CHECK(second.carry.empty());
  // A carried arrival whose collective is still not whole is dropped, not carried again.
  const JoinedWindow third =
      join_window({arrivals(0, 15, 15)}, {arrivals(0, 16, 16), arrivals(1, 16, 16)});
  CHECK(third.carry.empty());
  // A rank in no other group's collective is no member of it: group 1's arrivals of rank 0
  // alone are whole.
  RankArrivals only{0, "a", {{1, 1, kBaseNs}}};
  CHECK(join_window({}, {only, arrivals(1, 1, 1)}).carry.empty());
}

TEST_CASE("straggler: the window's sample is the same on every rank", "[straggler]") {
  std::vector<Arrival> as;
  for (int seq = 1; seq <= 100; ++seq) as.push_back({0, seq, seq});
  as.push_back({1, 5, 0});
  const auto kept = sample_arrivals(as);
  CHECK(kept.size() == 25 + 1);  // every 4th of group 0, and group 1's one
  for (const Arrival& a : kept) CHECK((a.pg == 1 || a.seq % 4 == 0));
  // A rank that saw fewer keeps a superset of the same choice.
  as.resize(40);
  for (const Arrival& a : sample_arrivals(as)) CHECK(a.seq % 2 == 0);
}

TEST_CASE("straggler: window codec round trip, and bad input named", "[straggler]") {
  const auto ranks = four_ranks(3, [](int, int) { return 0.0; });
  std::string error;
  const auto back = decode_window(encode_window(7, ranks), error);
  REQUIRE(back);
  CHECK(back->first == 7);
  REQUIRE(back->second.size() == 4);
  CHECK(back->second[3].host == "b");
  CHECK(back->second[3].arrivals[2].t_ns == ranks[3].arrivals[2].t_ns);
  for (const std::string& bad :
       {std::string("{"), std::string(R"({"version":2})"),
        std::string(R"({"version":1,"window":1,"ranks":[{"rank":0,"host":"a","arrivals":[[0]]}]})"),
        std::string(kMaxWindowBytes + 1, ' ')}) {
    error.clear();
    CHECK_FALSE(decode_window(bad, error));
    CHECK_FALSE(error.empty());
    CHECK(error.find('\n') == std::string::npos);
  }
}

namespace {

// One node as its agent runs it: the gate fed by hand with its two ranks' arrivals, on a
// clock `skew_ns` ahead of node 0's; global rank `late` (default 1, node 0's second) 0.2 s
// late; `tweak` changes the watch's parameters.
struct StragglerNode {
  StragglerNode(std::shared_ptr<ddprun::store::Store> store, int number, std::int64_t skew_ns,
                int late_rank = 1,
                const std::function<void(StragglerWatch::Params&)>& tweak = nullptr)
      : board(std::move(store), 0, number, 2, "test"),
        watch(gate, &board, params(number, skew_ns, tweak)),
        skew(skew_ns),
        node(number),
        late(late_rank) {}
  static StragglerWatch::Params params(int node, std::int64_t skew_ns,
                                       const std::function<void(StragglerWatch::Params&)>& tweak) {
    StragglerWatch::Params p;
    p.threshold_s = 0.05;
    p.window = 300ms;
    p.host = node == 0 ? "a" : "b";
    p.rank_base = 2 * node;
    p.workers = 2;
    p.wall_ns = [skew_ns] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count() +
             skew_ns;
    };
    if (tweak) tweak(p);
    return p;
  }
  void run(StragglerWatch::Clock::time_point until) {
    std::int64_t seq = 0;
    while (StragglerWatch::Clock::now() < until) {
      // 10 collectives a tick, every rank entering each at once but rank 1.
      const std::int64_t now = watch_clock();
      for (int i = 0; i < 10; ++i) {
        ++seq;
        for (int local = 0; local < 2; ++local) {
          const bool slow = 2 * node + local == late;
          gate.add_arrivals(local, {{0, seq, now + i * 1'000'000 + (slow ? 200'000'000 : 0)}});
        }
      }
      watch.tick(StragglerWatch::Clock::now());
      std::this_thread::sleep_for(50ms);
    }
  }
  std::int64_t watch_clock() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count() +
           skew;
  }
  StallGate gate;
  ddprun::rdzv::StoreJobBoard board;
  StragglerWatch watch;
  std::int64_t skew;
  int node;
  int late;
};

}  // namespace

TEST_CASE("straggler watch: job-wide, node 1's clock 5 s ahead is corrected", "[straggler]") {
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  StragglerNode a(store, 0, 0), b(store, 1, 5 * kSecondNs);
  const auto until = StragglerWatch::Clock::now() + 2s;
  auto fa = std::async(std::launch::async, [&] { a.run(until); });
  b.run(until);
  fa.get();
  const auto offset = b.watch.clock_offset();
  REQUIRE(offset);
  // StragglerNode 0's clock is node 1's minus 5 s, known within the measured bound.
  CHECK(offset->second >= 0);
  CHECK(offset->second < kSecondNs / 2);
  CHECK(std::llabs(offset->first + 5 * kSecondNs) <= offset->second + 1'000'000);
  // Uncorrected, both of node 1's ranks would arrive 5 s after rank 1: host b would be
  // named, not rank 1.
  REQUIRE_FALSE(a.watch.said().empty());
  CHECK(a.watch.said().front().rfind("straggler: rank 1 on a arrived last at ", 0) == 0);
  CHECK(a.watch.said().size() == 1);  // said once, not every window
  CHECK(b.watch.said().empty());      // said on node 0 and on the straggler's node only
}

TEST_CASE("straggler watch: one node whose ranks report on their own beats", "[straggler]") {
  // Rank 1 is 0.2 s late at each collective, and its arrivals reach the gate a tick after
  // rank 0's (the sampler's beats): every window's end cuts the collectives of the last
  // tick in two. 6 collectives a tick, 2 ticks a window: without the carry no window has
  // the 8 whole collectives the ranking needs.
  StallGate gate;
  StragglerWatch::Params p;
  p.window = 200ms;
  p.host = "a";
  p.workers = 2;
  StragglerWatch watch(gate, nullptr, p);
  std::int64_t seq = 0;
  std::vector<Arrival> rank1_next;
  const auto until = StragglerWatch::Clock::now() + 1500ms;
  while (StragglerWatch::Clock::now() < until && watch.said().empty()) {
    std::vector<Arrival> rank0;
    gate.add_arrivals(1, std::exchange(rank1_next, {}));
    for (int i = 0; i < 6; ++i) {
      ++seq;
      rank0.push_back({0, seq, kBaseNs + seq * kSecondNs / 10});
      rank1_next.push_back({0, seq, kBaseNs + seq * kSecondNs / 10 + kSecondNs / 5});
    }
    gate.add_arrivals(0, rank0);
    std::this_thread::sleep_for(100ms);
    watch.tick(StragglerWatch::Clock::now());
  }
  REQUIRE(watch.said().size() == 1);
  CHECK(watch.said().front().rfind("straggler: rank 1 on a arrived last at ", 0) == 0);
}

namespace {

// Two nodes for 2.5 s (about 8 windows of 0.3 s), rank `late` 0.2 s late, exclusion on with
// `min_nodes` and `spares`.
std::pair<std::optional<std::string>, std::optional<std::string>> run_excluding(int late,
                                                                                int min_nodes,
                                                                                int spares) {
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  const auto tweak = [&](StragglerWatch::Params& p) {
    p.exclude = true;
    p.min_nodes = min_nodes;
    p.spares = [spares] { return spares; };
  };
  StragglerNode a(store, 0, 0, late, tweak), b(store, 1, 0, late, tweak);
  const auto until = StragglerWatch::Clock::now() + 2500ms;
  auto fa = std::async(std::launch::async, [&] { a.run(until); });
  b.run(until);
  fa.get();
  return {a.watch.leave(), b.watch.leave()};
}

}  // namespace

TEST_CASE("straggler watch: --exclude-stragglers leaves the straggler's node out when it can",
          "[straggler]") {
  // Rank 3 (node 1) late, MIN 1: node 1 is told to leave after 3 windows in a row.
  const auto [a, b] = run_excluding(3, 1, 0);
  CHECK_FALSE(a);
  REQUIRE(b);
  CHECK(b->rfind("straggler: rank 3 on b arrived last at ", 0) == 0);
  // MIN 2 and no spare: nobody leaves; with a spare waiting, node 1 does.
  const auto [a2, b2] = run_excluding(3, 2, 0);
  CHECK_FALSE(a2);
  CHECK_FALSE(b2);
  CHECK(run_excluding(3, 2, 1).second);
  // The straggler on node 0 (which holds the rendezvous): nobody leaves.
  const auto [a3, b3] = run_excluding(1, 1, 0);
  CHECK_FALSE(a3);
  CHECK_FALSE(b3);
}

TEST_CASE("clock sync: polled, never blocking, a stamp missing in time is said unknown",
          "[straggler]") {
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  ddprun::rdzv::StoreJobBoard node0(store, 0, 0, 2, "test"), node1(store, 0, 1, 2, "test");
  const auto t0 = ClockSync::Clock::now();
  std::int64_t wall = 1'000'000'000;
  ClockSync alone(
      node1, [&] { return wall; }, t0);
  // Node 0 never stamps: each poll returns at once, the sync gives up after kStampWait.
  for (auto t = t0; t < t0 + ClockSync::kStampWait; t += 500ms) {
    const auto start = std::chrono::steady_clock::now();
    alone.poll(t);
    CHECK(std::chrono::steady_clock::now() - start < 1s);
    CHECK_FALSE(alone.done());
  }
  alone.poll(t0 + ClockSync::kStampWait + 10ms);
  REQUIRE(alone.done());
  CHECK(*alone.offset() == ClockSync::Offset{0, -1});
  CHECK(alone.next_tick() == ClockSync::Clock::time_point::max());
  // Node 0 with a node that is ready: it stamps at once; the node, 7 ns behind, reads it.
  ddprun::rdzv::StoreJobBoard b0(store, 1, 0, 2, "test"), b1(store, 1, 1, 2, "test");
  std::int64_t wall0 = 5'000;
  ClockSync zero(
      b0, [&] { return wall0; }, t0);
  ClockSync one(
      b1, [&] { return wall0 - 7; }, t0);
  for (auto t = t0; !(zero.done() && one.done()) && t < t0 + 2s; t += ClockSync::kPoll) {
    one.poll(t);
    zero.poll(t);
  }
  REQUIRE(zero.done());
  REQUIRE(one.done());
  CHECK(*zero.offset() == ClockSync::Offset{0, 0});
  CHECK(*one.offset() == ClockSync::Offset{7, 0});
}

TEST_CASE("clock sync: a node ready long before the stamp still knows it within a poll",
          "[straggler]") {
  // Three nodes; node 2 never says ready, so node 0 stamps only after kReadyWait. Node 1,
  // ready from the start, 7 ns behind, polls every kPoll of a clock that moves with the
  // polls: its bound is half a poll, not half the wait.
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  ddprun::rdzv::StoreJobBoard b0(store, 1, 0, 3, "test"), b1(store, 1, 1, 3, "test");
  const auto t0 = ClockSync::Clock::now();
  std::int64_t wall0 = 0;
  ClockSync zero(
      b0, [&] { return wall0; }, t0);
  ClockSync one(
      b1, [&] { return wall0 - 7; }, t0);
  for (auto t = t0; !(zero.done() && one.done()) && t < t0 + 10s; t += ClockSync::kPoll) {
    wall0 = std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0).count();
    one.poll(t);
    zero.poll(t);
  }
  REQUIRE(one.done());
  const auto offset = *one.offset();
  CHECK(offset.second <= std::chrono::nanoseconds(ClockSync::kPoll).count() / 2);
  CHECK(std::llabs(offset.first - 7) <= offset.second);
}
