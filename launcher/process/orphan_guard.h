// orphan_guard.h: the orphan guard process (start_orphan_guard, called by main), the
// record format between the supervisor and the guard, and the sender WorkerGroup uses.
// Thread-safety: send_guard_record is a single write(); start_orphan_guard forks and
// must run while the process is single-threaded.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ddprun::launcher {

// One fixed-size record per write(): far below PIPE_BUF, so records never interleave or
// split, and the guard reads them whole.
struct GuardRecord {
  enum Op : std::int32_t { kAdd = 1, kRemove = 2 };
  std::int32_t op;
  std::int32_t pgid;
};
static_assert(sizeof(GuardRecord) == 8);

// Writes one record to the guard pipe. Returns false if the guard is gone (EPIPE) or the
// fd is invalid; the caller warns once.
bool send_guard_record(int guard_fd, GuardRecord::Op op, pid_t pgid);

// The running guard, as the supervisor needs it (SupervisorOptions::orphan_guard).
struct OrphanGuard {
  int fd = -1;        // write end of the guard's pipe; -1: no guard
  pid_t pid = 0;      // the guard process (a child of the agent, never an adopted one)
  std::string token;  // the job token (descendants.h) to put in every worker's environment
};

// Starts the orphan guard: a small process forked from the (still single-threaded)
// agent that holds the read end of a pipe. The supervisor tells it every worker process
// group it creates; when the agent dies for any reason, even SIGKILL, the pipe closes and
// the guard SIGKILLs those process groups, grandchildren included, and then every process
// whose environment carries the job token (daemons that left their group: setsid or
// setpgid, then fork), repeating until none is left (at most about 2 s), then exits.
// REQUIRES: called from main before any thread is started. Throws std::system_error.
OrphanGuard start_orphan_guard();

}  // namespace ddprun::launcher
