// agent_faults.cpp: the Agent's answers to faults outside the workers' own code
// (agent.h): a worker wedged in uninterruptible sleep, this node cut off from the
// rendezvous (a silent network: issue 33), and a worker failure caused by a peer node
// that went away before the rendezvous declared it dead. Agent thread only.
#include <spdlog/spdlog.h>

#include <csignal>
#include <map>

#include "launcher/agent.h"
#include "launcher/jobwide/job_failures.h"

namespace ddprun::launcher {
namespace {

using Kind = SupervisorEvent::Kind;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

}  // namespace

bool Agent::round_breaks_for(const WorkerExit& exit, std::vector<WorkerExit>& also_failed) {
  // A worker whose peer on another node went away silently (a cut link, a node cut off
  // that stopped its workers) fails at once, before the rendezvous declares that node dead
  // (after its heartbeat budget). Wait that long for the round to break before taking
  // the failure for a fault of this node: then it spends no restart.
  const auto bound = handler_->peer_loss_bound();
  if (bound <= Ms(0) || !exit.failed()) return false;
  const Failure f = make_failure(exit, run_dirs_->error_file(attempt_, exit.local_rank));
  if (!says_peer_lost(f.summary)) return false;
  spdlog::info(
      "local rank {} failed as if a peer went away: waiting up to {} ms for the "
      "rendezvous to say whether a node was lost",
      exit.local_rank, bound.count());
  const auto until = Clock::now() + bound;
  while (Clock::now() < until) {
    const SupervisorEvent ev = supervisor_.next_event(Ms(250));
    if (ev.kind == Kind::kSignal) {
      pending_signal_ = ev.signo;  // on_failure() ends the run with it
      return false;
    }
    if (ev.kind == Kind::kWorkerExited && ev.exit.failed()) also_failed.push_back(ev.exit);
    if (membership_changed(/*fresh=*/true)) return true;
    // A peer's agent that reports a failure (or ended the job) is alive: its workers
    // failed, this one followed; nothing will break the round.
    if (job_ending_elsewhere()) return false;
  }
  return false;
}

bool Agent::job_ending_elsewhere() {
  try {
    if (handler_->is_closed()) return true;
    rdzv::JobBoard* board = handler_->job_board();
    return board != nullptr && job_failures_reported(*board) > 0;
  } catch (const std::exception& e) {
    spdlog::debug("job ending elsewhere: {}", e.what());
    return false;
  }
}

std::optional<Agent::Step> Agent::end_if_wedged(RunResult& result) {
  if (!dstate_watch_) return std::nullopt;
  const std::vector<DStateWatch::Stuck> stuck = dstate_watch_->check(supervisor_.live_pids());
  if (stuck.empty()) return std::nullopt;
  std::map<pid_t, std::string> why;
  for (const auto& s : stuck) {
    why[s.pid] = fmt::format(
        "stuck in uninterruptible sleep (D state) for {:.1f} s (>= "
        "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT={})",
        s.seconds, dstate_watch_->timeout_s());
    spdlog::error("worker pid={} {}; ending the worker group without a restart", s.pid, why[s.pid]);
  }
  // As torchrun 2.14: no restart, a fresh worker would contend for what the wedged one
  // holds. Unlike torchrun (exit 0), the job failed: the report says why, exit 1.
  remaining_restarts_ = 0;
  failure_ = {ExitClass::kInfrastructure, 0};
  std::vector<WorkerExit> exits = stop_workers(SIGTERM);
  std::vector<WorkerExit> failed;
  for (auto& e : exits) {
    if (const auto it = why.find(e.pid); it != why.end()) e.note = it->second;
    if (e.failed() || !e.note.empty()) failed.push_back(std::move(e));
  }
  if (failed.empty()) return finish(result, RunResult::Outcome::kFailed);  // all ended 0
  return on_failure(std::move(failed), result);
}

Agent::Step Agent::end_cut_off(const std::string& why, RunResult& result,
                               std::vector<WorkerExit> failed) {
  // The others go on without this node (or end) once they declare it dead, which the
  // fence puts after this: its workers must be gone by then. No restart (the store is
  // out of reach), no job-wide report (it would wait on the store), and the workers'
  // report says why they were stopped.
  spdlog::error(
      "{}; stopping this node's workers and exiting (the job goes on without it, or ends)", why);
  job_view_.reset();
  remaining_restarts_ = 0;
  failure_ = {ExitClass::kInfrastructure, 0};
  for (auto& e : stop_workers(SIGTERM)) {
    e.note = "stopped: this node was cut off from the rendezvous";
    failed.push_back(std::move(e));
  }
  if (failed.empty()) return finish(result, RunResult::Outcome::kFailed);
  return on_failure(std::move(failed), result);
}

}  // namespace ddprun::launcher
