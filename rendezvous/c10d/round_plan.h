// round_plan.h: the small per-slot record the round leader (slot 0 of a static / c10d
// round) publishes in r<r>/rank/<slot> (keys.h): that slot's part of the round's layout
// (layout_round(), round_layout.h), computed once for every member. Every other member
// reads only its own record, so a round costs it a constant number of store requests,
// whatever N. Used by StoreRendezvous; tested in tests/rendezvous/c10d/request_count_test.cpp.
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "rendezvous/round_layout.h"

namespace ddprun::rdzv {

// One member's part of the round, as r<r>/rank/<slot> holds it:
//   {"g": 3, "n": 8, "b": 24, "w": 64, "rc": 0, "g0": 5, "note": 1, "x": ["10.0.0.7"]}
// (group rank, group world size, rank base, world size, restart count, group rank 0's
// slot, the note flag, the members elsewhere).
using SlotPlan = SlotLayout;

std::string encode_slot_plan(const SlotPlan& plan);
// nullopt unless `json` is an object with the numeric fields.
std::optional<SlotPlan> decode_slot_plan(std::string_view json);

}  // namespace ddprun::rdzv
