// supervisor_interface.h: what the Agent sees of worker supervision: the worker spec it
// hands over, the events it gets back, and the small Supervisor interface (start,
// next_event, forward_signal, stop). ProcessSupervisor (supervisor.h) is the real one;
// tests/launcher drives the Agent through an in-process implementation of it.
// Used by agent.h, supervisor.h, worker_group.h. Thread-safety: plain values; see each
// implementation for its threads.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "launcher/process/log_fanout.h"
#include "launcher/process/stall_gate.h"

namespace ddprun::launcher {

struct WorkerSpec {
  int local_rank = 0;
  int global_rank = 0;
  std::vector<std::string> argv;  // argv[0] is looked up in PATH of `env` if it has no '/'
  std::vector<std::string> env;   // the complete environment, "NAME=value"
  std::string cwd;                // empty: inherit
  std::vector<int> cpus;          // the CPUs it is bound to (--numa-binding); empty: inherit
  std::string line_prefix;        // console prefix for the lines of kTee streams only,
                                  // e.g. "[default0]:"
  bool prefix_all = false;        // the prefix on every console line, whatever the mode
                                  // (the ssh launcher's "[host]:")
  int stdin_fd = -1;              // the worker's stdin (dup'ed; the caller keeps and closes
                                  // its own fd); -1: inherit the agent's
  bool stdin_null = false;        // stdin is /dev/null (another worker reads the agent's)
  bool terminal = false;          // a pty, instead of a pipe, for each stream that goes to
                                  // the console alone (kConsole) where the console is a
                                  // terminal (output_router.h)
  StreamSpec out;
  StreamSpec err;
  // Where this worker writes PyTorch's flight recorder dump when the stall watchdog
  // declares a stall (fr_dump.h); "": no dump.
  std::string flight_recorder_file;
};

struct WorkerExit {
  // The most of a worker's stderr a failed exit carries (the failure report's traceback).
  static constexpr std::size_t kStderrTailBytes = 64 * 1024;

  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = 0;
  int exit_code = 0;                           // valid when signal == 0
  int signal = 0;                              // the terminating signal, or 0
  std::chrono::system_clock::time_point when;  // when the exit was observed
  // Failed exits: the last kStderrTailBytes the worker wrote to stderr, byte-exact,
  // whatever --redirects/--tee say; `stderr_tail_cut` when earlier bytes were dropped.
  std::string stderr_tail;
  bool stderr_tail_cut = false;
  // Why the supervisor ended this worker, shown first in its failure report entry
  // (the stall watchdog: "no progress for 30 s; ..."); "" for an exit of its own.
  std::string note;
  bool failed() const { return signal != 0 || exit_code != 0; }
};

struct SupervisorEvent {
  enum class Kind {
    kWorkerExited,  // `exit` holds one worker's exit (successful or not)
    kAllSucceeded,  // every worker of the attempt has exited 0
    kSignal,        // the agent received `signo` (one of the handled signals)
    kTimeout,       // next_event's timeout passed
    kStalled,       // the stall watchdog ended the attempt: `exits` holds every worker it
                    // stopped (each with its note and the stacks it dumped to stderr)
  };
  Kind kind = Kind::kTimeout;
  WorkerExit exit;
  int signo = 0;
  std::vector<WorkerExit> exits;  // kStalled
  // kStalled: the folder of the flight recorder dumps written before (fr_dump.h); "": none.
  std::string flight_recorder_dir;
};

// One attempt's workers at a time. The contract (ProcessSupervisor documents it fully):
// start() runs the workers or throws SpawnError (spawn.h) with nothing left running;
// next_event() reports each worker's exit once, then kAllSucceeded when every worker
// exited 0, and the handled signals as they arrive; stop() ends the attempt (signal,
// grace, kill) and returns the exits not yet reported.
class Supervisor {
 public:
  virtual ~Supervisor() = default;
  virtual void start(std::vector<WorkerSpec> workers) = 0;
  virtual SupervisorEvent next_event(std::chrono::milliseconds timeout) = 0;
  virtual void forward_signal(int signo) = 0;
  virtual std::vector<WorkerExit> stop(int signo, std::chrono::milliseconds grace) = 0;
  // Pids of the live workers (the D-state watch reads their /proc state); none by default.
  virtual std::vector<pid_t> live_pids() const { return {}; }
  // The stall watchdog's gate (stall_gate.h) for a job-wide judge; nullptr without a
  // watchdog. Valid as long as the supervisor.
  virtual StallGate* stall_gate() { return nullptr; }
};

}  // namespace ddprun::launcher
