// job_stall.h: JobStallJudge, the job-wide stall judge (--stall-timeout in a job of more
// than one node; docs/usage.md, "Stall watchdog"). One node's workers all idle is not a
// stall when ranks elsewhere still progress (rank 0 evaluating alone while the others wait
// in a barrier): the judge shares this node's progress through the round's job-wide board
// (rendezvous/job_board.h) and tells this node's watchdog (StallGate) to act only once no
// rank of the job has progressed for the timeout. Then every node publishes where its ranks
// are, the node that declared the stall joins them into one verdict (stall_verdict.h), and
// every node prints that same verdict and stops its workers with it.
//
// The board's keys: "progress", a mark each node bumps (at most once a tick) while its
// workers progress; "stall", set once by the first node to see no progress job-wide (its
// node number); "snap/<node>", each node's NodeSnapshot; "verdict", the verdict's lines.
// Requests per node: one per tick while progressing, two while quiet; at the stall, two
// writes and one read (the declaring node reads N snapshots).
// Thread-safety: the agent thread only (the board's thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/process/stall_gate.h"
#include "rendezvous/job_board.h"

namespace ddprun::launcher {

class JobStallJudge {
 public:
  using Clock = std::chrono::steady_clock;
  struct Params {
    std::chrono::milliseconds timeout{0};  // --stall-timeout
    std::string host;                      // this node as the verdict names it
    int rank_base = 0;                     // global rank of local rank 0
  };

  // Judges for `gate`'s watchdog from now on; `gate` and `board` must outlive the judge.
  JobStallJudge(StallGate& gate, rdzv::JobBoard& board, Params params);
  // The watchdog decides alone again.
  ~JobStallJudge();
  JobStallJudge(const JobStallJudge&) = delete;
  JobStallJudge& operator=(const JobStallJudge&) = delete;

  // When tick() wants to run next: every timeout / 4, 250 ms to 1 s (the verdict comes
  // about two ticks after the job-wide timeout; 1 024 nodes cost the store ~1 000 adds/s).
  Clock::time_point next_tick() const { return next_; }
  // Looks and shares when due. Never throws: a board that fails hands the decision back
  // to the watchdog, with one warning.
  void tick(Clock::time_point now);
  // The verdict's lines (the first its headline) once this judge decided the job
  // stalled; none before.
  std::vector<std::string> verdict() const;

 private:
  void exchange(Clock::time_point now);
  // The job is stalled (declared by node `declared_by`): snapshot, verdict, decision.
  void decide(const NodeSample& sample, bool declared_here);

  StallGate& gate_;
  rdzv::JobBoard& board_;
  Params params_;
  std::chrono::milliseconds interval_;
  Clock::time_point next_;
  bool done_ = false;  // decided, or handed back
  Clock::time_point pushed_progress_{};
  std::int64_t seen_ = 0;           // the counter as this node last saw it
  Clock::time_point job_progress_;  // when a rank of the job last progressed, as seen here
  bool others_progressed_ = false;  // another node's progress was seen
  bool waiting_said_ = false;
};

}  // namespace ddprun::launcher
