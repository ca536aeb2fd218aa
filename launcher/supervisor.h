// supervisor.h: ProcessSupervisor, which spawns one attempt's worker processes, carries
// their stdout/stderr to the console and log files line by line, reaps them, forwards
// signals to their process groups and stops them (signal, grace period, SIGKILL).
// Used by the Agent (agent.cpp), which sees only events and never a pid loop of its own.
// Thread-safety: start/stop/forward_signal/next_event are called from one thread (the
// agent's); the supervisor runs its own event-loop thread (signalfd, pidfds or SIGCHLD,
// worker pipes), which is also the thread that forks, because PR_SET_PDEATHSIG fires
// when the forking *thread* exits. REQUIRES: main blocked the handled signals and SIGCHLD
// before starting any thread (prepare_agent_signals / block_signals in signals.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::launcher {

// Where one of a worker's output streams goes (torchrun's -r/--redirects and -t/--tee).
enum class StreamMode {
  kConsole,   // to the agent's own stdout/stderr, whole lines, unprefixed (torchrun default)
  kRedirect,  // to `file` only
  kTee,       // to `file`, and to the console with the line prefix
};

struct StreamSpec {
  StreamMode mode = StreamMode::kConsole;
  std::string file;          // kRedirect/kTee: created (truncated) before spawning
  bool show_on_console = true;  // false for local ranks filtered out by --local-ranks-filter
};

struct WorkerSpec {
  int local_rank = 0;
  int global_rank = 0;
  std::vector<std::string> argv;  // argv[0] is looked up in PATH of `env` if it has no '/'
  std::vector<std::string> env;   // the complete environment, "NAME=value"
  std::string cwd;                // empty: inherit
  std::string line_prefix;        // console prefix for the lines of kTee streams only,
                                  // e.g. "[default0]:"
  StreamSpec out;
  StreamSpec err;
};

// Thrown by start() when a worker cannot be started (exec failure, fork failure, a log
// file that cannot be created). The message names the program or file and the reason.
// Workers of the attempt that had started are stopped before it is thrown.
class SpawnError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct WorkerExit {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = 0;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the terminating signal, or 0
  std::chrono::system_clock::time_point when;  // when the exit was observed
  bool failed() const { return signal != 0 || exit_code != 0; }
};

struct SupervisorEvent {
  enum class Kind {
    kWorkerExited,  // `exit` holds one worker's exit (successful or not)
    kAllSucceeded,  // every worker of the attempt has exited 0
    kSignal,        // the agent received `signo` (one of the handled signals)
    kTimeout,       // next_event's timeout passed
  };
  Kind kind = Kind::kTimeout;
  WorkerExit exit;
  int signo = 0;
};

struct SupervisorOptions {
  // Signals the agent handles. The caller blocks them in every thread (in main, before
  // any thread starts); the supervisor consumes them with a signalfd and reports kSignal.
  std::vector<int> handled_signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  // Write end of the orphan guard's pipe (start_orphan_guard), or -1 for none.
  int orphan_guard_fd = -1;
  // Additions (process layer): where console lines go (tests pass pipes); not owned.
  int console_stdout_fd = 1;
  int console_stderr_fd = 2;
  // A handled signal that arrives while stop() waits out its grace period ends the grace
  // at once (a second Ctrl-C means "now"); it is still reported by next_event().
  bool signal_cuts_grace = true;
  // Exit detection through pidfds (Linux >= 5.3). When false, or when the kernel lacks
  // pidfd_open, SIGCHLD joins the signalfd and each worker is reaped with
  // waitpid(pid, WNOHANG) (never waitpid(-1): the orphan guard is also our child).
  bool use_pidfd = true;
};

class ProcessSupervisor {
 public:
  explicit ProcessSupervisor(SupervisorOptions options);
  // Stops (SIGKILL) and reaps any worker still alive, with a warning, then joins.
  ~ProcessSupervisor();
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
  void start(std::vector<WorkerSpec> workers);

  // Blocks until the next event or `timeout`. Worker exits are reported in the order
  // observed; kAllSucceeded follows the last successful exit. A worker's exit is reported
  // only after its pipes are drained (EOF, or everything available once it has exited:
  // grandchildren may hold the pipes open) and those last lines have reached the console,
  // so a failure report printed by the agent comes after the worker's own last words.
  SupervisorEvent next_event(std::chrono::milliseconds timeout);

  // Sends `signo` to every live worker's process group (ESRCH tolerated).
  void forward_signal(int signo);

  // Sends `signo` to every live worker's process group, waits up to `grace` for them
  // to exit, then SIGKILLs the groups and reaps. Returns the exits observed meanwhile.
  // Output already written by the workers is flushed to its sinks before it returns.
  // A handled signal that arrives during the grace period is reported by the next
  // next_event(); `cut_short()` ends the grace at once (e.g. on a second SIGINT).
  // Precisely: every process group of the attempt gets `signo` and, at the end, SIGKILL,
  // also when its leader already exited (grandchildren); ESRCH is tolerated. The returned
  // exits are all exits of the attempt not yet taken by next_event(), in observed order
  // (queued ones are removed from the event queue, so each exit is delivered exactly
  // once); kSignal events stay queued. Safe to call with nothing running (returns {}).
  std::vector<WorkerExit> stop(int signo, std::chrono::milliseconds grace);
  // Thread-safe (may be called from any thread while stop() blocks).
  void cut_short();

  // Pids of live workers (diagnostics and tests).
  std::vector<pid_t> live_pids() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Starts the orphan guard: a small process forked from the (still single-threaded)
// agent that holds the read end of a pipe. The supervisor tells it every worker process
// group it creates; when the agent dies for any reason, even SIGKILL, the pipe closes and
// the guard SIGKILLs those process groups, grandchildren included, then exits.
// REQUIRES: called from main before any thread is started. Returns the write end, which
// the supervisor uses (SupervisorOptions::orphan_guard_fd). Throws std::system_error.
int start_orphan_guard();

}  // namespace ddprun::launcher
