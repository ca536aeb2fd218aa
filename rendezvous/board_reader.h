// board_reader.h: BoardReader, a read-only look at a running job's JobBoard (job_board.h)
// from outside the job, for `ddprun status` (launcher/status_command.h): it finds the run's
// latest formed round and reads the value every node of it set under one name. It only
// reads: it adds no key, never waits on a key that is not there, and takes no part in a
// round (no join, no heartbeat, no lease). Implementations: StoreBoardReader (c10d/: the
// static and c10d backends), EtcdBoardReader (etcd/); made by make_board_reader()
// (registry.h). Thread-safety: one thread at a time.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun::rdzv {

// What one read found.
struct BoardSnapshot {
  enum class Kind {
    kNoRun,    // nothing of this run id in the rendezvous (no job key, no round)
    kForming,  // the run is known but no round has formed yet
    kRound,    // `round` formed with `nodes` nodes; `values` read
    kClosed,   // the run has ended (`closed` says how)
  };
  Kind kind = Kind::kNoRun;
  int round = -1;  // kRound: the latest formed round; kForming: the round forming, if known
  int nodes = 0;   // kRound: its node count
  // kRound: by group rank, the value of "<name><node>" (nullopt: not set yet).
  std::vector<std::optional<std::string>> values;
  std::string closed;  // kClosed: the run's closed value ("1": the job ended; else why)
};

class BoardReader {
 public:
  virtual ~BoardReader() = default;
  // Reads the run's state and, in its latest formed round, the board value "<name><n>" of
  // each node n. Throws RendezvousConnectionError when the rendezvous cannot be reached or
  // stops answering (within the reader's timeout), RendezvousStateError when a rendezvous
  // key holds something that is not ddprun's.
  virtual BoardSnapshot read(const std::string& name) = 0;
  // The rendezvous, as errors name it.
  virtual std::string where() const = 0;
};

}  // namespace ddprun::rdzv
