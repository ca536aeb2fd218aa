// workers_store.h: WorkersStore, the workers' store an agent hosts (a TcpStoreServer the
// PyTorch workers reach at MASTER_ADDR:MASTER_PORT), kept across attempts and emptied
// before each new one, so no worker of an attempt sees a key of an earlier one. The one
// piece every handler hosts it with: LocalRendezvous, and group rank 0 of a
// StoreRendezvous or EtcdRendezvous round. Thread-safety: the handler's agent thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace ddprun::store {
class TcpStoreServer;
}

namespace ddprun::rdzv {

class WorkersStore {
 public:
  WorkersStore();
  ~WorkersStore();  // stop()
  WorkersStore(const WorkersStore&) = delete;
  WorkersStore& operator=(const WorkersStore&) = delete;

  // For a new attempt: starts the store on bind_host:port ("" = every interface, port
  // 0 = OS-chosen) when it is not running, else empties it (every key, queue, waiter
  // and connection; the port stays). Returns the port. Throws RendezvousError
  // "cannot host the workers' store at <host:port>: <reason>" when the bind fails.
  std::uint16_t open_attempt(const std::string& bind_host, std::uint16_t port);

  // Stops the store (another node hosts this round's). Idempotent; open_attempt()
  // starts a new one.
  void stop();

  bool running() const { return server_ != nullptr; }
  std::uint16_t port() const;  // 0 when not running

  // No agent store (use_agent_store=0): worker rank 0 hosts one itself, on `port`
  // when given (> 0), else on a port of bind_host that is free now (free_tcp_port).
  static std::uint16_t port_for_worker_rank0(int port, const std::string& bind_host);

 private:
  std::unique_ptr<store::TcpStoreServer> server_;
};

}  // namespace ddprun::rdzv
