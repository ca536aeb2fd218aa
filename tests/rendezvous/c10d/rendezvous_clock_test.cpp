// StoreRendezvous with an injected clock (Config::now): the deadlines of joining follow
// that clock, so a test can pass join_timeout and last_call_timeout of 10 minutes in no
// time. Nodes are threads over one MemoryStore.
#include <atomic>
#include <catch2/catch.hpp>
#include <future>

#include "rendezvous/c10d/store_rendezvous.h"
#include "store/memory_store.h"
#include "tests/rendezvous/rdzv_test_util.h"

using namespace ddprun;
using namespace ddprun::rdzv;
using namespace std::chrono_literals;

namespace {

// A clock that stands still until advanced; readable from any thread.
class ManualClock {
 public:
  StoreRendezvous::Clock::time_point now() const {
    return StoreRendezvous::Clock::time_point(StoreRendezvous::Clock::duration(ticks_.load()));
  }
  void advance(std::chrono::milliseconds d) {
    ticks_ += std::chrono::duration_cast<StoreRendezvous::Clock::duration>(d).count();
  }

 private:
  std::atomic<StoreRendezvous::Clock::rep> ticks_{
      StoreRendezvous::Clock::now().time_since_epoch().count()};
};

const std::string kPrefix = "ddprun/rdzv/clock";

std::unique_ptr<StoreRendezvous> node(const std::shared_ptr<store::MemoryStore>& mem,
                                      const ManualClock& clock, int i, int min_nodes, int max_nodes,
                                      std::chrono::milliseconds join_timeout = 600s) {
  StoreRendezvous::Config c;
  c.endpoint = "memory";
  c.round =
      test::loopback_round("clock", i, min_nodes, max_nodes, "127.0.0." + std::to_string(i + 1));
  c.round.join_timeout = join_timeout;
  c.round.last_call_timeout = 600s;
  c.round.keep_alive_interval = 100ms;
  c.poll_slice = 20ms;
  c.round.now = [&clock] { return clock.now(); };
  return std::make_unique<StoreRendezvous>(c, test::memory_connect(mem, "clock"));
}

std::int64_t joined(store::MemoryStore& mem, int round) {
  return mem.add(kPrefix + "/r" + std::to_string(round) + "/joined", 0);
}

}  // namespace

TEST_CASE("injected clock: join_timeout passes when the clock says so", "[clock]") {
  auto mem = std::make_shared<store::MemoryStore>();
  ManualClock clock;
  auto h = node(mem, clock, 0, 2, 2);
  auto f = test::rendezvous_outcome<RendezvousTimeoutError>(*h);
  REQUIRE(test::eventually([&] { return joined(*mem, 0) == 1; }));
  clock.advance(601s);
  REQUIRE(f.wait_for(30s) == std::future_status::ready);
  CHECK_THAT(f.get(), Catch::Contains("timed out after join_timeout 600 s in round 0") &&
                          Catch::Contains("1 of min 2"));
  // Its slot says it left: no later round waits for it.
  CHECK(mem->get(kPrefix + "/r0/hb/0") == "left");
}

TEST_CASE("injected clock: last call ends when the clock says so", "[clock]") {
  auto mem = std::make_shared<store::MemoryStore>();
  ManualClock clock;
  std::vector<std::unique_ptr<StoreRendezvous>> hs;
  // join_timeout a day: only the last call may end this round.
  for (int i = 0; i < 2; ++i) hs.push_back(node(mem, clock, i, 2, 3, 24h));
  std::vector<std::future<RendezvousInfo>> fs;
  for (auto& h : hs) {
    fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
  }
  REQUIRE(test::eventually([&] { return joined(*mem, 0) == 2; }));
  // MIN is in, MAX is not, and no clock time has passed: the round is still open.
  CHECK_FALSE(mem->check({kPrefix + "/r0/final"}));
  // The clock moves in 10 s steps until the round closes: a node starts its last call
  // when it next looks (in clock time), which under load can be after any one step.
  REQUIRE(test::eventually([&] {
    if (mem->check({kPrefix + "/r0/final"})) return true;
    clock.advance(10s);
    return false;
  }));
  for (auto& f : fs) {
    REQUIRE(f.wait_for(30s) == std::future_status::ready);
    RendezvousInfo info = f.get();
    CHECK(info.round == 0);
    CHECK(info.group_world_size == 2);
  }
  CHECK(mem->get(kPrefix + "/r0/final") == "2");
  for (auto& h : hs) h->shutdown();
}
