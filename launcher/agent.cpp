// agent.cpp: the Agent's state machine (see the table in agent.h). About 400 lines: the
// transitions stay in one file so that the table maps onto it.
#include "launcher/agent.h"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "base/sys_error.h"
#include "launcher/error_file.h"
#include "launcher/numa.h"
#include "launcher/process/signals.h"
#include "launcher/process/spawn.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Kind = SupervisorEvent::Kind;

// How often the agent asks the handler whether the round must be re-formed.
constexpr auto kMembershipPoll = 1000ms;
// torchrun's exit barrier timeout.
constexpr auto kExitBarrierTimeout = std::chrono::seconds(300);

std::string make_temp_dir(const std::string& pattern) {
  std::string buf = pattern + "XXXXXX";
  if (::mkdtemp(buf.data()) == nullptr) {
    throw_errno("mkdtemp " + pattern);
  }
  return buf;
}

std::string temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  return (tmp && *tmp) ? tmp : "/tmp";
}

bool forward_only(int signo) { return signo == SIGUSR1 || signo == SIGUSR2; }

std::string expand_prefix(std::string text, const std::string& role, int rank, int local_rank) {
  const std::pair<std::string, std::string> macros[] = {
      {"${role_name}", role},
      {"${rank}", std::to_string(rank)},
      {"${local_rank}", std::to_string(local_rank)}};
  for (const auto& [macro, value] : macros) {
    for (auto pos = text.find(macro); pos != std::string::npos;
         pos = text.find(macro, pos + value.size())) {
      text.replace(pos, macro.size(), value);
    }
  }
  return text;
}

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

rdzv::RendezvousParams make_rendezvous_params(const LaunchConfig& config) {
  rdzv::RendezvousParams p;
  p.backend = config.rdzv_backend;
  p.backend_alias = config.rdzv_backend_alias;
  p.endpoint = config.rdzv_endpoint;
  p.run_id = config.rdzv_id;
  p.min_nodes = config.min_nodes;
  p.max_nodes = config.max_nodes;
  p.node_rank = config.node_rank;
  p.master_addr = config.master_addr;
  p.master_port = config.master_port;
  p.local_addr = config.local_addr;
  p.local_world_size = config.nproc_per_node;
  p.conf = config.rdzv_conf;
  // The job's fingerprint: the program and its arguments as written, not the python
  // executable or --nproc-per-node, which may differ per node (docs/multinode.md).
  if (config.entry == EntryKind::kPythonModule) p.job_command.push_back("-m");
  if (config.entry == EntryKind::kExecutable) p.job_command.push_back("--no-python");
  p.job_command.push_back(config.training_script);
  p.job_command.insert(p.job_command.end(), config.script_args.begin(), config.script_args.end());
  // USE_LIBUV=0 is PyTorch's switch to its non-libuv TCPStore, which (2.6) workers ignore
  // when told to use the agent's store; a build without libuv (Debian's 2.6) then cannot
  // initialise. So it also means: worker rank 0 hosts the store (docs/usage.md).
  const char* libuv = std::getenv("USE_LIBUV");
  if (libuv != nullptr && std::string(libuv) == "0" && !p.conf.use_agent_store) {
    p.conf.use_agent_store = false;
  }
  return p;
}

Agent::Agent(LaunchConfig config, EnvMap agent_env, Supervisor& supervisor,
             std::unique_ptr<rdzv::RendezvousHandler> handler)
    : config_(std::move(config)),
      agent_env_(std::move(agent_env)),
      supervisor_(supervisor),
      handler_(std::move(handler)),
      // Capped so that absurd values cannot overflow the conversion (1e7 s is 115 days).
      grace_(static_cast<std::int64_t>(std::min(config_.shutdown_timeout_s, 1e7) * 1000)),
      remaining_restarts_(config_.max_restarts) {}

Agent::~Agent() = default;

void Agent::make_run_log_dir() {
  std::string base = config_.log_dir;
  files_disabled_ = base == "/dev/null";
  if (base.empty() || files_disabled_) {
    base = make_temp_dir(temp_base() + "/torchelastic_");
    default_log_dir_ = base;
  } else {
    fs::create_directories(base);
  }
  std::string run_id = handler_->run_id();
  std::replace(run_id.begin(), run_id.end(), '/', '_');  // a user's --rdzv-id may hold '/'
  run_log_dir_ = make_temp_dir((fs::path(base) / (run_id + "_")).string());
  spdlog::info("log directory set to: {}", run_log_dir_);
}

std::string Agent::attempt_dir() const {
  return (fs::path(run_log_dir_) / fmt::format("attempt_{}", attempt_)).string();
}

std::string Agent::error_file_path(int local_rank) const {
  return (fs::path(attempt_dir()) / std::to_string(local_rank) / "error.json").string();
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
    if (ev.kind != Kind::kSignal || forward_only(ev.signo) || outcome.signo != 0) continue;
    outcome.signo = ev.signo;
    spdlog::warn("received {} during {}; leaving it", signal_name(ev.signo), during);
    handler_->interrupt();
  }
  helper.join();
  return outcome;
}

std::optional<rdzv::RendezvousInfo> Agent::rendezvous(RunResult& result) {
  std::optional<rdzv::RendezvousInfo> info;
  const CallOutcome call =
      call_interruptibly([&] { info = handler_->next_rendezvous(); }, "the rendezvous");
  if (call.signo != 0) {
    // The round may have formed just before interrupt(): shutdown() leaves it then.
    if (call.error) spdlog::debug("rendezvous: {}", what_of(call.error));
    stopped_by(call.signo, result);
    return std::nullopt;
  }
  if (call.error) {
    spdlog::error("rendezvous failed: {}", what_of(call.error));
    finish(result, RunResult::Outcome::kFailed);
    return std::nullopt;
  }
  spdlog::info("rendezvous complete: round {}, group_rank {}/{}, ranks {}..{} of {}, master {}:{}",
               info->round, info->group_rank, info->group_world_size, info->rank_base,
               info->rank_base + config_.nproc_per_node - 1, info->world_size, info->master_addr,
               info->master_port);
  return info;
}

std::vector<WorkerSpec> Agent::prepare_attempt(const rdzv::RendezvousInfo& info) {
  // TORCHELASTIC_RESTART_COUNT must be equal on every node of a round: PyTorch 1.13
  // workers prefix their store keys with it (/worker/attempt_<n>/), so nodes that
  // disagree wait for each other's keys forever. A node that spent a restart on a real
  // failure and a peer that only followed it into the new round would disagree, so
  // multi-node jobs use the shared round number. One node: the restarts spent (torchrun).
  attempt_ = config_.max_nodes > 1 ? info.round : restart_count_;
  // With --log-dir /dev/null the run dir is a private temp dir that holds only error.json.
  const fs::path logs = attempt_dir();
  fs::remove_all(logs);
  const AttemptFacts facts{info, handler_->run_id(), attempt_};
  const auto prefix_template = agent_env_.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");

  std::vector<WorkerSpec> specs;
  for (int lr = 0; lr < config_.nproc_per_node; ++lr) {
    fs::create_directories(logs / std::to_string(lr));
    WorkerSpec w;
    w.local_rank = lr;
    w.global_rank = info.rank_base + lr;
    w.argv = worker_argv(config_, lr);
    w.env = to_env_strings(worker_env(config_, facts, agent_env_, lr, error_file_path(lr)));
    if (lr < static_cast<int>(numa_plan_.size())) {
      w.cpus.assign(numa_plan_[lr].cpus.begin(), numa_plan_[lr].cpus.end());
    }

    const bool shown = !config_.local_ranks_filter || config_.local_ranks_filter->count(lr) > 0;
    const int tee = config_.tee.for_rank(lr);
    const int redirect = config_.redirects.for_rank(lr);
    const auto stream = [&](int bit, const char* name) {
      StreamSpec s;
      if (tee & bit) {
        s.mode = StreamMode::kTee;
      } else if ((redirect & bit) || !shown) {
        // A rank filtered off the console still keeps its output, in its log file.
        s.mode = StreamMode::kRedirect;
      }
      // Redirected only: the log file holds the sole copy of this output; keep it.
      if (s.mode == StreamMode::kRedirect && !files_disabled_) keep_default_log_dir_ = true;
      if (s.mode != StreamMode::kConsole) {
        s.file = files_disabled_
                     ? "/dev/null"
                     : (logs / std::to_string(lr) / (std::string(name) + ".log")).string();
      }
      s.show_on_console = shown;
      return s;
    };
    w.out = stream(StdStreams::kOut, "stdout");
    w.err = stream(StdStreams::kErr, "stderr");
    if (prefix_template != agent_env_.end()) {
      w.line_prefix = expand_prefix(prefix_template->second, config_.role, w.global_rank, lr);
    } else if (tee != 0) {
      w.line_prefix = fmt::format("[{}{}]:", config_.role, lr);
    }
    specs.push_back(std::move(w));
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
  auto next_poll = std::chrono::steady_clock::now() + kMembershipPoll;
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    const SupervisorEvent ev =
        supervisor_.next_event(std::chrono::duration_cast<std::chrono::milliseconds>(
            std::max(next_poll - now, now - now)));
    switch (ev.kind) {
      case Kind::kTimeout: {
        next_poll = std::chrono::steady_clock::now() + kMembershipPoll;
        if (membership_changed()) {
          spdlog::warn(
              "membership changed; restarting the workers in a new rendezvous round "
              "(no restart spent)");
          stop_workers(SIGTERM);
          return Step::kRendezvous;
        }
        break;
      }
      case Kind::kWorkerExited:
        if (ev.exit.failed() && membership_changed(/*fresh=*/true)) {
          // Peers that already left for the new round break this round's collectives, so
          // a failure now is most likely that, not a fault: no restart is spent on it.
          spdlog::warn(
              "local rank {} failed while the rendezvous needs a new round; "
              "restarting the workers in a new round (no restart spent)",
              ev.exit.local_rank);
          stop_workers(SIGTERM);
          return Step::kRendezvous;
        }
        if (ev.exit.failed()) return on_failure({ev.exit}, result);
        spdlog::debug("local rank {} (pid {}) exited 0", ev.exit.local_rank, ev.exit.pid);
        break;
      case Kind::kAllSucceeded:
        return on_success(result);
      case Kind::kStalled:  // the stall watchdog stopped them (--stall-timeout)
        return on_failure(ev.exits, result);
      case Kind::kSignal:
        if (forward_only(ev.signo)) {
          spdlog::info("forwarding {} to the workers", signal_name(ev.signo));
          supervisor_.forward_signal(ev.signo);
          break;
        }
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
  // List every worker that had already failed when the first failure was seen (torchrun
  // lists the failed workers of one poll), not the ones we are about to terminate.
  while (true) {
    const SupervisorEvent ev = supervisor_.next_event(0ms);
    if (ev.kind == Kind::kTimeout) break;
    if (ev.kind == Kind::kWorkerExited && ev.exit.failed()) failed.push_back(ev.exit);
    if (ev.kind == Kind::kSignal) {
      if (forward_only(ev.signo)) {
        supervisor_.forward_signal(ev.signo);
      } else {
        pending_signal_ = ev.signo;
      }
    }
  }
  stop_workers(pending_signal_ != 0 ? pending_signal_ : SIGTERM);

  std::sort(failed.begin(), failed.end(),
            [](const WorkerExit& a, const WorkerExit& b) { return a.global_rank < b.global_rank; });
  std::vector<Failure> failures;
  for (const auto& e : failed) {
    failures.push_back(make_failure(e, error_file_path(e.local_rank)));
  }
  const Failure& root = failures[root_cause_index(failures)];

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
    return Step::kRendezvous;
  }
  result.failures = std::move(failures);
  report(result);
  try {
    handler_->set_closed();
  } catch (const std::exception& e) {
    spdlog::debug("set_closed: {}", e.what());
  }
  return finish(result, RunResult::Outcome::kFailed);
}

Agent::Step Agent::on_success(RunResult& result) {
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
    spdlog::warn("exit barrier timed out after {} s; other nodes may still be running",
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
  return finish(result, RunResult::Outcome::kStopped);
}

Agent::Step Agent::finish(RunResult& result, RunResult::Outcome outcome) {
  handler_->shutdown();
  result.outcome = outcome;
  result.exit_code = outcome == RunResult::Outcome::kSucceeded ? 0 : 1;
  return Step::kDone;
}

void Agent::plan_numa_binding() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> allowed;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) allowed.insert(c);
    }
  }
  const auto cvd = agent_env_.find("CUDA_VISIBLE_DEVICES");
  numa_plan_ =
      plan_numa(config_.numa_binding, read_topology("/sys"), allowed, config_.nproc_per_node,
                cvd == agent_env_.end() ? std::nullopt : std::optional<std::string>(cvd->second));
  // Shown at the default level: the user asked for the binding.
  spdlog::warn("{}", describe_plan(config_.numa_binding, numa_plan_));
}

void Agent::remove_default_log_dir() {
  if (default_log_dir_.empty()) return;
  if (keep_default_log_dir_) {
    spdlog::warn("worker logs kept in {} (redirected without --log-dir)", run_log_dir_);
    return;
  }
  std::error_code ec;
  fs::remove_all(default_log_dir_, ec);
  if (ec) spdlog::warn("cannot remove log directory {}: {}", default_log_dir_, ec.message());
}

void Agent::report(const RunResult& result) {
  const auto& failures = result.failures;
  const std::string text = format_failure_report(config_.training_script, failures, host_fqdn());
  std::fprintf(stderr, "%s\n", text.c_str());
  const Failure& root = failures[root_cause_index(failures)];
  if (const std::string hint = failure_hint(root); !hint.empty()) {
    std::fprintf(stderr, "ddprun: hint: %s\n", hint.c_str());
  }
  std::fflush(stderr);

  // torchrun's agent runs under @record too: its own error file gets the root cause.
  const auto own = agent_env_.find("TORCHELASTIC_ERROR_FILE");
  if (own == agent_env_.end() || own->second.empty()) return;
  std::string why;
  const bool ok = root.error_file == root.error_file_path
                      ? copy_error_file(root.error_file_path, own->second, root.exitcode, &why)
                      : write_error_file(own->second, root.summary, root.callstack, root.timestamp,
                                         root.exitcode, &why);
  if (!ok) spdlog::warn("could not write the agent error file: {}", why);
}

RunResult Agent::run() {
  RunResult result;
  try {
    make_run_log_dir();
    if (defaults_omp_num_threads(config_, agent_env_)) {
      spdlog::warn(
          "\n*****************************************\n"
          "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
          "to avoid your system being overloaded, please further tune the variable for "
          "optimal performance in your application as needed. \n"
          "*****************************************");
    }
    if (!config_.numa_binding.empty()) plan_numa_binding();
    while (true) {
      const auto info = rendezvous(result);
      if (!info) break;
      try {
        supervisor_.start(prepare_attempt(*info));
      } catch (const SpawnError& e) {
        spdlog::error("cannot start the workers: {}", e.what());
        finish(result, RunResult::Outcome::kFailed);
        break;
      }
      spdlog::info("started {} workers (attempt {}, restarts spent {})", config_.nproc_per_node,
                   attempt_, restart_count_);
      if (monitor(result) == Step::kDone) break;
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    result.outcome = RunResult::Outcome::kFailed;
    result.exit_code = 1;
  }
  // The failure report (the only reader of the workers' error files) is printed by now.
  remove_default_log_dir();
  result.restart_count = restart_count_;
  return result;
}

}  // namespace ddprun::launcher
