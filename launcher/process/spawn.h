// spawn.h: starting one worker process the way a multithreaded supervisor must: everything
// prepared before fork(), only async-signal-safe calls in the child before execve, exec
// errors back through a close-on-exec pipe as SpawnError. Used by WorkerGroup, on the
// supervisor's thread. Thread-safety: the functions share no state; spawn_process must
// run on a thread that outlives the child.
#pragma once

#include <sys/types.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::launcher {

// A worker that cannot be started (exec failure, fork failure, a log file that cannot be
// created). The message names the program or file and the reason. Thrown by
// spawn_process and resolve_program, and by Supervisor::start (supervisor_interface.h).
class SpawnError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] without '/' is looked up in PATH of `env`
  std::vector<std::string> env;   // the complete environment, "NAME=value"
  std::string cwd;                // empty: inherit
  int stdin_fd = -1;              // dup2'ed onto fd 0 in the child; -1: inherit
  int stdout_fd = -1;             // dup2'ed onto fd 1 in the child; -1: inherit
  int stderr_fd = -1;             // dup2'ed onto fd 2 in the child; -1: inherit
  std::vector<int> cpus;          // sched_setaffinity in the child before exec; empty: inherit
  int keep_fd = -1;               // > 2: left open across exec at this number; -1: none
  // Tests only: skip close_range to exercise the fallback for kernels older than 5.11
  // (scan /proc/self/fd and mark every fd close-on-exec).
  bool scan_proc_fds = false;
};

// execvp's lookup, done in the parent: a name with '/' is returned unchanged; otherwise
// the first executable regular file "<dir>/<name>" along PATH taken from `env` (glibc's
// default "/bin:/usr/bin" when `env` has no PATH; an empty entry means "."). Throws
// SpawnError "cannot execute 'foo': No such file or directory" (or "Permission denied"
// when only non-executable matches exist).
std::string resolve_program(const std::string& name, const std::vector<std::string>& env);

// Forks and execs `options`. In the child, in this order and with async-signal-safe calls
// only: setsid() (its own session and process group, pgid == pid, like torchrun's
// start_new_session); prctl(PR_SET_PDEATHSIG, SIGKILL) and a getppid() re-check against
// the pid recorded before fork (the parent may have died before prctl); every signal
// disposition back to SIG_DFL (SIGPIPE included) and an empty signal mask (the agent
// blocks its handled signals and ignores SIGPIPE; execve would pass both on); dup2 of
// the pipes onto 1 and 2 (and of stdin_fd onto 0; stdin stays inherited otherwise, as
// with torchrun); every other fd marked close-on-exec (close_range, else a close()
// loop); chdir; sched_setaffinity when `cpus` is set; execve.
// If any step fails, the child writes {step, errno} to the close-on-exec pipe and exits
// 127 (ENOENT) or 126 (anything else), tini-style; the parent reaps it and throws.
//
// `on_forked(pid)` runs in the parent right after fork, before the exec outcome is known
// (the supervisor registers the new process group with the orphan guard there).
// Blocks until the child has exec'd or failed. Returns the pid. Throws SpawnError naming
// the program ("cannot execute 'foo': No such file or directory") or the directory;
// std::system_error if a pipe or fd cannot be created.
//
// PR_SET_PDEATHSIG fires when the *thread* that forked exits, not the process: call this
// only from a thread that lives as long as the child (the supervisor's own thread).
pid_t spawn_process(const SpawnOptions& options, const std::function<void(pid_t)>& on_forked = {});

}  // namespace ddprun::launcher
