// job_view.cpp: JobView (job_view.h), the agent's side of the job-wide view.
#include "launcher/job_view.h"

#include <spdlog/spdlog.h>

#include "launcher/job_failures.h"
#include "launcher/stall_verdict.h"

namespace ddprun::launcher {

JobView::JobView(Supervisor& supervisor, rdzv::RendezvousHandler& handler,
                 const rdzv::RendezvousInfo& info, const LaunchConfig& config, RunHistory& history)
    : history_(history) {
  if (info.group_world_size < 2) return;
  board_ = handler.job_board();
  if (board_ == nullptr) return;
  host_ = node_label(config.local_addr);
  if (StallGate* gate = supervisor.stall_gate()) {
    JobStallJudge::Params p;
    p.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(config.stall_timeout_s * 1000));
    p.host = host_;
    p.rank_base = info.rank_base;
    stall_ = std::make_unique<JobStallJudge>(*gate, *board_, std::move(p));
  }
}

JobView::Clock::time_point JobView::next_tick() const {
  return stall_ ? stall_->next_tick() : Clock::time_point::max();
}

void JobView::tick(Clock::time_point now) {
  if (stall_) stall_->tick(now);
}

std::optional<ExitClass> JobView::log_root_cause(std::vector<Failure>& failures) {
  if (board_ == nullptr || failures.empty()) return std::nullopt;
  if (std::vector<std::string> verdict = stall_ ? stall_->verdict() : std::vector<std::string>();
      !verdict.empty()) {
    // Every node stopped its ranks on the same verdict: that is the cause, not whichever
    // SIGABRT reached the store first.
    const std::string& head = verdict.front();
    const std::string line =
        "root cause (job-wide): the job stalled: " +
        (head.rfind(kVerdictPrefix, 0) == 0 ? head.substr(kVerdictPrefix.size()) : head);
    spdlog::error("{}", line);
    // A rank that failed before this node's watchdog stopped it (a peer node stopped its
    // ranks first: the collective broke) gets the same headline as the ranks it stopped.
    for (Failure& f : failures) {
      if (f.message.rfind(head, 0) == 0) continue;
      f.message = head +
                  "; stalled: no progress in the job; this rank failed on its own while the "
                  "job's ranks were being stopped\n  " +
                  f.message;
    }
    history_.job_cause(line, std::move(verdict));
    return ExitClass::kStall;
  }
  const auto cause = share_job_failure(*board_, failures, host_, kFailureWindow);
  if (!cause) return std::nullopt;
  spdlog::error("{}", cause->line);
  history_.job_cause(cause->line, {});
  if (cause->lost_peer) return ExitClass::kInfrastructure;
  return std::nullopt;
}

}  // namespace ddprun::launcher
