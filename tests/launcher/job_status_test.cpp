// `ddprun status` (issue 32): the status value's codec and bounds, the join of the nodes'
// values and the text table (launcher/jobwide/job_status.h); StatusPublisher
// (launcher/jobwide/status_publisher.h) on a real StallGate and a StoreJobBoard over a
// MemoryStore, read back by the read-only StoreBoardReader
// (rendezvous/c10d/store_board_reader.h) in each state of a run.
#include "launcher/jobwide/job_status.h"

#include <catch2/catch.hpp>
#include <memory>
#include <nlohmann/json.hpp>

#include "launcher/jobwide/status_publisher.h"
#include "rendezvous/c10d/store_board_reader.h"
#include "rendezvous/c10d/store_job_board.h"
#include "rendezvous/rendezvous.h"
#include "store/memory_store.h"

using namespace ddprun::launcher;

namespace {

NodeStatus status_fixture(int node) {
  NodeStatus s;
  s.node = node;
  s.host = "localhost (127.0.0." + std::to_string(node + 1) + ")";
  s.agent_pid = 4000 + node;
  s.state = "running";
  s.attempt = 1;
  s.restarts = 1;
  s.max_restarts = 3;
  s.time = 1'800'000'000.5;
  for (int local = 0; local < 2; ++local) {
    RankStatus r;
    r.rank = node * 2 + local;
    r.local_rank = local;
    r.pid = 5000 + r.rank;
    r.state = "S";
    r.idle_s = 12.5;
    r.where = r.rank == 3 ? "/job/train.py:46 in doze" : "/job/train.py:47 in doze";
    r.collectives = {{0, r.rank == 3 ? 1 : 2, 1, "gloo:all_reduce"}};
    s.ranks.push_back(r);
  }
  return s;
}

}  // namespace

TEST_CASE("status: a node's value round-trips, and stays bounded", "[job_status]") {
  const NodeStatus s = status_fixture(1);
  CHECK(decode_node_status(encode_node_status(s)) == s);

  NodeStatus big = s;
  big.host = std::string(1000, 'h');
  big.straggler = std::string(5000, 's');
  for (RankStatus& r : big.ranks) {
    r.where = std::string(5000, 'w');
    r.collectives.assign(50, {3, 7, 6, std::string(500, 'o')});
  }
  const std::string text = encode_node_status(big);
  CHECK(text.size() < 1000 + big.ranks.size() * 4096);
  const auto back = decode_node_status(text);
  REQUIRE(back);
  CHECK(back->host.size() == kMaxStatusText);
  CHECK(back->straggler.size() == kMaxStatusLine);
  CHECK(back->ranks[0].where.size() == kMaxStatusText);
  CHECK(back->ranks[0].where.substr(kMaxStatusText - 3) == "...");
  CHECK(back->ranks[0].collectives.size() == kMaxCollectives);
}

TEST_CASE("status: values that are not a status are refused", "[job_status]") {
  const std::string good = encode_node_status(status_fixture(0));
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  const std::vector<std::string> bad = {
      "",
      "garbage",
      "[1,2]",
      "{\"v\":1}",
      replaced("\"v\":1", "\"v\":2"),
      replaced("\"state\":\"running\"", "\"state\":7"),
      replaced("\"ranks\":[", "\"ranks\":[{},"),
      good.substr(0, good.size() / 2),
  };
  for (const std::string& text : bad) {
    INFO(text);
    CHECK_FALSE(decode_node_status(text));
  }
}

TEST_CASE("status: the joined nodes, the table and the JSON record", "[job_status]") {
  JobStatus job;
  job.run_id = "j";
  job.where = "rendezvous 'j' (c10d at h:29400)";
  job.round = 3;
  const int bad = join_node_values(
      job, {encode_node_status(status_fixture(0)), std::nullopt, std::string("{\"v\":1}"),
            encode_node_status(status_fixture(0))});  // node 3's slot holding node 0's value
  CHECK(bad == 2);
  REQUIRE(job.nodes.size() == 4);
  CHECK(job.nodes[0].status);
  CHECK(job.nodes[1].problem == "no status yet");
  CHECK(job.nodes[2].problem == "not a ddprun status value: '{\"v\":1}'");
  CHECK(job.nodes[3].problem.rfind("not a ddprun status value: ", 0) == 0);

  job.nodes[1].status = status_fixture(1);
  job.nodes[1].status->straggler = "straggler: rank 3 on b arrived last";
  job.nodes[1].problem.clear();
  job.nodes.resize(3);
  CHECK(format_job_status(job, 1'800'000'003.0) ==
        "run 'j', round 3, 3 node(s): rendezvous 'j' (c10d at h:29400)\n"
        "NODE  HOST                     STATE       ATTEMPT  RESTARTS  UPDATED\n"
        "0     localhost (127.0.0.1)    running     1        1/3       2.5 s ago\n"
        "      RANK   PID      STATE   IDLE_S  LAST COLLECTIVE                  WHERE\n"
        "      0      5000     S       12      in all_reduce #2 of group 0      /job/train.py:47\n"
        "      1      5001     S       12      in all_reduce #2 of group 0      /job/train.py:47\n"
        "1     localhost (127.0.0.2)    running     1        1/3       2.5 s ago\n"
        "      RANK   PID      STATE   IDLE_S  LAST COLLECTIVE                  WHERE\n"
        "      2      5002     S       12      in all_reduce #2 of group 0      /job/train.py:47\n"
        "      3      5003     S       12      after all_reduce #1 of group 0   /job/train.py:46\n"
        "      straggler: straggler: rank 3 on b arrived last\n"
        "2     -                        not a ddprun status value: '{\"v\":1}'\n");
  const auto record = nlohmann::json::parse(job_status_json(job));
  CHECK(record["round"] == 3);
  CHECK(record["nodes"][1]["ranks"][1]["where"] == "/job/train.py:46 in doze");
  CHECK(record["nodes"][2]["problem"] == "not a ddprun status value: '{\"v\":1}'");
}

TEST_CASE("status: file:line and the last collective", "[job_status]") {
  CHECK(where_file_line("a/b.py:12 in f") == "a/b.py:12");
  CHECK(where_file_line("a/b.py:12") == "a/b.py:12");
  CHECK(last_collective({}) == "");
  CHECK(last_collective({{0, -1, -1, ""}}) == "");
  CHECK(last_collective({{0, 4, -1, "nccl:broadcast"}}) == "in broadcast #4 of group 0");
  CHECK(last_collective({{2, 9, 9, "gloo:barrier"}, {1, 4, 4, "gloo:all_reduce"}}) ==
        "after all_reduce #4 of group 1");
}

TEST_CASE("status: published by a node, read back read-only in each state of a run",
          "[job_status]") {
  using Kind = ddprun::rdzv::BoardSnapshot::Kind;
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  ddprun::rdzv::StoreBoardReader reader(store, "rendezvous 'j' (test)");
  CHECK(reader.read(StatusPublisher::kNamePrefix).kind == Kind::kNoRun);
  store->set("job", "[\"train.py\"]");
  CHECK(reader.read(StatusPublisher::kNamePrefix).kind == Kind::kForming);
  store->set("round", "2");
  CHECK(reader.read(StatusPublisher::kNamePrefix).kind == Kind::kForming);  // no r2/final
  store->set("r2/final", "2");
  const auto keys_before = store->num_keys();

  StallGate gate;
  NodeSample sample;
  WorkerPosition w;
  w.local_rank = 1;
  w.pid = 77;
  w.sampled = true;
  w.where = "/usr/lib/python3/dist-packages/torch/x.py:9 in wait";
  w.user_where = "train.py:5 in step";
  w.state = 'S';
  w.idle_s = 3;
  sample.workers.push_back(w);
  gate.publish(sample);
  ddprun::rdzv::StoreJobBoard board(store, 2, 1, 2, "test");
  StatusPublisher publisher(&gate, board, {"b", 2, 2, 1, 1, 3, [] { return 100.0; }});
  CHECK(gate.wants_samples());  // the watchdog publishes its samples while it lives
  publisher.tick(StatusPublisher::Clock::now());

  auto snap = reader.read(StatusPublisher::kNamePrefix);
  CHECK(store->num_keys() == keys_before + 1);  // the publisher's key; nothing of the reader's
  REQUIRE(snap.kind == Kind::kRound);
  CHECK(snap.round == 2);
  REQUIRE(snap.values.size() == 2);
  CHECK_FALSE(snap.values[0]);
  REQUIRE(snap.values[1]);
  auto got = decode_node_status(*snap.values[1]);
  REQUIRE(got);
  CHECK(got->node == 1);
  CHECK(got->time == 100.0);
  REQUIRE(got->ranks.size() == 2);
  CHECK(got->ranks[0].rank == 2);
  CHECK(got->ranks[0].state == "exited");  // not in a sample that has workers
  CHECK(got->ranks[1].rank == 3);
  CHECK(got->ranks[1].pid == 77);
  CHECK(got->ranks[1].where == "train.py:5 in step");
  CHECK(got->ranks[1].idle_s == 3.0);

  publisher.set_state("failed", 2);
  got = decode_node_status(*reader.read(StatusPublisher::kNamePrefix).values[1]);
  REQUIRE(got);
  CHECK(got->state == "failed");
  CHECK(got->restarts == 2);

  { StatusPublisher other(&gate, board, {"b", 2, 2, 1, 1, 3, {}}); }
  CHECK_FALSE(gate.wants_samples());
  store->set("r2/final", "two");
  CHECK_THROWS_AS(reader.read(StatusPublisher::kNamePrefix), ddprun::rdzv::RendezvousStateError);
  store->set("closed", "1");
  snap = reader.read(StatusPublisher::kNamePrefix);
  CHECK(snap.kind == Kind::kClosed);
  CHECK(snap.closed == "1");
}
