// failure_report.h: the "<entrypoint> FAILED" summary torchrun prints when workers fail
// (ChildFailedError), in its exact layout, and report_failures, which prints it at the
// end of a failed run. Used by the Agent; golden-tested. Thread-safety: pure functions
// (make_failure reads the worker's error file; report_failures writes stderr and a file).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/process/supervisor_interface.h"
#include "rendezvous/endpoint.h"

namespace ddprun::launcher {

// The layout: borders, Failures, Root Cause (the failure with the smallest timestamp),
// one block per failed worker with time, host, ranks, exit code and pid, error file and
// traceback. A worker without an error file (a plain script, no @record) shows the
// traceback found at the end of its stderr instead of torchrun's "To enable traceback
// see" (stderr_excerpt.h).

struct Failure {
  int global_rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  int exitcode = 0;             // torchrun's convention: -signo for a worker killed by a signal
  std::string error_file;       // the path if the worker wrote it, else "<N/A>"
  std::string error_file_path;  // where the worker was told to write it (always set)
  std::string message;          // the "traceback" field (continuation lines indented)
  std::int64_t timestamp = 0;   // seconds since the epoch
  // Without an error file, what the agent's own error file says (@record's fields):
  // "message" (the exception line, e.g. "ValueError: boom", else the signal, the last
  // stderr line or torchrun's hint) and "py_callstack" (the traceback or stderr lines,
  // unindented; else = summary).
  std::string summary;
  std::string callstack;
};

// Builds a Failure from a worker's exit; reads `error_file_path` (TORCHELASTIC_ERROR_FILE)
// for the traceback and timestamp. Without that file: the exit's time, and the traceback
// (else the last lines) of its stderr tail after torchrun's texts for signals; torchrun's
// "To enable traceback see" only when stderr held nothing.
Failure make_failure(const WorkerExit& exit, const std::string& error_file_path);

// Index of the root cause: smallest timestamp, the earliest listed on a tie.
// REQUIRES: !failures.empty().
std::size_t root_cause_index(const std::vector<Failure>& failures);

// The report text (no leading or trailing newline). `failures` in the order they are
// numbered (by global rank). Times are local time, like torchrun.
// REQUIRES: !failures.empty().
std::string format_failure_report(const std::string& entrypoint,
                                  const std::vector<Failure>& failures,
                                  const std::string& hostname);

// The line before the report, as torchrun's traceback ends (note the trailing space).
inline constexpr const char* kChildFailedErrorLine =
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ";

// torchrun's error log line for a failed worker group, naming the first failure and the
// program the workers ran (the python interpreter, or the --no-python executable):
// "failed (exitcode: 1) local_rank: 0 (pid: 42) of binary: /usr/bin/python3".
std::string failed_log_line(const Failure& first, const std::string& binary);

// A one-line hint for failures whose cause is easy to misread (SIGKILL: likely the OOM
// killer; "No module named 'torch'": the interpreter `worker_python`, as
// describe_worker_python gives it, "" for --no-python, and PYTHON_EXEC), or "".
std::string failure_hint(const Failure& failure, const std::string& worker_python = "");

// socket.getfqdn() of this host (rendezvous/endpoint.h), so reports match torchrun's.
using rdzv::host_fqdn;
// This node in job-wide messages: host_fqdn(), then " (<addr>)" for a --local-addr that
// is not the same text (several agents per host tell apart).
std::string node_label(const std::optional<std::string>& local_addr);

// The end of a failed run: prints kChildFailedErrorLine, the report (and failure_hint's line) to
// stderr and, when `agent_error_file` is not empty (the agent's own TORCHELASTIC_ERROR_FILE:
// torchrun's agent runs under @record), writes the root cause there; a failed write is logged.
void report_failures(const std::string& entrypoint, const std::vector<Failure>& failures,
                     const std::string& agent_error_file, const std::string& worker_python);

}  // namespace ddprun::launcher
