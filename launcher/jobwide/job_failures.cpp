// job_failures.cpp: the job's root cause across nodes (job_failures.h).
#include "launcher/jobwide/job_failures.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher/jobwide/board_json.h"

namespace ddprun::launcher {
namespace {

using Ms = std::chrono::milliseconds;
constexpr std::size_t kMaxSummary = 500;
constexpr std::int64_t kMaxRecordsRead = 64;  // the first ones decide
constexpr const char* kCount = "failures";    // the board's counter of failure records

// What a rank's error says when a peer went away or a collective gave up (gloo, NCCL,
// the store), in PyTorch 1.13 through 2.14.
constexpr std::array kConsequences = {
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Socket Timeout",
    "Timed out",
    "timed out",
    "Timeout",
    "DistNetworkError",
    "DistBackendError",
    "NCCL communicator was aborted",
    "watchdog",
    "ProcessGroupNCCL",
    "Connection refused",
};

}  // namespace

std::string encode_failure_record(const FailureRecord& r) {
  std::string summary = r.summary.substr(0, kMaxSummary);
  const nlohmann::json j = {{"version", 1},      {"node", r.node}, {"host", r.host},
                            {"rank", r.rank},    {"pid", r.pid},   {"exitcode", r.exitcode},
                            {"summary", summary}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

FailureRecord read_failure_record(const nlohmann::json& j) {
  FailureRecord r;
  r.node = j.at("node").get<int>();
  r.host = j.at("host").get<std::string>().substr(0, kMaxSummary);
  r.rank = j.at("rank").get<int>();
  r.pid = j.at("pid").get<pid_t>();
  r.exitcode = j.at("exitcode").get<int>();
  r.summary = j.at("summary").get<std::string>().substr(0, kMaxSummary);
  return r;
}

}  // namespace

std::optional<FailureRecord> decode_failure_record(const std::string& text, std::string& error) {
  return decode_board_json(text, "failure record", 4 * kMaxSummary, 1, error, read_failure_record);
}

bool says_peer_lost(const std::string& summary) {
  return std::any_of(kConsequences.begin(), kConsequences.end(),
                     [&](const char* p) { return summary.find(p) != std::string::npos; });
}

bool looks_like_consequence(int exitcode, const std::string& summary) {
  if (exitcode == -SIGTERM || exitcode == -SIGKILL) return true;  // stopped by its agent
  return says_peer_lost(summary);
}

std::size_t job_root_cause(const std::vector<FailureRecord>& records) {
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (!looks_like_consequence(records[i].exitcode, records[i].summary)) return i;
  }
  return 0;
}

std::string root_cause_line(const FailureRecord& root, std::size_t failures_in_job,
                            bool this_node) {
  std::string line =
      fmt::format("root cause (job-wide): rank {} on {} (pid {}) failed {}: exitcode {}{}{}",
                  root.rank, root.host, root.pid,
                  root.seq == 1 ? "first in the job"
                                : "(the failures reported before it look like its consequences)",
                  root.exitcode, root.summary.empty() ? "" : ": ", root.summary);
  if (failures_in_job > 1) {
    line += fmt::format("; {} node(s) reported failures{}", failures_in_job,
                        this_node ? "" : " (this node's below are most likely its consequences)");
  }
  return line;
}

std::int64_t job_failures_reported(rdzv::JobBoard& board) { return board.add(kCount, 0); }

std::optional<JobRootCause> share_job_failure(rdzv::JobBoard& board,
                                              const std::vector<Failure>& failures,
                                              const std::string& host, Ms window) {
  try {
    const Failure& mine = failures[root_cause_index(failures)];
    FailureRecord me{0,        board.node(),  host,        mine.global_rank,
                     mine.pid, mine.exitcode, mine.summary};
    me.seq = board.add(kCount, 1);
    board.set("failure/" + std::to_string(me.seq), encode_failure_record(me));
    // The failures that reach the store about as early as this one: a consequence may
    // arrive before its cause (its agent was quicker), so wait for the window's end.
    const auto deadline = std::chrono::steady_clock::now() + window;
    std::this_thread::sleep_until(deadline);
    const std::int64_t count = std::min(board.add(kCount, 0), kMaxRecordsRead);
    std::vector<std::string> names;
    for (std::int64_t s = 1; s <= count; ++s) names.push_back("failure/" + std::to_string(s));
    const auto values = board.get(names, Ms(1000));  // each owner sets its record at once
    std::vector<FailureRecord> records;
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::string error;
      std::optional<FailureRecord> r;
      if (values[i]) r = decode_failure_record(*values[i], error);
      if (!r) continue;  // missing or not ours: the others decide
      r->seq = static_cast<std::int64_t>(i) + 1;
      records.push_back(std::move(*r));
    }
    if (records.empty()) records.push_back(me);
    const FailureRecord& root = records[job_root_cause(records)];
    return JobRootCause{root_cause_line(root, records.size(), root.node == board.node()),
                        looks_like_consequence(root.exitcode, root.summary)};
  } catch (const std::exception& e) {
    spdlog::warn("the job-wide root cause is unknown: {}", e.what());
    return std::nullopt;
  }
}

}  // namespace ddprun::launcher
