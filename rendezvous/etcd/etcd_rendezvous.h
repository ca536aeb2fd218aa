// etcd_rendezvous.h: EtcdRendezvous, the "etcd-v3" backend: rounds formed in an etcd
// cluster (EtcdClient), one lease per agent (EtcdSession), join keys per agent, waits on
// etcd watches; the algorithm and key layout are in docs/multinode.md ("etcd"). Made by
// make_rendezvous_handler() (registry.h). Thread-safety: as RendezvousHandler;
// interrupt() from any thread; the session's thread runs from the first
// next_rendezvous() to shutdown().
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/endpoint.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/etcd_job_board.h"
#include "rendezvous/etcd/etcd_round.h"
#include "rendezvous/etcd/etcd_session.h"
#include "rendezvous/etcd/etcd_watch.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/round_codec.h"
#include "rendezvous/round_config.h"
#include "rendezvous/round_handler.h"
#include "rendezvous/workers_store.h"

namespace ddprun::rdzv {

class EtcdRendezvous final : public RoundHandlerBase {
 public:
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  struct Config {
    RoundConfig round;  // the settings every multi-node backend shares
    EtcdOptions etcd;
    std::string prefix = "/ddprun/rdzv";  // keys: <prefix>/<run id>/...
    // The safety net under the watches: a wait re-reads the keys at least this often even
    // when no watch event came (a silent connection, a member cut off). Not a poll period:
    // changes wake the waits at once.
    Ms recheck_interval{5'000};
  };

  explicit EtcdRendezvous(Config config);
  ~EtcdRendezvous() override;

  RendezvousInfo next_rendezvous() override;
  int num_nodes_waiting() override;
  bool needs_new_round() override;
  bool needs_new_round_now() override;
  // The round's r<R>/view/ keys (EtcdJobBoard), until the exit barrier.
  JobBoard* job_board() override { return session_.is_cut_off() ? nullptr : board_.get(); }
  std::string cut_off() override;
  void leave_out(const std::string& address, const std::string& why) override;
  bool is_closed() override;
  void set_closed() override;
  bool exit_barrier(std::chrono::milliseconds timeout) override;
  std::string run_id() const override { return config_.round.run_id; }
  std::string backend_name() const override { return "etcd-v3"; }
  void shutdown() override;

  std::string new_round_reason();

 private:
  // RoundHandlerBase's parts: "rendezvous '<id>' (etcd-v3, <members>)", the round
  // settings, and wake(): interrupt() cancels the watch a wait blocks on.
  std::string where() const override;
  const RoundConfig& round_config() const override { return config_.round; }
  void wake() override;
  EtcdOptions options_with(const std::atomic<bool>* cancel) const;
  // How long one job-board call may take across the members: the fence less one
  // keep-alive interval (the agent's look), 0.5 s at least.
  EtcdOptions board_options() const;
  // Blocks until a key watch_ watches changes after `revision`, `until`, or
  // recheck_interval (the safety net); with `burst`, lets a burst of changes end first
  // (settle()). RendezvousInterruptedError on interrupt().
  void wait_for_change(std::int64_t revision, Clock::time_point until, bool burst);

  // The session's lease (again when it expired) and the descriptor; true when it granted
  // a new lease.
  bool ensure_lease();
  void check_same_job();
  // RendezvousStateError when --preflight left this node's address out of the job
  // (left_out/<addr> under the run's prefix); at this agent's first join only.
  void refuse_if_left_out();
  bool left_out_checked_ = false;
  void check_closed();
  // The join loop of next_rendezvous(): look, decide (next_join_step), act, log, wait.
  // What it carries from one look to the next:
  struct JoinMemory {
    Clock::time_point deadline;     // join_timeout
    Clock::time_point next_log;     // when the next progress line is due
    int progress_lines = 0;         // how many were logged (progress_level: which are loud)
    Clock::time_point changed_at;   // when the newest join key was first seen
    std::int64_t newest_join = -1;  // that key's create revision
    int left_round = -1;            // the round this node just left (-1: none)
    int round_seen = 0;             // the round of the last state seen
    int waiting_in = -1;            // the round this node registered as a late joiner of
    int joined_round = -1;          // the round whose join key this node wrote ...
    std::string joined_as;          // ... with this lease
  };
  // One look at the keys: the view next_join_step() decides on, and the revisions.
  struct JoinLook {
    JoinView view;
    std::int64_t revision = 0;        // the store's at this look: waits are for changes after it
    std::int64_t state_revision = 0;  // the state key's mod_revision: the CAS of a new state
  };
  JoinLook look(JoinMemory& m);
  // The join loop's lease expired (a keepalive or a write found it gone) and a new one
  // was granted: the keys that lived with the old one went; they are written again.
  void joining_again(const std::string& expired, JoinMemory& m);
  // The joining round's join keys, for a node that joined it: is it the oldest joiner
  // (then every joiner, oldest first, and when the newest one came).
  void look_at_joins(JoinLook& l, JoinMemory& m);
  // Carries out `step`: true when the loop waits for a change before its next look;
  // `info` is set when this node's round formed.
  bool act(const JoinStep& step, const JoinLook& l, JoinMemory& m,
           std::optional<RendezvousInfo>& info);
  void wait_under(int round, JoinMemory& m);  // a running round without this node
  void maybe_log_progress(const JoinLook& l, JoinMemory& m);

  // The members of final round `s` whose join key is there (lease ids).
  std::vector<std::string> live_members(const EtcdRoundState& s);
  // The descriptors of `members` from node/, in their order; nullopt when one is gone.
  std::optional<std::vector<std::string>> read_member_descs(
      const std::vector<std::string>& members);
  // CAS of the state (at `state_revision`) to the final `next`, with the members'
  // descriptors in r<R>/members; nothing when a member's descriptor is gone.
  void close_round(const EtcdRoundState& next, std::int64_t state_revision);
  // A member of the final round `s`: its layout (layout_round) and the workers' store;
  // nullopt when the round moved on meanwhile.
  std::optional<RendezvousInfo> formed(const EtcdRoundState& s, Clock::time_point deadline);
  void log_progress(const EtcdRoundState& s, Clock::time_point deadline, int nth);
  // The descriptors of final round `s` (r<R>/members, or node/); nullopt when one is gone.
  std::optional<std::vector<NodeDesc>> member_descs(const EtcdRoundState& s);
  // Group rank 0 (`rank0`) opens the workers' store and publishes it in r<R>/master; every
  // member reads it there. nullopt when the round moved on meanwhile.
  std::optional<Endpoint> workers_store_of(const EtcdRoundState& s, bool rank0,
                                           Clock::time_point deadline);

  Config config_;
  EtcdKeys keys_;      // under <prefix>/<run id>/
  EtcdClient client_;  // the agent thread's
  // The job board's (agent thread): its calls end within board_call_bound(), so that a
  // board call on a node cut off from etcd cannot hold the agent thread past the fence.
  EtcdClient board_client_;
  EtcdWatch watch_;  // the agent thread's: the state key, or what it waits for now
  EtcdSession session_;
  WorkersStore workers_store_;
  std::unique_ptr<EtcdJobBoard> board_;  // the current round's (agent thread)

  std::string me_;               // the session's lease id in hex (agent thread)
  int described_restarts_ = -1;  // the restarts_spent() its descriptor has now
};

}  // namespace ddprun::rdzv
