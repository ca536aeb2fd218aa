// Table tests of round_layout.h: what a formed round gives each member (group ranks, rank
// bases, world size, the round's restart count, group rank 0's slot), the rounds it
// refuses (another job, static node ranks, a loopback MASTER_ADDR for members elsewhere),
// the note when --node-rank is ignored, and each slot's gloo hint. Both backends apply it
// (tests/rendezvous/handler_contract_test.cpp).
#include "rendezvous/round_layout.h"

#include <catch2/catch.hpp>

using namespace ddprun::rdzv;

namespace {

// Slot i at addrs[i] (pid 100 + i) with nproc[i] workers.
std::vector<NodeDesc> members(const std::vector<std::string>& addrs, std::vector<int> nproc = {}) {
  std::vector<NodeDesc> out;
  for (std::size_t i = 0; i < addrs.size(); ++i) {
    NodeDesc d;
    d.slot = static_cast<int>(i);
    d.addr = addrs[i];
    d.pid = 100 + static_cast<long>(i);
    d.nproc = i < nproc.size() ? nproc[i] : 1;
    out.push_back(d);
  }
  return out;
}

RoundConfig config(int max_nodes) {
  RoundConfig c;
  c.max_nodes = max_nodes;
  c.job_check = false;
  return c;
}

}  // namespace

TEST_CASE("round layout: ranks, rank bases and world size by slot", "[layout]") {
  struct Row {
    const char* what;
    std::vector<std::string> addrs;
    std::vector<int> nproc;
    std::vector<int> group_rank;  // by slot
    std::vector<int> rank_base;   // by slot
    int world_size;
    int rank0_slot;
  };
  const std::vector<Row> rows{
      {"one node", {"10.0.0.1"}, {4}, {0}, {0}, 4, 0},
      {"address order, nproc differs",
       {"10.0.0.3", "10.0.0.1", "10.0.0.2"},
       {1, 2, 3},
       {2, 0, 1},
       {5, 0, 2},
       6,
       1},
      {"four nodes, reverse join order",
       {"127.0.0.4", "127.0.0.3", "127.0.0.2", "127.0.0.1"},
       {2, 1, 3, 2},
       {3, 2, 1, 0},
       {6, 5, 2, 0},
       8,
       3},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    const std::vector<NodeDesc> descs = members(row.addrs, row.nproc);
    const RoundLayout l = layout_round(descs, 0, config(static_cast<int>(descs.size())), false, "");
    REQUIRE(l.refused.empty());
    REQUIRE(l.slots.size() == descs.size());
    for (std::size_t s = 0; s < descs.size(); ++s) {
      CHECK(l.slots[s].group_rank == row.group_rank[s]);
      CHECK(l.slots[s].rank_base == row.rank_base[s]);
      CHECK(l.slots[s].world_size == row.world_size);
      CHECK(l.slots[s].group_world_size == static_cast<int>(descs.size()));
      CHECK(l.slots[s].rank0_slot == row.rank0_slot);
      const RendezvousInfo info = slot_info(l.slots[s]);
      CHECK(info.group_rank == row.group_rank[s]);
      CHECK(info.rank_base == row.rank_base[s]);
      CHECK(info.world_size == row.world_size);
    }
  }
}

TEST_CASE("round layout: the restart count is the round's most, on every slot", "[layout]") {
  std::vector<NodeDesc> descs = members({"10.0.0.1", "10.0.0.2", "10.0.0.3"});
  descs[1].restarts = 2;
  descs[2].restarts = 1;
  for (const SlotLayout& s : layout_round(descs, 0, config(3), false, "").slots) {
    CHECK(s.restart_count == 2);
  }
}

TEST_CASE("round layout: refusals, without the rendezvous' name", "[layout]") {
  struct Row {
    const char* what;
    std::vector<std::string> addrs;
    bool rank0_hosts;  // slot 0 hosts the rendezvous store: group rank 0
    bool static_ranks;
    std::vector<int> node_ranks;  // by slot; empty = none given
    std::string master_host;
    std::string refused;  // what the refusal starts with; "" = none
  };
  const std::vector<Row> rows{
      {"group rank 0 loopback, a member elsewhere",
       {"127.0.1.1", "10.0.0.2"},
       true,
       false,
       {},
       "",
       "group rank 0 (127.0.1.1 pid 100) would give the workers the loopback address 127.0.1.1 "
       "as MASTER_ADDR, which node 10.0.0.2 pid 101 cannot reach; start ddprun on 127.0.1.1 "
       "with --local-addr"},
      {"a shared store host on loopback, members elsewhere",
       {"10.0.0.1", "10.0.0.2"},
       false,
       false,
       {},
       "localhost",
       "group rank 0 (10.0.0.1 pid 100) would give the workers the loopback address localhost"},
      {"one machine on 127.0.0.x: nothing to refuse",
       {"127.0.0.1", "127.0.0.2"},
       false,
       false,
       {},
       "",
       ""},
      {"group rank 0 reachable", {"10.0.0.1", "127.0.0.2"}, false, false, {}, "", ""},
      {"static node ranks claimed twice",
       {"10.0.0.1", "10.0.0.2"},
       false,
       true,
       {0, 0},
       "",
       "node rank 0 is claimed by both"},
      {"static node rank out of range",
       {"10.0.0.1", "10.0.0.2"},
       false,
       true,
       {0, 2},
       "",
       "node 10.0.0.2 pid 101 has --node-rank 2, outside [0, 2)"},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    std::vector<NodeDesc> descs = members(row.addrs);
    descs[0].rdzv_host = row.rank0_hosts;
    for (std::size_t s = 0; s < row.node_ranks.size(); ++s) descs[s].node_rank = row.node_ranks[s];
    const RoundLayout l = layout_round(descs, 0, config(2), row.static_ranks, row.master_host);
    if (row.refused.empty()) {
      CHECK(l.refused.empty());
      CHECK(l.slots.size() == descs.size());
    } else {
      CHECK_THAT(l.refused, Catch::StartsWith(row.refused));
      CHECK(l.slots.empty());
    }
  }
}

TEST_CASE("round layout: a member of another job refuses the round", "[layout]") {
  RoundConfig c = config(2);
  c.job_check = true;
  c.job_command = {"train.py"};
  std::vector<NodeDesc> descs = members({"10.0.0.1", "10.0.0.2"});
  descs[0].job = job_fingerprint({"train.py"});
  descs[1].job = job_fingerprint({"other.py"});
  const RoundLayout l = layout_round(descs, 7, c, false, "");
  CHECK(l.refused ==
        "node 10.0.0.2 pid 101 of round 7 runs another job ([\"other.py\"]), this "
        "node `train.py`");
  CHECK(l.slots.empty());
  c.job_check = false;
  CHECK(layout_round(descs, 7, c, false, "").refused.empty());
}

TEST_CASE("round layout: c10d ignores conflicting node ranks with a note on every slot",
          "[layout]") {
  std::vector<NodeDesc> descs = members({"10.0.0.2", "10.0.0.1"});
  for (auto& d : descs) d.node_rank = 0;
  RoundLayout l = layout_round(descs, 0, config(2), false, "");
  CHECK(l.refused.empty());
  CHECK_THAT(l.note, Catch::StartsWith("node rank 0 is claimed by both 10.0.0.1 pid 101 and"));
  for (const SlotLayout& s : l.slots) CHECK(s.note);
  CHECK(l.slots[1].group_rank == 0);  // the automatic order: by address
  // Distinct ranks are honoured, without a note.
  descs[0].node_rank = 0;
  descs[1].node_rank = 1;
  l = layout_round(descs, 0, config(2), false, "");
  CHECK(l.note.empty());
  CHECK(l.slots[0].group_rank == 0);
  CHECK_FALSE(l.slots[0].note);
}

TEST_CASE("round layout: the gloo hint names up to two members elsewhere, never the slot itself",
          "[layout]") {
  struct Row {
    const char* what;
    std::vector<std::string> addrs;
    std::vector<std::vector<std::string>> elsewhere;  // by slot
  };
  const std::vector<Row> rows{
      {"one machine: none", {"127.0.0.1", "127.0.0.2"}, {{}, {}}},
      {"two machines", {"10.0.0.1", "10.0.0.2"}, {{"10.0.0.2"}, {"10.0.0.1"}}},
      {"a loopback member is never named",
       {"10.0.0.1", "127.0.0.2", "10.0.0.3"},
       {{"10.0.0.3"}, {"10.0.0.1", "10.0.0.3"}, {"10.0.0.1"}}},
      {"many machines: two each",
       {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"},
       {{"10.0.0.2", "10.0.0.3"},
        {"10.0.0.1", "10.0.0.3"},
        {"10.0.0.1", "10.0.0.2"},
        {"10.0.0.1", "10.0.0.2"}}},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    const RoundLayout l =
        layout_round(members(row.addrs), 0, config(static_cast<int>(row.addrs.size())), false, "");
    REQUIRE(l.slots.size() == row.addrs.size());
    for (std::size_t s = 0; s < row.addrs.size(); ++s)
      CHECK(l.slots[s].elsewhere == row.elsewhere[s]);
  }
}
