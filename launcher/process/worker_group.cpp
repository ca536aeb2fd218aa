// worker_group.cpp: WorkerGroup (see worker_group.h).
#include "launcher/process/worker_group.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "launcher/process/descendants.h"
#include "launcher/process/orphan_guard.h"
#include "launcher/process/signals.h"
#include "launcher/process/spawn.h"
#include "launcher/process/stall_watch.h"

namespace ddprun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// How long a worker may take to die after SIGKILL before the supervisor gives up on it.
constexpr std::chrono::milliseconds kKillWait{10000};
// Reaping interval when pidfds are missing and SIGCHLD may not be blocked everywhere.
constexpr int kFallbackPollMs = 50;

UniqueFd open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#else
  (void)pid;
  errno = ENOSYS;
  return UniqueFd();
#endif
}

WorkerExit decode_status(int status) {
  WorkerExit e;
  if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  } else {
    e.exit_code = WEXITSTATUS(status);
  }
  return e;
}

}  // namespace

struct WorkerGroup::Worker {
  std::size_t index = 0;
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = 0;
  UniqueFd pidfd;
  EventLoop::Id pidfd_id = 0;
  bool reaped = false;
  bool group_gone = false;  // the process group is known to be empty
  WorkerExit exit;
};

WorkerGroup::WorkerGroup(EventLoop& loop, bool use_pidfd, OrphanGuard guard, OnExit on_exit)
    : loop_(loop), guard_(std::move(guard)), on_exit_(std::move(on_exit)) {
  // Probe once: pidfd_open needs Linux 5.3.
  UniqueFd self = use_pidfd ? open_pidfd(::getpid()) : UniqueFd();
  use_pidfd_ = self.valid();
}

WorkerGroup::~WorkerGroup() { loop_.cancel_timer(poll_timer_); }

void WorkerGroup::spawn(WorkerSpec& spec, int stdout_fd, int stderr_fd) {
  workers_.push_back(std::make_unique<Worker>());
  Worker& w = *workers_.back();
  w.index = workers_.size() - 1;
  w.local_rank = spec.local_rank;
  w.global_rank = spec.global_rank;
  SpawnOptions so;
  so.argv = std::move(spec.argv);
  so.env = std::move(spec.env);
  // Inherited by every descendant: how the guard finds daemons once the agent is gone.
  if (!guard_.token.empty()) set_env_entry(so.env, kJobTokenVar, guard_.token);
  so.cwd = std::move(spec.cwd);
  so.cpus = std::move(spec.cpus);
  so.stdin_fd = spec.stdin_fd;
  so.stdout_fd = stdout_fd;
  so.stderr_fd = stderr_fd;
  try {
    w.pid = spawn_process(so, [&](pid_t pid) {
      w.pid = pid;
      guard(GuardRecord::kAdd, pid);
    });
  } catch (...) {
    // spawn_process reaped a child whose exec failed (or never forked one): nothing to
    // signal or wait for.
    w.reaped = true;
    w.group_gone = true;
    if (w.pid != 0) guard(GuardRecord::kRemove, w.pid);
    throw;
  }
  if (!use_pidfd_) {
    if (poll_timer_ == 0) poll();
    return;
  }
  w.pidfd = open_pidfd(w.pid);
  if (!w.pidfd) throw_errno("pidfd_open");
  w.pidfd_id = loop_.add(w.pidfd.get(), EPOLLIN, [this, &w](std::uint32_t) { reap(w); });
}

void WorkerGroup::reap(Worker& w) {
  if (w.reaped) return;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(w.pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return;
  if (r < 0) {
    // ECHILD: someone else reaped it (should not happen: nothing else waits for workers).
    spdlog::warn("waitpid({}): {}", w.pid, errno_text(errno));
    status = 0xff00;  // reported as exit code 255
  }
  record_exit(w, decode_status(status));
}

void WorkerGroup::record_exit(Worker& w, WorkerExit exit) {
  w.reaped = true;
  exit.local_rank = w.local_rank;
  exit.global_rank = w.global_rank;
  exit.pid = w.pid;
  exit.when = std::chrono::system_clock::now();
  w.exit = exit;
  loop_.remove(w.pidfd_id);
  w.pidfd_id = 0;
  w.pidfd.reset();
  // An empty group can be forgotten by the guard at once (no pid reuse window).
  if (::kill(-w.pid, 0) != 0 && errno == ESRCH) {
    w.group_gone = true;
    guard(GuardRecord::kRemove, w.pid);
  }
  on_exit_(w.index, w.exit);
}

void WorkerGroup::reap_all() {
  for (auto& w : workers_) reap(*w);
}

void WorkerGroup::poll() {
  poll_timer_ = loop_.add_timer(Clock::now() + std::chrono::milliseconds(kFallbackPollMs), [this] {
    poll_timer_ = 0;
    reap_all();
    if (alive() > 0) poll();
  });
}

void WorkerGroup::signal_groups(int signo) {
  for (auto& w : workers_) {
    if (w->group_gone) continue;
    // The group id is the leader's pid (setsid in spawn). Signalled even when the leader
    // has exited: its grandchildren may still be in the group. ESRCH: the group is empty.
    if (::kill(-w->pid, signo) != 0) {
      if (errno == ESRCH) {
        w->group_gone = w->reaped;  // before reaping, the leader's zombie keeps the id
      } else {
        spdlog::warn("killpg({}, {}): {}", w->pid, signal_name(signo), errno_text(errno));
      }
    }
  }
}

void WorkerGroup::kill_all() {
  signal_groups(SIGKILL);
  // SIGKILL cannot be caught, so this normally takes microseconds. A process stuck in
  // uninterruptible sleep (a hung NFS mount or GPU driver call) dies only when the call
  // returns; rather than hang the agent, such a worker is reported as killed and left.
  const auto deadline = Clock::now() + kKillWait;
  while (alive() > 0) {
    reap_all();
    std::vector<pollfd> fds;
    for (auto& w : workers_) {
      if (!w->reaped && w->pidfd) fds.push_back({w->pidfd.get(), POLLIN, 0});
    }
    if (alive() == 0) break;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    // Without pidfds there is nothing to wait on: poll() then just sleeps a few ms.
    int ms = fds.empty() ? 5 : static_cast<int>(std::min<std::int64_t>(left.count(), 100));
    ::poll(fds.data(), fds.size(), ms);
  }
  for (auto& w : workers_) {
    if (!w->reaped) {
      spdlog::warn(
          "worker pid {} (local rank {}) is still alive {} s after SIGKILL "
          "(uninterruptible sleep?); giving up on it",
          w->pid, w->local_rank, kKillWait.count() / 1000);
      WorkerExit killed;
      killed.signal = SIGKILL;
      record_exit(*w, killed);
    }
    if (!w->group_gone) guard(GuardRecord::kRemove, w->pid);
  }
  kill_adopted();
}

std::vector<pid_t> WorkerGroup::adopted() const {
  std::vector<pid_t> pids;
  for (pid_t pid : child_pids()) {
    const bool worker =
        std::any_of(workers_.begin(), workers_.end(), [&](auto& w) { return w->pid == pid; });
    if (!worker && pid != guard_.pid) pids.push_back(pid);
  }
  return pids;
}

void WorkerGroup::reap_adopted() {
  for (pid_t pid : adopted()) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) < 0 && errno == EINTR) {
    }
  }
}

void WorkerGroup::kill_adopted() {
  const auto deadline = Clock::now() + kKillWait;
  bool told = false;
  while (true) {
    std::vector<pid_t> live;
    for (pid_t pid : adopted()) {
      int status = 0;
      pid_t r;
      do {
        r = ::waitpid(pid, &status, WNOHANG);
      } while (r < 0 && errno == EINTR);
      if (r == 0) live.push_back(pid);
    }
    if (live.empty()) return;
    if (Clock::now() > deadline) {
      spdlog::warn(
          "{} process(es) that left their worker's process group still alive {} s "
          "after SIGKILL (uninterruptible sleep?); giving up on them",
          live.size(), kKillWait.count() / 1000);
      return;
    }
    if (!told) {
      spdlog::info("killing {} process(es) that left their worker's process group", live.size());
      told = true;
    }
    for (pid_t pid : live) {
      if (::getpgid(pid) == pid) ::kill(-pid, SIGKILL);  // a daemon's own group, at once
      ::kill(pid, SIGKILL);
    }
    ::poll(nullptr, 0, 2);
  }
}

void WorkerGroup::clear() { workers_.clear(); }

std::size_t WorkerGroup::alive() const {
  return std::count_if(workers_.begin(), workers_.end(), [](auto& w) { return !w->reaped; });
}

bool WorkerGroup::all_succeeded() const {
  return std::all_of(workers_.begin(), workers_.end(),
                     [](auto& w) { return w->reaped && !w->exit.failed(); });
}

std::vector<pid_t> WorkerGroup::live_pids() const {
  std::vector<pid_t> pids;
  for (auto& w : workers_) {
    if (!w->reaped) pids.push_back(w->pid);
  }
  return pids;
}

pid_t WorkerGroup::pid(std::size_t index) const { return workers_.at(index)->pid; }

int WorkerGroup::local_rank(std::size_t index) const { return workers_.at(index)->local_rank; }

bool WorkerGroup::reaped(std::size_t index) const { return workers_.at(index)->reaped; }

bool WorkerGroup::owns(pid_t pid) const {
  constexpr int kMaxDepth = 64;
  for (int depth = 0; depth < kMaxDepth && pid > 1 && pid != ::getpid(); ++depth) {
    if (std::any_of(workers_.begin(), workers_.end(),
                    [&](auto& w) { return !w->reaped && w->pid == pid; })) {
      return true;
    }
    const auto st = parse_proc_stat(read_proc_file("/proc/" + std::to_string(pid) + "/stat"));
    if (!st) return false;
    pid = st->ppid;
  }
  return false;
}

void WorkerGroup::guard(int op, pid_t pgid) {
  if (guard_.fd < 0 || guard_warned_) return;
  if (!send_guard_record(guard_.fd, static_cast<GuardRecord::Op>(op), pgid)) {
    guard_warned_ = true;
    spdlog::warn(
        "orphan guard unreachable ({}); workers' grandchildren may outlive a killed "
        "agent",
        errno_text(errno));
  }
}

}  // namespace ddprun::launcher
