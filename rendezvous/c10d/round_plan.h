// round_plan.h: what the round leader (slot 0 of a static / c10d round) decides once for
// every member from the round's N descriptors, and the small per-slot record it
// publishes in r<r>/rank/<slot> (keys.h). Every other member reads only its own record,
// so a round costs it a constant number of store requests, whatever N. Used by
// StoreRendezvous; table tests in tests/rendezvous/c10d/round_plan_test.cpp.
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/rendezvous.h"
#include "rendezvous/round_codec.h"
#include "rendezvous/round_config.h"

namespace ddprun::rdzv {

// One member's part of the round, as r<r>/rank/<slot> holds it:
//   {"g": 3, "n": 8, "b": 24, "w": 64, "rc": 0, "g0": 5, "note": 1, "x": ["10.0.0.7"]}
struct SlotPlan {
  int group_rank = 0;
  int group_world_size = 1;
  int rank_base = 0;
  int world_size = 1;
  int restart_count = 0;
  int rank0_slot = 0;  // the slot of group rank 0, which hosts the workers' store
  bool note = false;   // r<r>/note says why --node-rank was ignored
  // Up to two addresses of members on other machines (non-loopback), this slot's own
  // excluded: what gloo_interface() needs to choose GLOO_SOCKET_IFNAME.
  std::vector<std::string> elsewhere;

  bool operator==(const SlotPlan&) const = default;
};

std::string encode_slot_plan(const SlotPlan& plan);
// nullopt unless `json` is an object with the numeric fields.
std::optional<SlotPlan> decode_slot_plan(std::string_view json);

struct RoundPlan {
  std::vector<SlotPlan> slots;  // by slot; empty when refused
  // Why the round cannot run, without the rendezvous' name ("" = it can): the text
  // every member throws (RendezvousStateError), as each would have from the descriptors.
  std::string refused;
  std::string note;  // c10d: why --node-rank was ignored ("" = honoured or none given)
};

// The plan of a round from its descriptors (by slot): the job check (check_member_jobs
// with `c`), the group ranks (static or automatic order), each slot's layout, and the
// refusal of a loopback MASTER_ADDR for members elsewhere. `shared_store_addr` is
// the workers' store host when the workers share the rendezvous store ("" otherwise:
// group rank 0's address). `where` is stripped from the texts it would prefix.
RoundPlan plan_round(const std::vector<NodeDesc>& descs, int round, const RoundConfig& c,
                     bool static_ranks, const std::string& shared_store_addr,
                     const std::string& where);

// This member's RendezvousInfo from its plan (round, master_*, use_agent_store and
// gloo_socket_ifname left at their defaults).
RendezvousInfo info_of(const SlotPlan& plan);

// The descriptors gloo_interface() needs for this member: its plan's "elsewhere".
std::vector<NodeDesc> elsewhere_descs(const SlotPlan& plan);

}  // namespace ddprun::rdzv
