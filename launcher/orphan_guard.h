// orphan_guard.h: the record format between ProcessSupervisor and the orphan guard
// process (start_orphan_guard in supervisor.h), and the sender used by the supervisor.
// Internal to the process layer. Thread-safety: send_guard_record is a single write().
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

}  // namespace ddprun::launcher
