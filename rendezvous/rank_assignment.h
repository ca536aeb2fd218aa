// rank_assignment.h: who gets which group rank in a formed round, and what that makes
// of this node's RendezvousInfo. Every agent of the round computes the same answer from
// the same descriptors, so no one has to publish it. Used by both multi-node handlers; table
// tests in tests/rendezvous/rank_assignment_test.cpp. Thread-safety: pure functions
// (group_ranks_or_throw also logs).
#pragma once

#include <string>
#include <vector>

#include "rendezvous/rendezvous.h"
#include "rendezvous/round_codec.h"

namespace ddprun::rdzv {

struct RankAssignment {
  std::vector<int> group_rank;  // by slot (index into the descriptors); empty on error
  // static: why the given node ranks cannot be used (out of range, claimed twice); the
  // round must fail with it. "" otherwise.
  std::string error;
  // c10d: why --node-rank was ignored (every conflict, or "only 2 of 3 nodes gave one");
  // "" when the given ranks are honoured or none was given.
  std::string ignored;
};

// Node ranks are honoured when every node gave a distinct one in range (in [0, n) for
// static, [0, max_nodes) for c10d, compacted to 0..n-1 in their order); otherwise
// (c10d only, as torchrun, which ignores --node-rank there) the automatic order applies:
// the node that hosts the rendezvous store (NodeDesc::rdzv_host) first, then
// (address, host, pid). The node ranks are checked in that automatic order too,
// so every agent names the same conflicts in the same words.
RankAssignment assign_group_ranks(const std::vector<NodeDesc>& descs, bool static_ranks,
                                  int max_nodes);

// assign_group_ranks() for a handler: throws RendezvousStateError("<where>: <error>") when
// the static node ranks cannot be used; logs the c10d "--node-rank ignored" warning once
// per agent (when `warned` is false, then sets it). Used by StoreRendezvous and
// EtcdRendezvous (the one function here that logs).
std::vector<int> group_ranks_or_throw(const std::vector<NodeDesc>& descs, bool static_ranks,
                                      int max_nodes, const std::string& where, bool& warned);

// This node's view of the round, from the descriptors (by slot), their group ranks and
// this node's slot: group rank and world size, rank base (the nproc of the lower group
// ranks), world size, node names by group rank. round, master_* and use_agent_store are
// left at their defaults.
RendezvousInfo round_layout(const std::vector<NodeDesc>& descs, const std::vector<int>& group_rank,
                            int slot);

}  // namespace ddprun::rdzv
