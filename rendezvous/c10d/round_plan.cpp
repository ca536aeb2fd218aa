// round_plan.cpp: the round leader's plan for every slot and its per-slot record
// (round_plan.h).
#include "rendezvous/c10d/round_plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "rendezvous/published_address.h"
#include "rendezvous/rank_assignment.h"
#include "rendezvous/round_member.h"

namespace ddprun::rdzv {
namespace {

constexpr std::size_t kMaxNote = 2000;  // a note names conflicts: O(N) when all collide

std::string without_where(const std::string& text, const std::string& where) {
  const std::string prefix = where + ": ";
  return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text;
}

}  // namespace

std::string encode_slot_plan(const SlotPlan& p) {
  nlohmann::json j{{"g", p.group_rank}, {"n", p.group_world_size}, {"b", p.rank_base},
                   {"w", p.world_size}, {"rc", p.restart_count},   {"g0", p.rank0_slot}};
  if (p.note) j["note"] = 1;
  if (!p.elsewhere.empty()) j["x"] = p.elsewhere;
  return j.dump();
}

std::optional<SlotPlan> decode_slot_plan(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  SlotPlan p;
  for (auto [key, field] : {std::pair{"g", &p.group_rank}, std::pair{"n", &p.group_world_size},
                            std::pair{"b", &p.rank_base}, std::pair{"w", &p.world_size},
                            std::pair{"rc", &p.restart_count}, std::pair{"g0", &p.rank0_slot}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    *field = it->get<int>();
  }
  p.note = j.contains("note");
  if (auto it = j.find("x"); it != j.end()) {
    if (!it->is_array()) return std::nullopt;
    for (const auto& a : *it) {
      if (!a.is_string()) return std::nullopt;
      p.elsewhere.push_back(a.get<std::string>());
    }
  }
  return p;
}

RoundPlan plan_round(const std::vector<NodeDesc>& descs, int round, const RoundConfig& c,
                     bool static_ranks, const std::string& shared_store_addr,
                     const std::string& where) {
  RoundPlan out;
  try {
    check_member_jobs(descs, round, c, where);
  } catch (const RendezvousError& e) {
    out.refused = without_where(e.what(), where);
    return out;
  }
  RankAssignment assigned = assign_group_ranks(descs, static_ranks, c.max_nodes);
  if (!assigned.error.empty()) {
    out.refused = assigned.error;
    return out;
  }
  const std::vector<int>& ranks = assigned.group_rank;
  const auto first = std::find(ranks.begin(), ranks.end(), 0) - ranks.begin();
  const NodeDesc& rank0 = descs[static_cast<std::size_t>(first)];
  const std::string master_host = shared_store_addr.empty() ? rank0.addr : shared_store_addr;
  out.refused = loopback_master_error(master_host, descs, ranks);
  if (!out.refused.empty()) return out;
  out.note = assigned.ignored;
  if (out.note.size() > kMaxNote) out.note = out.note.substr(0, kMaxNote) + "; ...";
  // The members elsewhere (non-loopback addresses), the first three: enough for each
  // slot to have two that are not itself.
  std::vector<int> remote;
  for (std::size_t s = 0; s < descs.size() && remote.size() < 3; ++s) {
    if (!is_loopback_host(descs[s].addr)) remote.push_back(static_cast<int>(s));
  }
  // round_layout() for every slot at once: the rank bases are prefix sums in rank order.
  const std::size_t n = descs.size();
  std::vector<int> base(n + 1, 0);  // by group rank
  int restarts = 0;
  for (std::size_t s = 0; s < n; ++s) {
    base[static_cast<std::size_t>(ranks[s]) + 1] = descs[s].nproc;
    restarts = std::max(restarts, descs[s].restarts);
  }
  for (std::size_t g = 0; g < n; ++g) base[g + 1] += base[g];
  for (std::size_t s = 0; s < n; ++s) {
    SlotPlan p;
    p.group_rank = ranks[s];
    p.group_world_size = static_cast<int>(n);
    p.rank_base = base[static_cast<std::size_t>(ranks[s])];
    p.world_size = base[n];
    p.restart_count = restarts;
    p.rank0_slot = static_cast<int>(first);
    p.note = !out.note.empty();
    for (int r : remote) {
      if (r != static_cast<int>(s) && p.elsewhere.size() < 2) {
        p.elsewhere.push_back(descs[static_cast<std::size_t>(r)].addr);
      }
    }
    out.slots.push_back(std::move(p));
  }
  return out;
}

RendezvousInfo info_of(const SlotPlan& p) {
  RendezvousInfo info;
  info.group_rank = p.group_rank;
  info.group_world_size = p.group_world_size;
  info.rank_base = p.rank_base;
  info.world_size = p.world_size;
  info.restart_count = p.restart_count;
  return info;
}

std::vector<NodeDesc> elsewhere_descs(const SlotPlan& p) {
  std::vector<NodeDesc> out;
  for (const std::string& a : p.elsewhere) {
    NodeDesc d;
    d.slot = -1;
    d.addr = a;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace ddprun::rdzv
