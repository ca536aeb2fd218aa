// Table tests of progress.h: the line a waiting agent logs, and the static duplicate
// that ends the wait.
#include "rendezvous/progress.h"

#include <catch2/catch.hpp>

using namespace ddprun::rdzv;

namespace {

NodeDesc node(int last, int node_rank, bool defaulted = false) {
  NodeDesc d;
  d.addr = "127.0.0." + std::to_string(last);
  d.pid = last;
  d.node_rank = node_rank;
  d.node_rank_defaulted = defaulted;
  return d;
}

}  // namespace

TEST_CASE("progress: who is in, what is missing, why no round yet", "[progress]") {
  struct Row {
    const char* what;
    ProgressInput in;
    std::string line;
  };
  auto input = [](int round, int joined, std::vector<NodeDesc> descs, bool retired, int min_n,
                  int max_n, bool static_ranks) {
    ProgressInput in;
    in.round = round;
    in.joined = joined;
    in.described = descs.size();
    in.descs = std::move(descs);
    in.retired = retired;
    in.min_nodes = min_n;
    in.max_nodes = max_n;
    in.static_ranks = static_ranks;
    in.secs_left = 42;
    return in;
  };
  std::vector<Row> rows{
      {"c10d, too few", input(0, 1, {node(1, -1)}, true, 2, 3, false),
       "round 0: 1 joined (min 2, max 3): [127.0.0.1 pid 1]; waiting for 1 more; 42 s left"},
      {"c10d, too few, all ranked so far: the ranks not seen",
       input(0, 2, {node(1, 0), node(2, 2)}, true, 3, 4, false),
       "round 0: 2 joined (min 3, max 4): [127.0.0.1 pid 1, 127.0.0.2 pid 2]; waiting for 1 "
       "more (node ranks not seen yet: 1, 3); 42 s left"},
      {"c10d, enough, the previous round still runs",
       input(5, 2, {node(1, -1), node(2, -1)}, false, 2, 4, false),
       "round 5: 2 joined (min 2, max 4): [127.0.0.1 pid 1, 127.0.0.2 pid 2]; round 4 is still "
       "running (full, or its nodes have not left it yet); 42 s left"},
      {"c10d, enough: last call",
       input(1, 3, {node(1, -1), node(2, -1), node(3, -1)}, true, 2, 4, false),
       "round 1: 3 joined (min 2, max 4): [127.0.0.1 pid 1, 127.0.0.2 pid 2, 127.0.0.3 pid 3]; "
       "in last call for up to 1 more; 42 s left"},
      {"c10d, duplicate ranks are no error",
       input(0, 2, {node(1, 0), node(2, 0)}, true, 3, 3, false),
       "round 0: 2 joined (min 3, max 3): [127.0.0.1 pid 1, 127.0.0.2 pid 2]; waiting for 1 "
       "more (node ranks not seen yet: 1, 2); 42 s left"},
      {"static, the node ranks missing", input(0, 1, {node(2, 0)}, true, 3, 3, true),
       "round 0: 1 joined (min 3, max 3): [127.0.0.2 pid 2]; missing node ranks: 1, 2; 42 s "
       "left"},
      {"static, nobody yet", input(0, 0, {}, true, 2, 2, true),
       "round 0: 0 joined (min 2, max 2): []; missing node ranks: 0, 1; 42 s left"},
  };
  // A descriptor not written yet: not "all ranked", so no ranks are named.
  ProgressInput partial = input(0, 2, {node(1, 0)}, true, 3, 3, false);
  rows.push_back({"c10d, a slot without descriptor", partial,
                  "round 0: 2 joined (min 3, max 3): [127.0.0.1 pid 1]; waiting for 1 more; 42 s "
                  "left"});
  for (const auto& row : rows) {
    INFO(row.what);
    Progress p = describe_progress(row.in);
    CHECK(p.error.empty());
    CHECK(p.line == row.line);
  }
}

TEST_CASE("progress: static, a node rank claimed twice ends the wait", "[progress]") {
  ProgressInput in;
  in.joined = 2;
  in.described = 2;
  in.descs = {node(1, 0), node(2, 0, true)};
  in.min_nodes = in.max_nodes = 2;
  in.static_ranks = true;
  CHECK(describe_progress(in).error ==
        "node rank 0 is claimed twice (again by 127.0.0.2 pid 2, which gave no --node-rank); "
        "give every node a distinct --node-rank in [0, 2)");
}

TEST_CASE("progress: the first waiting line and one each 30 s at WARNING, INFO between",
          "[progress]") {
  // At the default 5 s interval: warnings at 5 s, 35 s, 65 s; the rest at INFO.
  CHECK(progress_level(0) == spdlog::level::warn);
  for (int nth = 1; nth < 6; ++nth) CHECK(progress_level(nth) == spdlog::level::info);
  CHECK(progress_level(6) == spdlog::level::warn);
  CHECK(progress_level(12) == spdlog::level::warn);
}
