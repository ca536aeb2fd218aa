// supervisor.h: ProcessSupervisor, the real Supervisor (supervisor_interface.h): spawns an
// attempt's workers, carries their output line by line, reaps them (as child subreaper,
// daemons too), forwards signals and stops them. Composes EventLoop, WorkerGroup,
// OutputRouter, StallWatchdog and FileTimerServer. Used by main.cpp and the ssh launch
// (supervision.h). Thread-safety: start/stop/forward_signal/next_event from one thread,
// cut_short from any; its own loop thread forks (PR_SET_PDEATHSIG follows the thread).
#pragma once

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process/orphan_guard.h"
#include "launcher/process/spawn.h"
#include "launcher/process/stall_watch.h"
#include "launcher/process/supervisor_interface.h"

namespace ddprun::launcher {

struct SupervisorOptions {
  // Signals the agent handles. The caller blocks them in every thread (in main, before
  // any thread starts); the supervisor consumes them with a signalfd and reports kSignal.
  std::vector<int> handled_signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  // The orphan guard (start_orphan_guard); fd -1: none.
  OrphanGuard orphan_guard;
  // Where console lines go (tests pass pipes); not owned.
  int console_stdout_fd = 1;
  int console_stderr_fd = 2;
  // Exit detection through pidfds (Linux >= 5.3). When false, or when the kernel lacks
  // pidfd_open, SIGCHLD joins the signalfd and each worker is reaped with
  // waitpid(pid, WNOHANG) (never waitpid(-1): the orphan guard is also our child).
  bool use_pidfd = true;
  // The stall watchdog (stall_watch.h; 0: off). When every live worker has made no
  // progress for this long (one idle while others progress is only logged, once), every
  // live worker is sent SIGABRT (with PYTHONFAULTHANDLER set, Python
  // prints every thread's stack to stderr and dies); once all have exited (SIGKILL after
  // kStallDumpWait) one kStalled event carries their exits, each with its stderr tail
  // and a note saying why it was stopped.
  std::chrono::milliseconds stall_timeout{0};
  // torch's FileTimerServer (file_timer.h; "": none): the named pipe created at this path
  // for the whole life of the supervisor. An expired timer's signal goes to its pid if
  // that is a worker or a worker's descendant; the exit then carries a note saying so.
  std::string file_timer_path;
};

// REQUIRES: main blocked the handled signals and SIGCHLD before starting any thread
// (prepare_agent_signals / block_signals in signals.h).
class ProcessSupervisor final : public Supervisor {
 public:
  explicit ProcessSupervisor(SupervisorOptions options);
  // Stops (SIGKILL) and reaps any worker still alive, with a warning, then joins.
  ~ProcessSupervisor() override;
  ProcessSupervisor(const ProcessSupervisor&) = delete;
  ProcessSupervisor& operator=(const ProcessSupervisor&) = delete;

  // Spawns one attempt's workers, each in its own session (setsid) with
  // PR_SET_PDEATHSIG(SIGKILL), default signal dispositions and an empty signal mask
  // (see spawn.h). Their stdout/stderr become pipes read by the supervisor thread and
  // routed per StreamSpec (see log_fanout.h); stdin is inherited.
  // REQUIRES: no worker of a previous attempt is alive (stop() returned). Process groups
  // left over from an attempt whose workers all exited are SIGKILLed here, and its exit
  // events not yet taken by next_event() are discarded.
  // Blocks until every worker has exec'd. Throws SpawnError.
  void start(std::vector<WorkerSpec> workers) override;

  // Blocks until the next event or `timeout`. Worker exits are reported in the order
  // observed; kAllSucceeded follows the last successful exit. A worker's exit is reported
  // only after its pipes are drained (EOF, or everything available once it has exited:
  // grandchildren may hold the pipes open) and those last lines have reached the console,
  // so a failure report printed by the agent comes after the worker's own last words.
  SupervisorEvent next_event(std::chrono::milliseconds timeout) override;

  // Sends `signo` to every live worker's process group (ESRCH tolerated).
  void forward_signal(int signo) override;

  // Sends `signo` to every live worker's process group, waits up to `grace` for them
  // to exit, then SIGKILLs the groups and reaps. Returns the exits observed meanwhile.
  // Output already written by the workers is flushed to its sinks before it returns.
  // A handled signal that arrives during the grace period ends it at once (a second
  // Ctrl-C means "now") and is still reported by the next next_event(); `cut_short()`
  // ends it too, from any thread.
  // Precisely: every process group of the attempt gets `signo` and, at the end, SIGKILL,
  // also when its leader already exited (grandchildren); ESRCH is tolerated. The returned
  // exits are all exits of the attempt not yet taken by next_event(), in observed order
  // (queued ones are removed from the event queue, so each exit is delivered exactly
  // once); kSignal events stay queued. Safe to call with nothing running (returns {}).
  std::vector<WorkerExit> stop(int signo, std::chrono::milliseconds grace) override;
  // Thread-safe (may be called from any thread while stop() blocks).
  void cut_short();

  // Pids of live workers (the Agent's D-state watch, diagnostics and tests).
  std::vector<pid_t> live_pids() const override;
  // The stall watchdog's gate (options.stall_timeout > 0), else nullptr.
  StallGate* stall_gate() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::launcher
