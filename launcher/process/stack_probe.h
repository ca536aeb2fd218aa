// stack_probe.h: StackProbe, where each worker's Python main thread *is*, for the stall
// watchdog (stall_watchdog.h): a sitecustomize.py that ddprun writes to a directory of its
// own and puts first on the workers' PYTHONPATH starts, in the first Python process of each
// worker, a thread that samples the main thread's stack (each frame's code and bytecode
// offset; while the main thread waits in Thread.join, the joined thread's) every 20 ms and
// reports on a pipe, once per sample interval, how often that changed, its pid and the
// innermost file:line. Then it restores PYTHONPATH and loads the sitecustomize it hides,
// if any. Workers that are not Python, or run with -S/-I, send nothing (the watchdog then
// judges them by CPU time); nor does a worker after the sampled process exec'd (the
// pipe's end closes: no longer sampled). Where PyTorch's flight recorder is on (2.14+;
// add() sets TORCH_FR_BUFFER_SIZE unless the user did), each report also carries, per
// process group, the last collective entered and completed, and the new collectives'
// arrival times; and, until all are known, the worker's start-up times (interpreter up,
// torch imported, process group formed, first collective) (flight_record.h). At a stall
// request_dumps() asks the hooks for the recorder's dump, each written to the worker's file
// (fr_dump.h), and collects their answers. The hook's text: stack_probe_hook.h.
// Used by StallWatchdog. Thread-safety: none; the supervisor's EventLoop thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "launcher/process/event_loop.h"
#include "launcher/process/flight_record.h"
#include "launcher/process/fr_dump.h"

namespace ddprun::launcher {

class StackProbe {
 public:
  // The last report of one worker.
  struct Position {
    bool sampled = false;     // a report came
    std::uint64_t moves = 0;  // how often the main thread's stack changed between samples
    pid_t pid = 0;            // the sampled process (the worker or a descendant)
    std::string where;        // "<file>:<line> in <function>", the innermost frame
    std::string user_where;   // the innermost frame outside Python's library and installed
                              // packages (the script's line calling all_reduce), when it
                              // is not the innermost; "" otherwise
    // Its process groups, from PyTorch's flight recorder (empty: no recorder, or no
    // group yet).
    std::vector<CollectiveState> collectives;
    StartupTimes startup;    // spawned: when add() was called
    bool importing = false;  // an import system frame is on its stack
  };

  // Writes the hook into a new directory under $TMPDIR (/tmp when unset or when it holds
  // a ':', which PYTHONPATH cannot carry); reports come every
  // `interval`. Without it (the directory cannot be written: a warning) add() does nothing.
  StackProbe(EventLoop& loop, std::chrono::milliseconds interval);
  ~StackProbe();  // removes the directory
  StackProbe(const StackProbe&) = delete;
  StackProbe& operator=(const StackProbe&) = delete;

  // The next worker (numbered from 0 in the order of add()): sets its environment
  // (PYTHONPATH, DDPRUN_STACK_*) and returns the write end of its report pipe, which the
  // child must inherit at the same number (SpawnOptions::keep_fd); invalid when disabled.
  // `dump`: its rank and the file its flight recorder dump goes to at a stall ("": none).
  UniqueFd add(std::vector<std::string>& env, FrDump dump = {});
  // A stall: asks workers `indices` (those with a file, a hook that reported, a recorder
  // the user did not switch off and a torch that has one: the hook says so up front) for
  // their dump: writes the question (<hook
  // dir>/fr_dump). Returns how many were asked.
  std::size_t request_dumps(const std::vector<std::size_t>& indices);
  // Worker `index` is not asked, for `why` (it is stopped).
  void no_dump(std::size_t index, std::string why);
  // Every worker asked has answered; one has written its dump.
  bool dumps_answered() const;
  bool dumps_written() const;
  // Each worker's dump, by index (FrDump::file "" where none was asked or refused).
  std::vector<FrDump> dumps() const;
  // The workers' setting that switches PyTorch's recorder off ("TORCH_FR_BUFFER_SIZE=0"),
  // "" when none does (fr_recorder_off).
  const std::string& recorder_off() const { return recorder_off_; }
  // The attempt ended: closes the pipes and forgets the workers.
  void clear();
  // Worker `index`'s last report (not sampled when none came).
  const Position& position(std::size_t index) const;
  // The arrivals worker `index` reported since the last call (at most kMaxArrivals, the
  // newest).
  std::vector<Arrival> take_arrivals(std::size_t index);
  static constexpr std::size_t kMaxArrivals = 4096;

 private:
  struct Worker {
    UniqueFd fd;
    EventLoop::Id id = 0;
    std::string partial;
    Position position;
    std::vector<CollectiveState> collectives;  // of the report under way
    std::vector<Arrival> arrivals;
    FrDump dump;
    bool asked = false;
    bool importing = false;  // of the report under way
  };
  void read(Worker& w);
  // One "F ..." or "A ..." line of the flight recorder.
  void record_line(Worker& w, std::string_view line);

  EventLoop& loop_;
  std::chrono::milliseconds interval_;
  std::string dir_;  // "" when disabled
  std::string recorder_off_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace ddprun::launcher
