// failure_report.h: the "<entrypoint> FAILED" summary torchrun prints when workers fail
// (ChildFailedError), in its exact layout: borders, Failures, Root Cause (the failure
// with the smallest timestamp), one block per failed worker with time, host, ranks,
// exit code and pid, error file and traceback. Used by the Agent; golden-tested.
// Thread-safety: pure functions (make_failure reads the worker's error file).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::launcher {

struct Failure {
  int global_rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  int exitcode = 0;             // torchrun's convention: -signo for a worker killed by a signal
  std::string error_file;       // the path if the worker wrote it, else "<N/A>"
  std::string error_file_path;  // where the worker was told to write it (always set)
  std::string message;          // the "traceback" field
  std::int64_t timestamp = 0;   // seconds since the epoch
};

// Builds a Failure from a worker's exit; reads `error_file_path` (TORCHELASTIC_ERROR_FILE)
// for the traceback and timestamp, else uses `observed_at` and torchrun's fallback texts.
// `signo` != 0 means the worker was killed by that signal.
Failure make_failure(int global_rank, int local_rank, pid_t pid, int exit_code, int signo,
                     std::int64_t observed_at, const std::string& error_file_path);

// Index of the root cause: smallest timestamp, the earliest listed on a tie.
// REQUIRES: !failures.empty().
std::size_t root_cause_index(const std::vector<Failure>& failures);

// The report text (no leading or trailing newline). `failures` in the order they are
// numbered (by global rank). Times are local time, like torchrun.
// REQUIRES: !failures.empty().
std::string format_failure_report(const std::string& entrypoint,
                                  const std::vector<Failure>& failures,
                                  const std::string& hostname);

// A one-line hint for failures whose cause is easy to misread (SIGKILL: likely the OOM
// killer), or "" when there is none.
std::string failure_hint(const Failure& failure);

// socket.getfqdn() of this host, computed the way Python does (so reports match torchrun).
std::string host_fqdn();

}  // namespace ddprun::launcher
