// job_failures.h: the job's root cause across nodes (issue 32; docs/usage.md, "Failure
// report"): when a node reports its workers' failures, it puts its own first failure on
// the round's job-wide board (rendezvous/job_board.h) in the store's one order (an ADD
// counter, not the nodes' skewed clocks), reads the job's, and prints one line naming the
// job's root cause before torchrun's per-node report: the first failure in that order that
// is not a consequence of another (a closed connection, a collective's timeout, a rank
// ddprun stopped), else the first. Every node that reports prints the same line.
// Used by Agent::fail_job. Thread-safety: pure functions, and share_job_failure on the
// board's thread (the agent thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/failure_report.h"
#include "rendezvous/job_board.h"

namespace ddprun::launcher {

// One node's first failure, as the board holds it.
struct FailureRecord {
  std::int64_t seq = 0;  // its place in the store's order (1: the job's first)
  int node = 0;
  std::string host;
  int rank = 0;  // global
  pid_t pid = 0;
  int exitcode = 0;     // torchrun's: -signo for a signal
  std::string summary;  // the exception line, the signal, or the last stderr line
};

std::string encode_failure_record(const FailureRecord& record);
// nullopt, with `error` set (one line), when `text` is not a record.
std::optional<FailureRecord> decode_failure_record(const std::string& text, std::string& error);

// The worker's error says a peer went away or a collective timed out (gloo's and NCCL's
// words for it).
bool says_peer_lost(const std::string& summary);
// A failure that another one most likely caused: the rank was stopped by ddprun (SIGTERM,
// SIGKILL) or says_peer_lost(summary).
bool looks_like_consequence(int exitcode, const std::string& summary);

// Index of the job's root cause among `records` (in the store's order): the first that
// does not look like a consequence, else the first. REQUIRES: !records.empty().
std::size_t job_root_cause(const std::vector<FailureRecord>& records);

// "root cause (job-wide): rank 1 on gpu-07 (pid 4242) failed first in the job: exitcode 1:
// ValueError: boom; 2 failures in the job since (the rest of this report, for this node, ...)"
std::string root_cause_line(const FailureRecord& root, std::size_t failures_in_job, bool this_node);

// How many nodes have shared a failure on `board` so far (their agents are alive and
// reporting). Throws what the board throws.
std::int64_t job_failures_reported(rdzv::JobBoard& board);

// What share_job_failure found: the line, and whether the job's root failure itself looks
// like a consequence (no node reported a cause: a node or a link was lost).
struct JobRootCause {
  std::string line;
  bool lost_peer = false;
};

// Shares this node's root failure (root_cause_index(failures)) on `board` and returns the
// job's root cause, after waiting up to `window` for the failures of other nodes that
// reach the store about as early; nullopt when the board fails (one warning).
std::optional<JobRootCause> share_job_failure(rdzv::JobBoard& board,
                                              const std::vector<Failure>& failures,
                                              const std::string& host,
                                              std::chrono::milliseconds window);

}  // namespace ddprun::launcher
