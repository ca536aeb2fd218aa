// round_layout.cpp: a formed round's layout for every member, its refusals and the gloo
// hint (round_layout.h).
#include "rendezvous/round_layout.h"

#include <algorithm>

#include "rendezvous/endpoint.h"
#include "rendezvous/published_address.h"
#include "rendezvous/rank_assignment.h"
#include "rendezvous/round_member.h"

namespace ddprun::rdzv {
namespace {

constexpr std::size_t kMaxNote = 2000;  // a note names conflicts: O(N) when all collide

// Each slot's ranks: the rank bases are prefix sums of nproc in group-rank order.
std::vector<SlotLayout> lay_out(const std::vector<NodeDesc>& descs, const std::vector<int>& ranks) {
  const std::size_t n = descs.size();
  std::vector<int> base(n + 1, 0);  // by group rank
  int restarts = 0;
  for (std::size_t s = 0; s < n; ++s) {
    base[static_cast<std::size_t>(ranks[s]) + 1] = descs[s].nproc;
    restarts = std::max(restarts, descs[s].restarts);
  }
  for (std::size_t g = 0; g < n; ++g) base[g + 1] += base[g];
  const int rank0 = static_cast<int>(std::find(ranks.begin(), ranks.end(), 0) - ranks.begin());
  std::vector<SlotLayout> out(n);
  for (std::size_t s = 0; s < n; ++s) {
    SlotLayout& p = out[s];
    p.group_rank = ranks[s];
    p.group_world_size = static_cast<int>(n);
    p.rank_base = base[static_cast<std::size_t>(ranks[s])];
    p.world_size = base[n];
    p.restart_count = restarts;
    p.rank0_slot = rank0;
  }
  return out;
}

// The gloo hint: the first three members elsewhere (non-loopback addresses) are enough
// for each slot to have two that are not itself.
void add_gloo_hints(const std::vector<NodeDesc>& descs, std::vector<SlotLayout>& slots) {
  std::vector<std::size_t> remote;
  for (std::size_t s = 0; s < descs.size() && remote.size() < 3; ++s) {
    if (!is_loopback_host(descs[s].addr)) remote.push_back(s);
  }
  for (std::size_t s = 0; s < slots.size(); ++s) {
    for (std::size_t r : remote) {
      if (r != s && slots[s].elsewhere.size() < 2) slots[s].elsewhere.push_back(descs[r].addr);
    }
  }
}

}  // namespace

RoundLayout layout_round(const std::vector<NodeDesc>& descs, int round, const RoundConfig& c,
                         bool static_ranks, const std::string& master_host) {
  RoundLayout out;
  if (descs.empty()) {
    out.refused = "round " + std::to_string(round) + " has no members";
    return out;
  }
  out.refused = member_jobs_error(descs, round, c);
  if (!out.refused.empty()) return out;
  RankAssignment assigned = assign_group_ranks(descs, static_ranks, c.max_nodes);
  if (!assigned.error.empty()) {
    out.refused = assigned.error;
    return out;
  }
  const std::vector<int>& ranks = assigned.group_rank;
  std::vector<SlotLayout> slots = lay_out(descs, ranks);
  const std::string& rank0_addr = descs[static_cast<std::size_t>(slots.front().rank0_slot)].addr;
  out.refused = loopback_master_error(master_host.empty() ? rank0_addr : master_host, descs, ranks);
  if (!out.refused.empty()) return out;
  out.note = assigned.ignored;
  if (out.note.size() > kMaxNote) out.note = out.note.substr(0, kMaxNote) + "; ...";
  for (SlotLayout& s : slots) s.note = !out.note.empty();
  add_gloo_hints(descs, slots);
  out.slots = std::move(slots);
  return out;
}

RendezvousInfo slot_info(const SlotLayout& s) {
  RendezvousInfo info;
  info.group_rank = s.group_rank;
  info.group_world_size = s.group_world_size;
  info.rank_base = s.rank_base;
  info.world_size = s.world_size;
  info.restart_count = s.restart_count;
  return info;
}

}  // namespace ddprun::rdzv
