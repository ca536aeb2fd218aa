// status_publisher.h: StatusPublisher, this node's side of `ddprun status` (issue 32;
// docs/usage.md, "Status"): while the workers run, every kPeriod it puts this node's
// status (job_status.h: host, state, restarts, and per local rank its pid, state, seconds
// since progress, file:line and last collective from the stall watchdog's sample through
// the StallGate) on the round's JobBoard under "status/<node>" with one set; and at once
// when the attempt's state changes (restarting, failed, succeeded). A board that fails
// once is not written again this attempt (never a second wait on a store gone). It asks
// the gate for the watchdog's samples (StallGate::want_samples) while it lives.
// The Agent's JobView makes one per attempt in a round of the static, c10d or etcd-v3
// rendezvous (one of a single node too: --nnodes 1:N).
// Thread-safety: the agent thread only.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "launcher/jobwide/job_status.h"
#include "launcher/process/stall_gate.h"
#include "rendezvous/job_board.h"

namespace ddprun::launcher {

class StatusPublisher {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kPeriod{2000};
  // The board name of node `node`'s value: kNamePrefix + node.
  inline static const std::string kNamePrefix = "status/";
  static std::string name(int node) { return kNamePrefix + std::to_string(node); }

  struct Params {
    std::string host;
    int rank_base = 0;
    int nproc = 1;
    int attempt = 0;
    int restarts = 0;
    int max_restarts = 0;
    // Seconds since the epoch now (tests fix it).
    std::function<double()> wall_s;
  };

  // `gate` (nullptr: no --stall-timeout, ranks without details) and `board` must outlive it.
  StatusPublisher(StallGate* gate, rdzv::JobBoard& board, Params params);
  ~StatusPublisher();
  StatusPublisher(const StatusPublisher&) = delete;
  StatusPublisher& operator=(const StatusPublisher&) = delete;

  Clock::time_point next_tick() const { return next_; }
  // Publishes "running" when the period is up.
  void tick(Clock::time_point now);
  // The attempt's state changed ("restarting", "rendezvous", "failed", "succeeded"), with
  // the restarts spent now: published now.
  void set_state(const std::string& state, int restarts);
  // The straggler line this node said last (published with the next status).
  void set_straggler(const std::string& line) { straggler_ = line; }

  // The value the next publish writes (tests).
  NodeStatus status() const;

 private:
  void publish();

  StallGate* gate_;
  rdzv::JobBoard& board_;
  Params params_;
  Clock::time_point next_;
  std::string state_ = "running";
  std::string straggler_;
  bool failed_ = false;
};

}  // namespace ddprun::launcher
