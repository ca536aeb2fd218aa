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

#include "rendezvous/etcd/etcd_client.h"
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
  // Blocks until a key watch_ watches changes after `revision`, `until`, or
  // recheck_interval (the safety net); with `burst`, lets a burst of changes end first
  // (settle()). RendezvousInterruptedError on interrupt().
  void wait_for_change(std::int64_t revision, Clock::time_point until, bool burst);

  void ensure_lease();  // the session's lease (again when it expired) and the descriptor
  void check_same_job();
  void check_closed();
  // The members of final round `s` whose join key is there (lease ids).
  std::vector<std::string> live_members(const EtcdRoundState& s);
  // CAS of the state (at `state_revision`) to the final `next`, with the members'
  // descriptors in r<R>/members; nothing when a member's descriptor is gone.
  void close_round(const EtcdRoundState& next, std::int64_t state_revision);
  // A member of the final round `s`: its ranks and the workers' store (the descriptors
  // from r<R>/members); nullopt when the round moved on meanwhile.
  std::optional<RendezvousInfo> formed(const EtcdRoundState& s, Clock::time_point deadline);
  void log_progress(const EtcdRoundState& s, Clock::time_point deadline);

  Config config_;
  EtcdKeys keys_;      // under <prefix>/<run id>/
  EtcdClient client_;  // the agent thread's
  EtcdWatch watch_;    // the agent thread's: the state key, or what it waits for now
  EtcdSession session_;
  WorkersStore workers_store_;

  std::string me_;               // the session's lease id in hex (agent thread)
  int described_restarts_ = -1;  // the restarts_spent() its descriptor has now
};

}  // namespace ddprun::rdzv
