// startup_watch.h: StartupWatch, the agent's side of the start-up timeline (issue 32;
// docs/usage.md, "Start-up timeline"; startup_timeline.h): once every worker of this node
// entered its first collective (or formed its process group and then 10 s passed without
// a flight recorder's collective, or kStartupWait passed), it has this node's ranks'
// start-up times. Alone (one node) it logs the report. In a job of several nodes it puts
// them on the round's JobBoard ("start/<node>"); node 0 waits for every node's (at most
// kJobWait), logs the job's report (one summary line per phase at INFO, a WARNING per rank
// or host that stands out) and publishes the warnings ("start/found"), which each other
// node logs when they name its host. The Agent's JobView makes one per attempt.
// Thread-safety: the agent thread only.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/jobwide/startup_timeline.h"
#include "launcher/process/stall_gate.h"
#include "rendezvous/job_board.h"

namespace ddprun::launcher {

class StartupWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kStartupWait{300};
  static constexpr std::chrono::seconds kJobWait{120};
  struct Params {
    std::string host;   // this node as the lines name it
    int rank_base = 0;  // global rank of local rank 0
    int workers = 1;    // this node's
  };

  // `gate` and `board` (nullptr: one node) must outlive the watch.
  StartupWatch(StallGate& gate, rdzv::JobBoard* board, Params params);

  Clock::time_point next_tick() const;
  void tick(Clock::time_point now);
  // The report this node made (alone or node 0: the job's; else its own ranks'), once made.
  const std::optional<StartupReport>& report() const { return report_; }

 private:
  enum class State { kLocal, kShared, kDone };
  std::optional<std::vector<RankStartup>> mine(Clock::time_point now) const;
  void log(const StartupReport& report) const;

  StallGate& gate_;
  rdzv::JobBoard* board_;
  Params params_;
  Clock::time_point started_;
  Clock::time_point shared_{};
  Clock::time_point next_;
  State state_ = State::kLocal;
  std::optional<StartupReport> report_;
};

}  // namespace ddprun::launcher
