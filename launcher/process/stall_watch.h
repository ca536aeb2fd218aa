// stall_watch.h: the stall watchdog's pure parts (--stall-timeout): what progress of a
// worker is, read cheaply from /proc and its output, and which workers have made none for
// too long (StallDetector). The policy that acts on it is StallWatchdog (stall_watchdog.h).
// Thread-safety: StallDetector is a plain value (one thread); the free functions share no
// state.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// Progress (docs/usage.md, "Stall watchdog"): between two samples, a worker made progress
// when it wrote any byte to stdout or stderr, or when its Python main thread moved (its
// stack changed: StackProbe, stack_probe.h; the thread it joins, while it joins one), or
// when the CPU time of its process tree (the worker and every descendant,
// /proc/<pid>/stat utime+stime plus the cutime+cstime of children already reaped; without
// the sampled process's own threads, whose stack says more) grew by more than
// kMinBusyFraction of the wall time between the samples. So a Python wrapper whose child
// trains, or a worker not sampled (not Python, python -S/-I, before the first report,
// after an exec), is judged by CPU time. ddprun holding a worker back (not reading its
// output while its own console is not read) is never a stall.
// A rank blocked in a gloo collective, in time.sleep or on a lock uses ~0; a rank that computes
// silently uses ~100 %. A host thread spinning on a hung GPU (cudaStreamSynchronize with spin-wait)
// looks busy and is not detected. A worker idle while others progress is only logged (a rank
// waiting for a slower peer, e.g. one still importing torch, looks just like a stuck one).

// How long the stall watchdog waits for the workers it sent SIGABRT before SIGKILL.
inline constexpr std::chrono::milliseconds kStallDumpWait{5000};

// The fields of /proc/<pid>/stat the watchdog needs.
struct ProcStat {
  pid_t ppid = 0;
  char state = '?';
  // utime + stime + cutime + cstime, in clock ticks (sysconf(_SC_CLK_TCK)).
  std::uint64_t cpu_ticks = 0;
  // utime + stime: the process's own threads only.
  std::uint64_t own_ticks = 0;
};

// Parses the text of /proc/<pid>/stat ("pid (comm) state ppid ..."; comm may hold spaces
// and parentheses, so fields are counted after the last ')'). nullopt when malformed.
std::optional<ProcStat> parse_proc_stat(std::string_view text);

// CPU time used by `pid` and its descendants (found through /proc/<p>/task/*/children),
// in seconds; processes that vanish meanwhile are skipped. 0 when `pid` is gone. The own
// threads' time of `except_own` (a process of the tree whose stack is sampled instead)
// is left out; that of its children, reaped or not, is not.
double process_tree_cpu_seconds(pid_t pid, pid_t except_own = 0);

class StallDetector {
 public:
  using Clock = std::chrono::steady_clock;
  // CPU growth below this share of one core between two samples is not progress.
  static constexpr double kMinBusyFraction = 0.05;

  // `timeout`: how long a worker may go without progress. REQUIRES: timeout > 0.
  explicit StallDetector(std::chrono::milliseconds timeout);

  // How often the owner samples: timeout / 5, between 100 ms and 1 s.
  std::chrono::milliseconds sample_interval() const;

  // Starts watching `count` workers (indices 0..count-1) at `now`; forgets earlier ones.
  void reset(std::size_t count, Clock::time_point now);
  // One sample of worker `index`: its tree's CPU seconds, the bytes it has written so far,
  // and how often its main thread moved (StackProbe; nullopt: not sampled), all
  // cumulative. With `moves`, `cpu_seconds` must leave out the sampled process's own
  // threads (a spinning rank burns CPU on one line). The first sample after reset() is the
  // baseline. Time the owner did not sample (more than two intervals since the last sample:
  // ddprun's own loop was blocked or stopped, e.g. Ctrl-Z on ddprun alone) is not held against the
  // worker.
  void observe(std::size_t index, Clock::time_point now, double cpu_seconds,
               std::uint64_t output_bytes, std::optional<std::uint64_t> moves = std::nullopt);
  // ddprun itself holds worker `index` back at `now` (it does not read its output: the
  // console is not read): not a stall, whatever the worker's samples say.
  void held_back(std::size_t index, Clock::time_point now);
  // A worker that exited is no longer watched.
  void forget(std::size_t index);
  // Workers watched whose last progress (or reset) is at least `timeout` before `now`.
  std::vector<std::size_t> stalled(Clock::time_point now) const;
  // Every watched worker is stalled (and one is watched): the job as a whole is stuck.
  bool all_stalled(Clock::time_point now) const;
  // The latest progress (or reset) of any watched worker; the reset's time when none is.
  Clock::time_point last_progress() const;
  // How long worker `index` has gone without progress at `now`.
  std::chrono::milliseconds idle_for(std::size_t index, Clock::time_point now) const;

 private:
  struct Worker {
    bool watched = false;
    bool sampled = false;
    Clock::time_point last_sample;
    double cpu = 0;
    std::uint64_t bytes = 0;
    std::optional<std::uint64_t> moves;
    Clock::time_point last_progress;
  };
  std::chrono::milliseconds timeout_;
  Clock::time_point reset_at_{};
  std::vector<Worker> workers_;
};

}  // namespace ddprun::launcher
