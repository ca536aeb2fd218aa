// etcd_session.h: EtcdSession, one agent's session with etcd (as etcd's own
// concurrency.Session): its lease, a background thread that keeps it alive and looks at
// the running round (membership, late joiners) through a watch, the verdict it keeps for
// needs_new_round(), and the lease's revocation at the end. Used by EtcdRendezvous only.
// Thread-safety: every method from any thread; the background thread runs from the first
// ensure_lease() to shutdown().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/etcd_round.h"
#include "rendezvous/etcd/etcd_watch.h"

namespace ddprun::rdzv {

// What one look at the run's keys found about round `round` of `members`.
struct EtcdLook {
  std::string reason;  // "" = the round can go on
  int waiting = 0;
  std::int64_t revision = 0;  // the store revision of the look (of its first read)
};
EtcdLook look_at_round(EtcdClient& c, const EtcdKeys& keys, int round,
                       const std::vector<std::string>& members);

// After a wait woke on a change: lets a burst of changes end before the next read (1 ms
// per node seen, 200 ms at most), until `stop` or `until` (real time).
void settle(const std::atomic<bool>& stop, std::chrono::steady_clock::time_point until,
            int nodes_seen);

class EtcdSession {
 public:
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  struct Settings {
    EtcdOptions etcd;  // its cancel flag is the session's own
    EtcdKeys keys;
    std::string where;  // how messages name the rendezvous
    Ms keep_alive_interval{5'000};
    int keep_alive_max_attempt = 3;  // lease TTL = interval x attempts (>= 2 s)
    Ms recheck_interval{5'000};
  };

  explicit EtcdSession(Settings settings);
  ~EtcdSession();  // shutdown()
  EtcdSession(const EtcdSession&) = delete;
  EtcdSession& operator=(const EtcdSession&) = delete;

  // Grants a lease through `client` when there is none or it expired; true when it did
  // (the caller then writes what lives with it). Starts the background thread once.
  bool ensure_lease(EtcdClient& client);
  std::int64_t lease() const { return lease_.load(); }
  std::string id() const;  // the lease in hex, as the keys name it
  // Lease `id` is gone (a keepalive or a write with it answered that etcd has no such
  // lease): the next ensure_lease() grants a new one. A later lease is left alone.
  void lease_gone(std::int64_t id);

  // Watch `round` of `members` (this node is one of them) until leave_round().
  void enter_round(int round, std::vector<std::string> members);
  // This node is at the round's exit barrier: stop watching the round (the members'
  // leaving is expected now; the barrier watches it).
  void finish_round();
  // Stops watching; the round left, or -1. Throws RendezvousConnectionError once the
  // background thread lost etcd.
  int leave_round();
  // Throws RendezvousConnectionError once the background thread lost etcd.
  void check_alive();
  struct Round {
    int round = 0;
    std::vector<std::string> members;
  };
  std::optional<Round> current_round();

  int waiting();
  bool needs_new_round();  // in a round, and a reason to leave it
  std::string reason();    // "" while the round can go on
  // Sets the reason unless one is set; true when there is one now.
  bool add_reason(const std::string& reason);
  // The fence (issue 33): in a round, when no keepalive sent in the last fence(ttl) was
  // answered, this node is cut off from etcd: its lease may expire any moment (etcd
  // counts the TTL from a keepalive's arrival, after its sending), and the others then
  // count it gone. Sets the reason ("cut off from etcd: ...") and returns it, "" while
  // the lease is kept. Cheap: the agent asks once a second, whatever the background
  // thread is blocked in. Later calls return the same.
  std::string check_fence();
  bool is_cut_off() const { return cut_off_.load(); }
  // TTL - 1.5 s (the agent's one-second look, and slack), 0.5 s at least.
  static Ms fence(Ms ttl);
  // The lease's TTL: interval x attempts in whole seconds, 2 s at least.
  static Ms lease_ttl(Ms keep_alive_interval, int keep_alive_max_attempt);
  // How long a member may stay silent (nothing acknowledged: EtcdOptions::
  // silent_member_timeout), or hold one of the background thread's calls unanswered,
  // before the call leaves it for the next: half of what the fence leaves after a
  // keepalive interval, 0.5 s at least, so that a keepalive behind a member cut off (its
  // link, its host, or a minority) is answered by another before the fence (issue 33).
  static Ms silent_member_bound(Ms keep_alive_interval, int keep_alive_max_attempt);
  void set_nodes_seen(int n) { nodes_seen_.store(n); }
  int nodes_seen() const { return nodes_seen_.load(); }

  // Stops the thread and revokes the lease (its keys go now, not at the TTL) with a
  // client of its own bounded by one request_timeout. Idempotent.
  void shutdown();

 private:
  void background();

  Settings s_;
  std::unique_ptr<EtcdClient> client_;  // the background thread's
  EtcdWatch watch_;                     // the background thread's
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> lease_{0};
  std::atomic<int> nodes_seen_{0};  // the round's size at the last look (settle())
  // When the newest keepalive (or grant) that etcd answered was sent, and the lease's TTL.
  std::atomic<Clock::rep> kept_at_{0};
  std::atomic<Ms::rep> ttl_ms_{0};
  std::atomic<bool> cut_off_{false};
  std::thread thread_;

  mutable std::mutex mu_;  // guards what follows; with cv_ for the background thread's waits
  std::condition_variable cv_;
  std::string me_;  // lease id in hex
  bool in_round_ = false;
  bool finishing_ = false;  // finish_round()
  int round_ = -1;
  std::vector<std::string> members_;
  std::string reason_;  // the verdict: "" = the round goes on
  int waiting_ = 0;
  std::string fatal_;  // etcd lost for failover_timeout (background thread)
  bool lease_lost_ = false;
  bool shut_down_ = false;
};

}  // namespace ddprun::rdzv
