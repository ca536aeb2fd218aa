// store_rendezvous.h: StoreRendezvous, the multi-node handler behind both the "static"
// and the "c10d" backends: rounds formed through any Store (ADD-slot join, one CAS to
// finalize, heartbeats by ADD counters), so it scales to hundreds of agents without a
// single contended JSON state. The key layout and the algorithm are described in
// docs/multinode.md. Created by make_rendezvous_handler() (registry.h); tests build it
// directly over a MemoryStore or a TcpStore.
// Thread-safety: as RendezvousHandler; interrupt() may be called from any thread. A
// background thread (heartbeats, membership watch) runs between next_rendezvous() and
// the next call / exit_barrier() / shutdown().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/rendezvous.h"

namespace ddprun::store {
class Store;
class TcpStoreServer;
}  // namespace ddprun::store

namespace ddprun::rdzv {

class StoreRendezvous final : public RendezvousHandler {
 public:
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  struct Config {
    std::string backend = "c10d";  // for messages and backend_name()
    std::string run_id = "none";
    std::string endpoint;  // "host:port" of the rendezvous store, for messages
    int min_nodes = 1;
    int max_nodes = 1;
    // static: every node must give a node rank; group rank = node rank.
    bool static_ranks = false;
    int node_rank = -1;                // -1 = not given
    bool node_rank_defaulted = false;  // static: --node-rank absent, 0 assumed
    int local_world_size = 1;
    // The job's fingerprint (RendezvousParams::job_command): the first agent of the run
    // id publishes it; a later one with a different one is refused before it joins.
    // job_check = false (--rdzv-conf job_check=0): nodes that deliberately run
    // different arguments; this node neither checks nor publishes one.
    std::vector<std::string> job_command;
    bool job_check = true;
    std::string advertise_addr;  // this node's address: descriptor and MASTER_ADDR
    std::string bind_addr;       // where this node's workers' store binds ("" = all)
    int workers_port = 0;        // port of that store (0 = OS-chosen)
    // false (--rdzv-conf use_agent_store=0): group rank 0 hosts no workers' store but
    // publishes a free port (workers_port if set) for worker rank 0 to host one on.
    bool agent_store = true;
    // static: > 0 = no store of the workers' own: they use the rendezvous store (hosted
    // by group rank 0 on this port), as torchrun's static backend does, so a firewall
    // that opens only --master-port suffices. Attempts are kept apart by the workers'
    // key prefix (/worker/attempt_<round>/), so the store is never reset (newer workers
    // that do not prefix are served by clear_worker_keys, see below). The workers
    // reach it where the agents do: shared_store_addr (the endpoint's host).
    std::string shared_store_addr;
    int shared_store_port = 0;
    std::string hostname;
    Ms join_timeout{600'000};
    Ms last_call_timeout{30'000};
    Ms keep_alive_interval{5'000};
    int keep_alive_max_attempt = 3;
    Ms progress_interval{5'000};  // how often a waiting agent logs where it stands
    Ms poll_slice{250};           // longest uninterruptible store wait
  };

  // Opens one new connection to the rendezvous store, as this handler's key space (the
  // registry prefixes ddprun/rdzv/<run id>/), retrying until
  // `deadline`; gives up early when `interrupted` becomes true. Throws RendezvousError.
  using Connect = std::function<std::shared_ptr<store::Store>(
      Clock::time_point deadline, const std::atomic<bool>& interrupted)>;

  // `on_shutdown` runs once in shutdown() (the registry stops a hosted rendezvous store
  // there). `hosts_store` tells whether this agent hosts the rendezvous store: such an
  // agent's exit_barrier() keeps waiting past its timeout while peers still heartbeat,
  // so the store does not vanish under running nodes. `clear_worker_keys` (shared store
  // only, called on group rank 0 before each round's workers learn the store) erases
  // what earlier attempts' workers left in it, sparing the rendezvous keys.
  StoreRendezvous(Config config, Connect connect, std::function<void()> on_shutdown = {},
                  std::function<bool()> hosts_store = {},
                  std::function<void()> clear_worker_keys = {});
  ~StoreRendezvous() override;

  // Leaves the current round (if any) and joins the next one: blocks until a round
  // including this node forms, or throws RendezvousTimeoutError (join_timeout),
  // RendezvousClosedError, RendezvousConnectionError (store unreachable/lost),
  // RendezvousStateError (static: duplicate or out-of-range node ranks; c10d falls back
  // to the automatic order with one warning instead) or
  // RendezvousInterruptedError (interrupt()).
  RendezvousInfo next_rendezvous() override;
  int num_nodes_waiting() override;
  // True once the round must be left. The first true also tells the peers at once
  // (this node's heartbeat becomes "left"), because the agent now stops its workers and
  // theirs will fail: their needs_new_round_now() then explains those failures.
  bool needs_new_round() override;
  bool needs_new_round_now() override;
  bool is_closed() override;
  void set_closed() override;
  bool exit_barrier(std::chrono::milliseconds timeout) override;
  std::string run_id() const override { return config_.run_id; }
  std::string backend_name() const override { return config_.backend; }
  void shutdown() override;
  void interrupt() override;

  // Why needs_new_round() became true ("" while it is false).
  std::string new_round_reason();

 private:
  struct NodeDesc {
    int slot = 0;
    std::string addr, host;
    long pid = 0;
    int node_rank = -1;
    bool node_rank_defaulted = false;
    int nproc = 1;
    std::string label() const;
  };
  enum class Member { kAlive, kLeft, kDone, kDead };
  // Remembers when each heartbeat counter of one round last changed (local clock), as
  // far as this observer could see: time in which it could not look (its thread was
  // starved or stopped, or the store did not answer) is not held against anyone.
  struct Liveness {
    Ms threshold{15'000};  // unchanged this long while observed: dead
    Ms max_gap{2'000};     // longer between two looks: the observer was blind
    int round = -1;
    std::optional<Clock::time_point> last_look;
    std::vector<std::pair<std::string, Clock::time_point>> last;
    // `values` were requested at `asked` (they are at least that fresh).
    std::vector<Member> observe(int r, const std::vector<std::string>& values,
                                Clock::time_point asked);
  };

  void ensure_connected(Clock::time_point deadline);
  // Publishes this job's fingerprint, or compares it with the one already published;
  // throws RendezvousStateError on a mismatch, having written nothing.
  void check_same_job();
  RendezvousInfo join(Clock::time_point deadline);
  int wait_for_final(int r, int slot, Clock::time_point deadline);
  bool round_retired(int r);
  std::vector<NodeDesc> read_descs(int r, int count);
  std::vector<int> assign_group_ranks(const std::vector<NodeDesc>& descs);
  void log_progress(int r, Clock::time_point deadline, bool retired);
  void check_interrupted();
  // Also marks slot `slot` of round r "left" before throwing (a slot this node holds).
  void check_interrupted(int r, int slot);
  void check_closed();
  std::string where() const;  // "rendezvous '<id>' (<backend> at <endpoint>)"
  std::string desc_json() const;
  void start_heartbeats();
  void stop_heartbeats();
  void heartbeat_loop(int r, int slot, int n);
  // One look at round r (n nodes) through `s`: updates liveness, waiting_ and
  // needs_new_round_; returns the reason for a new round, "" if none.
  std::string watch_round(store::Store& s, int r, int n);
  bool sleep_slice(Ms d);  // false when interrupted

  Config config_;
  Connect connect_;
  std::function<void()> on_shutdown_;
  std::function<bool()> hosts_store_;
  std::function<void()> clear_worker_keys_;
  std::shared_ptr<store::Store> store_;     // agent thread (and is_closed/set_closed)
  std::shared_ptr<store::Store> hb_store_;  // heartbeat thread
  std::unique_ptr<store::TcpStoreServer> workers_server_;

  // Current round, valid while in_round_.
  bool in_round_ = false;
  bool exited_ = false;
  int round_ = 0;
  int slot_ = 0;
  int nodes_ = 0;
  std::vector<NodeDesc> members_;  // by slot

  std::mutex mu_;
  std::condition_variable cv_;
  bool hb_stop_ = false;  // guarded by mu_
  Liveness liveness_;     // guarded by mu_
  std::string reason_;    // guarded by mu_
  std::thread hb_thread_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> needs_new_round_{false};
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> closed_{false};
  bool announced_ = false;  // "left" already published for the current round
  bool shut_down_ = false;
  bool job_checked_ = false;       // check_same_job() passed once
  bool node_rank_warned_ = false;  // c10d: "--node-rank ignored" said once per agent
};

}  // namespace ddprun::rdzv
