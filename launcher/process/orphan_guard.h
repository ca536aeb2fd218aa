// orphan_guard.h: the orphan guard process (start_orphan_guard, called by main), the
// record format between the supervisor and the guard, and the sender WorkerGroup uses.
// Thread-safety: send_guard_record is a single write(); start_orphan_guard forks and
// must run while the process is single-threaded.
#pragma once

#include <sys/types.h>

#include <cstdint>

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

// Starts the orphan guard: a small process forked from the (still single-threaded)
// agent that holds the read end of a pipe. The supervisor tells it every worker process
// group it creates; when the agent dies for any reason, even SIGKILL, the pipe closes and
// the guard SIGKILLs those process groups, grandchildren included, then exits.
// REQUIRES: called from main before any thread is started. Returns the write end, which
// the supervisor uses (SupervisorOptions::orphan_guard_fd). Throws std::system_error.
int start_orphan_guard();

}  // namespace ddprun::launcher
