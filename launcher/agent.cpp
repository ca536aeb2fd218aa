// agent.cpp: the Agent's state machine (see the table in agent.h): one method per state
// or transition, so that the table maps onto the file. Its side jobs live beside it:
// run_dirs (files), worker_env (worker specs), numa (the CPU plan), config (rendezvous).
#include "launcher/agent.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "launcher/numa.h"
#include "launcher/options/option_values.h"
#include "launcher/process/signals.h"
#include "launcher/process/spawn.h"
#include "launcher/worker_python.h"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;
using Kind = SupervisorEvent::Kind;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// How often the agent asks the handler whether the round must be re-formed.
constexpr auto kMembershipPoll = 1000ms;
// A round whose job is ending on a peer (its workers failed, no restart left): how long
// this node waits for its own workers to fail on their closed connections, so that their
// failure is reported with the job's root cause, before it leaves for a new round anyway.
constexpr auto kClosedGrace = 5000ms;
// torchrun's exit barrier timeout.
constexpr auto kExitBarrierTimeout = std::chrono::seconds(300);

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// Why the rendezvous failed, for its error line. A store that closed this node's
// connection means the agent hosting it exited: the job ended on that node (it failed for
// good, or was stopped), which its own log reports; say that rather than the socket's
// errno.
std::string rendezvous_failure(const std::exception_ptr& error) {
  std::string what = what_of(error);
  try {
    std::rethrow_exception(error);
  } catch (const rdzv::RendezvousStoreClosedError& e) {
    spdlog::info("rendezvous: {}", what);
    return e.where() +
           ": the job ended on the node hosting the rendezvous store (its agent closed the "
           "store: it failed for good or was stopped; its log says why)";
  } catch (...) {
  }
  return what;
}

}  // namespace

Agent::Agent(LaunchConfig config, EnvMap agent_env, Supervisor& supervisor,
             std::unique_ptr<rdzv::RendezvousHandler> handler)
    : config_(std::move(config)),
      agent_env_(std::move(agent_env)),
      supervisor_(supervisor),
      handler_(std::move(handler)),
      // Capped so that absurd values cannot overflow the conversion (1e7 s is 115 days).
      grace_(static_cast<std::int64_t>(std::min(config_.shutdown_timeout_s, 1e7) * 1000)),
      remaining_restarts_(config_.max_restarts),
      dstate_timeout_s_(uninterruptible_state_timeout(agent_env_)) {}

Agent::~Agent() = default;

RunHistory::Facts Agent::history_facts() const {
  const std::string entry =
      config_.entry == EntryKind::kExecutable ? config_.training_script : config_.python_exec;
  return {{.run_id = handler_->run_id(),
           .role = config_.role,
           .hostname = host_fqdn(),
           .rdzv_backend = handler_->backend_name(),
           .entry_point = std::filesystem::path(entry).filename().string()},
          config_.nproc_per_node,
          config_.record_file};
}

const std::string& Agent::run_log_dir() const {
  static const std::string kNone;
  return run_dirs_ ? run_dirs_->run_dir() : kNone;
}

Agent::CallOutcome Agent::call_interruptibly(const std::function<void()>& call,
                                             const char* during) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  CallOutcome outcome;
  std::thread helper([&] {
    try {
      call();
    } catch (...) {
      outcome.error = std::current_exception();  // read after join()
    }
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  });
  while (true) {
    {
      // Short waits: a one-node rendezvous completes in microseconds and must not pay a
      // polling delay, while a signal is still noticed within a few tens of ms.
      std::unique_lock lock(mu);
      if (cv.wait_for(lock, 25ms, [&] { return done; })) break;
    }
    // No worker is alive here, so the only events are signals (and timeouts).
    const SupervisorEvent ev = supervisor_.next_event(0ms);
    if (ev.kind != Kind::kSignal || outcome.signo != 0) continue;
    outcome.signo = ev.signo;
    spdlog::warn("received {} during {}; leaving it", signal_name(ev.signo), during);
    handler_->interrupt();
  }
  helper.join();
  return outcome;
}

std::optional<rdzv::RendezvousInfo> Agent::rendezvous(RunResult& result) {
  std::optional<rdzv::RendezvousInfo> info;
  job_view_.reset();  // its board ends with the round
  handler_->set_restarts_spent(restart_count_);
  const auto rendezvous_start = Clock::now();
  const CallOutcome call =
      call_interruptibly([&] { info = handler_->next_rendezvous(); }, "the rendezvous");
  if (call.signo != 0) {
    // The round may have formed just before interrupt(): shutdown() leaves it then.
    if (call.error) spdlog::debug("rendezvous: {}", what_of(call.error));
    stopped_by(call.signo, result);
    return std::nullopt;
  }
  if (call.error) {
    spdlog::error("rendezvous failed: {}", rendezvous_failure(call.error));
    failure_ = {ExitClass::kInfrastructure, 0};  // a node, the store or etcd lost
    if (unspent_failures_.empty()) {
      finish(result, RunResult::Outcome::kFailed);
    } else {
      fail_job(std::move(unspent_failures_), result);
    }
    return std::nullopt;
  }
  unspent_failures_.clear();
  history_->round_formed(
      *info, std::chrono::duration<double, std::milli>(Clock::now() - rendezvous_start).count());
  round_ = info;
  spdlog::info("rendezvous complete: round {}, group_rank {}/{}, ranks {}..{} of {}, master {}:{}",
               info->round, info->group_rank, info->group_world_size, info->rank_base,
               info->rank_base + config_.nproc_per_node - 1, info->world_size, info->master_addr,
               info->master_port);
  return info;
}

std::vector<WorkerSpec> Agent::prepare_attempt(const rdzv::RendezvousInfo& info) {
  // TORCHELASTIC_RESTART_COUNT and attempt_<N> count restarts, as torchrun's: a
  // membership change spends none and keeps them. They must be equal on every node of a
  // round: PyTorch 1.13 workers prefix their store keys with the count, so nodes that
  // disagree wait for each other's keys forever. A node that spent a restart on a real
  // failure and a peer that only followed it into the new round (its workers broke with
  // the round, needs_new_round_now()) would disagree, so the round's count is the most
  // any of its nodes has spent, and a node behind adopts it with the budget it leaves
  // (under torchrun such a peer usually sees its workers fail and spends one too).
  if (info.restart_count > restart_count_) {
    spdlog::info("a node of this round has spent {} restart(s); this node follows its count",
                 info.restart_count);
    restart_count_ = info.restart_count;
    remaining_restarts_ = std::max(0, config_.max_restarts - restart_count_);
  }
  attempt_ = restart_count_;
  run_dirs_->prepare_attempt(attempt_, config_.nproc_per_node);
  if (dstate_timeout_s_) dstate_watch_.emplace(*dstate_timeout_s_);
  std::vector<WorkerSpec> specs =
      make_worker_specs(config_, AttemptFacts{info, handler_->run_id(), attempt_}, agent_env_,
                        *run_dirs_, numa_plan_);
  for (const auto& w : specs) {
    // Written to a log file (-r or -t): the user asked for the files; keep them (torchrun
    // never removes its log directory).
    for (const StreamSpec* s : {&w.out, &w.err}) {
      if (s->mode != StreamMode::kConsole && s->file != "/dev/null") {
        run_dirs_->keep_default_dir(RunDirs::Keep::kLogs);
      }
    }
  }
  return specs;
}

std::vector<WorkerExit> Agent::stop_workers(int signo) { return supervisor_.stop(signo, grace_); }

bool Agent::membership_changed(bool fresh) {
  try {
    return fresh ? handler_->needs_new_round_now() : handler_->needs_new_round();
  } catch (const std::exception& e) {
    spdlog::warn("membership check failed: {}", e.what());
    return false;
  }
}

Agent::Step Agent::monitor(RunResult& result) {
  auto next_poll = Clock::now() + kMembershipPoll;
  std::vector<WorkerExit> also_failed;      // while round_breaks_for() waited
  std::optional<Clock::time_point> closed;  // when the closed rendezvous was first seen
  while (true) {
    const auto wake = job_view_ ? std::min(next_poll, job_view_->next_tick()) : next_poll;
    const SupervisorEvent ev = supervisor_.next_event(
        std::chrono::duration_cast<Ms>(std::max(wake - Clock::now(), Clock::duration::zero())));
    switch (ev.kind) {
      case Kind::kTimeout: {
        if (job_view_) job_view_->tick(Clock::now());
        if (const auto why = job_view_ ? job_view_->leave_job() : std::nullopt) {
          return leave_as_straggler(*why, result);
        }
        if (Clock::now() < next_poll) break;
        next_poll = Clock::now() + kMembershipPoll;
        if (auto step = end_if_wedged(result)) return *step;
        if (membership_changed()) {
          if (std::string why = handler_->cut_off(); !why.empty()) return end_cut_off(why, result);
          if (job_ending_elsewhere()) {  // this node's failure follows
            if (!closed) closed = Clock::now();
            if (Clock::now() - *closed < kClosedGrace) break;
          }
          spdlog::warn(
              "membership changed; restarting the workers in a new rendezvous round "
              "(no restart spent)");
          history_->attempt_ended("membership change");
          if (job_view_) job_view_->set_state("rendezvous", restart_count_);
          stop_workers(SIGTERM);
          return Step::kRendezvous;
        }
        break;
      }
      case Kind::kWorkerExited: {
        const bool broken = ev.exit.failed() && (membership_changed(/*fresh=*/true) ||
                                                 round_breaks_for(ev.exit, also_failed));
        if (std::string why = broken ? handler_->cut_off() : ""; !why.empty()) {
          also_failed.insert(also_failed.begin(), ev.exit);
          return end_cut_off(why, result, std::move(also_failed));
        }
        if (broken && pending_signal_ == 0 && !job_ending_elsewhere()) {
          // Peers that already left for the new round break this round's collectives, so
          // a failure now is most likely that, not a fault: no restart is spent on it.
          // With the job ending elsewhere, this failure is the job's, reported with its
          // root cause. If the peer had in fact ended the job unseen (its store gone), the
          // next rendezvous fails and this failure is the one reported.
          spdlog::warn(
              "local rank {} failed while the rendezvous needs a new round; "
              "restarting the workers in a new round (no restart spent)",
              ev.exit.local_rank);
          unspent_failures_ = {
              make_failure(ev.exit, run_dirs_->error_file(attempt_, ev.exit.local_rank))};
          history_->attempt_ended("membership change");
          if (job_view_) job_view_->set_state("rendezvous", restart_count_);
          stop_workers(SIGTERM);
          return Step::kRendezvous;
        }
        failure_ = {class_of_exit(ev.exit.signal), 0};
        if (ev.exit.failed()) {
          also_failed.insert(also_failed.begin(), ev.exit);
          return on_failure(std::move(also_failed), result);
        }
        spdlog::debug("local rank {} (pid {}) exited 0", ev.exit.local_rank, ev.exit.pid);
        break;
      }
      case Kind::kAllSucceeded:
        return on_success(result);
      case Kind::kStalled:  // the stall watchdog stopped them (--stall-timeout)
        failure_ = {ExitClass::kStall, 0};
        history_->flight_recorder_dumps(ev.flight_recorder_dir);
        return on_failure(ev.exits, result);
      case Kind::kSignal:
        // Every handled signal, SIGUSR1/SIGUSR2 included, ends the run (torchrun 2.11:
        // SignalException): forwarded to the workers, which are then stopped.
        spdlog::warn(
            "received {}; forwarding it to the workers and stopping them "
            "(SIGKILL after {} s)",
            signal_name(ev.signo), config_.shutdown_timeout_s);
        stop_workers(ev.signo);
        return stopped_by(ev.signo, result);
    }
  }
}

Agent::Step Agent::on_failure(std::vector<WorkerExit> failed, RunResult& result) {
  // Every worker that had already failed when the first failure was seen (torchrun's
  // failed workers of one poll), then, as torchrun 2.x, the peers stopped because of it
  // (exitcode -15, or -9 after the shutdown timeout); each part by global rank.
  history_->attempt_ended(exit_class_name(failure_.first));
  while (true) {
    const SupervisorEvent ev = supervisor_.next_event(0ms);
    if (ev.kind == Kind::kTimeout) break;
    if (ev.kind == Kind::kWorkerExited && ev.exit.failed()) failed.push_back(ev.exit);
    if (ev.kind == Kind::kSignal) pending_signal_ = ev.signo;
  }
  std::vector<WorkerExit> stopped = stop_workers(pending_signal_ != 0 ? pending_signal_ : SIGTERM);
  const auto by_rank = [](const WorkerExit& a, const WorkerExit& b) {
    return a.global_rank < b.global_rank;
  };
  std::sort(failed.begin(), failed.end(), by_rank);
  std::sort(stopped.begin(), stopped.end(), by_rank);
  for (auto& e : stopped) {
    if (e.failed()) failed.push_back(std::move(e));
  }
  std::vector<Failure> failures;
  for (const auto& e : failed) {
    failures.push_back(make_failure(e, run_dirs_->error_file(attempt_, e.local_rank)));
  }
  // As torchrun's: the failed attempt's folders stay (the report names the error files).
  run_dirs_->keep_default_dir(RunDirs::Keep::kFailure);
  const Failure& root = failures[root_cause_index(failures)];
  // torchrun's line, matched by log scrapers: logged for every failed attempt.
  spdlog::error(
      "{}", failed_log_line(root, config_.entry == EntryKind::kExecutable ? config_.training_script
                                                                          : config_.python_exec));

  if (pending_signal_ != 0) return stopped_by(pending_signal_, result);
  if (remaining_restarts_ > 0) {
    // The stall watchdog's report (where each rank was stuck) is shown before a restart
    // too: the next attempt may stall the same way.
    if (std::any_of(failed.begin(), failed.end(), [](auto& e) { return !e.note.empty(); })) {
      std::fprintf(stderr, "%s\n",
                   format_failure_report(config_.training_script, failures, host_fqdn()).c_str());
    }
    --remaining_restarts_;
    ++restart_count_;
    spdlog::warn("worker group failed (rank {} exitcode {}); restarting ({}/{} restarts)",
                 root.global_rank, root.exitcode, restart_count_, config_.max_restarts);
    if (job_view_) job_view_->set_state("restarting", restart_count_);
    return Step::kRendezvous;
  }
  return fail_job(std::move(failures), result);
}

Agent::Step Agent::fail_job(std::vector<Failure> failures, RunResult& result) {
  run_dirs_->keep_default_dir(RunDirs::Keep::kFailure);  // also a failure no restart was spent on
  result.failures = std::move(failures);
  if (job_view_) job_view_->set_state("failed", restart_count_);
  // The job's cause first (before the node's report); it may give this failure its class.
  if (const auto c = job_view_ ? job_view_->log_root_cause(result.failures) : std::nullopt)
    failure_ = {*c, 0};
  const auto own = agent_env_.find("TORCHELASTIC_ERROR_FILE");
  report_failures(config_.training_script, result.failures,
                  own == agent_env_.end() ? std::string() : own->second,
                  config_.entry == EntryKind::kExecutable
                      ? std::string()
                      : describe_worker_python(config_.python_exec, agent_env_));
  try {
    handler_->set_closed();
  } catch (const std::exception& e) {
    spdlog::debug("set_closed: {}", e.what());
  }
  return finish(result, RunResult::Outcome::kFailed);
}

Agent::Step Agent::on_success(RunResult& result) {
  history_->attempt_ended("success");
  if (job_view_) job_view_->set_state("succeeded", restart_count_);
  spdlog::info("all {} local workers succeeded", config_.nproc_per_node);
  bool passed = false;
  const CallOutcome call = call_interruptibly(
      [&] { passed = handler_->exit_barrier(kExitBarrierTimeout); }, "the exit barrier");
  if (call.signo != 0) return stopped_by(call.signo, result);
  if (call.error) {
    spdlog::warn("exit barrier: {}", what_of(call.error));
    return finish(result, RunResult::Outcome::kSucceeded);
  }
  if (!passed) {
    // The rendezvous logged why (a timeout after this bound, or a peer that left first).
    spdlog::warn("exit barrier not passed (bound {} s); other nodes may still be running",
                 kExitBarrierTimeout.count());
  }
  try {
    handler_->set_closed();
  } catch (const std::exception& e) {
    spdlog::warn("exit barrier: {}", e.what());
  }
  return finish(result, RunResult::Outcome::kSucceeded);
}

Agent::Step Agent::stopped_by(int signo, RunResult& result) {
  std::fprintf(stderr, "ddprun: stopped by %s\n", signal_name(signo).c_str());
  if (history_) history_->attempt_ended("stopped by " + signal_name(signo));
  failure_ = {ExitClass::kSignal, signo};
  return finish(result, RunResult::Outcome::kStopped);
}

Agent::Step Agent::finish(RunResult& result, RunResult::Outcome outcome) {
  job_view_.reset();
  handler_->shutdown();
  result.outcome = outcome;
  if (outcome == RunResult::Outcome::kSucceeded) failure_ = {ExitClass::kSuccess, 0};
  result.exit_class = failure_.first;
  result.exit_code = exit_code();
  return Step::kDone;
}

RunResult Agent::run() {
  RunResult result;
  try {
    // The default torchelastic_XXXXXX (no --log-dir) goes where torchrun's goes.
    run_dirs_.emplace(config_.log_dir, handler_->run_id(), temp_dir(agent_env_));
    history_.emplace(config_.event_log_handler, history_facts());
    if (defaults_omp_num_threads(config_, agent_env_)) {
      spdlog::warn(
          "\n*****************************************\n"
          "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
          "to avoid your system being overloaded, please further tune the variable for "
          "optimal performance in your application as needed. \n"
          "*****************************************");
    }
    if (!config_.numa_binding.empty()) {
      numa_plan_ = plan_and_show(config_.numa_binding, config_.nproc_per_node, agent_env_);
    }
    while (!blocked(result)) {  // read once: a later round's verdict does not list this node
      const auto info = rendezvous(result);
      if (!info) break;
      if (const auto step = config_.preflight ? preflight(*info, result) : std::nullopt) {
        if (*step == Step::kDone) break;
        continue;
      }
      try {
        supervisor_.start(prepare_attempt(*info));
      } catch (const SpawnError& e) {
        spdlog::error("cannot start the workers: {}", e.what());
        finish(result, RunResult::Outcome::kFailed);
        break;
      }
      job_view_.emplace(supervisor_, *handler_, *info, config_, *history_, attempt_,
                        restart_count_);
      history_->attempt_started(attempt_, restart_count_);
      spdlog::info(
          "started {} workers with {} (attempt {}, restarts spent {})", config_.nproc_per_node,
          config_.entry == EntryKind::kExecutable ? config_.training_script : config_.python_exec,
          attempt_, restart_count_);
      if (monitor(result) == Step::kDone) break;
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    result.outcome = RunResult::Outcome::kFailed;
    result.exit_code = exit_code();
  }
  if (history_) {
    // As torchrun's events: the workers' run ended (they may have failed) or the agent's.
    const bool workers_ended =
        result.outcome == RunResult::Outcome::kSucceeded ||
        (result.outcome == RunResult::Outcome::kFailed && !result.failures.empty());
    history_->run_ended(result.failures, workers_ended,
                        result.outcome == RunResult::Outcome::kSucceeded, failure_.first,
                        result.exit_code, restart_count_);
  }
  // The failure report (the only reader of the workers' error files) is printed by now.
  if (run_dirs_) run_dirs_->remove_default_dir();
  result.restart_count = restart_count_;
  return result;
}

}  // namespace ddprun::launcher
