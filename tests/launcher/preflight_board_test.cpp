// The pre-flight check's board exchange (launcher/preflight/board_exchange.h) over a real
// store (StoreJobBoard on a MemoryStore), one thread per node: node 0 alone reads every
// node's value and answers, every node returns that one answer; with node 0 silent the
// others answer themselves after the step's deadline and still agree; a signal stops a
// waiting node. And the answers themselves (preflight_verdict.h): the published verdict
// round-trips with the bad nodes' rows, a corrupt one stops the job.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "launcher/preflight/board_exchange.h"
#include "launcher/preflight/preflight_verdict.h"
#include "rendezvous/c10d/store_job_board.h"
#include "store/memory_store.h"

using namespace ddprun::launcher::preflight;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Action = Verdict::Action;

namespace {

const BoardWait kSleep = [](std::chrono::milliseconds look) {
  std::this_thread::sleep_for(std::min(look, std::chrono::milliseconds(20)));
  return true;
};

// Runs one step on `nodes` threads (node `silent` shares nothing), each node's decide
// counting its calls; returns every node's answer ("-" for the silent node's).
std::vector<std::string> step(int nodes, int silent, Clock::time_point deadline,
                              std::vector<int>& decided) {
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  std::vector<std::string> answers(static_cast<std::size_t>(nodes), "-");
  decided.assign(static_cast<std::size_t>(nodes), 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < nodes; ++i) {
    if (i == silent) continue;
    threads.emplace_back([&, i] {
      ddprun::rdzv::StoreJobBoard board(store, 0, i, nodes, "test");
      const Decide decide = [&, i](const std::vector<std::string>& values) {
        ++decided[static_cast<std::size_t>(i)];
        std::string joined;
        for (const auto& v : values) joined += (v.empty() ? "_" : v) + ",";
        return joined;
      };
      answers[static_cast<std::size_t>(i)] = *decide_on_board(
          board, nodes, i, "step/", "v" + std::to_string(i), deadline, kSleep, decide);
    });
  }
  for (auto& t : threads) t.join();
  return answers;
}

}  // namespace

TEST_CASE("preflight board: node 0 alone reads every value, all read its one answer",
          "[preflight]") {
  std::vector<int> decided;
  const auto answers = step(6, -1, Clock::now() + 60s, decided);
  for (const auto& a : answers) CHECK(a == "v0,v1,v2,v3,v4,v5,");
  CHECK(decided == std::vector<int>{1, 0, 0, 0, 0, 0});
}

TEST_CASE("preflight board: with node 0 silent the others answer after the deadline, as one",
          "[preflight]") {
  std::vector<int> decided;
  const auto t0 = Clock::now();
  const auto answers = step(4, 0, t0 + 500ms, decided);
  CHECK(Clock::now() - t0 >= 500ms + kLeaderSlack);
  CHECK(answers[0] == "-");
  for (int i = 1; i < 4; ++i) CHECK(answers[static_cast<std::size_t>(i)] == "_,v1,v2,v3,");
  CHECK(decided[0] == 0);
  int deciders = 0;
  for (int d : decided) deciders += d;
  CHECK(deciders >= 1);  // each may decide; set_once keeps the first
}

TEST_CASE("preflight board: a node told to stop while it waits returns nothing", "[preflight]") {
  auto store = std::make_shared<ddprun::store::MemoryStore>();
  ddprun::rdzv::StoreJobBoard board(store, 0, 1, 2, "test");
  int looks = 0;
  const auto answer = decide_on_board(
      board, 2, 1, "step/", "x", Clock::now() + 60s,
      [&](std::chrono::milliseconds) { return ++looks < 3; },
      [](const std::vector<std::string>&) { return std::string("never"); });
  CHECK_FALSE(answer);
  CHECK(looks == 3);
}

TEST_CASE("preflight board: the answers - who needs the check, go, the published verdict",
          "[preflight]") {
  CHECK(need_answer({"0", "0", "0"}) == kSkip);
  CHECK(need_answer({"0", "1", "0"}) == kRun);
  CHECK(need_answer({"0", "", "0"}) == kRun);  // a silent node: the check runs
  NodeResult ok;
  ok.host = "h";
  ok.key = "h";
  ok.checks = {{"import torch", true, 1.0, "2.14.0"}, {"cpu", true, 0.3, "1 threads"}};
  NodeResult broken = ok;
  broken.host = broken.key = "bad-host";
  broken.address = "10.0.0.9";
  broken.checks[0] = {"import torch", false, 0.1, "ModuleNotFoundError: No module named 'torch'"};
  const std::vector<std::string> good = {to_json(ok), to_json(ok), to_json(ok)};
  CHECK(findings_answer(good, false, {}, 10s, nullptr) == kGo);
  std::vector<NodeResult> read;
  const std::string passed = findings_answer(good, true, {}, 10s, &read);
  CHECK(read.size() == 3);
  std::vector<NodeResult> rows;
  CHECK(read_published(passed, rows).bad.empty());
  CHECK(rows.size() == 3);
  // Node 1 failed and node 2 was silent: the answer names both with their rows.
  const std::string answer =
      findings_answer({to_json(ok), to_json(broken), ""}, false, {.min_nodes = 1}, 10s, &read);
  REQUIRE(answer != kGo);
  const Verdict v = read_published(answer, rows);
  CHECK(v.action == Action::kExclude);
  REQUIRE(v.bad.size() == 2);
  CHECK(v.bad[0].node == 1);
  CHECK(v.bad[1].why == "shared no findings within 10 s");
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].host == "node 0");  // a good node's row is not published
  CHECK(rows[1].host == "bad-host");
  CHECK(rows[1].address == "10.0.0.9");
  CHECK(rows[2].missing == "shared no findings within 10 s");
  for (const char* bad :
       {"", "null", R"({"verdict": {"action": 7, "bad": [], "why": ""}, "nodes": 1, "rows": {}})",
        R"({"verdict": {"action": 1, "bad": [{"node": 5, "why": "x"}], "why": ""}, "nodes": 2,)"
        R"( "rows": {}})",
        R"({"verdict": {"action": 1, "bad": [], "why": ""}, "nodes": 2, "rows": {"9": {}}})",
        "{\"verdict\":"}) {
    CAPTURE(bad);
    const Verdict x = read_published(bad, rows);
    CHECK(x.action == Action::kStop);
    CHECK(x.why.find("the shared verdict is unreadable") == 0);
  }
}
