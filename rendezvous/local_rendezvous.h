// local_rendezvous.h: LocalRendezvous, the handler of a one-node job (max nodes == 1,
// whatever --rdzv-backend says): no rendezvous traffic at all, only the workers' store
// (workers_store.h), which this agent hosts and empties before every attempt after the
// first. Created by make_rendezvous_handler(). Thread-safety: as RendezvousHandler.
#pragma once

#include <atomic>
#include <string>

#include "rendezvous/rendezvous.h"
#include "rendezvous/workers_store.h"

namespace ddprun::rdzv {

class LocalRendezvous final : public RendezvousHandler {
 public:
  // The store binds --master-port when given, else an OS-chosen port (so concurrent jobs
  // never collide on 29500). MASTER_ADDR, as torchrun's: --local-addr when given; static:
  // --master-addr or 127.0.0.1; c10d and etcd (torchrun's default for one node, and
  // --standalone): this machine's host_fqdn() when it resolves to this machine's own
  // addresses only, else 127.0.0.1. The store binds that address when it is a literal,
  // every interface (IPv6 and IPv4) for a name, whatever the name resolves to first.
  // --rdzv-conf use_agent_store=0: no store here; worker rank 0 hosts one on a port that
  // is free when the round starts (--master-port when given).
  explicit LocalRendezvous(RendezvousParams params);
  ~LocalRendezvous() override;

  // First call: starts the store (throws RendezvousError naming host:port when the bind
  // fails). Later calls: reset() it, so no key of an earlier attempt survives.
  RendezvousInfo next_rendezvous() override;
  int num_nodes_waiting() override { return 0; }
  bool needs_new_round() override { return false; }
  bool is_closed() override { return closed_.load(); }
  void set_closed() override { closed_.store(true); }
  bool exit_barrier(std::chrono::milliseconds) override { return true; }
  std::string run_id() const override { return params_.run_id; }
  std::string backend_name() const override { return rdzv::backend_name(params_.backend); }
  void shutdown() override;

  // The hosted store's port (0 before the first next_rendezvous() and after shutdown()).
  std::uint16_t port() const;

 private:
  RendezvousInfo local_info() const;  // every field but round and master_port

  RendezvousParams params_;
  bool agent_store_ = true;
  std::string advertised_addr_;
  WorkersStore workers_store_;
  int round_ = 0;
  std::atomic<bool> closed_{false};
};

}  // namespace ddprun::rdzv
