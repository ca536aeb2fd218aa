// etcd_rendezvous.h: EtcdRendezvous, the "etcd-v3" backend: rounds formed in an etcd
// cluster through its v3 JSON gateway (EtcdClient), so the rendezvous survives the loss
// of any one machine, an etcd member included. One JSON state key per run id changed by
// compare-and-swap transactions (open a round, close it with MIN:MAX and last call); an
// agent joins a round with a key of its own (r<R>/join/<lease>: joiners never contend);
// one lease per agent, kept alive by a background thread, holds the agent's descriptor
// and join key (an expired lease = a node gone); late joiners wait under the round with
// their lease. Group ranks come from rank_assignment (as c10d), the workers' store is
// hosted by group rank 0's agent (WorkersStore). No wait polls: a wait reads the keys
// (store revision R) and blocks on an etcd watch of the run's keys from R + 1 (EtcdWatch:
// the agent thread's waits on watch_, the background thread's look at the running round on
// bg_watch_), re-reading at a change, at a deadline (last call, join timeout), or after
// recheck_interval as a safety net. Key layout and algorithm: docs/multinode.md ("etcd").
// Created by make_rendezvous_handler() (registry.h).
// Thread-safety: as RendezvousHandler; interrupt() from any thread. The background
// thread (keepalive, membership look) runs from the first next_rendezvous() to shutdown().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/etcd_client.h"
#include "rendezvous/etcd_watch.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/round_codec.h"
#include "rendezvous/workers_store.h"

namespace ddprun::rdzv {

// The round state kept in <prefix>/<run id>/state.
struct EtcdRoundState {
  int round = 0;
  bool final = false;
  std::vector<std::string> members;  // final: lease ids (hex), in join order; joining: none
};
std::string encode_round_state(const EtcdRoundState& s);
std::optional<EtcdRoundState> decode_round_state(const std::string& json);

class EtcdRendezvous final : public RendezvousHandler {
 public:
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  struct Config {
    EtcdOptions etcd;
    std::string prefix = "/ddprun/rdzv";  // keys: <prefix>/<run id>/...
    std::string run_id = "none";
    int min_nodes = 1;
    int max_nodes = 1;
    int node_rank = -1;  // -1 = not given
    int local_world_size = 1;
    std::vector<std::string> job_command;
    bool job_check = true;
    std::string advertise_addr;
    std::string bind_addr;
    int workers_port = 0;
    bool agent_store = true;
    std::string hostname;
    Ms join_timeout{600'000};
    Ms last_call_timeout{30'000};
    Ms keep_alive_interval{5'000};
    int keep_alive_max_attempt = 3;  // lease TTL = interval x attempts (>= 2 s)
    // The safety net under the watches: a wait re-reads the keys at least this often even
    // when no watch event came (a silent connection, a member cut off). Not a poll period:
    // changes wake the waits at once.
    Ms recheck_interval{5'000};
    Ms progress_interval{5'000};
  };

  explicit EtcdRendezvous(Config config);
  ~EtcdRendezvous() override;

  RendezvousInfo next_rendezvous() override;
  int num_nodes_waiting() override;
  bool needs_new_round() override;
  bool needs_new_round_now() override;
  bool is_closed() override;
  void set_closed() override;
  bool exit_barrier(std::chrono::milliseconds timeout) override;
  std::string run_id() const override { return config_.run_id; }
  std::string backend_name() const override { return "etcd-v3"; }
  void shutdown() override;
  void interrupt() override;
  void set_restarts_spent(int restarts) override { restarts_spent_ = restarts; }

  std::string new_round_reason();

 private:
  struct Look {          // what one look at the run's keys found about the current round
    std::string reason;  // "" = the round can go on
    int waiting = 0;
    std::int64_t revision = 0;  // the store revision of the look (of its first read)
  };

  std::string where() const;
  std::string key(const std::string& rel) const { return base_ + rel; }
  std::string rkey(int r, const std::string& rel) const {
    return base_ + "r" + std::to_string(r) + "/" + rel;
  }
  EtcdOptions options_with(const std::atomic<bool>* cancel) const;
  void throw_if_stopped();
  // Blocks until a key of the run changes after `revision`, `until`, or recheck_interval
  // (the safety net); RendezvousInterruptedError on interrupt().
  void wait_for_change(std::int64_t revision, Clock::time_point until);
  // After a wait woke on a change: lets a burst of changes end before the next read
  // (up to 1 ms per node seen, 200 ms at most), until `stop` or `until`.
  void settle(const std::atomic<bool>& stop, Clock::time_point until) const;

  void ensure_lease();  // grants the lease, writes the descriptor, starts the thread
  void check_same_job();
  void check_closed();
  std::vector<std::string> live_members();  // lease ids with a descriptor
  std::optional<RendezvousInfo> formed(const EtcdRoundState& s, Clock::time_point deadline);
  void log_progress(const EtcdRoundState& s, Clock::time_point deadline);
  Look look(EtcdClient& c, int round, const std::vector<std::string>& members);
  void background();

  Config config_;
  std::string base_;   // <prefix>/<run id>/
  EtcdClient client_;  // the agent thread's
  EtcdWatch watch_;    // the agent thread's: every key under base_
  std::unique_ptr<EtcdClient> bg_client_;
  EtcdWatch bg_watch_;  // the background thread's
  WorkersStore workers_store_;

  std::atomic<bool> interrupted_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> closed_{false};
  std::atomic<std::int64_t> lease_{0};
  std::atomic<int> nodes_seen_{0};  // the round's size at the last look (settle())
  std::string me_;                  // lease id in hex
  int restarts_spent_ = 0;          // set_restarts_spent(): in this node's descriptor
  std::thread thread_;

  std::mutex mu_;  // guards what follows; with cv_ for the background thread's waits
  std::condition_variable cv_;
  bool in_round_ = false;
  int round_ = -1;
  std::vector<std::string> members_;
  std::string reason_;  // the verdict: "" = the round goes on
  int waiting_ = 0;
  std::string fatal_;  // etcd lost for failover_timeout (background thread)
  bool lease_lost_ = false;
  bool shut_down_ = false;
  bool node_rank_warned_ = false;
};

}  // namespace ddprun::rdzv
