// straggler_watch.h: StragglerWatch, the agent's side of the straggler ranking (issue 34;
// docs/usage.md, "Stragglers"): every window (--straggler-window) it takes this node's
// workers' arrivals at collectives (PyTorch's flight recorder, through the stack probe and
// the StallGate) and ranks them (straggler.h). Alone (one node) it ranks its own ranks. In
// a job of several nodes each node first measures its clock's offset to node 0's through
// the round's JobBoard (rendezvous/job_board.h; ClockSync, clock_sync.h, polled between the
// agent's other work), then puts each window's sampled arrivals, on node 0's clock, on the
// board; node 0 ranks the whole job's previous window and publishes the finding; it and
// the node it names log it, once per straggler. At the attempt's end node 0 says how many
// windows it ranked and how many named a straggler (a quiet job's evidence). A collective
// that a window's end cut in two (one rank's arrival reported before it, another's after)
// is ranked with the next window (join_window). With
// --exclude-stragglers, node 0 leaves the node of a straggler named kExcludeAfter windows in a row
// out of the job when the elastic bounds allow (a spare waiting, or more nodes than --nnodes MIN):
// it publishes the line
// ("strag/out", set once), the named node's leave() says why, and its Agent leaves.
// Board keys: "clock/<round>/ready" and "clock/<round>/t", "strag/<node>/<window % 2>",
// "strag/found", "strag/out".
// The Agent's JobView makes one per attempt. Thread-safety: the agent thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/jobwide/clock_sync.h"
#include "launcher/jobwide/named_line.h"
#include "launcher/jobwide/straggler.h"
#include "launcher/process/stall_gate.h"
#include "rendezvous/job_board.h"

namespace ddprun::launcher {

class StragglerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Params {
    double threshold_s = 0.05;                // --straggler-threshold
    std::chrono::milliseconds window{10000};  // --straggler-window
    std::string host;                         // this node as the lines name it
    int rank_base = 0;                        // global rank of local rank 0
    int workers = 1;                          // this node's
    // --exclude-stragglers: node 0 leaves a straggler's node out when `min_nodes` and the
    // spares waiting (`spares`, the rendezvous' count; may throw) allow.
    bool exclude = false;
    int min_nodes = 1;
    std::function<int()> spares;
    // This host's wall clock in ns since the epoch (the flight recorder's clock); tests
    // skew it.
    std::function<std::int64_t()> wall_ns;
  };

  // `gate` and `board` (nullptr: one node) must outlive the watch.
  StragglerWatch(StallGate& gate, rdzv::JobBoard* board, Params params);
  ~StragglerWatch();
  StragglerWatch(const StragglerWatch&) = delete;
  StragglerWatch& operator=(const StragglerWatch&) = delete;

  Clock::time_point next_tick() const;
  void tick(Clock::time_point now);

  // This node's clock offset to node 0's (ns to add) and its bound, once measured.
  std::optional<ClockSync::Offset> clock_offset() const;
  // The lines said so far (for the run record and tests).
  const std::vector<std::string>& said() const { return said_; }
  // Why this node is to leave the job (--exclude-stragglers), once node 0 decided so.
  const std::optional<std::string>& leave() const { return leave_; }

  // How many windows in a row a straggler is named before it is left out.
  static constexpr int kExcludeAfter = 3;
  // Windows after every worker formed its process group with no collective from a flight
  // recorder before the watch says, once, that the ranking has nothing to rank.
  static constexpr int kNoRecorderWindows = 2;

 private:
  void say_offset() const;
  void check_recorder();
  std::vector<RankArrivals> collect();
  void judge_job(const std::vector<RankArrivals>& mine);
  // `window` joined with the collectives the last window's end cut (join_window).
  std::vector<RankArrivals> rank_with_carry(const std::vector<RankArrivals>& window);
  void say(const std::optional<Straggler>& found);
  void count(const std::vector<RankArrivals>& judged, const std::optional<Straggler>& found);
  void hear(const std::optional<std::string>& found, const std::optional<std::string>& out);
  void maybe_exclude(const std::optional<Straggler>& found, const std::string& line);

  StallGate& gate_;
  rdzv::JobBoard* board_;
  Params params_;
  Clock::time_point next_;
  std::int64_t window_ = 0;         // windows ended
  std::optional<ClockSync> clock_;  // several nodes: this host's clock against node 0's
  bool failed_ = false;             // the board failed once: ranking this node alone from then on
  std::string last_said_;
  std::vector<std::string> said_;
  int streak_ = 0;           // node 0: windows in a row naming the same straggler
  std::string streak_line_;  // node 0: the line that named it last
  bool excluded_ = false;    // node 0: "strag/out" is set
  std::string refused_;      // node 0: the straggler it last said it could not leave out
  std::optional<std::string> leave_;
  int windows_without_recorder_ = 0;  // since every worker formed its group, none recorded
  bool recorder_said_ = false;
  std::vector<RankArrivals> carry_;  // node 0 (or one node): for the next window
  int ranked_ = 0;                   // node 0 (or one node): windows ranked with two ranks or more
  int named_ = 0;                    // of those, windows that named a straggler
};

}  // namespace ddprun::launcher
