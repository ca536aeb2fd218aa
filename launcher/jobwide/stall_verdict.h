// stall_verdict.h: the job-wide stall verdict (docs/usage.md, "Stall watchdog"): what each
// node tells the others of its ranks when the whole job has stopped progressing
// (NodeSnapshot, a small JSON on the job-wide board), and the one verdict built from all of
// them that every node prints: ranks grouped by where they are, the odd ones (and those
// outside torch.distributed, which the rest wait for) first, each named by global rank,
// host and pid. Used by JobStallJudge (job_stall.h). Thread-safety: pure functions.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/process/flight_record.h"

namespace ddprun::launcher {

struct RankSnapshot {
  int rank = 0;  // global
  pid_t pid = 0;
  bool sampled = false;    // a Python stack was sampled
  std::string where;       // innermost frame, "<file>:<line> in <function>"
  std::string user_where;  // innermost frame outside Python's library and packages, or ""
  char state = '?';        // /proc state ('T': stopped)
  double idle_s = 0;
  std::vector<CollectiveState> collectives;  // PyTorch's flight recorder (empty: none)
};

struct NodeSnapshot {
  int node = 0;      // the node's place on the board (JobBoard::node())
  std::string host;  // how the node is named in the verdict
  std::vector<RankSnapshot> ranks;
};

// How every verdict's headline begins.
inline constexpr std::string_view kVerdictPrefix = "stall (job-wide): ";

// At most this many bytes of a snapshot's text are read (a larger one is refused).
inline constexpr std::size_t kMaxSnapshotBytes = 256 * 1024;

std::string encode_snapshot(const NodeSnapshot& snapshot);
// nullopt, with `error` (one line) set, when `text` is not a snapshot.
std::optional<NodeSnapshot> decode_snapshot(const std::string& text, std::string& error);

// The verdict over `snapshots` (`missing`: the nodes that sent none, as named in it), for
// a job that made no progress for `timeout`. The first line is the headline (one line,
// for the failure report), the rest one line per group of ranks at one place.
std::vector<std::string> stall_verdict(const std::vector<NodeSnapshot>& snapshots,
                                       const std::vector<std::string>& missing,
                                       std::chrono::milliseconds timeout);

}  // namespace ddprun::launcher
