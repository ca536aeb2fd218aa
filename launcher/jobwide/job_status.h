// job_status.h: the job's live status (issue 32; docs/usage.md, "Status"): what each
// node's agent puts on the round's JobBoard under "status/<node>" (StatusPublisher,
// status_publisher.h) and what `ddprun status` (launcher/status_command.h) reads back,
// joins and prints. One versioned JSON value per node (encode_node_status /
// decode_node_status, schema in docs/usage.md), bounded: text fields are cut, at most
// kMaxCollectives groups per rank. Table tests in tests/launcher/job_status_test.cpp.
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/process/flight_record.h"

namespace ddprun::launcher {

inline constexpr int kStatusVersion = 1;
inline constexpr std::size_t kMaxStatusText = 240;  // where, function, host: cut past this
inline constexpr std::size_t kMaxStatusLine = 400;  // the straggler line
inline constexpr std::size_t kMaxCollectives = 8;   // process groups per rank

// One worker, as its node's last stall-watchdog sample saw it.
struct RankStatus {
  int rank = 0;  // global
  int local_rank = 0;
  std::int64_t pid = 0;  // 0: not known (no sample yet, or exited)
  // The /proc state letter ("R", "S", "D", "T"...), "exited" (gone from the samples) or
  // "?" (not sampled: no --stall-timeout, or no sample yet).
  std::string state = "?";
  std::optional<double> idle_s;              // seconds since its last progress
  std::string where;                         // "<file>:<line> in <function>" ("": not sampled)
  std::vector<CollectiveState> collectives;  // flight recorder (PyTorch 2.14+), per group
  bool operator==(const RankStatus&) const = default;
};

// One node's status value.
struct NodeStatus {
  int node = 0;  // group rank
  std::string host;
  std::int64_t agent_pid = 0;
  // "running", "restarting", "failed", "succeeded".
  std::string state;
  int attempt = 0;
  int restarts = 0;  // spent
  int max_restarts = 0;
  double time = 0;        // when published: seconds since the epoch (the node's clock)
  std::string straggler;  // the last straggler line this node said ("": none)
  std::vector<RankStatus> ranks;
  bool operator==(const NodeStatus&) const = default;
};

// The JSON value, fields cut to the bounds above.
std::string encode_node_status(const NodeStatus& s);
// nullopt unless `text` is a status value of version kStatusVersion.
std::optional<NodeStatus> decode_node_status(const std::string& text);

// What `ddprun status` read of one round.
struct JobStatus {
  std::string run_id;
  std::string where;  // the rendezvous, as BoardReader::where() names it
  int round = 0;
  struct Slot {
    std::optional<NodeStatus> status;
    std::string problem;  // "" with a status; else why none ("no status yet", ...)
  };
  std::vector<Slot> nodes;  // by group rank
};

// Fills `job.nodes` from the board's values by group rank (nullopt: not published yet).
// Returns the number of values that are not a status (corrupt, foreign, another version).
int join_node_values(JobStatus& job, const std::vector<std::optional<std::string>>& values);

// The text table (docs/usage.md, "Status"); `now` in seconds since the epoch, for each
// node's "updated N s ago".
std::string format_job_status(const JobStatus& job, double now);
// The joined record, one JSON document.
std::string job_status_json(const JobStatus& job);

// "train.py:12" of "train.py:12 in step" (the part before " in ").
std::string where_file_line(const std::string& where);
// The rank's last collective, in the lowest-numbered group it entered one: "in
// all_reduce #12 of group 0" (entered, not completed), "after all_reduce #12 of group 0"
// (completed), or "" (no recorder state).
std::string last_collective(const std::vector<CollectiveState>& collectives);

}  // namespace ddprun::launcher
