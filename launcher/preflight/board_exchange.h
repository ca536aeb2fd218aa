// board_exchange.h: the pre-flight check's traffic on a round's JobBoard (docs/preflight.md),
// apart from the program it runs. Each step (who needs the check, the local findings, the
// collective's) is one exchange: every node shares one value, node 0 alone reads them all
// and writes the step's answer, and every other node reads that one answer. So a node
// reads O(1) values a step, node 0 O(nodes): at 1 024 nodes the findings are ~2 MB read
// once, not by every node. Used by preflight.cpp and by the rendezvous simulator's
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

// How often a node looks at the board: kBoardPoll x (1 + nodes / 64), so that 1 024
// waiting nodes send the store about 1 200 reads a second.
inline constexpr std::chrono::milliseconds kBoardPoll{50};
// How long the rendezvous store's host waits for the others to read the last answer.
inline constexpr std::chrono::milliseconds kVerdictReadWait{5000};
// How long past a step's deadline the other nodes wait for node 0's answer before each
// reads every node's value and answers itself (node 0 gone: set_once keeps one answer).
inline constexpr std::chrono::milliseconds kLeaderSlack{5000};

// Waits up to the given time between two looks; false stops the exchange (a signal).
using BoardWait = std::function<bool(std::chrono::milliseconds)>;
// The step's answer from every node's value, by node ("" for a node silent until the
// step's deadline).
using Decide = std::function<std::string(const std::vector<std::string>& values)>;

// One step: node `node` of `nodes` shares `mine` as `prefix<node>`. Node 0 waits until all
// have shared (or `deadline`), reads every value and writes `decide(values)` as
// `prefix`answer; every node returns that answer (nullopt when `wait` said stop). Throws
// what the board throws.
std::optional<std::string> decide_on_board(rdzv::JobBoard& board, int nodes, int node,
                                           const std::string& prefix, const std::string& mine,
                                           std::chrono::steady_clock::time_point deadline,
                                           const BoardWait& wait, const Decide& decide);

// The rendezvous store's host, after the last step: waits (at most kVerdictReadWait) until
// all `nodes` have read that step's answer, for when it stops the job its store goes too.
void wait_until_read(rdzv::JobBoard& board, int nodes, const std::string& prefix);

}  // namespace ddprun::launcher::preflight
