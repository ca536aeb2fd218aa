// Table tests of rank_assignment.h: who gets which group rank, what conflicts are named
// (in the same words whatever the slot order, so every agent warns alike).
#include "rendezvous/rank_assignment.h"

#include <algorithm>
#include <catch2/catch.hpp>

using namespace ddprun::rdzv;

namespace {

// A node at 127.0.0.<last> with pid <last>, holding `slot`.
NodeDesc node(int slot, int last, int node_rank = -1, bool defaulted = false, int nproc = 1) {
  NodeDesc d;
  d.slot = slot;
  d.addr = "127.0.0." + std::to_string(last);
  d.pid = last;
  d.node_rank = node_rank;
  d.node_rank_defaulted = defaulted;
  d.nproc = nproc;
  return d;
}

// {last octet, node rank} per slot.
std::vector<NodeDesc> nodes(const std::vector<std::pair<int, int>>& spec) {
  std::vector<NodeDesc> out;
  for (const auto& [last, rank] : spec) {
    out.push_back(node(static_cast<int>(out.size()), last, rank));
  }
  return out;
}

// `descs` with the node in `slot` hosting the rendezvous store.
std::vector<NodeDesc> hosted_by(std::vector<NodeDesc> descs, std::size_t slot) {
  descs.at(slot).rdzv_host = true;
  return descs;
}

}  // namespace

TEST_CASE("rank assignment: honoured, automatic, or refused", "[ranks]") {
  struct Row {
    const char* what;
    std::vector<NodeDesc> descs;
    bool static_ranks;
    int max_nodes;
    std::vector<int> ranks;  // by slot; empty when refused
    std::string error;
    std::string ignored;
  };
  const std::vector<Row> rows{
      {"c10d, no ranks: address order",
       nodes({{3, -1}, {1, -1}, {2, -1}}),
       false,
       3,
       {2, 0, 1},
       "",
       ""},
      {"c10d, no ranks: the rendezvous host first, then address order",
       hosted_by(nodes({{3, -1}, {1, -1}, {2, -1}, {4, -1}}), 2),
       false,
       4,
       {2, 1, 0, 3},
       "",
       ""},
      {"c10d, no ranks: the rendezvous host first even at the largest address",
       hosted_by(nodes({{3, -1}, {1, -1}, {2, -1}}), 0),
       false,
       3,
       {0, 1, 2},
       "",
       ""},
      {"c10d, distinct ranks: honoured over the rendezvous host",
       hosted_by(nodes({{1, 2}, {2, 0}, {3, 1}}), 0),
       false,
       3,
       {2, 0, 1},
       "",
       ""},
      {"c10d, some ranks: ignored, the rendezvous host first",
       hosted_by(nodes({{2, 0}, {1, -1}, {3, -1}}), 2),
       false,
       3,
       {2, 1, 0},
       "",
       "only 1 of 3 nodes gave one"},
      {"static: node ranks, whoever hosts",
       hosted_by(nodes({{2, 0}, {1, 1}}), 1),
       true,
       2,
       {0, 1},
       "",
       ""},
      {"c10d, distinct ranks: honoured",
       nodes({{1, 2}, {2, 0}, {3, 1}}),
       false,
       3,
       {2, 0, 1},
       "",
       ""},
      {"c10d MIN:MAX, ranks with gaps: compacted in their order",
       nodes({{1, 3}, {2, 1}, {3, 2}}),
       false,
       4,
       {2, 0, 1},
       "",
       ""},
      {"c10d, some ranks: ignored",
       nodes({{2, 0}, {1, -1}, {3, -1}}),
       false,
       3,
       {1, 0, 2},
       "",
       "only 1 of 3 nodes gave one"},
      {"c10d, colliding and out of range: every conflict, in address order",
       nodes({{3, 7}, {2, 0}, {1, 0}}),
       false,
       3,
       {2, 1, 0},
       "",
       "node rank 0 is claimed by both 127.0.0.1 pid 1 and 127.0.0.2 pid 2; node 127.0.0.3 pid "
       "3 has --node-rank 7, outside [0, 3)"},
      {"static, distinct ranks", nodes({{2, 0}, {1, 1}}), true, 2, {0, 1}, "", ""},
      {"static, claimed twice",
       nodes({{1, 0}, {2, 1}, {3, 1}}),
       true,
       3,
       {},
       "node rank 1 is claimed by both 127.0.0.2 pid 2 and 127.0.0.3 pid 3; give every node a "
       "distinct --node-rank in [0, 3)",
       ""},
      {"static, out of range for the round",
       nodes({{1, 0}, {2, 2}}),
       true,
       4,
       {},
       "node 127.0.0.2 pid 2 has --node-rank 2, outside [0, 2)",
       ""},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    // Every slot order gives the same answer per node: the agents agree.
    std::vector<NodeDesc> descs = row.descs;
    std::vector<int> perm(descs.size());
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
    do {
      std::vector<NodeDesc> shuffled;
      for (int i : perm) {
        shuffled.push_back(descs[static_cast<std::size_t>(i)]);
        shuffled.back().slot = static_cast<int>(shuffled.size()) - 1;
      }
      RankAssignment got = assign_group_ranks(shuffled, row.static_ranks, row.max_nodes);
      CHECK(got.error == row.error);
      CHECK(got.ignored == row.ignored);
      REQUIRE(got.group_rank.size() == row.ranks.size());
      for (std::size_t s = 0; s < row.ranks.size(); ++s) {
        CHECK(got.group_rank[s] == row.ranks[static_cast<std::size_t>(perm[s])]);
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST_CASE("rank assignment: a node that gave no --node-rank is named so", "[ranks]") {
  std::vector<NodeDesc> descs{node(0, 1, 0), node(1, 2, 0, true)};
  CHECK(assign_group_ranks(descs, true, 2).error ==
        "node rank 0 is claimed by both 127.0.0.1 pid 1 and 127.0.0.2 pid 2 (no --node-rank "
        "given: 0 assumed); give every node a distinct --node-rank in [0, 2)");
}

TEST_CASE("rank assignment: ties on the address go by host, then pid", "[ranks]") {
  std::vector<NodeDesc> descs{node(0, 1), node(1, 1), node(2, 1)};
  descs[0].host = "b";
  descs[1].host = "a";
  descs[1].pid = 9;
  descs[2].host = "a";
  descs[2].pid = 3;
  CHECK(assign_group_ranks(descs, false, 3).group_rank == std::vector<int>{2, 1, 0});
}
