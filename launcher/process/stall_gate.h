// stall_gate.h: StallGate, what the stall watchdog (stall_watchdog.h, on the supervisor's
// loop thread) and the agent's job-wide stall judge (launcher/jobwide/job_stall.h, on the agent
// thread) share when a job spans nodes. The watchdog publishes each sample (are all of
// this node's workers idle, when did one last progress, where is each); once all are idle
// it acts only on the judge's word: a decision carrying the job-wide verdict. Ranks
// elsewhere still progressing means this node's ranks wait for them: no decision comes,
// no stall. Without a judge (one node, no job-wide channel) the watchdog decides alone.
// The workers' arrivals at collectives (flight recorder) pass through it to the
// straggler watch.
// Thread-safety: every member may be called from any thread (one mutex).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/process/flight_record.h"

namespace ddprun::launcher {

// Where one worker was at the watchdog's last sample.
struct WorkerPosition {
  int local_rank = 0;
  pid_t pid = 0;           // the sampled process (the worker, or the Python descendant)
  bool sampled = false;    // the stack probe reports (a Python worker)
  std::string where;       // innermost frame, "<file>:<line> in <function>"
  std::string user_where;  // innermost frame outside Python's library and packages ("": same)
  char state = '?';        // /proc state letter ('T': stopped)
  double idle_s = 0;       // seconds without progress
  std::vector<CollectiveState> collectives;  // PyTorch's flight recorder, per group
};

// The watchdog's last sample of this node.
struct NodeSample {
  bool all_idle = false;  // every live worker made no progress for the stall timeout
  std::chrono::steady_clock::time_point last_progress{};  // the latest worker progress
  std::vector<WorkerPosition> workers;                    // live workers
};

class StallGate {
 public:
  // The judge decides from now on (true), or no more (false: the watchdog alone again).
  void set_judged(bool judged);
  bool judged() const;
  // The watchdog, after each sample, while a judge or the status (want_samples) reads them.
  void publish(NodeSample sample);
  NodeSample sample() const;
  // The judge: the job is stalled; `verdict` (one line per entry, the first a headline)
  // goes into the stall's report.
  void decide(std::vector<std::string> verdict);
  std::optional<std::vector<std::string>> decision() const;
  // The straggler watch (launcher/jobwide/straggler_watch.h) wants the workers' arrivals at
  // collectives; the watchdog then passes them on, at most kMaxArrivals (the newest).
  void want_arrivals(bool want);
  // `ddprun status`'s publisher (launcher/jobwide/status_publisher.h) reads the samples
  // also where no judge does (a round of one node).
  void want_samples(bool want);
  bool wants_samples() const;
  bool wants_arrivals() const;
  void add_arrivals(int local_rank, const std::vector<Arrival>& arrivals);
  // (local rank, arrival) since the last call.
  std::vector<std::pair<int, Arrival>> take_arrivals();
  static constexpr std::size_t kMaxArrivals = 16384;
  // Each worker's start-up times (the watchdog, every sample; the start-up timeline reads
  // them: launcher/jobwide/startup_timeline.h), by local rank.
  void set_startup(int local_rank, const StartupTimes& times);
  std::map<int, StartupTimes> startup() const;
  // A new attempt: no judge, no sample, no decision, no arrivals or samples wanted, no
  // start-up.
  void reset();

 private:
  mutable std::mutex mu_;
  bool judged_ = false;
  NodeSample sample_;
  std::optional<std::vector<std::string>> decision_;
  bool want_arrivals_ = false;
  bool want_samples_ = false;
  std::vector<std::pair<int, Arrival>> arrivals_;
  std::map<int, StartupTimes> startup_;
};

}  // namespace ddprun::launcher
