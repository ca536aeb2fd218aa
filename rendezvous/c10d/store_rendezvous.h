// store_rendezvous.h: StoreRendezvous, the "static" and "c10d" backends: rounds formed
// through any Store (ADD-slot join, one CAS to finalize, ADD heartbeats; docs/multinode.md).
// Made by make_rendezvous_handler(); tests build it over a MemoryStore or a TcpStore.
// Thread-safety: as RendezvousHandler; interrupt() from any thread. RoundWatch's thread
// runs between next_rendezvous() and the next call / exit_barrier() / shutdown().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/c10d/round_watch.h"
#include "rendezvous/c10d/store_job_board.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/round_codec.h"
#include "rendezvous/round_config.h"
#include "rendezvous/round_handler.h"
#include "rendezvous/workers_store.h"

namespace ddprun::store {
class Store;
}  // namespace ddprun::store

namespace ddprun::rdzv {

// The pure parts have files of their own: the key layout (keys.h), the values stored
// (round_codec.h), rank assignment (rank_assignment.h), liveness (liveness.h), the
// progress line (progress.h), what both multi-node handlers do (round_member.h); the
// heartbeat thread is RoundWatch (round_watch.h), the workers' store WorkersStore; the
// flags, messages and log lines every backend shares are RoundHandlerBase's (round_handler.h).
class StoreRendezvous final : public RoundHandlerBase {
 public:
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  struct Config {
    RoundConfig round;             // the settings every multi-node backend shares
    std::string backend = "c10d";  // for messages and backend_name()
    std::string endpoint;          // "host:port" of the rendezvous store, for messages
    // static: every node must give a node rank; group rank = node rank.
    bool static_ranks = false;
    bool node_rank_defaulted = false;  // static: --node-rank absent, 0 assumed
    // Set = round.advertise_addr is found once the rendezvous store is reached (the
    // endpoint resolves by then; it may not at start), replacing the value given.
    std::function<std::string()> find_address;
    // static: > 0 = no store of the workers' own: they use the rendezvous store (hosted
    // by group rank 0 on this port), as torchrun's static backend does, so a firewall
    // that opens only --master-port suffices. The store is never reset: earlier
    // attempts' worker keys are erased by clear_worker_keys (see below). The workers
    // reach it where the agents do: shared_store_addr (the endpoint's host).
    std::string shared_store_addr;
    int shared_store_port = 0;
    Ms poll_slice{250};  // longest uninterruptible store wait
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
  // The round's r<r>/view/ keys (StoreJobBoard), until the exit barrier.
  JobBoard* job_board() override;
  bool is_closed() override;
  void set_closed() override;
  bool exit_barrier(std::chrono::milliseconds timeout) override;
  std::string run_id() const override { return config_.round.run_id; }
  std::string backend_name() const override { return config_.backend; }
  void shutdown() override;

  // Why needs_new_round() became true ("" while it is false).
  std::string new_round_reason();
  std::string cut_off() override;
  std::chrono::milliseconds peer_loss_bound() override;
  bool hosts_rendezvous_store() const override { return hosts_store(); }
  void leave_out(const std::string& address, const std::string& why) override;

 private:
  // RoundHandlerBase's parts: "rendezvous '<id>' (<backend> at <endpoint>)", the round
  // settings, and wake(): the polling loops of next_rendezvous() and exit_barrier() stop
  // at throw_if_stopped(); interrupt() wakes sleep_slice().
  std::string where() const override;
  const RoundConfig& round_config() const override { return config_.round; }
  void wake() override;
  std::string automatic_order() const override;
  bool sleep_slice(Ms d);  // false when stopped

  void ensure_connected(Clock::time_point deadline);
  // Publishes this job's fingerprint, or compares it with the one already published;
  // throws RendezvousStateError on a mismatch, having written nothing.
  void check_same_job();
  // RendezvousStateError when --preflight left this node's address out of the job (keys.h
  // left_out/); checked at this agent's first join only.
  void refuse_if_left_out();
  // RendezvousClosedError once the job has ended; RendezvousStateError with the host's
  // reason once the store's host gave up (give_up_as_host).
  void check_closed();
  // The store's host, failing to form a round: publishes `why` as `closed` and keeps the
  // store up until the others have read it (a tick and a slice at most), so that each
  // agent ends with this one line instead of losing the store its own way.
  void give_up_as_host(const std::string& why);

  // join(), step by step (store_rendezvous_join.cpp).
  RendezvousInfo join(Clock::time_point deadline);
  // Leaves the current round, if any; the round to try first.
  int first_round();
  // One attempt at round r: this node's info, or nullopt when r formed without it or
  // failed to complete (then r + 1 is next). Throws as next_rendezvous().
  std::optional<RendezvousInfo> try_round(int r, Clock::time_point deadline);
  int take_slot(int r);
  // try_round() once this node holds `slot` of round r; an interrupt leaves the slot.
  std::optional<RendezvousInfo> try_slot(int r, int slot, Clock::time_point deadline);
  // Closes round r when it may (MAX in, or MIN in for last_call_timeout once round r-1
  // is over) and waits until someone did; returns its node count N.
  int wait_for_final(int r, int slot, Clock::time_point deadline);
  // Whether nobody runs in round r any more (every member counted out, or, looked at
  // by slot 0 of the next round, none of them alive).
  bool round_retired(int r, int next_slot);
  void log_progress(int r, Clock::time_point deadline, bool retired, int nth);
  // The round leader (slot 0): wait_for_descriptors(), then publish_plan(), or the
  // round's reason to start over when a descriptor never came.
  void lead_round(int r, int n, Clock::time_point deadline);
  // Waits for the n descriptors of round r while their count grows (beating slot 0's
  // heartbeat); false once it stood still for a heartbeat threshold, or at `deadline`.
  bool wait_for_descriptors(int r, int n, Clock::time_point deadline);
  // Reads the n descriptors once (into `descs`, by slot); the refusal text when one is
  // corrupt, "" otherwise.
  std::string read_descriptors(int r, int n, std::vector<NodeDesc>& descs);
  // Lays out round r (layout_round) and publishes every slot's plan (round_plan.h), the
  // note and, when the leader is group rank 0, the workers' store, in one MULTI_SET; or
  // the round's refusal.
  void publish_plan(int r, int n);
  // Waits for `key` (beating this slot's heartbeat) while slot `watched`'s heartbeat
  // moves: kStalled once it stood still for a heartbeat threshold (or at `deadline`),
  // kLeft when it says "left".
  enum class Await { kReady, kStalled, kLeft };
  Await await_key(int r, int slot, const std::string& key, int watched, Clock::time_point deadline);
  // The two waits above look every watch_tick() (RoundWatch's tick for this many nodes)
  // and judge a value's progress with progress_judge(): standing still for a heartbeat
  // threshold of looks is no progress.
  Ms watch_tick() const;
  Liveness progress_judge() const;
  // Ends round r (n nodes) for every node, for `why` (the text every member of the round
  // throws): leaves the slot, and the store's host waits (a heartbeat threshold at most)
  // until every slot is out, so that each node refuses alike. Throws
  // RendezvousStateError(where: why).
  [[noreturn]] void refuse_round(int r, int slot, int n, const std::string& why);
  // Group rank 0: makes the round's workers' store ready (emptied: no worker of this
  // attempt sees a key of an earlier one); its address as r<r>/master holds it.
  std::string workers_store_address();
  // Group rank 0: workers_store_address(), published with the round hint.
  void publish_workers_store(int r);
  void enter_round(int r, int slot, int n, const RendezvousInfo& info);
  // Its heartbeat says "left" (nobody waits for it), the round's reason (unless an
  // earlier one) that this node left, and the slot counts out of a formed round.
  void leave_slot(int r, int slot);
  std::string my_label(int slot) const;  // how messages name this node

  // exit_barrier() steps.
  void acknowledge_exit();  // all done: count this node, and the host waits for the rest
  bool hosts_store() const { return hosts_store_ && hosts_store_(); }

  Config config_;
  Connect connect_;
  std::function<void()> on_shutdown_;
  std::function<bool()> hosts_store_;
  std::function<void()> clear_worker_keys_;
  std::shared_ptr<store::Store> store_;     // agent thread (and is_closed/set_closed)
  std::shared_ptr<store::Store> hb_store_;  // the watch thread's connection
  WorkersStore workers_store_;
  RoundWatch watch_;

  // Current round, valid while in_round_.
  bool in_round_ = false;
  bool exited_ = false;
  int round_ = 0;
  int slot_ = 0;
  int nodes_ = 0;
  std::unique_ptr<StoreJobBoard> board_;  // the current round's, made by enter_round()
  int joining_round_ = -1;                // the round try_round() last took a slot in

  std::mutex mu_;  // with cv_: sleep_slice() and wake()
  std::condition_variable cv_;
  bool announced_ = false;  // "left" already published for the current round
  bool shut_down_ = false;
  bool job_checked_ = false;       // check_same_job() passed once
  bool left_out_checked_ = false;  // refuse_if_left_out() passed once
  // The last scan of the previous round's heartbeats (round_retired, slot 0).
  std::optional<Clock::time_point> last_scan_;
};

}  // namespace ddprun::rdzv
