// tcp_rendezvous_store.h: TcpRendezvousStore, the rendezvous store of one static/c10d
// handler: hosted here when this node may (a TcpStoreServer), reached over TCP, retrying
// name resolution and connects until the join deadline. Made by the registry; shared by
// StoreRendezvous's connect, shutdown and clear_worker_keys callbacks.
// Thread-safety: the handler's agent thread (connect() also from its watch's setup).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "rendezvous/endpoint.h"

namespace ddprun::store {
class Store;
class TcpStoreServer;
}  // namespace ddprun::store

namespace ddprun::rdzv {

// The handler's keys live under this prefix + run id in the rendezvous store.
inline const std::string kRdzvKeyPrefix = "ddprun/rdzv/";

struct TcpRendezvousStore {
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  Endpoint endpoint;
  std::string backend;
  std::string run_id;
  bool try_host = false;
  bool must_host = false;  // static node rank 0: failing to bind is an error
  // c10d, loopback endpoint, is_host not given and another --local-addr: host it after
  // kLateHostAfter of refused connects (it can only be hosted on this machine, and the
  // agent whose --local-addr it is did not come).
  bool late_host = false;
  // Connected once: the store was hosted, so refusals now mean its host left (late_host
  // would start an empty store that the others' rounds never reach).
  bool connected = false;
  // c10d: connects refused (the machine answers, nothing listens) for this long end the
  // wait, as torchrun's rendezvous TCPStore gives up after read_timeout; 0 = wait until
  // the join timeout (static, as torchrun's store `timeout`).
  Ms refused_limit{0};
  Ms read_timeout{60'000};
  // The hosted store drops a client silent this long (base/silent_peer.h): the heartbeat
  // budget, keep_alive_interval x keep_alive_max_attempt.
  Ms silent_peer{15'000};
  // This node's connections give up a store silent this long: the fence
  // (RoundWatch::fence), shorter than the budget.
  Ms silent_store{8'000};
  bool host_attempted = false;
  // Why hosting failed with the port taken ("cannot listen on ...: Address already in
  // use"): with connects refused too, no store can ever listen there (a socket bound
  // without listening holds it), so connect_raw says this within kTakenPortRefusedFor.
  std::string port_taken;
  std::unique_ptr<store::TcpStoreServer> server;

  TcpRendezvousStore();
  ~TcpRendezvousStore();

  std::string where() const;
  // Hosts the store when try_host and not tried yet; RendezvousError when must_host and
  // the bind fails (else joins as a client).
  void maybe_host();
  // A new connection, as the handler's key space (kRdzvKeyPrefix + run id). Throws
  // RendezvousConnectionError at `deadline`, RendezvousInterruptedError once
  // `interrupted`.
  std::shared_ptr<store::Store> connect(Clock::time_point deadline,
                                        const std::atomic<bool>& interrupted);
  // A new connection to the whole store (hosting first when it may).
  std::shared_ptr<store::Store> connect_raw(Clock::time_point deadline,
                                            const std::atomic<bool>& interrupted);
  // Static, on the host, before a new attempt's workers learn the store: erases the
  // keys of earlier attempts' workers (everything outside ddprun/rdzv/), so workers that
  // do not prefix their keys per attempt (PyTorch 2.4+) never see stale ones.
  void clear_worker_keys();
  void shutdown();  // stops a hosted store
};

// One connection to run `run_id`'s key space at `endpoint` for a reader from outside the
// job (`ddprun status`: c10d/store_board_reader.h): never hosts, tries to connect for at
// most `timeout`, and each later call waits at most `timeout` for its reply. Throws
// RendezvousConnectionError naming the endpoint.
std::shared_ptr<store::Store> connect_rendezvous_reader(const Endpoint& endpoint,
                                                        const std::string& run_id,
                                                        std::chrono::milliseconds timeout);

}  // namespace ddprun::rdzv
