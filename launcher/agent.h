// agent.h: the Agent, ddprun's torchelastic agent for one node: rendezvous, start the
// local workers with torchrun's environment, react to their exits and to signals,
// restart within --max-restarts, and on failure print torchrun's failure report.
// Used by main.cpp. Thread-safety: run() is called once, from the main thread, which
// owns the supervisor and the handler. The handler's blocking calls (next_rendezvous,
// exit_barrier) run on a helper thread while the main thread keeps taking signals; a
// terminating signal makes the main thread call the handler's interrupt(), then join
// the helper: the one way a blocking call is cancelled (no thread outlives run()).
//
// State machine (one row per transition; "stop" = stop(signal, grace), see supervisor):
//
//   state      | event                               | action                      | next
//   -----------+-------------------------------------+-----------------------------+-----------
//   INIT       | -                                   | create the run log dir      | RENDEZVOUS
//   RENDEZVOUS | next_rendezvous() returned          | wipe/create attempt dir,    | HEALTHY
//              |                                     | start workers               |
//   RENDEZVOUS | RendezvousError / SpawnError        | log one line, shutdown      | FAILED
//   RENDEZVOUS | terminating signal                  | interrupt(), join, shutdown | STOPPED
//   HEALTHY    | a worker exited 0                   | -                           | HEALTHY
//   HEALTHY    | all workers exited 0                | exit_barrier, set_closed,   | SUCCEEDED
//              |                                     | shutdown                    |
//   HEALTHY    | all exited 0, then a terminating    | interrupt() the barrier,    | STOPPED
//              | signal during the exit barrier      | join, shutdown              |
//   HEALTHY    | a worker failed, restarts left      | collect failures, stop TERM,| RENDEZVOUS
//              |                                     | restart_count += 1          |
//   HEALTHY    | a worker failed, no restart left    | collect, stop TERM, report  | FAILED
//   HEALTHY    | kStalled (--stall-timeout: stacks   | as "a worker failed", with  | RENDEZVOUS
//              | dumped, workers ended)              | every stopped worker listed | / FAILED
//   HEALTHY    | needs_new_round() (polled every 1 s)| stop TERM, same restart_cnt | RENDEZVOUS
//   HEALTHY    | a worker failed and                 | stop TERM, same restart_cnt | RENDEZVOUS
//              | needs_new_round_now()               |                             |
//   HEALTHY    | a handled signal (--signals-to-     | stop(that signal), shutdown | STOPPED
//              | handle, SIGUSR1/SIGUSR2 included)   |                             |
//
//   Exit codes: SUCCEEDED 0; FAILED and STOPPED 1 (as torchrun).
//   TORCHELASTIC_RESTART_COUNT and attempt_<N>: restarts spent (as torchrun: a membership
//   change spends none); several nodes: the most any node of the round has spent
//   (RendezvousInfo::restart_count), adopted by the others, so that it is equal on every
//   node of a round.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/dstate_watch.h"
#include "launcher/events.h"
#include "launcher/exit_status.h"
#include "launcher/failure_report.h"
#include "launcher/jobwide/job_view.h"
#include "launcher/numa.h"
#include "launcher/options/config.h"
#include "launcher/process/supervisor_interface.h"
#include "launcher/run_dirs.h"
#include "launcher/run_history.h"
#include "launcher/worker_env.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::launcher {

struct RunResult {
  enum class Outcome { kSucceeded, kFailed, kStopped };
  Outcome outcome = Outcome::kFailed;
  int exit_code = 1;  // exit_status() of exit_class (--exit-codes)
  ExitClass exit_class = ExitClass::kWorkerError;
  std::vector<Failure> failures;  // the last attempt's failed workers (kFailed)
  int restart_count = 0;          // restarts spent
};

class Agent {
 public:
  // `agent_env` is the environment the workers inherit (the agent's own, normally).
  // `supervisor` (ProcessSupervisor in ddprun) must outlive the Agent.
  Agent(LaunchConfig config, EnvMap agent_env, Supervisor& supervisor,
        std::unique_ptr<rdzv::RendezvousHandler> handler);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the job to its end. Blocks until then. Never throws: every error is logged as
  // one line and gives kFailed.
  RunResult run();

  // The run log directory (<log-dir>/<run_id>_XXXXXX), known once run() has started.
  const std::string& run_log_dir() const;

 private:
  enum class Step { kRendezvous, kDone };
  // How a handler call run by call_interruptibly() ended.
  struct CallOutcome {
    int signo = 0;             // the terminating signal that interrupted it (0: none)
    std::exception_ptr error;  // what the call threw
  };

  // Runs `call` (a handler call that may block for minutes) on a helper thread while
  // this thread takes the supervisor's events (no worker runs then: only signals). The
  // first terminating signal calls handler_->interrupt(), which makes the call give up
  // within about a second; the helper is always joined before this returns.
  CallOutcome call_interruptibly(const std::function<void()>& call, const char* during);

  std::optional<rdzv::RendezvousInfo> rendezvous(RunResult& result);
  std::vector<WorkerSpec> prepare_attempt(const rdzv::RendezvousInfo& info);
  Step monitor(RunResult& result);
  // The handler's needs_new_round() (or, `fresh`, needs_new_round_now(): a store round
  // trip, for a worker failure that a peer's leaving may have caused); errors log as "no".
  bool membership_changed(bool fresh = false);
  std::vector<WorkerExit> stop_workers(int signo);
  // A worker in D state past TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT: stops the group
  // and fails the job without a restart (a wedged worker holds a kernel resource a fresh
  // one would need), the report naming why; nullopt while none is.
  std::optional<Step> end_if_wedged(RunResult& result);
  // `exit` failed saying a peer went away (job_failures.h): waits up to the rendezvous'
  // peer_loss_bound() for a new round to be needed (true); failures seen meanwhile go to
  // `also_failed`, a signal to pending_signal_ (false).
  bool round_breaks_for(const WorkerExit& exit, std::vector<WorkerExit>& also_failed);
  // This node is cut off from the rendezvous (RendezvousHandler::cut_off() = `why`):
  // stops the workers and fails the job without a restart, infrastructure class;
  // `failed` holds the worker failures already seen.
  Step end_cut_off(const std::string& why, RunResult& result, std::vector<WorkerExit> failed = {});
  Step on_failure(std::vector<WorkerExit> failed, RunResult& result);
  // The job failed for good: the failure report (stderr and the agent's error file), the
  // rendezvous closed, kFailed.
  Step fail_job(std::vector<Failure> failures, RunResult& result);
  // Whether the job is ending on another node, not changing its membership: the
  // rendezvous is closed, or a node already reported its job's failure on this round's
  // job-wide board (job_failures.h; it does so before it closes the rendezvous and
  // leaves, and the leaving may be seen first). Errors say no.
  bool job_ending_elsewhere();
  // A terminating signal ended the run: says so on stderr and finishes as kStopped.
  Step stopped_by(int signo, RunResult& result);
  // All workers exited 0: the exit barrier, then set_closed(), then kSucceeded.
  Step on_success(RunResult& result);
  // Ends the run: shuts the handler down (and the store it hosts) and sets the outcome.
  Step finish(RunResult& result, RunResult::Outcome outcome);
  // --blocklist: true when this node's host is listed (it says so and finishes).
  bool blocked(RunResult& result);
  // --preflight (agent_preflight.cpp): checks the round before its workers start.
  // kRendezvous when the round goes on without a bad node (or without this one: then
  // kDone), nullopt when the workers may start.
  std::optional<Step> preflight(const rdzv::RendezvousInfo& info, RunResult& result);
  // --exclude-stragglers (agent_preflight.cpp): node 0 named this node's rank or host the
  // straggler for long enough; it stops its workers and leaves (the block-list keeps it),
  // the others' next round goes on without it. kDone.
  Step leave_as_straggler(const std::string& why, RunResult& result);
  // What the run history (torchrun's events, the run record) knows from the start.
  RunHistory::Facts history_facts() const;

  LaunchConfig config_;
  EnvMap agent_env_;
  Supervisor& supervisor_;
  std::unique_ptr<rdzv::RendezvousHandler> handler_;
  std::chrono::milliseconds grace_;
  std::optional<RunDirs> run_dirs_;  // made when run() starts
  int restart_count_ = 0;            // restarts spent on failures (or adopted from the round)
  int attempt_ = 0;                  // TORCHELASTIC_RESTART_COUNT and attempt_<N> of this attempt
  int remaining_restarts_ = 0;
  int pending_signal_ = 0;  // a terminating signal seen while collecting failures
  // A worker failure left for a new round without spending a restart (a peer had left):
  // reported as the job's failure if that round cannot form (the peer ended the job).
  std::vector<Failure> unspent_failures_;
  std::vector<RankPlacement> numa_plan_;       // by local rank; empty: no --numa-binding
  std::optional<RunHistory> history_;          // made when run() starts
  std::optional<rdzv::RendezvousInfo> round_;  // the last round formed (events)
  bool preflight_passed_ = false;              // this node passed --preflight in a round
  // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT set: each attempt's D-state watch.
  std::optional<double> dstate_timeout_s_;
  std::optional<DStateWatch> dstate_watch_;
  // This attempt's side of the job-wide view (stall judge, root cause); made once the
  // workers started, dropped before the next rendezvous.
  std::optional<JobView> job_view_;
  // The class of the run's end so far and its signal (exit_status.h): set where a failure
  // is seen, so the last one decides.
  std::pair<ExitClass, int> failure_{ExitClass::kWorkerError, 0};
  int exit_code() const {
    return exit_status(failure_.first, failure_.second, config_.exit_code_classes);
  }
};

}  // namespace ddprun::launcher
