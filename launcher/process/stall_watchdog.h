// stall_watchdog.h: StallWatchdog, the --stall-timeout policy of ProcessSupervisor: on its
// own EventLoop timer it samples each live worker (StallDetector, stall_watch.h; where its
// Python main thread is: StackProbe, stack_probe.h), logs once a worker idle while others
// progress, and when all are stuck first asks their hooks for PyTorch's flight recorder
// dumps (StackProbe::request_dumps, fr_dump.h; at most kFrDumpWait) and logs where they are,
// then sends SIGABRT (Python dumps its stacks; SIGCONT too to a worker stopped by SIGSTOP),
// SIGKILL after kStallDumpWait (stall_watch.h), and holds one kStalled event with every
// stopped worker's exit, each with a note saying where it was.
// In a job that spans nodes the agent's job-wide judge decides instead (StallGate,
// stall_gate.h): every sample is published there, and all workers idle stops them only
// once the judge's verdict says the whole job is stuck.
// Thread-safety: the loop thread only, like the other parts.
#pragma once

#include <chrono>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "launcher/process/event_loop.h"
#include "launcher/process/output_router.h"
#include "launcher/process/stack_probe.h"
#include "launcher/process/stall_gate.h"
#include "launcher/process/stall_watch.h"
#include "launcher/process/worker_group.h"

namespace ddprun::launcher {

class StallWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // `group`'s workers are watched; their output counts as progress (`router`), which
  // also gets the kStalled event. All must outlive the watchdog.
  StallWatchdog(EventLoop& loop, WorkerGroup& group, OutputRouter& router,
                std::chrono::milliseconds timeout);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // Before spawning each worker of an attempt, in order: its environment gets the stack
  // probe; returns the fd the child must inherit (SpawnOptions::keep_fd; invalid: none).
  // `dump`: its rank and where its flight recorder dump goes at a stall (fr_dump.h).
  UniqueFd add_worker(std::vector<std::string>& env, FrDump dump = {}) {
    return probe_.add(env, std::move(dump));
  }
  // An attempt of `workers` workers started: the baseline sample now.
  void start_attempt(std::size_t workers);
  // stop() began: no more sampling (a dump already under way still escalates).
  void stop_sampling() { sampling_ = false; }
  // Worker `index` exited. True when the watchdog had stopped it: its exit then goes into
  // the kStalled event instead of being reported on its own.
  bool collect(std::size_t index, const WorkerExit& exit);
  // The attempt ended: forget the dump and the timer.
  void end_attempt();
  // What the job-wide judge shares with this watchdog (thread-safe).
  StallGate& gate() { return gate_; }

 private:
  struct Dump {
    bool active = false;
    bool asking = false;  // waiting for the flight recorder dumps, before SIGABRT
    bool killed = false;
    Clock::time_point deadline{};
    std::vector<std::size_t> pending;      // signalled (or about to be), not yet exited
    std::vector<std::size_t> to_continue;  // stopped (state T): SIGCONT after SIGABRT
    std::vector<std::string> notes;        // by worker index
    std::vector<WorkerExit> exits;
    std::string dumps_folder;  // of the flight recorder dumps written ("": none)
  };

  void arm(Clock::time_point when);
  // The timer: samples when due, fires, escalates to SIGKILL.
  void tick();
  // This sample, for the judge.
  void publish(Clock::time_point now, bool all_idle);
  // `verdict`: the judge's (empty: this node decided alone).
  void fire(const std::vector<std::size_t>& stalled, Clock::time_point now,
            const std::vector<std::string>& verdict);
  // Asks for the flight recorder dumps; false when none was asked (then abort at once).
  bool ask_for_dumps(Clock::time_point now);
  // The answers are in, or kFrDumpWait passed: the line saying where the dumps are.
  void dumps_done();
  // SIGABRT (and SIGCONT) to the pending workers; SIGKILL after kStallDumpWait.
  void abort_workers(Clock::time_point now);
  // Where worker `index` is, for messages: " at <file>:<line> in <function>", and
  // ", stopped: state T" when /proc says so ("" when neither is known).
  std::string where(std::size_t index) const;
  bool stopped(std::size_t index, char* state = nullptr) const;

  EventLoop& loop_;
  WorkerGroup& group_;
  OutputRouter& router_;
  std::chrono::milliseconds timeout_;
  StallDetector detector_;
  StackProbe probe_;
  EventLoop::TimerId timer_ = 0;
  bool sampling_ = false;
  Clock::time_point next_sample_{};
  std::set<std::size_t> warned_;  // idle workers already said so (peers progress)
  bool said_no_dumps_ = false;    // a stall without any dump was explained (once a run)
  Dump dump_;
  StallGate gate_;
};

}  // namespace ddprun::launcher
