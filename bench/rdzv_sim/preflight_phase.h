// preflight_phase.h: the simulator's pre-flight phase (ddprun-rdzv-sim --preflight;
// docs/benchmarks.md, "What --preflight adds to start-up"): with the round formed, every
// agent runs the pre-flight check's real board traffic (launcher/preflight/board_exchange.h:
// who needs the check, the local findings, the collective's findings; node 0 answering
// each step, node 0's last answer the verdict) on
// its handler's JobBoard, with findings of a real check's size and the real judge, but no
// check program (its time is the node's own, measured by bench/preflight_cost.py). Measured:
// how long the last agent took to hold the verdict, and what the phase cost the store.
// Used by rdzv_sim.cpp. Thread-safety: one call at a time.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/rendezvous.h"

namespace ddprun::bench {

struct PreflightPhase {
  double last_s = 0;            // the last agent's verdict, from the phase start
  double median_s = 0;          // the median agent's
  int undecided = 0;            // agents without a verdict (the board failed, or a node missing)
  bool same = true;             // every agent read the same verdict
  std::size_t value_bytes = 0;  // one node's full findings, as shared
  std::string action;           // agent 0's verdict: "run", "exclude" or "stop"
};

// Runs the phase over `handlers` (in a round); each step gives up after `bound`.
PreflightPhase run_preflight_phase(std::vector<std::unique_ptr<rdzv::RendezvousHandler>>& handlers,
                                   std::chrono::milliseconds bound);

}  // namespace ddprun::bench
