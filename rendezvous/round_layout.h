// round_layout.h: what a formed round gives each of its members, whichever backend formed
// it (StoreRendezvous's round leader, for every slot at once; EtcdRendezvous, each member
// for itself): layout_round() checks the members' jobs, assigns the group ranks
// (rank_assignment.h), lays out each slot's ranks, refuses a loopback MASTER_ADDR for
// members elsewhere and names, per slot, the members elsewhere that gloo_interface()
// needs (the gloo hint). Table tests in tests/rendezvous/round_layout_test.cpp; the
// handler contract (tests/rendezvous/handler_contract_test.cpp) checks that every backend
// applies it. Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "rendezvous/rendezvous.h"
#include "rendezvous/round_codec.h"
#include "rendezvous/round_config.h"

namespace ddprun::rdzv {

// One member's part of a formed round (c10d publishes it as r<R>/rank/<slot>: round_plan.h).
struct SlotLayout {
  int group_rank = 0;
  int group_world_size = 1;
  int rank_base = 0;  // the nproc of the lower group ranks
  int world_size = 1;
  int restart_count = 0;  // the most restarts any member had spent (the same on every node)
  int rank0_slot = 0;     // the slot of group rank 0, which hosts the workers' store
  bool note = false;      // the round has a note (--node-rank ignored)
  // The gloo hint: up to two addresses of members on other machines (non-loopback), this
  // slot's own excluded: what gloo_interface() needs to choose GLOO_SOCKET_IFNAME.
  std::vector<std::string> elsewhere;

  bool operator==(const SlotLayout&) const = default;
};

struct RoundLayout {
  std::vector<SlotLayout> slots;  // by slot; empty when refused
  // Why the round cannot run, without the rendezvous' name ("" = it can): the text every
  // member throws (RendezvousStateError), as each would from the descriptors.
  std::string refused;
  // c10d: why --node-rank was ignored, at most about 2000 bytes ("" = honoured or none
  // given); every slot's `note` says whether there is one.
  std::string note;
};

// The layout of round `round` from its descriptors (by slot): the job check
// (member_jobs_error with `c`), the group ranks (static node ranks or the automatic order,
// up to c.max_nodes), each slot's ranks (prefix sums of nproc in group-rank order), and
// the refusal of a loopback MASTER_ADDR for members elsewhere. `master_host` is the
// workers' store host when it is not group rank 0's address ("" = group rank 0's
// address: the workers' store on group rank 0).
RoundLayout layout_round(const std::vector<NodeDesc>& descs, int round, const RoundConfig& c,
                         bool static_ranks, const std::string& master_host);

// A member's RendezvousInfo from its slot's layout (round, master_*, use_agent_store and
// gloo_socket_ifname left at their defaults).
RendezvousInfo slot_info(const SlotLayout& slot);

}  // namespace ddprun::rdzv
