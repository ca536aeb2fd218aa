// job_view.h: JobView, the agent's side of the job-wide view (issue 32; docs/usage.md):
// for one attempt in a round of several nodes, what this node shares with the others on
// the round's JobBoard (rendezvous/job_board.h): the stall judge (job_stall.h) while the
// workers run, the job's root cause when they fail (job_failures.h). The Agent makes one
// per attempt and drops it before its next rendezvous (the board ends with the round).
// In any round with a board (static, c10d, etcd-v3; one node of --nnodes 1:N too) it
// publishes this node's live status for `ddprun status` (status_publisher.h). In a
// one-node round, or without a board, only the start-up timeline and the straggler
// ranking run (on this node's ranks).
// Thread-safety: the agent thread only.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/exit_status.h"
#include "launcher/failure_report.h"
#include "launcher/jobwide/job_stall.h"
#include "launcher/jobwide/startup_watch.h"
#include "launcher/jobwide/status_publisher.h"
#include "launcher/jobwide/straggler_watch.h"
#include "launcher/options/config.h"
#include "launcher/process/supervisor_interface.h"
#include "launcher/run_history.h"
#include "rendezvous/job_board.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::launcher {

class JobView {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a failing node waits for the other nodes' failures before it names the root
  // cause (a consequence may reach the store before its cause).
  static constexpr std::chrono::milliseconds kFailureWindow{1000};

  // After the attempt's workers started. `supervisor` and `handler` must outlive it.
  // `history` gets the job's cause (the run record). `attempt` and `restarts` (spent) are
  // the Agent's, for the status.
  JobView(Supervisor& supervisor, rdzv::RendezvousHandler& handler,
          const rdzv::RendezvousInfo& info, const LaunchConfig& config, RunHistory& history,
          int attempt, int restarts);

  // When tick() wants to run next (Clock::time_point::max(): never).
  Clock::time_point next_tick() const;
  void tick(Clock::time_point now);
  // The job failed here: shares this node's first failure and logs the job's root cause
  // (one line, the same on every node that reports); after a job-wide stall, the verdict.
  // Returns the class the job's cause gives this node's failure (exit_status.h): a stall,
  // or infrastructure when the job's first failure is itself a consequence (a peer went
  // away without a failure of its own: a node or a link lost); nullopt: this node's own.
  // After a stall, each failure whose report entry does not start with the verdict's
  // headline (a rank that failed before this node stopped it) gets it.
  std::optional<ExitClass> log_root_cause(std::vector<Failure>& failures);
  // Why this node is to leave the job as a straggler (--exclude-stragglers; node 0's
  // decision), nullopt while it is not.
  std::optional<std::string> leave_job() const {
    return stragglers_ ? stragglers_->leave() : std::nullopt;
  }
  // The attempt's state changed ("restarting", "rendezvous", "failed", "succeeded"; with the
  // restarts spent now): this node's status says so at once (a round with a board; else
  // nothing).
  void set_state(const std::string& state, int restarts);

 private:
  RunHistory& history_;
  rdzv::JobBoard* board_ = nullptr;  // nullptr: one node, or no board
  std::string host_;                 // this node in job-wide messages (node_label)
  std::unique_ptr<JobStallJudge> stall_;
  std::unique_ptr<StragglerWatch> stragglers_;  // also in a one-node round
  std::size_t stragglers_said_ = 0;             // its lines in the run record so far
  std::unique_ptr<StartupWatch> startup_;       // also in a one-node round
  std::unique_ptr<StatusPublisher> status_;     // any round with a board
  bool startup_recorded_ = false;
};

}  // namespace ddprun::launcher
