// orphan_guard.cpp: start_orphan_guard and the guard process (see orphan_guard.h), which
// kills the job's process groups and token carriers when the agent dies however it dies.

// Why a separate process: PR_SET_PDEATHSIG only reaches a worker's *leader*, and only
// when the agent's supervisor thread dies; grandchildren (DataLoader workers, `sh -c
// 'a & b'`) would survive a `kill -9` of the agent. The guard holds the read end of a
// pipe whose only write end is the agent's (close-on-exec, so workers never hold it);
// the kernel closes it however the agent dies, and the guard then SIGKILLs every
// process group it was told about, and every process carrying the job token in its
// environment: daemons that left their worker's group, which the agent (a child
// subreaper) would have killed at a normal end, but which re-parent away from it when
// it is killed.
#include "launcher/process/orphan_guard.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/process/descendants.h"

namespace ddprun::launcher {
namespace {

// How often the guard scans for token carriers after the agent is gone, at most: each
// round kills what it finds; processes forked meanwhile are found by the next round.
constexpr int kTokenRounds = 100;
constexpr int kTokenRoundMs = 20;

[[noreturn]] void run_guard(int read_fd, const std::string& token) {
  // Ctrl-C in the terminal reaches the agent's foreground group; the guard must outlive
  // the agent's orderly shutdown, so these are ignored (SIGKILL still works). First of
  // all: once it has its name, the guard can be found and signalled.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(s, SIG_IGN);
  // Own session: a kill of the agent's process group (or the terminal's hang-up) must
  // not take the guard down with the agent; it exits by itself on EOF.
  ::setsid();
  ::prctl(PR_SET_NAME, "ddprun-guard", 0, 0, 0);
  // Keep nothing of the agent open (a `ddprun | tee` pipeline must not wait for the
  // guard): the pipe moves to a high number, 0..2 become /dev/null, the rest is closed.
  int keep = ::fcntl(read_fd, F_DUPFD, 100);
  if (keep < 0) keep = read_fd;
  int null_fd = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) {
    if (null_fd >= 0 && fd != keep) ::dup2(null_fd, fd);
  }
  unsigned low = 3, high = static_cast<unsigned>(keep);
  if (::syscall(SYS_close_range, low, high - 1, 0) != 0 ||
      ::syscall(SYS_close_range, high + 1, ~0U, 0) != 0) {
    for (int fd = 3; fd < 65536; ++fd) {
      if (fd != keep) ::close(fd);
    }
  }
  read_fd = keep;
  std::vector<pid_t> groups;
  GuardRecord rec{};
  std::size_t have = 0;
  while (true) {
    ssize_t n = ::read(read_fd, reinterpret_cast<char*>(&rec) + have, sizeof rec - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the agent is gone (or an error we cannot recover from)
    have += static_cast<std::size_t>(n);
    if (have < sizeof rec) continue;
    have = 0;
    if (rec.pgid <= 1) continue;
    if (rec.op == GuardRecord::kAdd) {
      groups.push_back(rec.pgid);
    } else if (rec.op == GuardRecord::kRemove) {
      groups.erase(std::remove(groups.begin(), groups.end(), rec.pgid), groups.end());
    }
  }
  for (pid_t g : groups) ::kill(-g, SIGKILL);  // ESRCH: that group is already empty
  for (int round = 0; !token.empty() && round < kTokenRounds; ++round) {
    const std::vector<pid_t> carriers = processes_with_token(token);
    if (carriers.empty()) break;
    for (pid_t pid : carriers) ::kill(pid, SIGKILL);
    ::poll(nullptr, 0, kTokenRoundMs);
  }
  ::_exit(0);
}

}  // namespace

bool send_guard_record(int guard_fd, GuardRecord::Op op, pid_t pgid) {
  if (guard_fd < 0) return false;
  GuardRecord rec{op, static_cast<std::int32_t>(pgid)};
  ssize_t n;
  do {
    n = ::write(guard_fd, &rec, sizeof rec);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof rec);
}

OrphanGuard start_orphan_guard() {
  OrphanGuard guard;
  guard.token = make_job_token();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("orphan guard: pipe2");
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  pid_t pid = ::fork();
  if (pid < 0) throw_errno("orphan guard: fork");
  if (pid == 0) {
    write_end.reset();
    run_guard(read_end.release(), guard.token);
  }
  guard.fd = write_end.release();
  guard.pid = pid;
  return guard;
}

}  // namespace ddprun::launcher
