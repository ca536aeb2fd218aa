// flight_record.h: what ddprun reads of PyTorch's flight recorder (2.14+, on when
// TORCH_FR_BUFFER_SIZE > 0) through the stack probe's hook (stack_probe.h): per process
// group, the last collective a rank entered and completed, and when the rank entered each
// collective (its arrival); and the rank's start-up times the hook sees. Used by the stall watchdog
// and verdict (which collective a rank never entered) and the straggler ranking (who arrives last).
// Plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// One process group of one rank, as its recorder last said.
struct CollectiveState {
  int pg = 0;                   // the group's id (0: the default group)
  std::int64_t entered = -1;    // the last collective's sequence number in the group (-1: none)
  std::int64_t completed = -1;  // the last one completed (-1: none or not known)
  std::string op;               // the last entered one's name ("gloo:all_reduce")
  bool operator==(const CollectiveState&) const = default;
};

// When a rank entered one collective.
struct Arrival {
  int pg = 0;
  std::int64_t seq = 0;   // sequence number in the group
  std::int64_t t_ns = 0;  // the rank's wall clock (ns since the epoch)
};

// A worker's start-up, in ns since the epoch on its host's clock (0: not yet): spawned
// (by ddprun), its interpreter up (the stack probe's hook ran), torch imported, the
// default process group formed, its first collective entered (flight recorder).
struct StartupTimes {
  std::int64_t spawned = 0;
  std::int64_t up = 0;
  std::int64_t torch = 0;
  std::int64_t group = 0;
  std::int64_t first_collective = 0;
  bool operator==(const StartupTimes&) const = default;
};

// The recorder's buffer ddprun asks for when the user sets none (TORCH_FR_BUFFER_SIZE).
inline constexpr int kFlightRecorderEntries = 256;

// "all_reduce" for "gloo:all_reduce" (the backend left out).
std::string_view op_name(std::string_view op);
// "all_reduce #12 of group 0" for `op` "gloo:all_reduce" (the backend left out).
std::string collective_name(std::string_view op, std::int64_t seq, int pg);

// Per group, the furthest collective any rank entered, and which op each rank entered
// as that one (more than one: a collective called on some ranks, another on others).
struct GroupFront {
  std::int64_t seq = -1;
  std::map<std::string, std::vector<int>> ops;  // op -> the ranks (as numbered by the caller)
};
using CollectiveFronts = std::map<int, GroupFront>;

// `ranks[i]` is rank i's recorder state (empty: none).
CollectiveFronts collective_fronts(const std::vector<std::vector<CollectiveState>>& ranks);

// Where one rank stands against `fronts`: in the lowest group where it is behind the
// front, "never entered all_reduce #12 of group 0" (`behind`); else, in a collective at
// the front it has not completed, "in all_reduce #12 of group 0"; else "" (no recorder,
// or nothing under way).
struct Standing {
  bool behind = false;
  std::string text;
};
Standing collective_standing(const std::vector<CollectiveState>& rank,
                             const CollectiveFronts& fronts);

}  // namespace ddprun::launcher
