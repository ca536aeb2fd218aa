// clock_sync.h: ClockSync, this node's wall-clock offset to node 0's, measured through the
// round's JobBoard without blocking the agent thread (the straggler ranking compares
// arrival times taken on different hosts; docs/usage.md, "Stragglers"). Two stamps: for
// each, every other node notes its clock and says it is ready ("clock/<k>/ready"); node 0,
// once every node is ready (or kReadyWait passed), sets its clock ("clock/<k>/t"); a node
// knows the stamp was taken between the start of its last read that did not find it (or
// its saying ready) and the end of the read that found it, so the offset is the stamp
// minus that span's midpoint, within half of it: a poll apart, however long node 0 waited
// for the slowest node (the board's reads are linearizable: the c10d store's one server,
// etcd's default reads). The tighter of the two is kept. Each
// step is one board call, polled every kPoll through poll(): the agent's loop handles its
// workers' events between them.
// Used by StragglerWatch (straggler_watch.h). Thread-safety: the agent thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

#include "rendezvous/job_board.h"

namespace ddprun::launcher {

class ClockSync {
 public:
  using Clock = std::chrono::steady_clock;
  // (ns to add to this host's clock to read node 0's, the bound in ns); bound -1: unknown.
  using Offset = std::pair<std::int64_t, std::int64_t>;
  static constexpr std::chrono::milliseconds kPoll{5};
  static constexpr std::chrono::milliseconds kReadyWait{3000};  // node 0, for the others
  static constexpr std::chrono::milliseconds kStampWait{5000};  // the others, for a stamp

  // `board` must outlive it; `wall_ns`: this host's wall clock in ns since the epoch.
  ClockSync(rdzv::JobBoard& board, std::function<std::int64_t()> wall_ns, Clock::time_point now);

  // When poll() wants to run next (Clock::time_point::max(): done).
  Clock::time_point next_tick() const { return done_ ? Clock::time_point::max() : next_; }
  // One step; throws what the board throws.
  void poll(Clock::time_point now);
  bool done() const { return done_; }
  // Once done: the offset, {0, -1} when node 0 stamped nothing in time ({0, 0} on node 0).
  const std::optional<Offset>& offset() const { return offset_; }

 private:
  void begin(int stamp, Clock::time_point now);
  void finish(std::optional<Offset> measured);

  rdzv::JobBoard& board_;
  std::function<std::int64_t()> wall_ns_;
  int stamp_ = 1;  // 1 or 2
  bool asked_ = false;
  std::int64_t stamp_after_ns_ = 0;  // this host's clock: the stamp is set after it
  Clock::time_point deadline_;
  Clock::time_point next_;
  std::optional<Offset> first_;
  std::optional<Offset> offset_;
  bool done_ = false;
};

}  // namespace ddprun::launcher
