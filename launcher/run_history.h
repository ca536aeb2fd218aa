// run_history.h: RunHistory, what the agent records of its run for machines: torchrun's
// elastic events (--event-log-handler console: EventLog, events.h) as they happen, and,
// with --record-file, one JSON run record written when the run ends: the node, every round and
// attempt with why it ended, the failures, the job's root cause and stall verdict (job_view.h), the
// exit class and status, the straggler lines, the start-up timeline, the flight recorder
// dumps' folder of a stalled attempt. Schema: docs/run-record.schema.json (version 3;
// docs/usage.md, "Run record"). Used by the Agent and
// JobView. Thread-safety: the agent thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/events.h"
#include "launcher/exit_status.h"
#include "launcher/failure_report.h"
#include "launcher/jobwide/startup_timeline.h"
#include "rendezvous/rendezvous.h"

namespace ddprun::launcher {

class RunHistory {
 public:
  struct Facts {
    EventContext context;  // run id, role, host, backend, entry point (restarts: 0)
    int nproc_per_node = 1;
    std::string record_path;  // "": no run record
  };
  RunHistory(const std::string& event_log_handler, Facts facts);

  // A round formed after `waited_ms` of rendezvous (torchrun's RENDEZVOUS and
  // ASSIGN_WORKER_RANKS events carry the previous round's ranks).
  void round_formed(const rdzv::RendezvousInfo& info, double waited_ms);
  // The attempt's workers started (START per worker).
  void attempt_started(int attempt, int restarts_spent);
  // Why the running attempt ended: "succeeded", "failed", "stalled", "membership changed",
  // "wedged (D state)", "stopped by SIGTERM", ...
  void attempt_ended(const std::string& why);
  // The running attempt's flight recorder dumps at a stall are in `folder` (fr_dump.h; "":
  // none).
  void flight_recorder_dumps(std::string folder);
  // The job-wide cause (job_view.h): the root-cause line, the stall verdict's lines.
  void job_cause(std::string root_cause, std::vector<std::string> verdict);
  // A straggler line this node logged (straggler_watch.h).
  void straggler(std::string line) { stragglers_.push_back(std::move(line)); }
  // The start-up timeline's phases per rank (startup_watch.h).
  void startup(std::vector<RankPhases> ranks) { startup_ = std::move(ranks); }
  // The run ended: torchrun's end events (each worker's state, then the agent's) and the
  // run record (a warning when it cannot be written).
  void run_ended(const std::vector<Failure>& failures, bool workers_ended, bool succeeded,
                 ExitClass cls, int exit_status, int restarts_spent);

  // The record's JSON text (for tests and run_ended).
  std::string record_json(const std::vector<Failure>& failures, ExitClass cls, int exit_status,
                          int restarts_spent) const;

 private:
  using Clock = std::chrono::system_clock;
  struct Attempt {
    int attempt = 0;
    int round = 0;
    Clock::time_point started;
    std::optional<Clock::time_point> ended;
    std::string end;
    std::string flight_recorder;  // the folder of its dumps at a stall ("": none)
  };
  struct Round {
    rdzv::RendezvousInfo info;
    double rendezvous_ms = 0;
    Clock::time_point formed;
  };
  void record(const EventFields& event, std::int64_t total_run_time = 0) const;

  EventLog events_;
  Facts facts_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  Clock::time_point started_at_ = Clock::now();
  std::vector<Round> rounds_;
  std::vector<Attempt> attempts_;
  std::string root_cause_;
  std::vector<std::string> verdict_;
  std::vector<std::string> stragglers_;
  std::vector<RankPhases> startup_;
};

}  // namespace ddprun::launcher
