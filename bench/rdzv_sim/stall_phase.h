// stall_phase.h: the simulator's job-wide stall phase (ddprun-rdzv-sim --stall-ranks R;
// docs/benchmarks.md, "Job-wide stall verdict"): with the round formed, every agent runs
// the real JobStallJudge (launcher/jobwide/job_stall.h) on its handler's JobBoard, its node's R
// ranks all idle from the phase's start (one rank elsewhere stands apart), and waits for
// the verdict. Measured: how long after the job-wide timeout the last agent had it, and
// what the phase cost the store. Used by rdzv_sim.cpp. Thread-safety: one call at a time.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/rendezvous.h"

namespace ddprun::bench {

struct StallPhase {
  double latency_s = 0;  // the last agent's verdict, after the timeout (from the phase start)
  int undecided = 0;     // agents without a verdict within the bound
  bool same = true;      // every agent printed the same verdict
  std::string headline;  // agent 0's
};

// Runs the phase over `handlers` (in a round), each node `ranks` ranks, stall timeout
// `timeout`; gives up `bound` after the timeout.
StallPhase run_stall_phase(std::vector<std::unique_ptr<rdzv::RendezvousHandler>>& handlers,
                           int ranks, std::chrono::milliseconds timeout,
                           std::chrono::milliseconds bound);

}  // namespace ddprun::bench
