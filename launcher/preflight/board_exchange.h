// board_exchange.h: the pre-flight check's traffic on a round's JobBoard (docs/preflight.md),
// apart from the program it runs: every node shares one value per step and reads all of
// them, then every node reads one verdict. Used by preflight.cpp (its three steps: who
// needs the check, the local findings, the collective's) and by the rendezvous simulator's
// pre-flight phase (bench/rdzv_sim/preflight_phase.h), which measures it at 256+ nodes.
// Thread-safety: one call at a time per board (each node its own).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/job_board.h"

namespace ddprun::launcher::preflight {

// How often a node looks at a step's counter: kBoardPoll x (1 + nodes / 64), so that
// 1 024 waiting nodes send the store about 1 200 reads a second.
inline constexpr std::chrono::milliseconds kBoardPoll{50};
// How long the rendezvous store's host waits for the others to read the verdict.
inline constexpr std::chrono::milliseconds kVerdictReadWait{5000};

// Waits up to the given time between two looks; false stops the exchange (a signal).
using BoardWait = std::function<bool(std::chrono::milliseconds)>;

// Node `node` of `nodes` shares `mine` as `prefix<node>` and returns every node's value,
// by node ("" for a node silent until `deadline`); nullopt when `wait` said stop. Waits
// on one counter (`prefix`count: one round trip a look), then reads the values in one
// wait and one read. Throws what the board throws.
std::optional<std::vector<std::string>> share_on_board(
    rdzv::JobBoard& board, int nodes, int node, const std::string& prefix, const std::string& mine,
    std::chrono::steady_clock::time_point deadline, const BoardWait& wait);

// Every node reads the same verdict: the first node's `mine` to be written under `key`
// is returned to all. A node that `hosts_store` then waits (at most kVerdictReadWait)
// until all `nodes` have read it: when it stops the job, its store goes with it.
std::string agree_on_board(rdzv::JobBoard& board, int nodes, bool hosts_store,
                           const std::string& key, const std::string& mine);

}  // namespace ddprun::launcher::preflight
