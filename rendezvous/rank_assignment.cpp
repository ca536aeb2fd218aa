// rank_assignment.cpp: group ranks from a round's descriptors (static node ranks or the
// automatic order) (rank_assignment.h).
#include "rendezvous/rank_assignment.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

namespace ddprun::rdzv {
namespace {

// How a conflict names a node: its label, and whether it gave --node-rank at all.
std::string noted(const NodeDesc& d) {
  return d.label() + (d.node_rank_defaulted ? " (no --node-rank given: 0 assumed)" : "");
}

// Slots in the automatic order: the rendezvous store's host first (group rank 0, the
// checkpoint writer, where the user pointed --rdzv-endpoint), then (address, host, pid),
// stable across rounds. The fallback order and the order of the checks.
std::vector<int> automatic_order(const std::vector<NodeDesc>& descs) {
  std::vector<int> order(descs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const NodeDesc& x = descs[static_cast<std::size_t>(a)];
    const NodeDesc& y = descs[static_cast<std::size_t>(b)];
    const bool x_later = !x.rdzv_host;
    const bool y_later = !y.rdzv_host;
    return std::tie(x_later, x.addr, x.host, x.pid, x.slot) <
           std::tie(y_later, y.addr, y.host, y.pid, y.slot);
  });
  return order;
}

}  // namespace

RankAssignment assign_group_ranks(const std::vector<NodeDesc>& descs, bool static_ranks,
                                  int max_nodes) {
  RankAssignment out;
  const int n = static_cast<int>(descs.size());
  const int limit = static_ranks ? n : max_nodes;
  const std::vector<int> automatic = automatic_order(descs);
  std::map<int, const NodeDesc*> by_node_rank;
  int given = 0;
  std::string conflict;  // c10d: every reason the given node ranks cannot be honoured
  const auto add_conflict = [&](const std::string& why) {
    conflict += (conflict.empty() ? "" : "; ") + why;
  };
  for (int i : automatic) {
    const NodeDesc& d = descs[static_cast<std::size_t>(i)];
    if (d.node_rank < 0) continue;
    ++given;
    if (d.node_rank >= limit) {
      std::string why = "node " + d.label() + " has --node-rank " + std::to_string(d.node_rank) +
                        ", outside [0, " + std::to_string(limit) + ")";
      if (static_ranks) {
        out.error = why;
        return out;
      }
      add_conflict(why);
      continue;
    }
    auto [it, inserted] = by_node_rank.emplace(d.node_rank, &d);
    if (!inserted) {
      std::string why = "node rank " + std::to_string(d.node_rank) + " is claimed by both " +
                        noted(*it->second) + " and " + noted(d);
      if (static_ranks) {
        out.error =
            why + "; give every node a distinct --node-rank in [0, " + std::to_string(limit) + ")";
        return out;
      }
      add_conflict(why);
    }
  }
  std::vector<int> order = automatic;
  if (given == n && conflict.empty()) {
    // Every node gave a distinct --node-rank: honour it (in an elastic round with fewer
    // than max nodes the ranks are compacted, keeping their order).
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return descs[static_cast<std::size_t>(a)].node_rank <
             descs[static_cast<std::size_t>(b)].node_rank;
    });
  } else if (given > 0) {
    // Scripts copied from one node often keep --node_rank=0 everywhere: a c10d launch
    // never fails over node ranks.
    out.ignored = conflict.empty() ? "only " + std::to_string(given) + " of " + std::to_string(n) +
                                         " nodes gave one"
                                   : conflict;
  }
  out.group_rank.resize(descs.size());
  for (int g = 0; g < n; ++g) out.group_rank[static_cast<std::size_t>(order[g])] = g;
  return out;
}

}  // namespace ddprun::rdzv
