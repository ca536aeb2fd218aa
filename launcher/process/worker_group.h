// worker_group.h: WorkerGroup, one attempt's worker processes as the supervisor tracks
// them: spawn, exit detection, reaping, signals to every process group, the SIGKILL
// escalation, and the adopted processes. Used by ProcessSupervisor. Thread-safety: none;
// everything runs on the supervisor's EventLoop thread, which is also the thread that
// forks (PR_SET_PDEATHSIG, spawn.h).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/process/event_loop.h"
#include "launcher/process/orphan_guard.h"
#include "launcher/process/supervisor_interface.h"

namespace ddprun::launcher {

// Spawning (spawn.h) tells the orphan guard each new process group and puts the job token
// in each environment; exits are detected by a pidfd per worker, or by waitpid(pid,
// WNOHANG) on SIGCHLD and a poll timer where pidfds are missing. Adopted processes
// (descendants.h: daemons that left their worker's group and re-parented to the agent)
// are reaped when they exit and killed at the attempt's end; their exits are never
// reported as workers' exits.

class WorkerGroup {
 public:
  // Called once per worker when its exit is recorded (reaped, or given up after SIGKILL).
  using OnExit = std::function<void(std::size_t index, const WorkerExit& exit)>;

  // `use_pidfd` false, or a kernel without pidfd_open (< 5.3): the owner must call
  // reap_all() after SIGCHLD; the group also polls on a loop timer while one is alive. `guard`: the
  // orphan guard (orphan_guard.h; fd -1 for none): its pipe gets the process groups, its token goes
  // into every worker's environment, its pid is never taken for an adopted process.
  WorkerGroup(EventLoop& loop, bool use_pidfd, OrphanGuard guard, OnExit on_exit);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  bool use_pidfd() const { return use_pidfd_; }

  // Starts the next worker (index = number of workers added before) with the child's ends
  // of its output pipes, and `keep_fd` (-1: none) inherited at its number (the stall
  // watchdog's stack probe). Blocks until it has exec'd. Throws SpawnError; a worker that
  // failed to exec is reaped and counts as exited without an exit report.
  void spawn(WorkerSpec& spec, int stdout_fd, int stderr_fd, int keep_fd = -1);

  // Reaps every worker that has exited (the fallback without pidfds).
  void reap_all();
  // `signo` to every process group of the attempt, also when the leader already exited
  // (grandchildren); ESRCH tolerated.
  void signal_groups(int signo);
  // The escalation's end: SIGKILL to every group, then reaps each worker (a worker still
  // alive kKillWait later, in uninterruptible sleep, is given up and reported as killed),
  // tells the guard to forget every group, and kills the adopted processes (kill_adopted).
  void kill_all();
  // Reaps the adopted processes that have exited (call on SIGCHLD): the agent's children
  // that are neither workers nor the guard.
  void reap_adopted();
  // SIGKILLs every adopted process (and its process group, if it leads one) and reaps
  // it, round after round, since each death re-parents that process's own children to
  // the agent; gives up after kKillWait (uninterruptible sleep) with a warning.
  void kill_adopted();
  // Forgets the workers (all must have been reaped).
  void clear();

  std::size_t alive() const;
  bool all_reaped() const { return alive() == 0; }
  // Every worker reaped and none failed.
  bool all_succeeded() const;
  std::vector<pid_t> live_pids() const;
  // Workers added so far, and worker `index`'s pid and state (the stall watchdog).
  std::size_t size() const { return workers_.size(); }
  pid_t pid(std::size_t index) const;
  int local_rank(std::size_t index) const;
  bool reaped(std::size_t index) const;
  // Whether `pid` is a live worker of the attempt or a descendant of one (its parent
  // chain in /proc reaches a worker): the processes the file timer may signal.
  bool owns(pid_t pid) const;

 private:
  struct Worker;

  void reap(Worker& w);
  // Without pidfds: reap_all() every kFallbackPollMs while a worker is alive.
  void poll();
  void record_exit(Worker& w, WorkerExit exit);
  void guard(int op, pid_t pgid);
  // The agent's children that are neither a worker of this group nor the guard.
  std::vector<pid_t> adopted() const;

  EventLoop& loop_;
  bool use_pidfd_ = true;
  OrphanGuard guard_;
  bool guard_warned_ = false;
  OnExit on_exit_;
  std::vector<std::unique_ptr<Worker>> workers_;
  EventLoop::TimerId poll_timer_ = 0;
};

}  // namespace ddprun::launcher
