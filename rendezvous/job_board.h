// job_board.h: JobBoard, the job-wide channel: small facts every node of the current
// round shares through what the rendezvous already shares (the c10d store, etcd), so
// that a question about the whole job gets one answer on every node (the job-wide stall
// judge, launcher/jobwide/job_stall.h). Names are the board's own, scoped to the round: a new
// round starts with an empty board. Implementations: StoreJobBoard (c10d/), EtcdJobBoard
// (etcd/).
// Thread-safety: one thread at a time (the agent thread); a handler's board is valid until
// its next next_rendezvous() or shutdown(). Calls block for at most the rendezvous
// store's read timeout (or `timeout`) and throw RendezvousError naming the endpoint.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::rdzv {

class JobBoard {
 public:
  virtual ~JobBoard() = default;
  // This node's group rank in the round, and the round's node count.
  virtual int node() const = 0;
  virtual int nodes() const = 0;
  // Adds `delta` (>= 0) to the counter `name` (created at 0); returns its new value (0:
  // reads). Dense: N adds of 1 by any nodes give 1..N, one value each.
  virtual std::int64_t add(const std::string& name, std::int64_t delta) = 0;
  // A mark of `name` that changes whenever any node bumps it (not a count: cheaper where
  // the backend has no atomic add); returns the mark after this bump.
  virtual std::int64_t bump(const std::string& name) = 0;
  // The mark of `name` now (0: never bumped).
  virtual std::int64_t mark(const std::string& name) = 0;
  virtual void set(const std::string& name, const std::string& value) = 0;
  // Sets `name` to `value` unless it holds a value; returns the value it holds after.
  virtual std::string set_once(const std::string& name, const std::string& value) = 0;
  // The values of `names`, nullopt for those not set; waits up to `timeout` (0: not at
  // all) for all of them to be set.
  virtual std::vector<std::optional<std::string>> get(const std::vector<std::string>& names,
                                                      std::chrono::milliseconds timeout) = 0;
};

}  // namespace ddprun::rdzv
