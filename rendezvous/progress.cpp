// progress.cpp: describe_progress() (progress.h), the line a waiting agent logs: who
// joined, who is missing, and why the round has not formed.
#include "rendezvous/progress.h"

#include <set>

namespace ddprun::rdzv {
namespace {

// "0, 2, 3": the ranks in [0, max) not in `seen`.
std::string absent_ranks(const std::set<int>& seen, int max) {
  std::string out;
  for (int k = 0; k < max; ++k) {
    if (!seen.count(k)) out += (out.empty() ? "" : ", ") + std::to_string(k);
  }
  return out;
}

}  // namespace

Progress describe_progress(const ProgressInput& in) {
  Progress out;
  std::string joined;
  std::set<int> ranks;
  bool all_ranked = static_cast<std::int64_t>(in.described) == in.joined;
  for (const NodeDesc& d : in.descs) {
    joined += (joined.empty() ? "" : ", ") + d.label();
    if (d.node_rank < 0) all_ranked = false;
    if (d.node_rank >= 0 && !ranks.insert(d.node_rank).second && in.static_ranks) {
      out.error = "node rank " + std::to_string(d.node_rank) + " is claimed twice (again by " +
                  d.label() + (d.node_rank_defaulted ? ", which gave no --node-rank" : "") +
                  "); give every node a distinct --node-rank in [0, " +
                  std::to_string(in.max_nodes) + ")";
      return out;
    }
  }
  std::string missing;
  if (in.static_ranks) {
    const std::string absent = absent_ranks(ranks, in.max_nodes);
    missing = absent.empty() ? "" : "; missing node ranks: " + absent;
  } else if (in.joined < in.min_nodes) {
    missing = "; waiting for " + std::to_string(in.min_nodes - in.joined) + " more";
    if (all_ranked && in.joined > 0) {  // every node so far gave --node-rank: name the others
      missing += " (node ranks not seen yet: " + absent_ranks(ranks, in.max_nodes) + ")";
    }
  } else if (!in.retired) {
    missing = "; round " + std::to_string(in.round - 1) +
              " is still running (full, or its nodes have not left it yet)";
  } else {
    missing = "; in last call for up to " + std::to_string(in.max_nodes - in.joined) + " more";
  }
  out.line = "round " + std::to_string(in.round) + ": " + std::to_string(in.joined) +
             " joined (min " + std::to_string(in.min_nodes) + ", max " +
             std::to_string(in.max_nodes) + "): [" + joined + "]" + missing + "; " +
             std::to_string(in.secs_left) + " s left";
  return out;
}

spdlog::level::level_enum progress_level(int nth) {
  return nth % 6 == 0 ? spdlog::level::warn : spdlog::level::info;
}

}  // namespace ddprun::rdzv
