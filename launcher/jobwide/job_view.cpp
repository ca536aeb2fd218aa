// job_view.cpp: JobView (job_view.h), the agent's side of the job-wide view.
#include "launcher/jobwide/job_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "launcher/jobwide/job_failures.h"
#include "launcher/jobwide/stall_verdict.h"

namespace ddprun::launcher {

JobView::JobView(Supervisor& supervisor, rdzv::RendezvousHandler& handler,
                 const rdzv::RendezvousInfo& info, const LaunchConfig& config, RunHistory& history,
                 int attempt, int restarts)
    : history_(history) {
  host_ = node_label(config.local_addr);
  if (info.group_world_size >= 2) board_ = handler.job_board();
  StallGate* gate = supervisor.stall_gate();
  if (gate != nullptr && config.straggler_threshold_s > 0) {
    StragglerWatch::Params p;
    p.threshold_s = config.straggler_threshold_s;
    p.window =
        std::chrono::milliseconds(static_cast<std::int64_t>(config.straggler_window_s * 1000));
    p.host = host_;
    p.rank_base = info.rank_base;
    p.workers = config.nproc_per_node;
    p.exclude = config.exclude_stragglers;
    p.min_nodes = config.min_nodes;
    p.spares = [&handler] { return handler.num_nodes_waiting(); };
    stragglers_ = std::make_unique<StragglerWatch>(*gate, board_, std::move(p));
  }
  if (gate != nullptr) {
    startup_ = std::make_unique<StartupWatch>(
        *gate, board_, StartupWatch::Params{host_, info.rank_base, config.nproc_per_node});
  }
  // The status also in a round of one node (of --nnodes 1:N): `ddprun status` reads it.
  if (rdzv::JobBoard* board = handler.job_board(); board != nullptr) {
    StatusPublisher::Params sp;
    sp.host = host_;
    sp.rank_base = info.rank_base;
    sp.nproc = config.nproc_per_node;
    sp.attempt = attempt;
    sp.restarts = restarts;
    sp.max_restarts = config.max_restarts;
    status_ = std::make_unique<StatusPublisher>(gate, *board, std::move(sp));
  }
  if (board_ == nullptr) return;
  if (gate != nullptr) {
    JobStallJudge::Params p;
    p.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(config.stall_timeout_s * 1000));
    p.host = host_;
    p.rank_base = info.rank_base;
    stall_ = std::make_unique<JobStallJudge>(*gate, *board_, std::move(p));
  }
}

JobView::Clock::time_point JobView::next_tick() const {
  return std::min({stall_ ? stall_->next_tick() : Clock::time_point::max(),
                   stragglers_ ? stragglers_->next_tick() : Clock::time_point::max(),
                   startup_ ? startup_->next_tick() : Clock::time_point::max(),
                   status_ ? status_->next_tick() : Clock::time_point::max()});
}

void JobView::tick(Clock::time_point now) {
  if (stall_) stall_->tick(now);
  if (startup_) {
    startup_->tick(now);
    if (!startup_recorded_ && startup_->report()) {
      startup_recorded_ = true;
      history_.startup(startup_->report()->ranks);
    }
  }
  if (stragglers_) {
    stragglers_->tick(now);
    const auto& said = stragglers_->said();
    while (stragglers_said_ < said.size()) history_.straggler(said[stragglers_said_++]);
    if (status_ && !said.empty()) status_->set_straggler(said.back());
  }
  if (status_) status_->tick(now);
}

void JobView::set_state(const std::string& state, int restarts) {
  if (status_) status_->set_state(state, restarts);
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
