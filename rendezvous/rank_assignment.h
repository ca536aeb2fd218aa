// rank_assignment.h: who gets which group rank in a formed round. Every agent of the
// round computes the same answer from the same descriptors, so no one has to publish it.
// Used by layout_round() (round_layout.h) for both multi-node handlers; table tests in
// tests/rendezvous/rank_assignment_test.cpp. Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

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

}  // namespace ddprun::rdzv
