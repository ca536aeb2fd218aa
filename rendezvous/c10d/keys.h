// keys.h: StoreRendezvous's key layout in the rendezvous store, relative to the
// handler's prefix (the registry's ddprun/rdzv/<run id>/), below, and the reading of the
// counters kept there; docs/multinode.md ("Rounds, elasticity and failures") shows it
// with the prefix. Used by StoreRendezvous and its tests. Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

// The layout:
//   closed                 set once the job has ended
//   job                    the job's fingerprint (JSON array: the workers' command), set
//                          once by the first agent of the run id
//   round                  hint: the latest formed round (fresh agents start there)
//   r<r>/joined            ADD counter: slots of round r
//   r<r>/node/<slot>       descriptor JSON of the agent holding the slot (round_codec.h)
//   r<r>/hb/<slot>         heartbeat: ADD counter, or "left" / "done"
//   r<r>/final             node count N of the formed round (CAS from "")
//   r<r>/master            JSON {addr, port} of the workers' store for round r
//   r<r>/exit_seen         ADD counter: exit-barrier acknowledgements

namespace ddprun::rdzv::keys {

inline constexpr const char* kClosed = "closed";
inline constexpr const char* kJob = "job";
inline constexpr const char* kRound = "round";

// Heartbeat values other than a counter.
inline constexpr const char* kLeft = "left";
inline constexpr const char* kDone = "done";

std::string joined(int round);
std::string node(int round, int slot);
std::string heartbeat(int round, int slot);
std::string final_size(int round);
std::string master(int round);
std::string exit_seen(int round);

// node(round, 0..n-1) and heartbeat(round, 0..n-1).
std::vector<std::string> nodes(int round, int n);
std::vector<std::string> heartbeats(int round, int n);

// A count or round number read back from `key`: a decimal integer >= 0. Throws
// RendezvousStateError ("corrupt rendezvous key <key> = '<value>'") otherwise.
int parse_count(const std::string& value, const std::string& key);

}  // namespace ddprun::rdzv::keys
