// The job-wide stall verdict (launcher/jobwide/stall_verdict.h) and the judge that builds it over a
// real store (launcher/jobwide/job_stall.h over StoreJobBoard and a MemoryStore): two nodes' judges
// on two threads, as two agents.
#include "launcher/jobwide/stall_verdict.h"

#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <thread>

#include "launcher/jobwide/job_stall.h"
#include "rendezvous/c10d/store_job_board.h"
#include "store/memory_store.h"

using namespace ddprun::launcher;
using namespace std::chrono_literals;

namespace {

const std::string kAllReduce =
    "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1500 in all_reduce";

RankSnapshot at(int rank, std::string where, std::string user_where = "") {
  RankSnapshot r;
  r.rank = rank;
  r.pid = 1000 + rank;
  r.sampled = true;
  r.where = std::move(where);
  r.user_where = std::move(user_where);
  return r;
}

}  // namespace

TEST_CASE("verdict: the rank outside the collective first, the waiting ranks after", "[stall]") {
  const std::vector<NodeSnapshot> nodes = {
      {0, "a", {at(0, kAllReduce, "w.py:31 in step")}},
      {1, "b", {at(1, "w.py:30 in step")}},
  };
  const auto v = stall_verdict(nodes, {}, 3000ms);
  REQUIRE(v.size() == 3);
  CHECK(v[0] ==
        "stall (job-wide): no rank of the job made progress for 3 s; rank 1 on b (pid 1001) is "
        "at w.py:30 in step; rank 0 on a (pid 1000) waits at w.py:31 in step (inside " +
            kAllReduce + ")");
  CHECK(v[1] == "  rank 1 is at w.py:30 in step");
}

TEST_CASE("verdict: ranks waiting in different collectives are said to", "[stall]") {
  const std::string bcast =
      "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1800 in broadcast";
  const std::vector<NodeSnapshot> nodes = {
      {0, "a", {at(0, kAllReduce, "w.py:31 in step"), at(1, kAllReduce, "w.py:31 in step")}},
      {1, "b", {at(2, bcast, "w.py:40 in sync"), at(3, kAllReduce, "w.py:31 in step")}},
  };
  const auto v = stall_verdict(nodes, {}, 3000ms);
  CHECK(v[0].find("; rank 2 on b (pid 1002) waits at w.py:40 in sync (inside " + bcast +
                  "); rank 0 on a (pid 1000), rank 1 on a (pid 1001), rank 3 on b (pid 1003) "
                  "wait at w.py:31 in step") != std::string::npos);
  CHECK(v[0].find("; ranks wait in different collectives: all_reduce (ranks 0-1,3), "
                  "broadcast (rank 2): a collective called on some ranks and not on others") !=
        std::string::npos);
}

TEST_CASE("verdict: a large group is counted, with its rank ranges and hosts", "[stall]") {
  std::vector<NodeSnapshot> nodes;
  for (int n = 0; n < 8; ++n) {
    NodeSnapshot s{n, "h" + std::to_string(n), {}};
    for (int r = 2 * n; r < 2 * n + 2; ++r) {
      s.ranks.push_back(r == 13 ? at(r, "w.py:88 in load_batch")
                                : at(r, kAllReduce, "w.py:92 in <module>"));
    }
    nodes.push_back(s);
  }
  const auto v = stall_verdict(nodes, {"node 9"}, 30000ms);
  CHECK(v[0] ==
        "stall (job-wide): no rank of the job made progress for 30 s; rank 13 on h6 (pid 1013) "
        "is at w.py:88 in load_batch; 15 ranks (0-12,14-15) on h0, h1, h2, h3 and 4 more hosts "
        "wait at w.py:92 in <module> (inside " +
            kAllReduce + "); no snapshot from node 9");
  CHECK(v[2] == "  ranks 0-12,14-15 wait at w.py:92 in <module> (inside " + kAllReduce + ")");
}

TEST_CASE("verdict: every rank at one place, and ranks not sampled", "[stall]") {
  RankSnapshot spin = at(0, "");
  spin.sampled = false;
  RankSnapshot stopped = at(1, "w.py:5 in f");
  stopped.state = 'T';
  auto v = stall_verdict({{0, "a", {spin, stopped}}}, {}, 1000ms);
  CHECK(v[0] ==
        "stall (job-wide): no rank of the job made progress for 1 s; rank 0 on a (pid 1000) is "
        "without a Python stack (not sampled); rank 1 on a (pid 1001) is stopped (state T) at "
        "w.py:5 in f");
  v = stall_verdict({{0, "a", {at(0, "w.py:5 in f"), at(1, "w.py:5 in f")}}}, {}, 1000ms);
  CHECK(v[0] ==
        "stall (job-wide): no rank of the job made progress for 1 s; all 2 ranks are at "
        "w.py:5 in f");
  // Only one rank's snapshot came (a CI run printed "all 1 ranks is at"): named as any.
  v = stall_verdict({{1, "b", {at(1, "w.py:30 in <module>")}}}, {"node 0"}, 3000ms);
  CHECK(v[0] ==
        "stall (job-wide): no rank of the job made progress for 3 s; rank 1 on b (pid 1001) is "
        "at w.py:30 in <module>; no snapshot from node 0");
}

TEST_CASE("verdict: with the flight recorder, the collective a rank never entered", "[stall]") {
  // The issue's 3 am example: rank 13 loads a batch while the others wait in all_reduce
  // #4711 of group 0; group 1's state is older and alike everywhere.
  std::vector<NodeSnapshot> nodes;
  for (int n = 0; n < 8; ++n) {
    NodeSnapshot s{n, "h" + std::to_string(n), {}};
    for (int r = 2 * n; r < 2 * n + 2; ++r) {
      RankSnapshot rs =
          r == 13 ? at(r, "w.py:88 in load_batch") : at(r, kAllReduce, "w.py:92 in <module>");
      rs.collectives = {{0, r == 13 ? 4710 : 4711, 4710, "gloo:all_reduce"},
                        {1, 7, 7, "gloo:broadcast"}};
      s.ranks.push_back(rs);
    }
    nodes.push_back(s);
  }
  const auto v = stall_verdict(nodes, {}, 30000ms);
  CHECK(v[0] ==
        "stall (job-wide): no rank of the job made progress for 30 s; rank 13 on h6 (pid 1013) "
        "never entered all_reduce #4711 of group 0: it is at w.py:88 in load_batch; 15 ranks "
        "(0-12,14-15) on h0, h1, h2, h3 and 4 more hosts wait in all_reduce #4711 of group 0 at "
        "w.py:92 in <module> (inside " +
            kAllReduce + ")");
  CHECK(v[1] ==
        "  rank 13 never entered all_reduce #4711 of group 0: it is at w.py:88 in load_batch");
  // The node's own watchdog says the same of its workers (collective_standing).
  const CollectiveFronts fronts =
      collective_fronts({nodes[6].ranks[0].collectives, nodes[6].ranks[1].collectives});
  CHECK(collective_standing(nodes[6].ranks[0].collectives, fronts).text ==
        "in all_reduce #4711 of group 0");
  CHECK(collective_standing(nodes[6].ranks[1].collectives, fronts).behind);
}

TEST_CASE("verdict: ranks that entered different collectives as one are said to", "[stall]") {
  std::vector<NodeSnapshot> nodes = {{0, "a", {at(0, kAllReduce), at(1, kAllReduce)}},
                                     {1, "b", {at(2, kAllReduce), at(3, kAllReduce)}}};
  for (auto& n : nodes) {
    for (auto& r : n.ranks)
      r.collectives = {{0, 5, 4, r.rank == 2 ? "gloo:broadcast" : "gloo:all_reduce"}};
  }
  const auto v = stall_verdict(nodes, {}, 3000ms);
  CHECK(v[0].find("; ranks entered different collectives as #5 of group 0: all_reduce (ranks "
                  "0-1,3), broadcast (rank 2): a collective called on some ranks and not on "
                  "others") != std::string::npos);
  CHECK(v[0].find("wait in different collectives") == std::string::npos);
  // Without a recorder anywhere, nobody is said to be behind.
  CHECK(collective_standing({}, collective_fronts({{}, {}})).text.empty());
}

TEST_CASE("snapshot codec: round trip, and bad input named, never a crash", "[stall]") {
  NodeSnapshot s{3, "gpu-07", {at(13, kAllReduce, "t.py:9 in x")}};
  s.ranks[0].state = 'S';
  s.ranks[0].idle_s = 4.5;
  s.ranks[0].collectives = {{0, 12, 11, "gloo:all_reduce"}, {3, 2, -1, "nccl:broadcast"}};
  std::string error;
  const auto back = decode_snapshot(encode_snapshot(s), error);
  REQUIRE(back);
  CHECK(back->node == 3);
  CHECK(back->host == "gpu-07");
  REQUIRE(back->ranks.size() == 1);
  CHECK(back->ranks[0].where == kAllReduce);
  CHECK(back->ranks[0].user_where == "t.py:9 in x");
  CHECK(back->ranks[0].state == 'S');
  CHECK(back->ranks[0].idle_s == 4.5);
  CHECK(back->ranks[0].collectives == s.ranks[0].collectives);
  for (const std::string& bad :
       {std::string("{"), std::string("[]"), std::string(R"({"version":2})"),
        std::string(R"({"version":1,"node":"x","host":"h","ranks":[]})"),
        std::string(R"({"version":1,"node":0,"host":"h","ranks":[{"rank":0,"pid":1,)"
                    R"("sampled":true,"where":"","user_where":"","state":"S","idle_s":0,)"
                    R"("collectives":[[0,"x"]]}]})"),
        std::string(kMaxSnapshotBytes + 1, ' ')}) {
    error.clear();
    CHECK_FALSE(decode_snapshot(bad, error));
    CHECK_FALSE(error.empty());
    CHECK(error.find('\n') == std::string::npos);
  }
  // A huge frame text is cut, so a snapshot stays small.
  s.ranks[0].where = std::string(10000, 'x');
  CHECK(encode_snapshot(s).size() < 1000);
}

namespace {

// One node as its agent runs it: the watchdog's gate, fed by hand, and the judge over a
// board on the shared store.
struct Node {
  Node(std::shared_ptr<ddprun::store::Store> store, int node, std::chrono::milliseconds timeout)
      : board(std::move(store), 0, node, 2, "test"),
        judge(gate, board, {timeout, "host" + std::to_string(node), node}) {}
  // Ticks until decided or `until`; `progress`: the workers progress all along.
  std::optional<std::vector<std::string>> run(bool progress,
                                              JobStallJudge::Clock::time_point until) {
    while (JobStallJudge::Clock::now() < until && !gate.decision()) {
      NodeSample s;
      s.all_idle = !progress;
      s.last_progress = progress ? JobStallJudge::Clock::now() : JobStallJudge::Clock::time_point{};
      WorkerPosition w;
      w.local_rank = 0;
      w.pid = 42;
      w.sampled = true;
      w.where = progress ? "w.py:1 in evaluate" : kAllReduce;
      w.user_where = progress ? "" : "w.py:2 in step";
      s.workers = {w};
      gate.publish(s);
      judge.tick(JobStallJudge::Clock::now());
      std::this_thread::sleep_for(20ms);
    }
    return gate.decision();
  }
  StallGate gate;
  ddprun::rdzv::StoreJobBoard board;
  JobStallJudge judge;
};

}  // namespace

TEST_CASE("judge: a node whose ranks wait while another node's progress is not stalled",
          "[stall]") {
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  Node busy(store, 0, 400ms), waiting(store, 1, 400ms);
  CHECK(waiting.gate.judged());
  const auto until = JobStallJudge::Clock::now() + 2s;  // 5 stall timeouts
  auto b = std::async(std::launch::async, [&] { return busy.run(true, until); });
  CHECK_FALSE(waiting.run(false, until));
  CHECK_FALSE(b.get());
}

TEST_CASE("judge: the whole job quiet gives both nodes one verdict", "[stall]") {
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  Node a(store, 0, 400ms), b(store, 1, 400ms);
  const auto until = JobStallJudge::Clock::now() + 10s;
  auto fa = std::async(std::launch::async, [&] { return a.run(false, until); });
  const auto vb = b.run(false, until);
  const auto va = fa.get();
  REQUIRE(va);
  REQUIRE(vb);
  CHECK(*va == *vb);
  CHECK(va->front() ==
        "stall (job-wide): no rank of the job made progress for 0.4 s; all 2 ranks wait at "
        "w.py:2 in step (inside " +
            kAllReduce + ")");
}
