// rendezvous.h: how an agent finds its peers: RendezvousHandler turns "this node runs N
// workers" into one attempt's group layout and workers' store. Implementations:
// LocalRendezvous, StoreRendezvous (static, c10d: c10d/), EtcdRendezvous (etcd-v3: etcd/),
// made only by make_rendezvous_handler() (registry.h). Thread-safety: the agent thread,
// except num_nodes_waiting() and is_closed(), which any thread may call.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/job_board.h"
#include "rendezvous/rdzv_conf.h"

namespace ddprun::rdzv {

// Everything the agent needs to start one attempt's workers.
struct RendezvousInfo {
  int round = 0;  // rendezvous round (changes on membership changes)
  // The most restarts any node of the round had spent when it joined (each agent's
  // set_restarts_spent()); 0 for one node. Identical on every node of a round: the
  // agents' TORCHELASTIC_RESTART_COUNT, which PyTorch 1.13 workers put into their store
  // keys, so nodes must agree on it.
  int restart_count = 0;
  int group_rank = 0;        // this node's rank, 0..group_world_size-1 (GROUP_RANK)
  int group_world_size = 1;  // number of nodes (GROUP_WORLD_SIZE)
  int rank_base = 0;         // global rank of this node's local rank 0
  int world_size = 1;        // total workers across nodes (WORLD_SIZE)
  std::string master_addr;   // the workers' store (MASTER_ADDR / MASTER_PORT)
  std::uint16_t master_port = 0;
  bool use_agent_store = true;  // TORCHELASTIC_USE_AGENT_STORE: an agent hosts that store
  // GLOO_SOCKET_IFNAME for the workers when gloo would bind to loopback (this machine's
  // host name does not resolve to one of its addresses) in a round spanning machines;
  // "" = leave it to PyTorch (and a user's value is always kept).
  std::string gloo_socket_ifname;
  // This node's address as its peers reach it (what it published); "" for one node.
  std::string node_address;
};

// The rendezvous backends (--rdzv-backend); parse_backend() in registry.h reads the name.
enum class Backend { kStatic, kC10d, kEtcdV3 };
inline std::string backend_name(Backend b) {
  return b == Backend::kStatic ? "static" : b == Backend::kC10d ? "c10d" : "etcd-v3";
}

// What the launcher knows that the rendezvous needs, parsed from the command line.
// Each single value is checked where it is parsed (the launcher's build_config,
// parse_backend, parse_rdzv_conf); make_rendezvous_handler() checks how they combine.
struct RendezvousParams {
  Backend backend = Backend::kStatic;
  // --rdzv-backend as given when it was torchrun's name for etcd ("etcd", "etcd-v2":
  // backend_alias() in registry.h), "" otherwise; make_rendezvous_handler() says once
  // that it runs etcd-v3.
  std::string backend_alias;
  std::string endpoint;         // --rdzv-endpoint, "host[:port]", may be empty
                                // (etcd-v3: a comma-separated list of client URLs)
  std::string run_id = "none";  // --rdzv-id
  int min_nodes = 1;            // --nnodes MIN:MAX, 1 <= MIN <= MAX
  int max_nodes = 1;
  std::optional<int> node_rank;            // --node-rank, when given
  std::optional<std::string> master_addr;  // --master-addr, when given
  std::optional<int> master_port;          // --master-port, when given (0..65535)
  std::optional<std::string> local_addr;   // --local-addr, when given
  int local_world_size = 1;                // this node's --nproc-per-node, >= 1
  RdzvConf conf;                           // --rdzv-conf
  // The job's entry point, as the user wrote it after the launcher's options: the entry
  // form ("-m" for a module, "--no-python" for an executable, nothing for a script),
  // then the script / module / executable (the launcher leaves out its arguments, which
  // may differ per node). The job's fingerprint: nodes of one run id must agree on it
  // (docs/multinode.md, "Same job").
  std::vector<std::string> job_command;
};

// Errors, all one line naming the endpoint and the cause.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class RendezvousClosedError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};
class RendezvousTimeoutError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};
class RendezvousConnectionError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};
// The rendezvous store closed this node's connection (its host's agent exited: the job
// ended there), as opposed to a store that cannot be reached or does not answer.
class RendezvousStoreClosedError : public RendezvousConnectionError {
 public:
  RendezvousStoreClosedError(const std::string& where, const std::string& why)
      : RendezvousConnectionError(where + ": lost the rendezvous store: " + why), where_(where) {}
  const std::string& where() const { return where_; }  // rendezvous_where(): run id, backend

 private:
  std::string where_;
};
class RendezvousStateError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};
// interrupt() was called (the agent got SIGINT/SIGTERM while it was rendezvousing).
class RendezvousInterruptedError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

class RendezvousHandler {
 public:
  virtual ~RendezvousHandler() = default;

  // Joins the next round and blocks until it is complete. On the node that hosts the
  // workers' store, that store is (re)started empty for the new attempt, so no key of a
  // previous attempt survives. Throws a RendezvousError subclass.
  virtual RendezvousInfo next_rendezvous() = 0;

  // The restarts this node's agent has spent (--max-restarts), published with its next
  // join, so that RendezvousInfo::restart_count is the round's most. Multi-node handlers
  // keep it; a one-node handler has nobody to tell.
  virtual void set_restarts_spent(int restarts) { (void)restarts; }

  // Nodes that arrived after the current round completed and wait for the next one;
  // the agent restarts its workers into a new round when this is > 0.
  virtual int num_nodes_waiting() = 0;

  // True when the current round cannot go on as formed: nodes are waiting to join, or a
  // participant left or missed its heartbeats. The agent polls this every monitor
  // interval (it must be cheap: answer from state a background thread keeps fresh), then
  // stops its workers and calls next_rendezvous() without spending a restart.
  virtual bool needs_new_round() { return num_nodes_waiting() > 0; }

  // Like needs_new_round(), but asks the rendezvous store now (a round trip or two,
  // bounded by the store's read timeout) instead of answering from the background watch.
  // For the agent when a worker FAILED in a multi-node job: a peer that stops its workers
  // for a new round makes this node's workers fail at once (collective errors), before
  // the watch has noticed. If this returns true, the failure is a consequence of the
  // membership change: restart into a new round without spending a restart.
  virtual bool needs_new_round_now() { return needs_new_round(); }

  // Why this node is cut off from the job ("" while it is not): its rendezvous store (or
  // etcd) stayed silent past the fence, shorter than the heartbeat budget after which the
  // others declare it dead. The round goes on without it (or ends); needs_new_round() is
  // true. The agent stops its workers and exits without touching the rendezvous again.
  virtual std::string cut_off() { return {}; }
  // How long after a peer falls silent this rendezvous declares it dead (the heartbeat
  // budget and the watch's blind ticks); 0 where it has no peers to judge. A worker that
  // failed because a peer's went away may wait this long for needs_new_round_now().
  virtual std::chrono::milliseconds peer_loss_bound() { return std::chrono::milliseconds(0); }

  // True when this agent hosts the rendezvous store itself (c10d's endpoint host): it
  // cannot leave the job without ending it for every node (--preflight keeps it in).
  virtual bool hosts_rendezvous_store() const { return false; }

  // --preflight left the node published at `address` out of this job (`why`): that
  // address's next first join (the node started again, a pod restarted) is refused with a
  // RendezvousStateError quoting `why`, so that it does not make the running nodes stop
  // for a new round. Job-scoped; where a backend keeps no such record, nothing is kept.
  virtual void leave_out(const std::string& address, const std::string& why) {
    (void)address;
    (void)why;
  }

  // The current round's job-wide channel (job_board.h), for the agent thread; nullptr
  // where there is none (one node: nothing to share) or no round runs. Valid until
  // the next next_rendezvous() or shutdown().
  virtual JobBoard* job_board() { return nullptr; }

  virtual bool is_closed() = 0;
  // Marks the rendezvous closed (the job has ended): late joiners get
  // RendezvousClosedError.
  virtual void set_closed() = 0;

  // Waits (bounded by `timeout`) until every node of the current round has called
  // exit_barrier, so the store host does not vanish while peers still need it.
  // Returns false on timeout. Single-node handlers return true at once.
  virtual bool exit_barrier(std::chrono::milliseconds timeout) = 0;

  virtual std::string run_id() const = 0;
  virtual std::string backend_name() const = 0;

  // Stops heartbeats and any hosted store. Idempotent.
  virtual void shutdown() = 0;

  // Makes a blocked (or the next) next_rendezvous() / exit_barrier() give up promptly
  // (within about a second): next_rendezvous() throws RendezvousInterruptedError,
  // exit_barrier() returns false. For the agent's signal path: callable from any thread
  // (not from a signal handler). Sticky: later calls give up too.
  virtual void interrupt() {}
};

}  // namespace ddprun::rdzv
