// Table tests of liveness.h: one observer's looks at a round's heartbeats, each a list of
// values read at a time, and the verdict per member; and RoundWatch::fence against them.
#include "rendezvous/c10d/liveness.h"

#include <catch2/catch.hpp>

#include "rendezvous/c10d/round_watch.h"

using namespace ddprun::rdzv;
using namespace std::chrono_literals;

namespace {

constexpr auto A = Member::kAlive;
constexpr auto D = Member::kDead;
constexpr auto L = Member::kLeft;
constexpr auto F = Member::kDone;

struct Look {
  int at_ms;  // when the values were asked for
  std::vector<std::string> values;
  std::vector<Member> want;
  int round = 0;
};

// Threshold 1000 ms, max gap 200 ms.
void play(const std::vector<Look>& looks) {
  Liveness live(1000ms, 200ms);
  const auto t0 = Liveness::Clock::now();
  for (std::size_t i = 0; i < looks.size(); ++i) {
    const Look& l = looks[i];
    INFO("look " << i << " at " << l.at_ms << " ms");
    CHECK(live.observe(l.round, l.values, t0 + std::chrono::milliseconds(l.at_ms)) == l.want);
  }
}

// Looks every `step` ms from `from` to `to` (inclusive) with unchanged `values`.
std::vector<Look> steady(int from, int to, int step, const std::vector<std::string>& values,
                         const std::vector<Member>& want) {
  std::vector<Look> out;
  for (int t = from; t <= to; t += step) out.push_back({t, values, want});
  return out;
}

std::vector<Look> operator+(std::vector<Look> a, const std::vector<Look>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("liveness: counters that move are alive, left and done say so at once", "[liveness]") {
  play({{0, {"1", "1", "left", "done"}, {A, A, L, F}},
        {100, {"2", "1", "left", "done"}, {A, A, L, F}},
        {900, {"3", "1", "1", "done"}, {A, A, A, F}}});
}

TEST_CASE("liveness: unchanged for the threshold while watched: dead", "[liveness]") {
  // Looked at every 100 ms: the stuck counter dies at 1000 ms, the moving one never.
  std::vector<Look> looks;
  for (int t = 0; t <= 1200; t += 100) {
    looks.push_back({t, {"1", std::to_string(t)}, {t >= 1000 ? D : A, A}});
  }
  play(looks);
}

TEST_CASE("liveness: the observer's blind time blames no one", "[liveness]") {
  SECTION("a gap longer than the threshold starts the clocks afresh") {
    play(steady(0, 500, 100, {"1"}, {A}) + std::vector<Look>{{5000, {"1"}, {A}}} +
         steady(5100, 5900, 100, {"1"}, {A}) + std::vector<Look>{{6000, {"1"}, {D}}});
  }
  SECTION("a gap over max_gap counts for max_gap only") {
    // 0 -> 900: 200 ms counted; 1000 ms of watched time are reached at 1700.
    play(std::vector<Look>{{0, {"1"}, {A}}, {900, {"1"}, {A}}} +
         steady(1000, 1600, 100, {"1"}, {A}) + std::vector<Look>{{1700, {"1"}, {D}}});
  }
  SECTION("steady slow looks (each within max_gap) still add up") {
    play(steady(0, 800, 200, {"1"}, {A}) + std::vector<Look>{{1000, {"1"}, {D}}});
  }
}

TEST_CASE("liveness: a new round or member count starts afresh", "[liveness]") {
  play({{0, {"1", "1"}, {A, A}},
        {1000, {"1", "1"}, {A, A}},  // a gap of a whole threshold: afresh
        {1100, {"1", "1"}, {A, A}, 1},
        {2000, {"1", "1"}, {A, A}, 1},  // gap 900 > max gap: 200 ms of it counted
        {2100, {"1", "1", "1"}, {A, A, A}, 1}});
}

TEST_CASE("liveness: looks of two threads may interleave", "[liveness]") {
  // A look asked at 150 answers after one asked at 200: no negative gap, no death.
  play({{0, {"1"}, {A}},
        {200, {"1"}, {A}},
        {150, {"1"}, {A}},
        {300, {"2"}, {A}},
        {1299, {"2"}, {A}}});
}

// The fence (issue 33): a node cut off from the store gives up before its peers can
// declare it dead. They wait the budget I x A from its last beat, which is at most one
// interval before the silence began; its first unanswered request leaves within a tick
// of it and its agent looks once a second: fence + tick + 1 s <= I x (A - 1), wherever
// the 1 s floor does not apply.
TEST_CASE("the fence comes before the peers can declare the node dead", "[liveness][fence]") {
  CHECK(RoundWatch::fence(5s, 3) == 8s);  // torchrun's defaults
  CHECK(RoundWatch::fence(1s, 5) == 2s);  // the tests' FAST settings
  CHECK(RoundWatch::fence(1s, 2) == 1s);  // the floor
  for (int interval_ms : {100, 500, 1000, 5000, 30000}) {
    for (int attempts : {2, 3, 5, 10, 600}) {
      for (int nodes : {1, 256, 1024}) {
        const std::chrono::milliseconds i(interval_ms);
        const auto fence = RoundWatch::fence(i, attempts, nodes);
        INFO(interval_ms << " ms x " << attempts << ", " << nodes << " nodes: fence "
                         << fence.count() << " ms");
        CHECK(fence >= 1s);
        if (fence > 1s) CHECK(fence + RoundWatch::tick(i, nodes) + 1s <= i * (attempts - 1));
      }
    }
  }
}
