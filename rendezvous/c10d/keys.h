// keys.h: StoreRendezvous's key layout in the rendezvous store, relative to the
// handler's prefix (the registry's ddprun/rdzv/<run id>/), below, and the reading of the
// counters kept there; docs/multinode.md ("Rounds, elasticity and failures") shows it
// with the prefix. Used by StoreRendezvous and its tests. Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

// The layout:
//   closed                 "1" once the job has ended; else why the store's host gave up
//   closed_seen            ADD counter: agents that read that reason
//   job                    the job's fingerprint (JSON array: the workers' command), set
//                          once by the first agent of the run id
//   round                  hint: the latest formed round (fresh agents start there)
//   left_out/<addr>        why --preflight left the node published at <addr> out of the
//                          job: that address's first join is refused (it came back)
//   r<r>/joined            ADD counter: slots of round r
//   r<r>/node/<slot>       descriptor JSON of the agent holding the slot (round_codec.h)
//   r<r>/hb/<slot>         heartbeat: ADD counter, or "left" / "done"
//   r<r>/final             node count N of the formed round (CAS from "")
//   r<r>/rank/<slot>       the round leader's (slot 0's) answer for the slot: its plan
//                          (round_plan.h), or "!" = see refused / broken
//   r<r>/refused           why round r cannot run: every member throws this text
//   r<r>/note              the "--node-rank ignored" reason, when the plan has one
//   r<r>/master            JSON {addr, port} of the workers' store for round r
//   r<r>/broken            the first reason round r must end (CAS from ""): a member
//                          left, died, or nodes wait; every member reads this one key
//   r<r>/gone/<slot>       ADD counter: the first to add (the slot itself, or the node
//                          that found it dead) counts the slot out
//   r<r>/out               ADD counter: members counted out (left, done or dead)
//   r<r>/done              ADD counter: members at the exit barrier
//   r<r>/exit              set by the member whose arrival made done = N
//   r<r>/exit_seen         ADD counter: exit-barrier acknowledgements
//   r<r>/view/<name>       the round's job-wide view (StoreJobBoard, job_board.h)

namespace ddprun::rdzv::keys {

inline constexpr const char* kClosed = "closed";
// ADD counter: agents that read why the store's host gave up (a `closed` other than "1").
inline constexpr const char* kClosedSeen = "closed_seen";
inline constexpr const char* kJob = "job";
inline constexpr const char* kRound = "round";
inline std::string left_out(const std::string& address) { return "left_out/" + address; }

// Heartbeat values other than a counter.
inline constexpr const char* kLeft = "left";
inline constexpr const char* kDone = "done";

std::string joined(int round);
std::string node(int round, int slot);
std::string heartbeat(int round, int slot);
std::string final_size(int round);
std::string master(int round);
std::string exit_seen(int round);
std::string rank(int round, int slot);
std::string refused(int round);
std::string note(int round);
std::string broken(int round);
std::string gone(int round, int slot);
std::string out(int round);
std::string done(int round);
std::string exit_all(int round);
std::string view(int round, const std::string& name);

// The "see the round-level key" value of r<r>/rank/<slot>.
inline constexpr const char* kSeeRound = "!";

// node(round, 0..n-1), heartbeat(round, 0..n-1) and rank(round, 0..n-1).
std::vector<std::string> nodes(int round, int n);
std::vector<std::string> heartbeats(int round, int n);
std::vector<std::string> ranks(int round, int n);

// A count or round number read back from `key`: a decimal integer >= 0. Throws
// RendezvousStateError ("corrupt rendezvous key <key> = '<value>'") otherwise.
int parse_count(const std::string& value, const std::string& key);

}  // namespace ddprun::rdzv::keys
