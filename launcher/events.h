// events.h: torchrun's elastic events (--event-log-handler console): the agent's and each
// worker's status records, one JSON line each on stderr, as torchrun 2.14's
// events.record() writes them through its "console" handler (Python's json.dumps of the
// Event: name, source, timestamp, metadata). "null" (the default) records nothing.
// Used by the Agent. Thread-safety: EventLog writes whole lines with one fputs; the
// formatting functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace ddprun::launcher {

// What every event of one agent says about the job.
struct EventContext {
  std::string run_id;
  std::string role;
  std::string hostname;             // the fully qualified name, as torchrun's
  std::string rdzv_backend;         // "c10d", "static", "etcd-v2", ...
  std::string entry_point;          // the python executable, or the --no-python program
  int agent_restarts = 0;           // restarts spent
  std::int64_t total_run_time = 0;  // whole seconds; torchrun's is 0 until the run ends
};

// One event. Agent events leave `worker` empty.
struct EventFields {
  struct Worker {
    Worker(int local, int global, int size)
        : local_rank(local), global_rank(global), world_size(size) {}
    int local_rank = 0;
    int global_rank = 0;
    int world_size = 0;            // the role's world size (one role per job)
    std::optional<int> pid;        // worker_id (torchrun: the worker's pid)
    std::optional<int> exit_code;  // failed workers only
  };
  explicit EventFields(std::string s) : state(std::move(s)) {}
  std::string state;  // RENDEZVOUS, ASSIGN_WORKER_RANKS, START, SUCCEEDED, FAILED, TERMINATED
  std::optional<int> group_rank;
  std::optional<int> group_world_size;
  std::optional<Worker> worker;
  std::optional<std::string> raw_error;  // failed workers: the error file's JSON
  std::optional<double> duration_ms;     // RENDEZVOUS, ASSIGN_WORKER_RANKS
};

// The JSON line (no newline) torchrun 2.14 prints for `event`, byte for byte where the
// values are the same ("timestamp" is 0, as torchrun's).
std::string format_event(const EventContext& context, const EventFields& event);

// raw_error of a failed worker, as torchrun's json.dumps(failure.error_file_data): the
// error file's JSON re-serialized with Python's separators, or, without a readable file,
// torchrun's "<NONE>" record (with its errorTraits for an exit code >= 0).
std::string raw_error_of(const std::string& error_file_path, bool written, int exitcode);

// --event-log-handler: "console" prints the events to stderr; "null" (and torchrun's
// "dynamic_rendezvous", also a null handler) drops them.
class EventLog {
 public:
  explicit EventLog(const std::string& handler) : console_(handler == "console") {}
  bool on() const { return console_; }
  void record(const EventContext& context, const EventFields& event) const;

 private:
  bool console_;
};

}  // namespace ddprun::launcher
